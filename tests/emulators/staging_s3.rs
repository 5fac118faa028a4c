//! Outputs into a real S3-compatible server: moto's standalone server (`pip install
//! 'moto[server]'`, which provides `moto_server`), started on a loopback port by this test,
//! through `outputs::start` on both staging backends (`objstore::open` builds the store with
//! `AmazonS3Builder::from_env()` from the environment a deployment would set). Covered: a 20 MiB
//! file as a multipart upload of three parts, a directory of nested files,
//! `output_upload='job'`, a bucket that does not exist named. Without `moto_server` on PATH the
//! test prints why and passes without checking, unless `SLURM_CONNECTOR_REQUIRE_REAL` requires the
//! `s3` tier (CI installs it and does).

use crate::backends::{self, Backend, S3_SECRET};
use crate::common::emulator;

#[test]
fn outputs_upload_to_s3_through_both_backends() {
    backends::run(Backend::S3, |endpoint| async move {
        emulator::outputs_round_trip("s3://outputs/runs", "no-such-bucket", &[S3_SECRET]).await;
        // The large file went as a multipart upload: S3's ETag of one says how many parts.
        let etag = emulator::etag(&endpoint, "outputs/runs/local/model").await;
        assert!(etag.ends_with("-3\""), "three parts: {etag}");
        println!(
            "staging_s3: moto_server at {endpoint}: multipart (3 parts), directory, job upload and \
             missing bucket verified"
        );
    });
}
