//! Deferred submits: what one submit try says about the cluster's pace, on recorded answers.

use super::*;
use crate::slurmrestd::{ApiVersion, Auth, ClientConfig, JobId, RetryPolicy, Secret};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A recorded real answer (tests/fixtures/slurmrestd/<name>.json) served for `method path`.
async fn replay(server: &MockServer, verb: &str, at: &str, name: &str) {
    let file = format!(
        "{}/tests/fixtures/slurmrestd/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect(&file)).unwrap();
    let r = &rec["response"];
    Mock::given(method(verb))
        .and(path(at))
        .respond_with(
            ResponseTemplate::new(r["status"].as_u64().unwrap() as u16)
                .set_body_raw(serde_json::to_vec(&r["body"]).unwrap(), "application/json"),
        )
        .mount(server)
        .await;
}

fn client(server: &MockServer) -> Client {
    let mut cfg = ClientConfig::new(
        "dev2605",
        server.uri().parse().unwrap(),
        Auth::Static {
            token: Secret::new("a.b.c".to_string()),
        },
    );
    cfg.api_version = Some(ApiVersion::V0045);
    cfg.retry = RetryPolicy {
        max_attempts: 1,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    };
    Client::new(cfg).unwrap()
}

#[allow(clippy::result_large_err)] // the shape `pace_of` takes, as `submit_once` returns it
fn failed(error: ClientError) -> Result<Submitted, SubmitFailure> {
    Err(SubmitFailure {
        what: "submitting the job".into(),
        error: error.into(),
    })
}

/// What real slurmrestd 26.05 answered with slurmctld stopped (`dev-cluster --release 26.05
/// daemon stop slurmctld`, then scripts/record-slurmrestd.py): a submit and a listing are a
/// 502 with error 1800 after 10 s, a state query a 500 with error -1. Once read as
/// throttling (502 and late), it halved the submit limit down to 1; it is an outage: the
/// limit stays, and the submit is retried (nothing lost) like one during a slurmrestd outage.
#[tokio::test]
async fn an_unreachable_slurmctld_is_an_outage_not_throttling() {
    let server = MockServer::start().await;
    replay(&server, "GET", "/slurm/v0.0.45/ping/", "26.05_v0.0.45_ping").await;
    replay(
        &server,
        "POST",
        "/slurm/v0.0.45/job/submit",
        "26.05_v0.0.45_ctld-down-submit",
    )
    .await;
    replay(
        &server,
        "GET",
        "/slurm/v0.0.45/jobs/",
        "26.05_v0.0.45_ctld-down-jobs",
    )
    .await;
    replay(
        &server,
        "GET",
        "/slurm/v0.0.45/jobs/state/",
        "26.05_v0.0.45_ctld-down-jobs-state",
    )
    .await;
    let c = client(&server);
    let submit = c
        .submit(&JobDescription::default())
        .await
        .expect_err("slurmctld is down");
    assert!(submit.is_outage() && submit.is_transient(), "{submit:?}");
    assert!(
        submit
            .to_string()
            .contains("Unable to contact slurm controller"),
        "{submit}"
    );
    assert_eq!(pace_of(&failed(submit)), Pace::Outage);
    let listing = c.jobs().await.expect_err("slurmctld is down");
    assert_eq!(pace_of(&failed(listing)), Pace::Outage);
    // The tracker's state query: retried as transient (its error -1 says nothing more).
    let states = c.states(&[JobId(1)]).await.expect_err("slurmctld is down");
    assert!(states.is_transient(), "{states:?}");
    // A 502 without 1800 (slurmctld's BACKOFF under rate limiting) is still throttling.
    let backoff = ClientError::Http {
        cluster: "dev2605".into(),
        operation: "submit",
        status: 502,
        body: "Bad Gateway".into(),
    };
    assert_eq!(pace_of(&failed(backoff)), Pace::Throttled);
}
