//! Outputs into Azure Blob Storage's emulator, Azurite (`npm install azurite@3.37.0`, which
//! provides `azurite-blob`), started on a loopback port by this test, through the code path of
//! s3:// (`outputs::start` on both staging backends; `objstore::open` builds the store with
//! `MicrosoftAzureBuilder::from_env()` from the environment a deployment would set:
//! `AZURE_STORAGE_USE_EMULATOR` and `AZURITE_BLOB_STORAGE_URL`). Covered: a 20 MiB file sent as
//! a block list of three blocks (multipart), a directory of nested files, `output_upload='job'`,
//! and a container that does not exist. Without `azurite-blob` on PATH the test prints why and
//! passes without checking, unless `SLURM_CONNECTOR_REQUIRE_REAL` requires the `azure` tier (CI
//! installs it and does).

use crate::backends::{self, AZURE_KEY, Backend, azure_signed};
use crate::common::emulator;

#[test]
fn outputs_upload_to_azurite_through_both_backends() {
    backends::run(Backend::Azure, |endpoint| async move {
        emulator::outputs_round_trip("abfs://outputs/runs", "no-such-container", &[AZURE_KEY])
            .await;
        // The large file went as a block list (object_store's multipart), three 8 MiB blocks.
        let blocks = azure_signed(
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
