//! Real tier: how Slurm's failures reach Flyte (issue 18), through the connector's gRPC service
//! (in-process `serve_with`) on the dev cluster:
//! - a script exiting 3 is RETRYABLE_FAILED (the task's `retries` apply), `[FAILED] ...`;
//! - a 1-minute time limit is RETRYABLE_FAILED, `[TIMEOUT] after 00:01:00`;
//! - a job over its `--mem` is RETRYABLE_FAILED, `[OUT_OF_MEMORY] ... (MaxRSS ...)`;
//! - node1 set DOWN while the job runs, then resumed: Slurm requeues the job (same id), the
//!   message says so, there is never more than one live job for the task, and it SUCCEEDS;
//! - preemption by a job of a higher partition: requeued, then SUCCEEDED with the same job;
//! - a spent requeue budget (0): the job is cancelled, RETRYABLE_FAILED, `[REQUEUE_BUDGET]`.
//!
//! Skipped (with the reason) when the dev-cluster environment is not exported. The memory and
//! preemption cases need `dev-cluster --failure-modes` and say so when the cluster lacks it:
//! `deploy/dev-cluster/dev-cluster --release 24.11 --failure-modes run cargo test --test real_failures`.
//!
//! The node and preemption cases change node1 for every job on it, so they run one at a time
//! and alone (`NODE` write lock); the others share it.

mod common;
use common::server::Server;
use common::skip::{Tier, skip};

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "real_slurm/connector.rs"]
mod connector;

// The native (`slurm`) task's pieces: the task image, its Flyte 2 tasks, the SDK's request.
#[path = "real_apptainer/support.rs"]
mod native;
use connector::{deployment, get, job_of, poll_until, request, terminal};

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use slurm_connector::proto::connector::Resource;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::slurmrestd::job_description::Limit;
use slurm_connector::slurmrestd::{BaseState, JobId};
use tonic::transport::Channel;

type Grpc = AsyncConnectorServiceClient<Channel>;

/// Shared by the cases that leave node1 alone; taken alone by those that take it down or fill it.
static NODE: LazyLock<tokio::sync::RwLock<()>> = LazyLock::new(|| tokio::sync::RwLock::new(()));

/// The second run of a requeued job ends at once; the first sleeps until something happens.
const REQUEUE_AWARE: &str = "#!/bin/bash\n\
    echo \"run with SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}\"\n\
    if [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ]; then exit 0; fi\n\
    sleep 600\n";

