//! Real tier: job arrays of `slurm_script` tasks (issue 18) through the connector's gRPC service
//! (in-process) on the dev cluster:
//! - an array of 5 (`--array=0-4%3`) where element 3 exits 3: RETRYABLE_FAILED, the first line
//!   the element's failure naming its index, the failed indices and element 3's stderr tail;
//!   one log per element (`%A_%a` filled in by Slurm); GetTaskMetrics has a series per element;
//! - an all-success array: SUCCEEDED, with per-element progress (and how to attach to a running
//!   element) while it runs;
//! - DeleteTask cancels every element, running and pending;
//! - with accounting: an array adopted after every element left slurmctld (MinJobAge) is
//!   resolved from slurmdbd, element by element;
//! - without accounting (`--no-accounting`): the same array is resolved from the exit-status
//!   marker each element left (`<job>_<index>.exit`).
//!
//! Skipped (with the reason) when the dev-cluster environment is not exported.

mod common;
use common::server::Server;
use common::skip::{Tier, skip};

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "real_slurm/connector.rs"]
mod connector;
use connector::{deployment, job_of, poll_until, request, terminal};

use std::time::{Duration, Instant};

use slurm_connector::proto::connector::Resource;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::slurmrestd::JobId;

/// Five elements, three at a time; element 3 fails with a line on stderr.
const ONE_FAILS: &str = "#!/bin/bash\n#SBATCH --array=0-4%3\n#SBATCH --time=2\n\
    echo \"element $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID\"\nsleep 2\n\
    if [ \"$SLURM_ARRAY_TASK_ID\" = 3 ]; then echo \"element 3 broke\" >&2; exit 3; fi\n";

fn job_name(meta: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(meta).unwrap();
    v["job_name"].as_str().unwrap().to_string()
}

fn custom_info(r: &Resource) -> serde_json::Value {
    let s = r.custom_info.as_ref().expect("custom_info");
    serde_json::to_value(prost_struct_json(s)).unwrap()
}

fn prost_struct_json(s: &prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), prost_json(v)))
            .collect(),
    )
}

fn prost_json(v: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &v.kind {
        Some(Kind::StringValue(s)) => serde_json::json!(s),
        Some(Kind::NumberValue(n)) => serde_json::json!(*n as i64),
        Some(Kind::BoolValue(b)) => serde_json::json!(b),
        Some(Kind::StructValue(s)) => prost_struct_json(s),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(prost_json).collect())
        }
        Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
    }
}

fn element_states(r: &Resource) -> Vec<String> {
    custom_info(r)["array"]["elements"]
        .as_array()
        .unwrap_or_else(|| panic!("no elements: {}", r.message))
        .iter()
        .map(|e| e["state"].as_str().unwrap_or("none").to_string())
        .collect()
}

