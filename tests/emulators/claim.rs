//! The claim store (`service::claim`, issue 52) against the object-store emulators, through the
//! suite every backend runs (`common::claim::suite`: create once, a stale read loses, 16
//! concurrent creators and 16 concurrent takeovers each with one winner, the tombstone over a
//! late record, a takeover only past the lease) and the start-up probe, on the clients
//! production builds (`staging::objstore::open` from the environment):
//! - S3 on moto 5.2: `PutMode::Create` is `If-None-Match: *`, which moto honours (412), as one
//!   step with the write only when it serves one request at a time (`Backend::S3OneRequestAtATime`:
//!   threaded, 2 of 16 racers won one record on a loaded machine).
//! - Azure Blob Storage on Azurite: `If-None-Match: *`, honoured (409/412).
//! - GCS's XML API on moto: object_store sends `x-goog-if-generation-match: 0`, a GCS header moto's
//!   S3 server does not know and ignores: a second create overwrites. So the suite cannot run
//!   there; what is pinned instead is that exchange, raw, and the probe refusing that store (what
//!   a deployment on such a server would see). Real GCS honours the header (object_store's own CI
//!   runs it against fake-gcs-server; no emulator in the registries serves the XML API with
//!   preconditions: tests/emulators/staging_gcs.rs says which were tried).
//!
//! Each test starts its emulator from PATH and fails instead of skipping when
//! `SLURM_CONNECTOR_REQUIRE_REAL` names its tier (`common::skip`). One alone:
//! `cargo test --test emulators claim::`.

use crate::backends::{self, AZURE_KEY, Backend, GCS_TOKEN, S3_SECRET};
use crate::common;

use slurm_connector::service::claim::{self, ClaimError, ClaimStore, Record, State};

/// A claim in a bucket that does not exist: the store's failure, not a conflict, naming the
/// claim and none of `secrets`.
async fn missing_bucket_is_an_outage(prefix: &str, secrets: &[&str]) {
    let c = ClaimStore::under_output_prefix(prefix).unwrap();
    let e = c
        .create(Record::new("a", State::Deleted))
        .await
        .unwrap_err();
    assert!(matches!(e, ClaimError::Store { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(c.uri()), "{msg}");
    for s in secrets {
        assert!(!msg.contains(s), "a secret in {msg}");
    }
}

#[test]
fn claims_on_s3_have_one_winner() {
    backends::run(Backend::S3OneRequestAtATime, |_| async {
        common::claim::suite("s3 (moto)", |name| {
            ClaimStore::under_output_prefix(&format!("s3://outputs/runs/{name}/a0")).unwrap()
        })
        .await;
        claim::probe("s3://outputs/runs").await.unwrap();
        missing_bucket_is_an_outage("s3://no-such-bucket/runs/a0", &[S3_SECRET]).await;
    });
}

#[test]
fn claims_on_azure_have_one_winner() {
    backends::run(Backend::Azure, |_| async {
        common::claim::suite("azure (azurite)", |name| {
            ClaimStore::under_output_prefix(&format!("abfs://outputs/runs/{name}/a0")).unwrap()
        })
        .await;
        claim::probe("abfs://outputs/runs").await.unwrap();
        missing_bucket_is_an_outage("abfs://no-such-container/runs/a0", &[AZURE_KEY]).await;
    });
}

/// moto serving GCS's XML API ignores GCS's precondition header: pinned raw, and the probe
/// refuses the store. The day moto honours it, the first assertion fails and the suite can run
/// on gs:// as on s3://.
#[test]
fn the_probe_refuses_moto_as_gcs_which_ignores_generation_preconditions() {
    backends::run(Backend::Gcs, |endpoint| async move {
        // The exchange object_store's `PutMode::Create` makes on gs://, raw: both creates of one
        // object answer 200, the second overwriting the first.
        let http = reqwest::Client::new();
        let put = |body: &'static str, header: (&'static str, &'static str)| {
            http.put(format!("{endpoint}/outputs/pin/gcs"))
                .header(header.0, header.1)
                .bearer_auth(GCS_TOKEN)
                .body(body)
                .send()
        };
        let generation = ("x-goog-if-generation-match", "0");
        let first = put("first", generation).await.unwrap().status().as_u16();
        let second = put("second", generation).await.unwrap().status().as_u16();
        let now = http
            .get(format!("{endpoint}/outputs/pin/gcs"))
            .bearer_auth(GCS_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        println!(
            "moto as GCS: PUT /outputs/pin/gcs x-goog-if-generation-match: 0 -> {first}, again \
             -> {second}, object now {now:?}"
        );
        assert_eq!(
            (first, second, now.as_str()),
            (200, 200, "second"),
            "moto ignores x-goog-if-generation-match"
        );
        // The same server honours S3's create-if-absent on that object: the gap is the header.
        let s3_style = put("third", ("if-none-match", "*"))
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(s3_style, 412, "moto honours If-None-Match: *");

        let e = claim::probe("gs://outputs/runs").await.unwrap_err();
        let msg = e.to_string();
        println!("the probe on gs:// (moto): {msg}");
        assert!(matches!(e, ClaimError::NotConditional { .. }), "{msg}");
        assert!(
            msg.contains("gs://outputs/runs/.slurm-connector/probe/")
                && msg.contains("second create-if-absent")
                && msg.contains("run a single replica"),
            "{msg}"
        );
        assert!(!msg.contains(GCS_TOKEN), "{msg}");
    });
}
