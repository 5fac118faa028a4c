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
    client_at(server, ApiVersion::V0045)
}

/// A client pinned to `version` that does not retry (each recorded answer is seen once).
fn client_at(server: &MockServer, version: ApiVersion) -> Client {
    let mut cfg = ClientConfig::new(
        "dev2605",
        server.uri().parse().unwrap(),
        Auth::Static {
            token: Secret::new("a.b.c".to_string()),
        },
    );
    cfg.api_version = Some(version);
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

/// What real slurmctld 26.05 answers a submit by a user it cannot resolve (`dev-cluster
/// --no-accounting`, a token for `nosuchuser`, then scripts/record-slurmrestd.py): an HTTP 500
/// with error 6010, "Rejecting authentication of user nobody or group nobody" (24.11 accepted
/// such a job and held it for ever: tests/real_identity.rs). A refusal, named, at once: not a
/// hiccup retried for 15 minutes, not a full cluster waited out, not throttling.
#[tokio::test]
async fn a_submit_by_a_user_slurm_cannot_resolve_is_refused_at_once() {
    let server = MockServer::start().await;
    replay(&server, "GET", "/slurm/v0.0.44/ping/", "26.05_v0.0.45_ping").await;
    replay(
        &server,
        "POST",
        "/slurm/v0.0.44/job/submit",
        "26.05_v0.0.44_submit-unknown-user-refused",
    )
    .await;
    let refused = client_at(&server, ApiVersion::V0044)
        .submit(&JobDescription::default())
        .await
        .expect_err("refused");
    match &refused {
        ClientError::Slurm { status, errors, .. } => {
            assert_eq!(*status, 500);
            assert_eq!(errors.iter().map(|e| e.number).collect::<Vec<_>>(), [6010]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        refused
            .to_string()
            .contains("Rejecting authentication of user nobody"),
        "{refused}"
    );
    assert!(
        !refused.is_transient() && !refused.is_cluster_full() && !refused.is_outage(),
        "{refused:?}"
    );
    assert_eq!(pace_of(&failed(refused)), Pace::Prompt);
}

/// What real slurmctld answers a submit past its `MaxJobCount` (`dev-cluster --max-job-count 4`,
/// then scripts/record-slurmrestd.py): 24.11 an HTTP 500 with EAGAIN (11, "Resource temporarily
/// unavailable"), 26.05 a 422 with 2007 ("MaxJobCount limit reached"); nothing was created. A
/// full cluster, not a hiccup (no 15-minute give-up), nor an uncertain submit, nor throttling.
#[tokio::test]
async fn a_submit_refused_for_max_job_count_waits_for_room() {
    for (release, version, at, ping) in [
        ("24.11", "v0.0.42", ApiVersion::V0042, "24.11_v0.0.42_ping"),
        // The version probe's answer: 26.05's ping (its v0.0.45 recording; the same body).
        ("26.05", "v0.0.44", ApiVersion::V0044, "26.05_v0.0.45_ping"),
    ] {
        let server = MockServer::start().await;
        replay(&server, "GET", &format!("/slurm/{version}/ping/"), ping).await;
        replay(
            &server,
            "POST",
            &format!("/slurm/{version}/job/submit"),
            &format!("{release}_{version}_maxjobs-submit-refused"),
        )
        .await;
        let c = client_at(&server, at);
        let refused = c
            .submit(&JobDescription::default())
            .await
            .expect_err("MaxJobCount reached");
        assert!(refused.is_cluster_full(), "{release}: {refused:?}");
        assert!(
            !refused.is_transient() && !refused.is_outage() && !refused.never_sent(),
            "{release}: {refused:?}"
        );
        assert_eq!(pace_of(&failed(refused)), Pace::Full, "{release}");
    }
    // Another refusal is none of it.
    let other = ClientError::Slurm {
        cluster: "dev".into(),
        operation: "submit",
        status: 422,
        errors: vec![crate::slurmrestd::SlurmError {
            number: 2000,
            error: "Invalid partition name specified".into(),
            description: "Batch job submission failed".into(),
            source: "slurm_submit_batch_job()".into(),
        }],
    };
    assert!(!other.is_cluster_full());
    assert_eq!(pace_of(&failed(other)), Pace::Prompt);
}
