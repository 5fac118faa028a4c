//! The object-store emulator tier in one test binary: outputs staged to S3 (moto), GCS's XML API
//! (moto) and Azure Blob Storage (Azurite), each started from PATH on a free port (`.ci/run`
//! installs them; `common::skip` says what is missing). Apart from the hermetic tier because each
//! module points object_store at its emulator through process-wide variables (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`), which no other test should read. One module alone:
//! `cargo test --test emulators staging_gcs::`. `claim`: the claim store (issue 52) on each.

#[path = "../common/mod.rs"]
mod common;

/// Held for a whole test: each sets process-wide variables (`std::env::set_var`, unsound while
/// another thread reads the environment) before it starts its runtime, so the tests run one at
/// a time (~10 s in all) and each sets its variables while the others wait here.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that panicked held it: the variables it set are overwritten by the next one.
    ENV.lock().unwrap_or_else(|e| e.into_inner())
}

mod backends;
mod claim;
mod staging_azure;
mod staging_gcs;
mod staging_s3;
