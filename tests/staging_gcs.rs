//! gs:// destinations against gcp-storage-emulator (`pip install gcp-storage-emulator==2026.7.19`,
//! which provides `gcp-storage-emulator`), started on a loopback port by this test, through the
//! code path of s3:// (`objstore::open`, which builds the store with
//! `GoogleCloudStorageBuilder::from_env()` from the environment a deployment would set:
//! `GOOGLE_BASE_URL`, `GOOGLE_BEARER_TOKEN` (a static token instead of a service account; the
//! emulator checks none) and `GOOGLE_ALLOW_HTTP`; then `objstore::upload_reader`).
//! `GOOGLE_SKIP_SIGNATURE` would not do: in object_store 0.14.2 it spares only reads (GET, HEAD,
//! list) the token; a PUT still asks the metadata server for one (`gcp/client.rs`,
//! `Request::send`).
//!
//! object_store cannot stage outputs into this emulator at all, so what is checked is narrow:
//! object_store's GCS client speaks GCS's XML API for every object call (PUT/GET/HEAD
//! `/<bucket>/<object>`, list as `GET /<bucket>?list-type=2`, multipart as
//! `POST /<bucket>/<object>?uploads`), and gcp-storage-emulator 2026.7.19 routes only GET and PUT
//! of `/<bucket>/<object>` in that API (server.py, `HANDLERS`): HEAD (the staging path's first
//! call: an output another replica already published is not uploaded again), the listing and
//! multipart answer 501 Not Implemented, and its PUT answers 200 without the `ETag` header
//! object_store requires of every upload (`MissingEtag`; its GET has neither `ETag` nor
//! `Last-Modified`). Checked here: `gs://` built into the default binary and configured from the
//! environment, a bucket that does not exist named in the error, and the gaps themselves, so that
//! a new pinned version that closes them fails this test and says to run the full round trip
//! (`common::emulator::outputs_round_trip`, as tests/staging_azure.rs does) instead.
//!
//! Without `gcp-storage-emulator` on PATH the test prints why and passes without checking, unless
//! `SLURM_CONNECTOR_REQUIRE_REAL` requires the `gcs` tier (CI installs it and does).

mod common;
use common::emulator;
use common::free_port;
use common::skip::{Tier, skip};

use slurm_connector::staging::transfer::TransferCtl;
use slurm_connector::staging::{StagingError, objstore};

#[test]
fn gs_uploads_to_gcp_storage_emulator() {
    let Some(exe) = emulator::find_on_path("gcp-storage-emulator") else {
        skip(
            Tier::Gcs,
            "gcp-storage-emulator is not on PATH; install it with: \
             pip install gcp-storage-emulator==2026.7.19",
        );
        return;
    };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    // object_store reads its GCS settings from the environment, as it will in production: where
    // the API is, a static token (without one object_store asks the metadata server, which is
    // not there), plain http. Set before the runtime (and any other thread) exists.
    // SAFETY: single-threaded at this point; this test binary has one test.
    unsafe {
        std::env::set_var("GOOGLE_BASE_URL", &endpoint);
        std::env::set_var("GOOGLE_BEARER_TOKEN", "emulator-checks-no-token");
        std::env::set_var("GOOGLE_ALLOW_HTTP", "true");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let args = [
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--in-memory",
            "-q",
        ]
        .map(String::from);
        let _gcs = emulator::start("gcp-storage-emulator", &exe, &args, &endpoint).await;
        // The bucket, through the emulator's JSON API (object_store creates no buckets).
        let created = reqwest::Client::new()
            .post(format!("{endpoint}/storage/v1/b?project=test"))
            .json(&serde_json::json!({"name": "outputs"}))
            .send()
            .await
            .unwrap();
        assert!(
            created.status().is_success(),
            "create bucket: {}",
            created.status()
        );

        // A bucket that does not exist: the error names it.
        // (No `-` in its name: object_store percent-encodes it, and the emulator's route for
        // `/<bucket>/<object>` takes only `[-.\w]` in a bucket name, so it would answer 501.)
        let (ctl, _cancel) = TransferCtl::new();
        let body = b"weights v1\n".repeat(1000);
        let dest = objstore::open("gs://absentbucket/runs/1/model.bin").unwrap();
        let err = objstore::upload_reader(&body[..], body.len() as u64, &dest, &ctl)
            .await
            .unwrap_err();
        assert!(matches!(err, StagingError::NoBucket { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("'absentbucket' does not exist"), "{msg}");
        println!("missing bucket: {msg}");

        // The gaps (module doc). An upload through the staging code: the emulator stores the
        // object but its answer has no ETag.
        let gap = "gcp-storage-emulator now serves this: replace the gap checks with \
                   common::emulator::outputs_round_trip (see tests/staging_azure.rs)";
        let dest = objstore::open("gs://outputs/runs/1/model.bin").unwrap();
        let put = objstore::upload_reader(&body[..], body.len() as u64, &dest, &ctl).await;
        let err = format!("{:?}", put.expect_err(gap));
        assert!(err.contains("MissingEtag"), "{err}");
        // The rest asked as object_store asks it, but directly: object_store retries a 5xx for up
        // to 3 minutes, which would say nothing more.
        let http = reqwest::Client::new();
        let object = format!("{endpoint}/outputs/runs/1/sub/model.bin");
        for (what, req) in [
            (
                "HEAD of an object (the staging path's first call)",
                http.head(&object),
            ),
            (
                "listing (output_upload='job' of a directory)",
                http.get(format!("{endpoint}/outputs"))
                    .query(&[("list-type", "2"), ("prefix", "runs/")]),
            ),
            (
                "multipart upload",
                http.post(&object).query(&[("uploads", "")]),
            ),
        ] {
            let status = req.send().await.unwrap().status();
            assert_eq!(status.as_u16(), 501, "{what}: {status}; {gap}");
        }
        println!(
            "staging_gcs: gcp-storage-emulator at {endpoint}: missing bucket verified; PUT without \
             ETag, HEAD, listing and multipart 501: no staging round trip on this emulator"
        );
    });
}
