//! Outputs into a real S3-compatible server: moto's standalone server (`pip install
//! 'moto[server]'`, which provides `moto_server`), started on a loopback port by this test,
//! through `outputs::start` on both staging backends (`objstore::open` builds the store with
//! `AmazonS3Builder::from_env()` from the environment a deployment would set). Covered: a 20 MiB
//! file as a multipart upload of three parts, a directory of nested files,
//! `output_upload='job'`, a bucket that does not exist named. Without `moto_server` on PATH the
//! test prints why and passes without checking, unless `SLURM_CONNECTOR_REQUIRE_REAL` requires the
//! `s3` tier (CI installs it and does).

use crate::common;
use common::emulator;
use common::free_port;
use common::skip::{Tier, skip};

#[test]
fn outputs_upload_to_s3_through_both_backends() {
    let _alone = crate::alone();
    let Some(exe) = emulator::find_on_path("moto_server") else {
        skip(
            Tier::S3,
            "moto_server is not on PATH; install it with: pip install 'moto[server]==5.2.5'",
        );
        return;
    };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    // object_store reads its S3 settings from the environment, as it will in production. Set
    // before the runtime (and any other thread) exists.
    // SAFETY: no other thread of this process reads the environment now: the binary's other
    // tests wait on `crate::alone()`, and this test's runtime starts below.
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing-secret-key");
        std::env::set_var("AWS_REGION", "us-east-1");
        std::env::set_var("AWS_ALLOW_HTTP", "true");
        std::env::set_var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false");
        std::env::set_var("AWS_ENDPOINT", &endpoint);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let _moto = emulator::moto(&exe, port, "outputs").await;
        emulator::outputs_round_trip(
            "s3://outputs/runs",
            "no-such-bucket",
            &["testing-secret-key"],
        )
        .await;
        // The large file went as a multipart upload: S3's ETag of one says how many parts.
        let etag = emulator::etag(&endpoint, "outputs/runs/local/model").await;
        assert!(etag.ends_with("-3\""), "three parts: {etag}");
        println!(
            "staging_s3: moto_server at {endpoint}: multipart (3 parts), directory, job upload and \
             missing bucket verified"
        );
    });
}
