//! Outputs into Azure Blob Storage's emulator, Azurite (`npm install azurite@3.37.0`, which
//! provides `azurite-blob`), started on a loopback port by this test, through the code path of
//! s3:// (`outputs::start` on both staging backends; `objstore::open` builds the store with
//! `MicrosoftAzureBuilder::from_env()` from the environment a deployment would set:
//! `AZURE_STORAGE_USE_EMULATOR` and `AZURITE_BLOB_STORAGE_URL`). Covered: a 20 MiB file sent as
//! a block list of three blocks (multipart), a directory of nested files, `output_upload='job'`,
//! and a container that does not exist. Without `azurite-blob` on PATH the test prints why and
//! passes without checking, unless `SLURM_CONNECTOR_REQUIRE_REAL` requires the `azure` tier (CI
//! installs it and does).

use crate::common;
use common::emulator;
use common::free_port;
use common::skip::{Tier, skip};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Azurite's well-known development account and key (public, the same in every Azurite; what
/// `AZURE_STORAGE_USE_EMULATOR` makes object_store use).
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A request to Azurite signed with the account key (Shared Key), for what object_store does not
/// do: create a container, read a blob's block list. `resource` is `/<container>[/<blob>]`,
/// `query` the sorted `name=value` pairs.
async fn signed(
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
        .decode(KEY)
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

#[test]
fn outputs_upload_to_azurite_through_both_backends() {
    let _alone = crate::alone();
    let Some(exe) = emulator::find_on_path("azurite-blob") else {
        skip(
            Tier::Azure,
            "azurite-blob is not on PATH; install it with: npm install azurite@3.37.0 \
             (its node_modules/.bin on PATH)",
        );
        return;
    };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    // object_store reads its Azure settings from the environment, as it will in production:
    // the emulator switch (its well-known account and key, plain http) and where it listens.
    // Set before the runtime (and any other thread) exists.
    // SAFETY: no other thread of this process reads the environment now: the binary's other
    // tests wait on `crate::alone()`, and this test's runtime starts below.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_BLOB_STORAGE_URL", &endpoint);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let args = [
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            &port.to_string(),
            "--inMemoryPersistence",
            "--silent",
            "--disableTelemetry",
            // object_store sends its own x-ms-version; the emulator's check of it would tie
            // this test to which of the two is newer.
            "--skipApiVersionCheck",
        ]
        .map(String::from);
        let _azurite = emulator::start("azurite", &exe, &args, &endpoint).await;
        let created = signed(
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

        emulator::outputs_round_trip("abfs://outputs/runs", "no-such-container", &[KEY]).await;

        // The large file went as a block list (object_store's multipart), three 8 MiB blocks.
        let blocks = signed(
            &endpoint,
            reqwest::Method::GET,
            "/outputs/runs/local/model",
            &[("blocklisttype", "committed"), ("comp", "blocklist")],
        )
        .await
        .text()
        .await
        .unwrap();
        assert_eq!(blocks.matches("<Block>").count(), 3, "{blocks}");
        println!(
            "staging_azure: azurite at {endpoint}: multipart (3 blocks), directory and missing \
             container verified"
        );
    });
}
