//! What real Slurm 24.11 reports when jobs fail (recorded on the dev cluster with
//! `--failure-modes` by the issue-18 measurements: tests/fixtures/slurmrestd/24.11_v0.0.42_
//! {failed-exit3,timeout,oom,nodefail,preempted,array}-*.json), replayed through the client, and
//! what the connector makes of it (state, class, the fields messages and custom_info use).

use crate::common;

use common::Recorded;
use slurm_connector::slurmrestd::{BaseState, Client, JobId, JobInfo};
use slurm_connector::tracker::{FailureClass, Packed};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

fn client(server: &MockServer) -> Client {
    common::replay_client(server, "dev2411", 1)
}

/// job/{id} of a recorded sample, through the client: the record slurmctld gave.
async fn job(sample: &str) -> JobInfo {
    let server = common::serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]).await;
    let rec = Recorded::load(sample);
    let id = rec.body["jobs"][0]["job_id"].as_u64().unwrap() as u32;
    Mock::given(method("GET"))
        .and(path(format!("/slurm/v0.0.42/job/{id}")))
        .respond_with(rec.response())
        .mount(&server)
        .await;
    client(&server).job(JobId(id)).await.unwrap().unwrap()
}

fn class(info: &JobInfo) -> Option<FailureClass> {
    Packed::pack(&info.state).0.class()
}

#[tokio::test]
async fn a_non_zero_exit_is_failed_with_its_code_and_the_users_class() {
    let j = job("24.11_v0.0.42_failed-exit3-job-get").await;
    assert_eq!(j.state.base, BaseState::Failed);
    assert_eq!(j.exit_code.as_ref().unwrap().return_code, Some(3));
    assert_eq!(j.exit_code.as_ref().unwrap().signal, None);
    assert_eq!(j.reason.as_deref(), Some("NonZeroExitCode"));
    assert_eq!(j.nodes.as_deref(), Some("node1"));
    assert_eq!(j.restart_count, Some(0));
    // No --time: the partition's INFINITE limit.
    assert_eq!(j.time_limit_minutes, None);
    assert_eq!(class(&j), Some(FailureClass::User));
}

#[tokio::test]
async fn a_time_limit_is_timeout_by_term_with_the_limit_in_minutes() {
    let j = job("24.11_v0.0.42_timeout-job-get").await;
    assert_eq!(j.state.base, BaseState::Timeout);
    // slurmctld records the TERM the time limit sent (slurmdbd's job record says 0:0 and puts
    // the TERM on the batch step, CANCELLED).
    assert_eq!(j.exit_code.as_ref().unwrap().to_string(), "0:15");
    assert_eq!(
        j.exit_code.as_ref().unwrap().signal_name.as_deref(),
        Some("TERM")
    );
    assert_eq!(j.time_limit_minutes, Some(1));
    assert_eq!(class(&j), Some(FailureClass::User));
}

#[tokio::test]
async fn over_memory_kill_is_failed_by_sigkill_not_out_of_memory() {
    let j = job("24.11_v0.0.42_oom-job-get").await;
    // jobacct_gather's OverMemoryKill: FAILED, signal 9, RaisedSignal. Only slurmstepd's stderr
    // line names the memory (status::over_memory_line).
    assert_eq!(j.state.base, BaseState::Failed);
    let code = j.exit_code.as_ref().unwrap();
    assert_eq!(code.signal, Some(9));
    assert_eq!(code.signal_name.as_deref(), Some("KILL"));
    assert_eq!(code.return_code, None);
    assert_eq!(j.reason.as_deref(), Some("RaisedSignal"));
    assert_eq!(j.memory_per_node_mib, Some(50));
    assert_eq!(class(&j), Some(FailureClass::User));
}

#[tokio::test]
async fn a_job_requeued_by_slurm_is_pending_with_its_restart_count() {
    for sample in [
        "24.11_v0.0.42_nodefail-job-get-requeued",
        "24.11_v0.0.42_preempted-job-get-requeued",
    ] {
        let j = job(sample).await;
        // Slurm put it back at once (no NODE_FAIL / PREEMPTED state is ever listed by
        // slurmctld): PENDING until its requeue delay (BeginTime, ~2 min) has passed.
        assert_eq!(j.state.base, BaseState::Pending, "{sample}");
        assert_eq!(j.reason.as_deref(), Some("BeginTime"), "{sample}");
        assert_eq!(j.restart_count, Some(1), "{sample}");
        assert_eq!(j.nodes, None, "{sample}");
        assert_eq!(class(&j), None, "{sample}: not a failure");
    }
    for sample in [
        "24.11_v0.0.42_nodefail-job-get-done",
        "24.11_v0.0.42_preempted-job-get-done",
    ] {
        let j = job(sample).await;
        assert_eq!(j.state.base, BaseState::Completed, "{sample}");
        assert_eq!(j.restart_count, Some(1), "{sample}");
        assert_eq!(j.nodes.as_deref(), Some("node1"), "{sample}");
    }
}

/// slurmdbd keeps the run that failed as a record of its own: NODE_FAIL (or PREEMPTED) with
/// the failed node, next to the requeued one.
#[test]
fn slurmdbd_keeps_the_failed_run_of_a_requeued_job() {
    for (sample, first) in [
        (
            "24.11_v0.0.42_nodefail-slurmdb-job-get-requeued",
            "NODE_FAIL",
        ),
        (
            "24.11_v0.0.42_preempted-slurmdb-job-get-requeued",
            "PREEMPTED",
        ),
    ] {
        let rec = Recorded::load(sample);
        let jobs = rec.body["jobs"].as_array().unwrap();
        let states: Vec<(&str, i64)> = jobs
            .iter()
            .map(|j| {
                (
                    j["state"]["current"][0].as_str().unwrap(),
                    j["restart_cnt"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(states, vec![(first, 0), ("PENDING", 1)], "{sample}");
        if first == "NODE_FAIL" {
            assert_eq!(jobs[0]["failed_node"], "node1");
        }
    }
}

/// `jobs/state?job_id=<array id>` answers one entry per element, ids `<job id>_<index>`: all
/// under the array's id while pending, each element's own id once it ran (the last element
/// keeps the array's).
#[test]
fn jobs_state_of_an_array_lists_every_element() {
    let pending = Recorded::load("24.11_v0.0.42_array-jobs-state-running");
    let ids: Vec<&str> = pending.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["269_0", "269_1", "269_2", "269_3", "269_4"]);
    let done = Recorded::load("24.11_v0.0.42_array-jobs-state-done");
    let mut got: Vec<(String, String)> = done.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["job_id"].as_str().unwrap().to_string(),
                j["state"][0].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("269_4", "COMPLETED"),
            ("271_0", "COMPLETED"),
            ("272_1", "COMPLETED"),
            ("273_2", "COMPLETED"),
            ("274_3", "FAILED"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // job/{array id} lists every element with its array_job_id / array_task_id.
    let rec = Recorded::load("24.11_v0.0.42_array-job-get-done");
    for j in rec.body["jobs"].as_array().unwrap() {
        assert_eq!(j["array_job_id"]["number"], 269);
        let idx = j["array_task_id"]["number"].as_u64().unwrap();
        let want = if idx == 3 { "FAILED" } else { "COMPLETED" };
        assert_eq!(j["job_state"][0], want);
        assert!(
            j["standard_error"]
                .as_str()
                .unwrap()
                .ends_with(&format!("-269_{idx}.err")),
            "%A_%a expanded: {}",
            j["standard_error"]
        );
    }
}
