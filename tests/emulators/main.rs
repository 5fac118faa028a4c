//! The object-store emulator tier in one test binary: outputs staged to S3 (moto), GCS's XML API
//! (moto) and Azure Blob Storage (Azurite), each started from PATH on a free port (`.ci/run`
//! installs them; `common::skip` says what is missing). Apart from the hermetic tier because each
//! module points object_store at its emulator through process-wide variables (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`), which no other test should read. One module alone:
//! `cargo test --test emulators staging_gcs::`.

#[path = "../common/mod.rs"]
mod common;

mod staging_azure;
mod staging_gcs;
mod staging_s3;
