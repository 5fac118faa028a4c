//! What real Slurm 24.11 answers around the held submit of the replica check (recorded on the
//! dev cluster with `scripts/record-slurmrestd.py 24.11 v0.0.42 release`:
//! tests/fixtures/slurmrestd/24.11_v0.0.42_release-*.json), replayed through the client:
//! - a job submitted with `hold: true` is PENDING, reason `JobHeldUser`, priority 0, its comment
//!   as sent (the connector's mark at the end): what tells a replica the job awaits release;
//! - `POST job/{id}` with `hold: false` and the comment answers 200 with `results: null`; the job
//!   then runs with the comment restored, and releasing it again (running) is also a 200;
//! - a job slurmctld no longer knows (finished and aged out, or never existed) is a 404 with
//!   error 2017, which the client reports as nothing to release.

use crate::common;

use common::Recorded;
use slurm_connector::service::AWAITING_CHECK;
use slurm_connector::slurmrestd::{BaseState, Client, JobId};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer};

fn client(server: &MockServer) -> Client {
    common::replay_client(server, "dev2411", 1)
}

fn recorded_id(sample: &str) -> u32 {
    let rec = Recorded::load(sample);
    rec.body["jobs"][0]["job_id"].as_u64().unwrap() as u32
}

async fn serve(server: &MockServer, http: &str, sample: &str, at: String) {
    Mock::given(method(http))
        .and(path(at))
        .respond_with(Recorded::load(sample).response())
        .mount(server)
        .await;
}

#[tokio::test]
async fn a_held_submit_is_pending_held_by_its_user_with_the_mark() {
    let server = common::serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]).await;
    let id = recorded_id("24.11_v0.0.42_release-job-get-held");
    serve(
        &server,
        "GET",
        "24.11_v0.0.42_release-job-get-held",
        format!("/slurm/v0.0.42/job/{id}"),
    )
    .await;
    let j = client(&server).job(JobId(id)).await.unwrap().unwrap();
    assert_eq!(j.state.base, BaseState::Pending);
    assert_eq!(j.reason.as_deref(), Some("JobHeldUser"));
    assert!(j.comment.as_deref().unwrap().ends_with(AWAITING_CHECK));
}

#[tokio::test]
async fn a_release_is_accepted_then_the_job_runs_with_its_comment_restored() {
    let server = common::serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]).await;
    let id = recorded_id("24.11_v0.0.42_release-job-get-released");
    // The body the client sends: hold false and the task's comment, nothing else.
    Mock::given(method("POST"))
        .and(path(format!("/slurm/v0.0.42/job/{id}")))
        .and(body_partial_json(
            serde_json::json!({"hold": false, "comment": "flyte-key=0123456789abcdef"}),
        ))
        .respond_with(Recorded::load("24.11_v0.0.42_release-release").response())
        .expect(2)
        .mount(&server)
        .await;
    serve(
        &server,
        "GET",
        "24.11_v0.0.42_release-job-get-released",
        format!("/slurm/v0.0.42/job/{id}"),
    )
    .await;
    let c = client(&server);
    assert!(
        c.release(JobId(id), Some("flyte-key=0123456789abcdef"), false)
            .await
            .unwrap()
    );
    let j = c.job(JobId(id)).await.unwrap().unwrap();
    assert_eq!(j.state.base, BaseState::Running);
    assert_eq!(j.comment.as_deref(), Some("flyte-key=0123456789abcdef"));
    // Released again while it runs (another replica answering the same execution): accepted.
    assert!(
        c.release(JobId(id), Some("flyte-key=0123456789abcdef"), false)
            .await
            .unwrap()
    );
    let again = Recorded::load("24.11_v0.0.42_release-release-again");
    assert_eq!(again.status, 200);
}

#[tokio::test]
async fn a_job_slurmctld_no_longer_knows_has_nothing_to_release() {
    let server = common::serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]).await;
    serve(
        &server,
        "POST",
        "24.11_v0.0.42_release-release-finished",
        "/slurm/v0.0.42/job/4242".to_string(),
    )
    .await;
    let released = client(&server).release(JobId(4242), None, false).await;
    assert!(!released.unwrap(), "2017: nothing to release");
}

/// The replica check's light listing: `jobs/state/` with no `job_id` at all (recorded on every
/// release and version: every job slurmctld knows, id and state only).
#[tokio::test]
async fn all_states_is_one_jobs_state_request_without_ids_on_every_version() {
    for (release, versions) in [
        ("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"][..]),
        ("26.05", &["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"][..]),
        (
            "26.11rc1",
            &["v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"][..],
        ),
    ] {
        for v in versions {
            let server = common::serving(release, &[v]).await;
            let sample = Recorded::load(&format!("{release}_{v}_jobs-state-all"));
            let want = sample.body["jobs"].as_array().unwrap().len();
            Mock::given(method("GET"))
                .and(path(format!("/slurm/{v}/jobs/state/")))
                .respond_with(sample.response())
                .expect(1)
                .mount(&server)
                .await;
            let states = client(&server).all_states().await.unwrap();
            assert_eq!(states.len(), want, "{release} {v}");
            let requests = server.received_requests().await.unwrap();
            let asked = requests
                .iter()
                .find(|r| r.url.path().ends_with("/jobs/state/"))
                .unwrap();
            assert_eq!(asked.url.query(), None, "{release} {v}: no job_id sent");
        }
    }
}

/// slurmrestd refuses to update one element of an array (recorded:
/// `24.11_v0.0.42_update-array-element-refused`, the same on v0.0.40 and v0.0.41): the client
/// reports Slurm's refusal, and the claim's protocol never asks it (it releases whole arrays).
#[tokio::test]
async fn releasing_one_element_of_an_array_is_refused_by_slurmrestd() {
    let server = common::serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]).await;
    let sample = Recorded::load("24.11_v0.0.42_update-array-element-refused");
    Mock::given(method("POST"))
        .and(path("/slurm/v0.0.42/job/12503_1"))
        .respond_with(sample.response())
        .expect(1)
        .mount(&server)
        .await;
    let element = slurm_connector::slurmrestd::JobRef {
        id: JobId(12503),
        element: Some(1),
    };
    let e = client(&server)
        .release(element, Some("x"), false)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("instead of array task id") && text.contains("422"),
        "{text}"
    );
}
