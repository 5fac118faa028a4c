//! What every test of this binary does before its own checks: find its emulator on PATH (or
//! skip, failing when `SLURM_CONNECTOR_REQUIRE_REAL` names the tier), point object_store at it
//! through the variables a deployment would set, start it on a free loopback port with a bucket
//! (or container) `outputs`, and run the test on a runtime of its own.

use std::future::Future;

use crate::common;
use common::emulator;
use common::free_port;
use common::skip::{Tier, skip};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// A token object_store sends to GCS as `Authorization: Bearer`; moto checks none. It must
/// appear in no message.
pub const GCS_TOKEN: &str = "ya29.gcs-test-bearer-token";
/// The S3 secret key the tests set; it must appear in no message.
pub const S3_SECRET: &str = "testing-secret-key";

/// Azurite's well-known development account and key (public, the same in every Azurite; what
/// `AZURE_STORAGE_USE_EMULATOR` makes object_store use).
const ACCOUNT: &str = "devstoreaccount1";
pub const AZURE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    /// S3 on moto's standalone server (`pip install 'moto[server]'`: `moto_server`).
    S3,
    /// The same, answering one request at a time: S3's conditional writes are atomic, moto's
    /// only when its requests do not overlap (`emulator::moto_one_request_at_a_time`).
    S3OneRequestAtATime,
    /// GCS's XML API, which object_store's gs:// client speaks, on moto's server
    /// (`staging_gcs.rs` says why no GCS emulator).
    Gcs,
    /// Azure Blob Storage on Azurite (`npm install azurite`: `azurite-blob`).
    Azure,
}

/// Runs `test` with the endpoint of `backend`'s emulator, started with `outputs` in it, unless
/// the emulator is missing (then the test skips, or fails when its tier is required).
pub fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let _alone = crate::alone();
    let (exe, tier, install) = match backend {
        Backend::S3 | Backend::S3OneRequestAtATime => {
            ("moto_server", Tier::S3, "pip install 'moto[server]==5.2.5'")
        }
        Backend::Gcs => (
            "moto_server",
            Tier::Gcs,
            "pip install 'moto[server]==5.2.5' (it serves the GCS XML API)",
        ),
        Backend::Azure => (
            "azurite-blob",
            Tier::Azure,
            "npm install azurite@3.37.0 (its node_modules/.bin on PATH)",
        ),
    };
    let Some(exe) = emulator::find_on_path(exe) else {
        skip(
            tier,
            format!("{exe} is not on PATH; install it with: {install}"),
        );
        return;
    };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    // object_store reads its settings from the environment, as it will in production. Set
    // before the runtime (and any other thread) exists.
    // SAFETY: no other thread of this process reads the environment now: the binary's other
    // tests wait on `crate::alone()`, and this test's runtime starts below.
    unsafe {
        match backend {
            Backend::S3 | Backend::S3OneRequestAtATime => {
                std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
                std::env::set_var("AWS_SECRET_ACCESS_KEY", S3_SECRET);
                std::env::set_var("AWS_REGION", "us-east-1");
                std::env::set_var("AWS_ALLOW_HTTP", "true");
                std::env::set_var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false");
                std::env::set_var("AWS_ENDPOINT", &endpoint);
            }
            // Where the API is, a static token (without one object_store asks the metadata
            // server, which is not there), plain http.
            Backend::Gcs => {
                std::env::set_var("GOOGLE_BASE_URL", &endpoint);
                std::env::set_var("GOOGLE_BEARER_TOKEN", GCS_TOKEN);
                std::env::set_var("GOOGLE_ALLOW_HTTP", "true");
            }
            // The emulator switch (its well-known account and key, plain http) and where it
            // listens.
            Backend::Azure => {
                std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
                std::env::set_var("AZURITE_BLOB_STORAGE_URL", &endpoint);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let _emulator = match backend {
            Backend::S3 | Backend::Gcs => emulator::moto(&exe, port, "outputs").await,
            Backend::S3OneRequestAtATime => {
                emulator::moto_one_request_at_a_time(&exe, port, "outputs").await
            }
            Backend::Azure => {
                let args = [
                    "--blobHost",
                    "127.0.0.1",
                    "--blobPort",
                    &port.to_string(),
                    "--inMemoryPersistence",
                    "--silent",
                    "--disableTelemetry",
                    // object_store sends its own x-ms-version; the emulator's check of it would
                    // tie these tests to which of the two is newer.
                    "--skipApiVersionCheck",
                ]
                .map(String::from);
                let azurite = emulator::start("azurite", &exe, &args, &endpoint).await;
                let created = azure_signed(
                    &endpoint,
                    reqwest::Method::PUT,
                    "/outputs",
                    &[("restype", "container")],
                )
                .await;
                assert_eq!(
                    created.status().as_u16(),
                    201,
                    "create container: {}",
                    created.text().await.unwrap()
                );
                azurite
            }
        };
        test(endpoint).await;
    });
}

/// A request to Azurite signed with the account key (Shared Key), for what object_store does not
/// do: create a container, read a blob's block list. `resource` is `/<container>[/<blob>]`,
/// `query` the sorted `name=value` pairs.
pub async fn azure_signed(
    endpoint: &str,
    method: reqwest::Method,
    resource: &str,
    query: &[(&str, &str)],
) -> reqwest::Response {
    let date = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let version = "2021-08-06";
    // https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key: the path
    // style URL of the emulator has the account in its path, so it appears twice.
    let mut canonical = format!("/{ACCOUNT}/{ACCOUNT}{resource}");
    for (k, v) in query {
        canonical.push_str(&format!("\n{k}:{v}"));
    }
    let to_sign = format!(
        "{method}\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n{canonical}"
    );
    let key = base64::engine::general_purpose::STANDARD
        .decode(AZURE_KEY)
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(to_sign.as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    reqwest::Client::new()
        .request(method, format!("{endpoint}/{ACCOUNT}{resource}"))
        .query(query)
        .header("x-ms-date", date)
        .header("x-ms-version", version)
        .header("content-length", "0")
        .header("authorization", format!("SharedKey {ACCOUNT}:{sig}"))
        .send()
        .await
        .unwrap()
}