fn info(r: &Resource, key: &str) -> serde_json::Value {
    let s = r.custom_info.as_ref().expect("custom_info");
    match s.fields.get(key).and_then(|v| v.kind.as_ref()) {
        Some(prost_types::value::Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(prost_types::value::Kind::NumberValue(n)) => serde_json::json!(*n as i64),
        Some(prost_types::value::Kind::NullValue(_)) | None => serde_json::Value::Null,
        other => panic!("{key}: {other:?}"),
    }
}

/// Whether the cluster was brought up with `--failure-modes` (its partitions say so); when not,
/// the test skips (a failure where CI requires the `failure-modes` tier).
async fn failure_modes(c: &support::Cluster) -> bool {
    let parts = c.user_client().partitions().await.expect("partitions");
    let on =
        parts.iter().any(|p| p.name == "preemptible") && parts.iter().any(|p| p.name == "urgent");
    if !on {
        skip(
            Tier::FailureModes,
            format!(
                "the dev cluster runs without --failure-modes (no `preemptible`/`urgent` \
                 partitions, no memory enforcement); run `deploy/dev-cluster/dev-cluster \
                 --release {} --failure-modes run cargo test --test real_failures`",
                c.release
            ),
        );
    }
    on
}

/// The cluster's `MaxJobCount` when small enough for a test to fill (`dev-cluster
/// --max-job-count N`, N ≤ 20); when not, the test skips (a failure where CI requires the
/// `max-job-count` tier).
async fn small_max_job_count(c: &support::Cluster) -> Option<usize> {
    let config = c.dev_cluster(&["exec", "scontrol", "show", "config"]).await;
    let max: usize = config
        .lines()
        .find_map(|l| l.strip_prefix("MaxJobCount"))
        .and_then(|v| v.trim_start().strip_prefix('='))
        .and_then(|v| v.trim().parse().ok())
        .expect("scontrol show config lists MaxJobCount");
    if max > 20 {
        skip(
            Tier::MaxJobCount,
            format!(
                "the dev cluster's MaxJobCount is {max}; run `deploy/dev-cluster/dev-cluster \
                 --release {} --max-job-count 8 --min-job-age 5 run cargo test --test \
                 real_failures -- full_cluster`",
                c.release
            ),
        );
        return None;
    }
    Some(max)
}

/// GetTask of a native (`slurm`) task, which never fails.
async fn get_native(g: &mut Grpc, meta: &[u8]) -> Resource {
    g.get_task(native::get_req(meta))
        .await
        .expect("GetTask never fails")
        .into_inner()
        .resource
        .unwrap()
}

/// An interruptible task's end after a preemption: SUCCEEDED, the requeue shown on the way and
/// counted, and the same job ran again (Slurm requeued it: no Flyte retry, no new job).
fn resumed_as_the_same_job(r: &Resource, saw_requeue: bool, id: JobId) {
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    assert!(saw_requeue, "the message never showed the requeue");
    assert!(
        info(r, "requeue_count").as_i64().unwrap() >= 1,
        "{:?}",
        r.custom_info
    );
    assert_eq!(info(r, "job_id"), id.0 as i64, "the same job ran again");
}

/// The live (not finished) jobs on the cluster whose name is the task's.
async fn live_jobs(c: &support::Cluster, name: &str) -> Vec<JobId> {
    c.user_client()
        .jobs()
        .await
        .expect("jobs")
        .into_iter()
        .filter(|j| j.name == name && !j.state.is_finished())
        .map(|j| j.job_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_script_is_retryable_with_what_happened_first() {
    let Some(c) = support::cluster() else { return };
    let _node = NODE.read().await;
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let script = "#!/bin/bash\necho 'about to fail' >&2\nexit 3\n";
    let meta = g
        .create_task(request("exit3", script))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    let r = poll_until(&mut g, &meta, 120, terminal, |_| {}).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert_eq!(
        r.message.lines().next().unwrap(),
        format!("[FAILED] job {id} exited with code 3 on node1"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("about to fail"),
        "stderr tail: {}",
        r.message
    );
    assert_eq!(info(&r, "failure_class"), "user");
    assert_eq!(info(&r, "exit_code"), "3:0");
    assert_eq!(info(&r, "nodes"), "node1");
    assert_eq!(info(&r, "reason"), "NonZeroExitCode");
    assert_eq!(info(&r, "requeue_count"), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_limit_is_a_retryable_timeout() {
    let Some(c) = support::cluster() else { return };
    let _node = NODE.read().await;
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let script = "#!/bin/bash\n#SBATCH --time=1\nsleep 600\n";
    let meta = g
        .create_task(request("timeout", script))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    // slurmctld checks time limits about every 30 s: the job ends 60-100 s after it started.
    let r = poll_until(&mut g, &meta, 240, terminal, |_| {}).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert_eq!(
        r.message.lines().next().unwrap(),
        format!("[TIMEOUT] after 00:01:00 (job {id} on node1)"),
        "{}",
        r.message
    );
    assert_eq!(info(&r, "state"), "TIMEOUT");
    assert_eq!(info(&r, "reason"), "TimeLimit");
    // The batch shell of the rendered script outlives the TERM and exits with the script's
    // status, so Slurm records 143:0 rather than signal 15 (measured; without the marker's
    // wrapper it is 0:15, tests/fixtures/slurmrestd/24.11_v0.0.42_timeout-job-get.json).
    assert_eq!(info(&r, "exit_code"), "143:0");
    assert_eq!(info(&r, "failure_class"), "user");
    // The job's own marker tells the same without accounting: the TERM came at its end time.
    assert_eq!(marker(&c, &r).await, "143 TERM time_limit\n");
    server.stop().await;
}

/// The job's exit-status marker (written a moment after the job's end is published).
async fn marker(c: &support::Cluster, r: &Resource) -> String {
    let name = info(r, "job_name");
    let p = c
        .workdir_local
        .join(format!("{}.exit", name.as_str().unwrap()));
    for _ in 0..50 {
        if let Ok(m) = std::fs::read_to_string(&p) {
            return common::request::marker_without_job(&m, r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no marker at {}", p.display())
}

/// A cluster without slurmdbd (`--no-accounting --min-job-age 2`): a job that timed out and left
/// slurmctld before the connector saw it end is still TIMEOUT, from the marker the job wrote.
/// Connector A submits and stops; connector B, which never saw the job, answers. Skips on a
/// cluster with accounting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_accounting_an_aged_out_timeout_is_a_timeout_from_its_marker() {
    let Some(c) = support::cluster() else { return };
    if c.accounting {
        skip(
            Tier::NoAccounting,
            format!(
                "the dev cluster has accounting (run `deploy/dev-cluster/dev-cluster --release {} \
                 --no-accounting --min-job-age 2 run cargo test --test real_failures \
                 without_accounting`)",
                c.release
            ),
        );
        return;
    }
    let _node = NODE.read().await;
    let mut d = deployment(&c, 3);
    d.poll_interval = Duration::from_secs(3600);
    let a = Server::start(d).await;
    let script = "#!/bin/bash\n#SBATCH --time=1\nsleep 600\n";
    let mut g = a.client().await;
    let meta = g
        .create_task(request("noacct-timeout", script))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    // The meta as CreateTask answered it: a deferred one (a submit slower than its wait) is
    // found by B through the job's marker.
    let id = job_of(&mut g, &meta).await;
    a.stop().await;
    let client = c.user_client();
    support::wait_for(&client, id, Duration::from_secs(240), "TIMEOUT", |s| {
        s.is_some_and(|s| s.base == BaseState::Timeout)
    })
    .await;
    let start = Instant::now();
    while client.job(id).await.unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "job {id} still in slurmctld after 240 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let b = Server::start(deployment(&c, 3)).await;
    let mut g = b.client().await;
    let r = poll_until(&mut g, &meta, 60, terminal, |_| {}).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert!(
        r.message
            .starts_with(&format!("[TIMEOUT] job {id} reached its time limit")),
        "{}",
        r.message
    );
    assert!(r.message.contains("exit-status marker"), "{}", r.message);
    assert_eq!(info(&r, "state"), "TIMEOUT");
    assert_eq!(info(&r, "signal"), "TERM");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_its_memory_is_a_retryable_out_of_memory() {
    let Some(c) = support::cluster() else { return };
    if !failure_modes(&c).await {
        return;
    }
    let _node = NODE.read().await;
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    // 600 MB held for a few seconds (jobacct_gather samples every second) against a 50 MB
    // limit; perl is part of every Debian system (perl-base).
    let script = "#!/bin/bash\n#SBATCH --mem=50M\nperl -e '$x = \"x\" x (600 * 1024 * 1024); sleep 10'\necho survived\n";
    let meta = g
        .create_task(request("oom", script))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    let r = poll_until(&mut g, &meta, 120, terminal, |_| {}).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    let first = r.message.lines().next().unwrap().to_string();
    assert!(
        first.starts_with(&format!(
            "[OUT_OF_MEMORY] job {id} used more than its 50M (MaxRSS "
        )),
        "{}",
        r.message
    );
    // What Slurm itself reports for jobacct_gather's kill (recorded in
    // tests/fixtures/slurmrestd/24.11_v0.0.42_oom-job-get.json).
    // Slurm's state says only FAILED; whether the batch shell died of the SIGKILL itself
    // (0:9, RaisedSignal) or after the script (137:0) is a race between the two.
    assert_eq!(info(&r, "state"), "FAILED");
    assert_eq!(info(&r, "failure_class"), "user");
    server.stop().await;
}

/// Polls a task whose job the test disturbs: at every answer at most one live job has the task's
/// name, and no failure reaches Flyte; `act` runs once per answer with the message until it says
/// it is done. Returns the final resource and whether the requeue line was shown.
async fn watch_requeue(
    c: &support::Cluster,
    g: &mut Grpc,
    meta: &[u8],
    name: &str,
    mut act: impl AsyncFnMut(&Resource) -> bool,
) -> (Resource, bool) {
    let start = Instant::now();
    let (mut acted, mut saw_requeue) = (false, false);
    loop {
        let r = get(g, meta).await;
        let live = live_jobs(c, name).await;
        assert!(
            live.len() <= 1,
            "more than one live job for the task: {live:?}"
        );
        // "after 1 preemption", "after 1 node failure", or, before slurmdbd has the earlier
        // run's record, "after a node failure or preemption".
        saw_requeue |=
            r.message.contains("requeued by Slurm after ") && r.message.contains(" (1 of 3)");
        if terminal(&r) {
            return (r, saw_requeue);
        }
        if !acted {
            acted = act(&r).await;
        }
        assert!(
            start.elapsed() < Duration::from_secs(420),
            "not done in 420 s: {}",
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failure_is_absorbed_by_slurms_requeue_with_one_live_job() {
    let Some(c) = support::cluster() else { return };
    let _node = NODE.write().await;
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let meta = g
        .create_task(request("nodefail", REQUEUE_AWARE))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    let name = info(&get(&mut g, &meta).await, "job_name")
        .as_str()
        .unwrap()
        .to_string();
    let client = c.user_client();
    support::wait_base(&client, id, BaseState::Running).await;
    c.dev_cluster(&[
        "exec",
        "scontrol",
        "update",
        "nodename=node1",
        "state=down",
        "reason=issue18-node-failure",
    ])
    .await;
    // Once the connector has shown the requeue, the node comes back; Slurm starts the job again
    // after its requeue delay (about 2 minutes).
    let (r, saw_requeue) = watch_requeue(&c, &mut g, &meta, &name, async |r: &Resource| {
        if !r.message.contains("requeued by Slurm") {
            return false;
        }
        assert_ne!(r.phase, Phase::Running as i32, "{}", r.message);
        resume(&c).await;
        true
    })
    .await;
    // Whatever happened, node1 must be back for the other tests.
    resume(&c).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    assert!(saw_requeue, "the message never showed the requeue");
    assert_eq!(info(&r, "requeue_count"), 1);
    // The same job ran twice: the task's job id did not change.
    assert_eq!(info(&r, "job_id"), id.0 as i64);
    server.stop().await;
}

/// `scontrol update nodename=node1 state=resume`. Slurm refuses it ("Invalid node state
/// specified") once the node is back by itself (ReturnToService=2 returns a DOWN node when its
/// slurmd registers again), so its status is only logged.
async fn resume(c: &support::Cluster) {
    let out = tokio::process::Command::new(&c.script)
        .args(["--release", &c.release, "--cache", &c.cache])
        .args([
            "exec",
            "scontrol",
            "update",
            "nodename=node1",
            "state=resume",
        ])
        .output()
        .await
        .expect("run dev-cluster");
    eprintln!(
        "resume node1: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// `req` marked interruptible where flyte-sdk writes it: the template's metadata.
fn interruptible(
    mut req: slurm_connector::proto::connector::CreateTaskRequest,
) -> slurm_connector::proto::connector::CreateTaskRequest {
    use slurm_connector::proto::core::task_metadata::InterruptibleValue;
    req.template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_default()
        .interruptible_value = Some(InterruptibleValue::Interruptible(true));
    req
}

/// A job of the `urgent` partition takes the CPUs of the task's `preemptible` job.
async fn preempt(c: &support::Cluster, tag: &str) -> JobId {
    let mut urgent = c.job(
        tag,
        "#!/bin/bash
sleep 5
",
    );
    urgent.partition = Some("urgent".into());
    urgent.cpus_per_task = Some(8);
    urgent.time_limit = Some(Limit::Finite(2));
    support::submit(&c.user_client(), &urgent).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_is_absorbed_and_the_task_succeeds_with_the_same_job() {
    let Some(c) = support::cluster() else { return };
    if !failure_modes(&c).await {
        return;
    }
    let _node = NODE.write().await;
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let script = REQUEUE_AWARE.replace(
        "#!/bin/bash\n",
        "#!/bin/bash\n#SBATCH --partition=preemptible\n#SBATCH --cpus-per-task=8\n#SBATCH --time=15\n",
    );
    let req = request("preempted", &script);
    let attempt = req
        .task_execution_metadata
        .as_ref()
        .unwrap()
        .task_execution_id
        .as_ref()
        .unwrap()
        .retry_attempt;
    let meta = g.create_task(req).await.unwrap().into_inner().resource_meta;
    let id = job_of(&mut g, &meta).await;
    let name = info(&get(&mut g, &meta).await, "job_name")
        .as_str()
        .unwrap()
        .to_string();
    support::wait_base(&c.user_client(), id, BaseState::Running).await;
    preempt(&c, "urgent").await;
    let (r, saw_requeue) = watch_requeue(&c, &mut g, &meta, &name, async |_: &Resource| true).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    assert!(saw_requeue, "the message never showed the requeue");
    assert_eq!(info(&r, "requeue_count"), 1);
    // Nothing reached Flyte: no new attempt, and the task's one job ran again.
    assert_eq!(info(&r, "job_id"), id.0 as i64);
    assert_eq!(attempt, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_requeue_budget_cancels_the_job_and_is_retryable() {
    let Some(c) = support::cluster() else { return };
    if !failure_modes(&c).await {
        return;
    }
    let _node = NODE.write().await;
    // Budget 0: the first requeue is already one too many.
    let server = Server::start(deployment(&c, 0)).await;
    let mut g = server.client().await;
    let script = REQUEUE_AWARE.replace(
        "#!/bin/bash\n",
        "#!/bin/bash\n#SBATCH --partition=preemptible\n#SBATCH --cpus-per-task=8\n#SBATCH --time=15\n",
    );
    let meta = g
        .create_task(request("budget", &script))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    support::wait_base(&c.user_client(), id, BaseState::Running).await;
    preempt(&c, "urgent-budget").await;
    let r = poll_until(&mut g, &meta, 120, terminal, |_| {}).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert!(
        r.message.starts_with(&format!(
            "[REQUEUE_BUDGET] Slurm requeued job {id} 1 time after node failures or preemptions, \
             more than the task's budget of 0; the job was cancelled"
        )),
        "{}",
        r.message
    );
    assert_eq!(info(&r, "failure_class"), "infrastructure");
    // The connector cancelled it: it does not run again.
    support::wait_base(&c.user_client(), id, BaseState::Cancelled).await;
    server.stop().await;
}

/// An interruptible task (flyte-sdk's `interruptible=True`, in the template's metadata): the
/// site's setting sends it to `preemptible-grace`, requeueable and with `--signal=B:USR1@60`.
/// Preempted by an `urgent` job, Slurm requeues it; it resumes from its last checkpoint (taken
/// every 10 steps, and on the warning signal when Slurm sends one) and SUCCEEDS as the same job:
/// no Flyte retry consumed. What Slurm 24.11 did here (recorded in BENCHMARKS.md "Preemption"):
/// with `PreemptMode=REQUEUE` the partition's GraceTime is not applied (the job is killed at
/// once, no warning), and the run after the requeue was itself requeued once more when it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruptible_task_resumes_from_its_checkpoint_after_preemption() {
    let Some(c) = support::cluster() else { return };
    if !failure_modes(&c).await {
        return;
    }
    let _node = NODE.write().await;
    let mut d = deployment(&c, 3);
    d.interruptible.partition = Some("preemptible-grace".into());
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let base = format!("{}/{}", c.workdir, support::unique("ckpt"));
    let (ckpt, events) = (format!("{base}.ckpt"), format!("{base}.events"));
    // A step every 0.2 s (`wait` lets the trap run at once), a checkpoint every 10 steps and on
    // the warning; 300 steps (60 s), longer than the grace time. Every run appends to `events`
    // (the job's log starts again with each run).
    let script = format!(
        "#!/bin/bash\n#SBATCH --cpus-per-task=8\n#SBATCH --time=15\n\
         step=0; [ -f {ckpt} ] && step=$(cat {ckpt})\n\
         echo \"run ${{SLURM_RESTART_COUNT:-0}} starts at step $step; warned by \
         $FLYTE_SLURM_WARNING_SIGNAL $FLYTE_SLURM_WARNING_SECONDS s ahead\" >> {events}\n\
         trap 'echo $step > {ckpt}; echo \"warned: checkpoint at step $step\" >> {events}' USR1\n\
         while [ \"$step\" -lt 300 ]; do\n\
           sleep 0.2 & wait $!; step=$((step+1))\n\
           [ $((step % 10)) = 0 ] && echo $step > {ckpt}\n\
         done\n\
         echo \"done at step $step\" >> {events}\n"
    );
    let req = interruptible(request("interruptible", &script));
    let meta = g.create_task(req).await.unwrap().into_inner().resource_meta;
    let id = job_of(&mut g, &meta).await;
    let job = c
        .user_client()
        .job(id)
        .await
        .expect("the job")
        .expect("known");
    assert_eq!(job.partition.as_deref(), Some("preemptible-grace"));
    let name = info(&get(&mut g, &meta).await, "job_name")
        .as_str()
        .unwrap()
        .to_string();
    support::wait_base(&c.user_client(), id, BaseState::Running).await;
    // Some work first.
    tokio::time::sleep(Duration::from_secs(6)).await;
    preempt(&c, "urgent-interruptible").await;
    let (r, saw_requeue) = watch_requeue(&c, &mut g, &meta, &name, async |_: &Resource| true).await;
    eprintln!(
        "GetTask message:\n{}\ncustom_info: {:?}",
        r.message, r.custom_info
    );
    resumed_as_the_same_job(&r, saw_requeue, id);
    let log = std::fs::read_to_string(support::local_path(
        &support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap(),
        &events,
    ))
    .unwrap();
    eprintln!("runs:\n{log}\nrequeues: {}", info(&r, "requeue_count"));
    // A later run started from a checkpoint, not from step 0.
    let resumed: Vec<u64> = log
        .lines()
        .filter(|l| l.starts_with("run ") && !l.starts_with("run 0 "))
        .filter_map(|l| l.split(" starts at step ").nth(1))
        .filter_map(|rest| rest.split(';').next()?.parse().ok())
        .collect();
    assert!(
        resumed.iter().any(|s| *s > 0),
        "no run after the requeue resumed from a checkpoint: {log}"
    );
    assert!(log.contains("warned by USR1 60 s ahead"), "{log}");
    assert!(log.contains("done at step 300"), "{log}");
    server.stop().await;
}

/// The same for a native `slurm` task written with the Flyte SDK (flyte 2.12, Flyte's `a0` in
/// the dev cluster's apptainer image): it saves its step with `flyte.Checkpoint` every 2 s and
/// on Slurm's warning (SIGUSR1). Preempted, requeued, the run after the requeue loads what the
/// preempted run saved — the connector hands a requeued run its own attempt's checkpoint as
/// `--prev-checkpoint` (`render/resume.rs`) — and the task SUCCEEDS as the same job, its output
/// saying the step it resumed from. Needs `--failure-modes --apptainer` (26.05 or 26.11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruptible_native_task_resumes_from_its_sdk_checkpoint_after_preemption() {
    let Some(c) = support::cluster() else { return };
    if !failure_modes(&c).await {
        return;
    }
    let Some(nc) = native::cluster() else { return };
    let _node = NODE.write().await;
    let mut d = deployment(&c, 3);
    d.interruptible.partition = Some("preemptible-grace".into());
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let w = native::work(&nc, "ckpt", 600);
    let req = interruptible(native::request(
        &nc,
        &w,
        "checkpointed",
        &native::run_name("ckpt"),
        600,
    ));
    let meta = g.create_task(req).await.unwrap().into_inner().resource_meta;
    let id = JobId(common::request::job_of(&mut g, native::get_req(&meta)).await as u32);
    // Preempt once the task has saved a checkpoint (its handler is installed by then).
    let ckpt = w.host.join("ckpt");
    let start = Instant::now();
    while !ckpt.exists() {
        let r = get_native(&mut g, &meta).await;
        assert!(
            !terminal(&r),
            "ended before its first checkpoint: {}",
            r.message
        );
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no checkpoint in 300 s: {}",
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    preempt(&c, "urgent-native").await;
    let (mut saw_requeue, start) = (false, Instant::now());
    let r = loop {
        let r = get_native(&mut g, &meta).await;
        saw_requeue |= r.message.contains("requeued by Slurm after ");
        if terminal(&r) {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(480),
            "not done in 480 s: {}",
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "GetTask message:\n{}\nlast checkpoint: step {}",
        r.message,
        std::fs::read_to_string(&ckpt).unwrap_or_default()
    );
    resumed_as_the_same_job(&r, saw_requeue, id);
    use prost::Message;
    let outputs = std::fs::read(w.host.join("out/outputs.pb")).expect("outputs.pb");
    let said = format!(
        "{:?}",
        slurm_connector::proto::task::Outputs::decode(outputs.as_slice()).unwrap()
    );
    let resumed: u64 = said
        .split("resumed at step ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `resumed at step` in the output: {said}"));
    eprintln!("output: {said}");
    assert!(
        resumed > 0,
        "the run after the requeue started from step 0: the SDK checkpoint was not loaded ({said})"
    );
    let _ = std::fs::remove_dir_all(&w.host);
    server.stop().await;
}

/// The preemption drill (issue 39): `SLURM_CONNECTOR_PREEMPTION_DRILL=<tasks>` interruptible
/// tasks (1 CPU each, 150 steps of 0.2 s, a checkpoint every 10 steps and on the warning) on
/// `preemptible-grace`, while `urgent` jobs take the whole node again and again until at least
/// two preemptions per task happened. Every task must SUCCEED as its one job, never answering a
/// failed phase (no Flyte retry), and each run after a requeue must resume from its checkpoint:
/// the work lost per preemption (the steps the killed run had reached past the step the next run
/// resumed from) is measured and bounded by the checkpoint interval.
///
/// By hand (minutes of Slurm's requeue delays; not in CI):
/// `SLURM_CONNECTOR_PREEMPTION_DRILL=50 deploy/dev-cluster/dev-cluster --release 26.05
/// --failure-modes run cargo test --test real_failures -- --nocapture preemption_drill`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_drill_interruptible_tasks_resume_without_a_retry() {
    use futures::StreamExt;
    let Some(c) = support::cluster() else { return };
    let Some(tasks) = support::var("SLURM_CONNECTOR_PREEMPTION_DRILL") else {
        skip(
            Tier::PreemptionDrill,
            "the preemption drill runs when asked: SLURM_CONNECTOR_PREEMPTION_DRILL=<tasks> on a \
             --failure-modes cluster",
        );
        return;
    };
    let tasks: usize = tasks
        .parse()
        .expect("SLURM_CONNECTOR_PREEMPTION_DRILL: a number of tasks");
    if !failure_modes(&c).await {
        return;
    }
    let _node = NODE.write().await;
    let started = Instant::now();
    // A budget no task reaches: the drill measures requeues, not the budget.
    let mut d = deployment(&c, 1000);
    d.interruptible.partition = Some("preemptible-grace".into());
    // Each task a job of its own, so each preemption is one job's (a coalesced map's elements
    // are preempted the same way, one element at a time).
    d.coalesce = slurm_connector::config::Coalesce::Off;
    let server = Server::start(d).await;
    let g = server.client().await;
    let tag = support::unique("drill");
    // The files beside the jobs' own, in the working directory the job user writes to.
    let dir = c.workdir.clone();
    let local =
        |p: &str| support::local_path(&support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap(), p);
    // `reached`: the last step done, written every step; `ckpt`: the last checkpoint. Each run
    // logs where it starts and how far the run before it got.
    let script = |i: usize| {
        let base = format!("{dir}/{tag}-t{i}");
        format!(
            "#!/bin/bash\n#SBATCH --time=30\n\
             step=0; [ -f {base}.ckpt ] && step=$(cat {base}.ckpt)\n\
             reached=0; [ -f {base}.reached ] && reached=$(cat {base}.reached)\n\
             echo \"run ${{SLURM_RESTART_COUNT:-0}} starts at step $step reached $reached\" >> {base}.events\n\
             trap 'echo $step > {base}.ckpt; echo \"warned at step $step\" >> {base}.events' USR1\n\
             while [ \"$step\" -lt 150 ]; do\n\
               sleep 0.2 & wait $!; step=$((step+1)); echo $step > {base}.reached\n\
               [ $((step % 10)) = 0 ] && echo $step > {base}.ckpt\n\
             done\n\
             echo \"done at step $step\" >> {base}.events\n"
        )
    };
    let metas: Vec<Vec<u8>> = futures::stream::iter(0..tasks)
        .map(|i| {
            let mut g = g.clone();
            let req = interruptible(request(&format!("{tag}-{i}"), &script(i)));
            async move { g.create_task(req).await.unwrap().into_inner().resource_meta }
        })
        .buffered(10)
        .collect()
        .await;
    let mut ids = Vec::new();
    for m in &metas {
        ids.push(job_of(&mut g.clone(), m).await);
    }
    let client = c.user_client();
    // Preempt whatever runs, round after round, until two preemptions per task happened (or
    // everything finished).
    let want = 2 * tasks;
    let (mut preemptions, mut rounds) = (0usize, 0usize);
    while preemptions < want {
        let states = client.states(&ids).await.expect("states");
        let running: Vec<JobId> = ids
            .iter()
            .copied()
            .filter(|id| states.get(id).is_some_and(|s| s.base == BaseState::Running))
            .collect();
        if states.values().all(|s| s.is_finished()) {
            break;
        }
        if running.is_empty() {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        }
        rounds += 1;
        let urgent = preempt(&c, &format!("{tag}-urgent-{rounds}")).await;
        support::wait_base(&client, urgent, BaseState::Completed).await;
        let after = client.states(&running).await.expect("states");
        let requeued = running
            .iter()
            .filter(|id| after.get(id).is_some_and(|s| s.base == BaseState::Pending))
            .count();
        preemptions += requeued;
        eprintln!(
            "round {rounds} at {:?}: {} running, {requeued} requeued, {preemptions} preemptions so far",
            started.elapsed(),
            running.len()
        );
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "the drill took over an hour"
        );
    }
    // Every task to its end, as the backend polls: never a failed phase on the way.
    let ends: Vec<(Resource, bool)> = futures::stream::iter(&metas)
        .map(|m| {
            let mut g = g.clone();
            async move {
                let mut failed_on_the_way = false;
                let r = poll_until(&mut g, m, 1800, terminal, |r: &Resource| {
                    failed_on_the_way |= matches!(
                        Phase::try_from(r.phase),
                        Ok(Phase::Failed | Phase::RetryableFailed)
                    );
                })
                .await;
                (r, failed_on_the_way)
            }
        })
        .buffered(tasks)
        .collect()
        .await;
    let mut lost = Vec::new();
    let mut requeues = 0i64;
    for (i, ((r, failed), id)) in ends.iter().zip(&ids).enumerate() {
        assert_eq!(r.phase, Phase::Succeeded as i32, "task {i}: {}", r.message);
        assert!(!failed, "task {i} answered a failed phase on the way");
        assert_eq!(info(r, "job_id"), id.0 as i64, "task {i}: its one job");
        requeues += info(r, "requeue_count").as_i64().unwrap_or(0);
        let events = std::fs::read_to_string(local(&format!("{dir}/{tag}-t{i}.events"))).unwrap();
        assert!(events.contains("done at step 150"), "task {i}: {events}");
        for l in events
            .lines()
            .filter(|l| l.starts_with("run ") && !l.starts_with("run 0 "))
        {
            let n: Vec<i64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            // run R starts at step S reached P
            let (resumed, reached) = (n[1], n[2]);
            assert!(
                resumed > 0 || reached == 0,
                "task {i} started over: {events}"
            );
            lost.push(reached - resumed);
        }
    }
    // One job per task: sacct knows exactly `tasks` jobs by the drill's names.
    let out = c
        .dev_cluster(&[
            "exec",
            "sacct",
            "-X",
            "-n",
            "-P",
            "-a",
            "-o",
            "JobID,JobName%200",
            "-S",
            "now-2hours",
        ])
        .await;
    let jobs: std::collections::BTreeSet<&str> = out
        .lines()
        .filter(|l| l.contains(&tag) && !l.contains("urgent"))
        .filter_map(|l| l.split('|').next())
        .collect();
    lost.sort_unstable();
    let mean = lost.iter().sum::<i64>() as f64 / lost.len().max(1) as f64;
    eprintln!(
        "preemption drill: {tasks} tasks, {rounds} rounds, {preemptions} preemptions counted, \
         {requeues} requeues in Slurm's records, {} resumed runs; steps lost per resume: mean \
         {mean:.1}, max {} (0.2 s a step; checkpoint every 10); {} jobs in sacct; {:?}",
        lost.len(),
        lost.last().copied().unwrap_or(0),
        jobs.len(),
        started.elapsed()
    );
    assert_eq!(jobs.len(), tasks, "one job per task: {jobs:?}");
    assert!(
        preemptions >= want,
        "{preemptions} preemptions, wanted {want}"
    );
    assert!(
        lost.last().copied().unwrap_or(0) <= 10,
        "a resumed run lost more than the checkpoint interval: {lost:?}"
    );
    server.stop().await;
}

/// A cluster at its `MaxJobCount` (issue 38; `dev-cluster --max-job-count 8`): slurmctld refuses
/// a submit it has no room for (24.11: EAGAIN, 26.05+: 2007 "MaxJobCount limit reached",
/// recorded in `tests/fixtures/slurmrestd/*_maxjobs-*.json`). Twice as many tasks as it holds:
/// none fails, those without room answer a deferred meta and GetTask says QUEUED and why, the
/// connector probes once every 5 s while full (counted: `slurm_connector_submits_refused_full`
/// and sdiag's submits), and every task runs, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_queues_tasks_until_jobs_leave_it() {
    let Some(c) = support::cluster() else { return };
    let Some(max) = small_max_job_count(&c).await else {
        return;
    };
    // Alone: another case's jobs would take room (and its own submits be refused). What earlier
    // runs left pending (held jobs stay across `dev-cluster down`/`up`) would too: this cluster
    // is for this case, so they go, and the case waits for slurmctld to be empty.
    let _node = NODE.write().await;
    c.dev_cluster(&["exec", "scancel", "--state=PENDING"]).await;
    let empty_by = Instant::now() + Duration::from_secs(120);
    while !c
        .dev_cluster(&["exec", "squeue", "-h", "-t", "all"])
        .await
        .trim()
        .is_empty()
    {
        assert!(
            Instant::now() < empty_by,
            "slurmctld still holds jobs after 120 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let sdiag = |text: String| -> u64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix("REQUEST_SUBMIT_BATCH_JOB"))
            .and_then(|r| r.split_whitespace().find_map(|w| w.strip_prefix("count:")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let submits_before = sdiag(c.dev_cluster(&["exec", "sdiag"]).await);
    let mut d = deployment(&c, 3);
    d.coalesce = slurm_connector::config::Coalesce::Off;
    d.submit_wait = Duration::from_secs(2);
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let n = 2 * max;
    let began = Instant::now();
    let mut metas = Vec::new();
    for i in 0..n {
        let meta = g
            .create_task(request(&format!("full{i}"), "#!/bin/bash\nsleep 10\n"))
            .await
            .unwrap_or_else(|e| panic!("CreateTask {i} of {n} is no error: {e}"))
            .into_inner()
            .resource_meta;
        metas.push(meta);
    }
    let deferred: Vec<&Vec<u8>> = metas
        .iter()
        .filter(|m| {
            serde_json::from_slice::<serde_json::Value>(m).unwrap()["job_id"].as_u64() == Some(0)
        })
        .collect();
    assert!(
        deferred.len() >= n - max,
        "{} of {n} deferred with MaxJobCount {max}",
        deferred.len()
    );
    let r = get(&mut g, deferred.last().unwrap()).await;
    eprintln!("GetTask of a task without room:\n{}", r.message);
    assert_eq!(r.phase, Phase::Queued as i32, "{}", r.message);
    assert!(
        r.message
            .starts_with(&format!("Waiting for room on cluster {}", c.name))
            && r.message.contains("MaxJobCount"),
        "{}",
        r.message
    );
    for m in &metas {
        let r = poll_until(&mut g, m, 300, terminal, |_| {}).await;
        assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    }
    let took = began.elapsed();
    let submitted = server
        .metric("slurm_connector_jobs_submitted_total", &[])
        .await;
    let refused = server
        .metric("slurm_connector_submits_refused_full", &[])
        .await;
    let submits = sdiag(c.dev_cluster(&["exec", "sdiag"]).await) - submits_before;
    eprintln!(
        "{n} tasks with MaxJobCount {max}: {} deferred, all SUCCEEDED in {:.0} s; {submitted} \
         jobs submitted, {refused} submits refused while full; slurmctld counted {submits} \
         submit RPCs",
        deferred.len(),
        took.as_secs_f64()
    );
    assert_eq!(submitted as usize, n, "one job per task");
    // The first refusals (the submits in flight together), then one probe every 5 s.
    let bound = 4.0 + took.as_secs_f64() / 5.0;
    assert!(
        refused >= 1.0 && refused <= bound,
        "{refused} refused submits in {took:?} (bound {bound:.0})"
    );
    assert_eq!(
        submits,
        n as u64 + refused as u64,
        "sdiag counts the same submits"
    );
    server.stop().await;
}