/// What a failed five-element array must say, however its elements were resolved.
fn assert_element_3_failed(r: &Resource, id: JobId) {
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    let first = r.message.lines().next().unwrap();
    assert!(
        first.starts_with("[FAILED] job ")
            && first.contains("exited with code 3")
            && first.ends_with(&format!("(element 3 of job array {id})")),
        "{}",
        r.message
    );
    assert!(
        r.message.contains(&format!(
            "job array {id}: 5 of 5 elements done (4 COMPLETED, 1 FAILED)"
        )),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("\nfailed elements: 3\n"),
        "{}",
        r.message
    );
    assert!(
        r.message
            .contains(&format!("_{id}_3.err) ---\nelement 3 broke")),
        "the failed element's stderr tail: {}",
        r.message
    );
    let info = custom_info(r);
    assert_eq!(info["failure_class"], "user", "{info}");
    assert_eq!(info["array"]["failed"], serde_json::json!([3]), "{info}");
    assert_eq!(
        element_states(r),
        ["COMPLETED", "COMPLETED", "COMPLETED", "FAILED", "COMPLETED"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_with_a_failing_element_names_its_index_and_stderr_tail() {
    let Some(c) = support::cluster() else { return };
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let meta = g
        .create_task(request("arr-fail", ONE_FAILS))
        .await
        .expect("CreateTask takes an array")
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    let r = poll_until(&mut g, &meta, 120, terminal, |_| {}).await;
    assert_element_3_failed(&r, id);
    // GetTaskMetrics: one series per element, labelled with its index.
    let results = g
        .get_task_metrics(slurm_connector::proto::connector::GetTaskMetricsRequest {
            resource_meta: meta.clone(),
            queries: vec!["elapsed_seconds".into()],
            ..Default::default()
        })
        .await
        .expect("GetTaskMetrics of an array")
        .into_inner()
        .results;
    let data = prost_struct_json(results[0].data.as_ref().unwrap());
    let mut got: Vec<(String, String)> = data["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["metric"]["array_task_id"].as_str().unwrap().to_string(),
                s["metric"]["array_job_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        (0..5)
            .map(|i| (i.to_string(), id.to_string()))
            .collect::<Vec<_>>(),
        "{data}"
    );
    // One log per element, named by Slurm from %A_%a.
    let name = job_name(&meta);
    for i in 0..5 {
        let out = c.workdir_local.join(format!("{name}_{id}_{i}.out"));
        let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{out:?}: {e}"));
        assert_eq!(text, format!("element {i} of {id}\n"), "{out:?}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_success_array_succeeds_with_per_element_progress() {
    let Some(c) = support::cluster() else { return };
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let script = "#!/bin/bash\n#SBATCH --array=0-3%2\n#SBATCH --time=2\nsleep 3\n";
    let meta = g
        .create_task(request("arr-ok", script))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    let mut running = None;
    let r = poll_until(&mut g, &meta, 120, terminal, |r| {
        if r.phase == Phase::Running as i32 && running.is_none() {
            running = Some(r.message.clone());
        }
    })
    .await;
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    assert!(
        r.message.contains(&format!(
            "job array {id}: 4 of 4 elements done (4 COMPLETED)"
        )),
        "{}",
        r.message
    );
    let running = running.expect("seen RUNNING");
    assert!(
        running.contains(&format!("job array {id}: ")),
        "per-element progress while it runs: {running}"
    );
    assert!(
        running.contains("attach: srun --jobid=") && running.contains("--overlap --pty bash"),
        "{running}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_task_cancels_every_element() {
    let Some(c) = support::cluster() else { return };
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let script = "#!/bin/bash\n#SBATCH --array=0-3%2\n#SBATCH --time=5\nsleep 300\n";
    let meta = g
        .create_task(request("arr-del", script))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let id = job_of(&mut g, &meta).await;
    poll_until(
        &mut g,
        &meta,
        60,
        |r| r.phase == Phase::Running as i32,
        |_| {},
    )
    .await;
    g.delete_task(slurm_connector::proto::connector::DeleteTaskRequest {
        resource_meta: meta.clone(),
        ..Default::default()
    })
    .await
    .expect("DeleteTask");
    let r = poll_until(&mut g, &meta, 60, terminal, |_| {}).await;
    assert_eq!(r.phase, Phase::Aborted as i32, "{}", r.message);
    assert_eq!(element_states(&r), ["CANCELLED"; 4], "{}", r.message);
    // Slurm agrees: nothing of the array is left running or pending.
    let live: Vec<_> = c
        .user_client()
        .jobs()
        .await
        .expect("jobs")
        .into_iter()
        .filter(|j| j.array.is_some_and(|a| a.array_job_id == id) && !j.state.is_finished())
        .map(|j| (j.job_id, j.state.to_string()))
        .collect();
    assert!(live.is_empty(), "{live:?}");
    server.stop().await;
}

/// Submits the five-element array with a connector that then stops, waits until slurmctld no
/// longer lists any element (MinJobAge), and asks a new connector about it.
async fn adopted_after_aging(c: &support::Cluster, tag: &str) -> (Resource, JobId) {
    let (meta, id) = {
        let server = Server::start(deployment(c, 3)).await;
        let mut g = server.client().await;
        let meta = g
            .create_task(request(tag, ONE_FAILS))
            .await
            .unwrap()
            .into_inner()
            .resource_meta;
        let id = job_of(&mut g, &meta).await;
        server.stop().await;
        // With accounting a deferred meta is resolved through slurmdbd; without, an array's
        // cannot be (its markers are per element: docs/operations.md), and this is about the
        // elements' markers.
        let meta = if c.accounting {
            meta
        } else {
            common::request::answered_with(&meta, id.0.into())
        };
        (meta, id)
    };
    let client = c.user_client();
    let start = Instant::now();
    loop {
        let s = client.states_and_elements(&[id]).await.expect("jobs/state");
        if start.elapsed() > Duration::from_secs(10) && s.elements.is_empty() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(180), "{s:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let server = Server::start(deployment(c, 3)).await;
    let mut g = server.client().await;
    let r = poll_until(&mut g, &meta, 60, terminal, |_| {}).await;
    server.stop().await;
    (r, id)
}

/// A connector that restarts after every element left slurmctld (MinJobAge): the array's id
/// brings every element from slurmdbd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_that_left_slurmctld_is_resolved_from_slurmdbd() {
    let Some(c) = support::cluster() else { return };
    if !c.accounting || c.min_job_age > 60 {
        skip(
            Tier::Accounting,
            format!(
                "needs slurmdbd and a short MinJobAge (accounting={}, MinJobAge={} s): \
                 `deploy/dev-cluster/dev-cluster --release {} --min-job-age 5 up`",
                c.accounting, c.min_job_age, c.release
            ),
        );
        return;
    }
    let (r, id) = adopted_after_aging(&c, "arr-aged").await;
    assert_element_3_failed(&r, id);
}

/// Without slurmdbd: each element's exit-status marker says how it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_accounting_an_array_is_resolved_from_its_elements_markers() {
    let Some(c) = support::cluster() else { return };
    if c.accounting || c.min_job_age > 60 {
        skip(
            Tier::NoAccounting,
            format!(
                "needs a cluster without slurmdbd and a short MinJobAge (accounting={}, \
                 MinJobAge={} s): `deploy/dev-cluster/dev-cluster --release {} --no-accounting \
                 --min-job-age 2 run cargo test --test real_arrays without_accounting`",
                c.accounting, c.min_job_age, c.release
            ),
        );
        return;
    }
    let (r, id) = adopted_after_aging(&c, "arr-noacct").await;
    assert_element_3_failed(&r, id);
    assert!(
        r.message
            .contains("outcome was read from the exit-status marker"),
        "{}",
        r.message
    );
}
