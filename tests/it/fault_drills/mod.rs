//! Fault drills (issue 9): the connector under the faults a production Slurm throws at it, with
//! load on, counting what a Flyte backend would see. Each drill prints one `DRILL` line of
//! numbers (run with `--nocapture`); BENCHMARKS.md records them.
//!
//! - `slurmrestd_down_60s_with_100_running_tasks`: slurmctld unreachable for the full 60 s while
//!   100 tasks run and are polled → zero GetTask errors, zero wrong phases, and every answer
//!   given after the first successful poll tick is the true one (recovery within one tick).
//! - `connector_sigkilled_while_backend_retries_create_task`: the real `slurm-connector serve`
//!   SIGKILLed three times while 60 executions are created by a client that retries like Flyte's
//!   backend → every execution gets exactly one job, and every job is some execution's.
//! - `sigterm_drains_a_create_task_caught_between_submit_and_release`: the real `serve` gets
//!   SIGTERM while a CreateTask's job is on the cluster, held, its release slow → health turns
//!   NOT_SERVING at once, a new CreateTask is answered with a hand-off (a deferred meta, nothing
//!   submitted here; not an error, which would cost the task an attempt), the one in flight
//!   completes with its job released, the process exits 0 within the drain deadline, and the
//!   replacement submits the handed-off task at its first GetTask: both SUCCEEDED, one job each.
//! - `drain_deadline_bounds_the_exit_and_the_retry_releases_the_held_job`: the same with a
//!   release slower than the deadline → the process still exits 0 at the deadline, the job stays
//!   held (never runs twice, never runs unchecked), and the backend's retry against a restarted
//!   connector adopts and releases that one job, which then runs.
//! - `sigterm_waits_for_a_deferred_submit_between_submit_and_release`: the same when the
//!   CreateTask already answered (a deferred resource_meta) and its submit goes on in its own
//!   task → the drain waits for that submit's release too; the job is released before exit 0.
//! - `short_lived_minted_tokens_renewed_and_rejections_survived`: 2 s minted tokens renewed
//!   through the run, plus tokens refused as expired mid-run → zero failed calls, all tasks done.
//! - `slow_then_down_slurmdbd`: jobs age out of slurmctld while slurmdbd is slow, then down, then
//!   a restarted connector adopts them while it is slow again → every GetTask inside Flyte's 10 s
//!   deadline, no wrong phase, all SUCCEEDED once slurmdbd answers.
//!
//! The mock really runs the batch scripts (`sleep`), so "running" means a process is running.
//! The 60 s drill dominates; the others run beside it (the test harness runs tests in parallel).

use crate::common;
mod drain;
mod killed;
mod outage;
mod slurmdbd;
mod tokens;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::drill::*;
use mock_slurmrestd::FaultConfig;
use slurm_connector::config::AuthConfig;
use slurm_connector::proto::core::task_execution::Phase;

/// The real `serve`'s environment for a mock cluster, as a deployment sets it.
fn serve_env(mock: &Mock, shutdown_grace: Option<&str>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("FLYTE_SLURM_RESTD_URL", mock.handle.url()),
        (
            "FLYTE_SLURM_JWT_KEY_FILE",
            mock.key_file().display().to_string(),
        ),
        ("FLYTE_SLURM_USERNAME", "flyte".to_string()),
        (
            "FLYTE_SLURM_WORKING_DIR",
            mock.dir.join("jobs").display().to_string(),
        ),
        ("FLYTE_SLURM_POLL_INTERVAL", "1s".to_string()),
    ];
    if let Some(g) = shutdown_grace {
        env.push(("FLYTE_SLURM_SHUTDOWN_GRACE", g.to_string()));
    }
    env
}

/// grpc.health.v1 Check of the whole server, on a new connection each time (as the kubelet's
/// gRPC probe does).
async fn health(port: u16) -> Result<i32, String> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let ch = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut r = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    r.set_timeout(Duration::from_secs(2));
    HealthClient::new(ch)
        .check(r)
        .await
        .map(|r| r.into_inner().status)
        .map_err(|s| format!("{s:?}"))
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

/// The mock's jobs (id, comment) as slurmrestd lists them.
async fn jobs_with_comments(mock: &Mock) -> Vec<(u32, String)> {
    use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, Secret};
    let client = Client::new(ClientConfig::new(
        "mock",
        url::Url::parse(&mock.handle.url()).unwrap(),
        Auth::Static {
            token: Secret::new(mock.handle.mint_token("flyte", Duration::from_secs(600))),
        },
    ))
    .unwrap();
    let mut jobs: Vec<(u32, String)> = client
        .jobs()
        .await
        .expect("list the mock's jobs")
        .into_iter()
        .map(|j| (j.job_id.0, j.comment.unwrap_or_default()))
        .collect();
    jobs.sort();
    jobs
}

/// Waits until the mock holds exactly one job, submitted held by the connector (awaiting its
/// duplicate check): the CreateTask is between its submit and its release.
async fn one_held_job(mock: &Mock) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let jobs = jobs_with_comments(mock).await;
        if let [(id, comment)] = jobs.as_slice()
            && comment.ends_with(slurm_connector::service::AWAITING_CHECK)
        {
            return *id;
        }
        assert!(jobs.len() <= 1, "more than one job: {jobs:?}");
        assert!(Instant::now() < deadline, "no held job appeared: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Release calls (`POST job/{id}`) that take `ms` at the mock.
fn slow_release(ms: u64) -> FaultConfig {
    FaultConfig {
        latency_ms: ms,
        operations: vec!["job_update".into()],
        ..FaultConfig::default()
    }
}
