//! The real tier for multi-node work: Flyte clustered tasks (`clustered-task`) and a multi-node
//! `slurm` task, run by the real `slurm-connector serve` on a 2-node dev cluster (two slurmd,
//! each in its own UTS namespace, Apptainer, Slurm 26.11). The requests are the ones the
//! published SDK makes (`tests/fixtures/multinode/multinode_*.pb`, written by
//! `scripts/make-multinode-fixtures.py` with flyte 2.12.1 and flyteplugins-slurm 2.12.1); the task
//! code (`tests/fixtures/real/multinode_tasks.py`) runs under Flyte's own `a0` in the cluster's
//! task image, every rank doing a real TCP rendezvous at MASTER_ADDR:MASTER_PORT (no torch).
//!
//! ```sh
//! sudo deploy/dev-cluster/dev-cluster --release 26.11 --apptainer --nodes 2 --min-job-age 5 \
//!   run cargo test --test real_multinode
//! ```
//! Skips with a reason unless such a cluster's environment is exported (tier `multinode`). The
//! `pyxis_*` tests run the same gang through Pyxis + Enroot, the image mapped to the pre-staged
//! `.sqsh` (tier `pyxis`):
//! ```sh
//! sudo deploy/dev-cluster/dev-cluster --release 26.05 --apptainer --pyxis --nodes 2 --min-job-age 5 \
//!   run cargo test --test real_multinode pyxis
//! ```

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::{
    CreateTaskRequest, DeleteTaskRequest, GetTaskRequest, Resource, TaskCategory,
};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::proto::core::{self, KeyValuePair};
use slurm_connector::proto::task::Outputs;
use tonic::transport::Channel;

mod common;
use common::request::RequestExt;
use common::skip::{Tier, skip};

#[path = "real_apptainer/support.rs"]
mod support;
use support::{Cluster, JOB_UID, Serve, free_port, int_literal, job_of, job_processes, phase};

const TASKS_PY: &str = include_str!("fixtures/real/multinode_tasks.py");

/// The 2-node dev cluster for `runtime`: Apptainer with the fixtures' own image (`/images/...sif`;
/// 26.11 in CI), or Pyxis + Enroot with the task image mapped to the pre-staged `.sqsh` by the
/// connector's image map (26.05 `--pyxis` in CI).
fn cluster2(runtime: &'static str) -> Option<Cluster> {
    let nodes: u32 = std::env::var("SLURM_DEV_CLUSTER_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let (tier, var, how) = match runtime {
        "pyxis" => (
            Tier::Pyxis,
            "SLURM_DEV_CLUSTER_PYXIS",
            "--release 26.05 --apptainer --pyxis --nodes 2 run cargo test --test real_multinode pyxis",
        ),
        _ => (
            Tier::Multinode,
            "SLURM_DEV_CLUSTER_APPTAINER",
            "--release 26.11 --apptainer --nodes 2 run cargo test --test real_multinode",
        ),
    };
    if nodes < 2
        || std::env::var(var).as_deref() != Ok("1")
        || std::env::var_os("SLURM_DEV_CLUSTER_ROOT").is_none()
    {
        skip(
            tier,
            format!(
                "no 2-node dev cluster with {runtime}; run under `deploy/dev-cluster/dev-cluster {how}`"
            ),
        );
        return None;
    }
    if runtime == "pyxis" {
        return support::mapped_cluster("pyxis");
    }
    Some(Cluster {
        root: std::env::var("SLURM_DEV_CLUSTER_ROOT").unwrap().into(),
        image: std::env::var("SLURM_DEV_CLUSTER_APPTAINER_IMAGE").unwrap_or_default(),
        runtime: "apptainer",
        config_file: None,
    })
}

/// The real binary, serving clustered tasks in `c`'s runtime (with its image map, if it has one)
/// and the shared folder mounted.
async fn serve(c: &Cluster, tag: &str) -> (Serve, AsyncConnectorServiceClient<Channel>) {
    let port = free_port();
    let data = std::env::temp_dir().join(format!("sc-real-multinode-{}-{tag}", std::process::id()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
    if let Some(f) = &c.config_file {
        cmd.env("FLYTE_SLURM_CONFIG", f);
    }
    let child = cmd
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .env("FLYTE_SLURM_POLL_INTERVAL", "1s")
        .env("FLYTE_SLURM_CLUSTERED_TASKS", "true")
        .env("FLYTE_SLURM_CLUSTERED_RUNTIME", c.runtime)
        .env("FLYTE_SLURM_CLUSTERED_MOUNTS", "/shared")
        .env("FLYTE_SLURM_CLUSTERED_TIME_LIMIT", "00:10:00")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let child = Serve::from(child);
    (child, support::connect_when_listening(port).await)
}

/// A work folder on the shared filesystem: the task code, its inputs.pb, its output prefix.
struct Work {
    cluster: String,
    host: std::path::PathBuf,
}

fn work(c: &Cluster, tag: &str, x: i64) -> Work {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let cluster = format!(
        "/shared/flyte/multinode-{tag}-{}-{stamp}",
        std::process::id()
    );
    let host = c.root.join(cluster.trim_start_matches('/'));
    for d in ["", "code", "io"] {
        let p = host.join(d);
        std::fs::create_dir_all(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(JOB_UID), Some(JOB_UID)).unwrap();
    }
    std::fs::write(host.join("code/multinode_tasks.py"), TASKS_PY).unwrap();
    let inputs = slurm_connector::proto::task::Inputs {
        literals: vec![slurm_connector::proto::task::NamedLiteral {
            name: "x".into(),
            value: Some(int_literal(x)),
        }],
        ..Default::default()
    };
    std::fs::write(host.join("io/inputs.pb"), inputs.encode_to_vec()).unwrap();
    Work { cluster, host }
}

/// A fixture the SDK wrote, made ready as the backend would: its container templates rendered
/// for this work folder and run, the code found through PYTHONPATH (the clustered task has no
/// Slurm config to bind a workdir with), its own run name.
/// On a mapped cluster (Pyxis) the image is the registry reference the image map turns into the
/// pre-staged file, as a site's would be.
fn request(c: &Cluster, fixture: &str, w: &Work, run: &str) -> CreateTaskRequest {
    let path = format!(
        "{}/tests/fixtures/multinode/{fixture}.pb",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut req = CreateTaskRequest::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
    let prefix = format!("file://{}/out", w.cluster);
    let rendered = [
        ("{{.input}}", format!("file://{}/io/inputs.pb", w.cluster)),
        ("{{.outputPrefix}}", prefix.clone()),
        (
            "{{.rawOutputDataPrefix}}",
            format!("file://{}/raw", w.cluster),
        ),
        (
            "{{.checkpointOutputPrefix}}",
            format!("file://{}/ckpt", w.cluster),
        ),
        ("{{.prevCheckpointPrefix}}", String::new()),
        ("{{.runStartTime}}", "2026-12-01T00:00:00Z".into()),
    ];
    let t = req.template.as_mut().unwrap();
    let Some(core::task_template::Target::Container(container)) = t.target.as_mut() else {
        panic!("{fixture}: no container");
    };
    if c.config_file.is_some() {
        container.image = c.image.clone();
    }
    for a in container.args.iter_mut() {
        for (k, v) in &rendered {
            if a == k {
                *a = v.clone();
            }
        }
    }
    container.env.push(KeyValuePair {
        key: "PYTHONPATH".into(),
        value: format!("{}/code", w.cluster),
    });
    if t.r#type == "slurm" {
        // The plugin's task binds what it needs itself.
        let mut custom = slurm_connector::proto::struct_to_json(t.custom.as_ref().unwrap());
        custom["container"]["mounts"] = serde_json::json!([w.cluster]);
        t.custom = Some(slurm_connector::proto::json_to_struct(&custom));
    }
    req.output_prefix = prefix;
    req.run_name(run)
}

/// Cancels the job when a test ends early (a failed assertion must not leave a whole-node
/// job holding both nodes for the next test).
struct CancelOnDrop(u64);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let (Ok(script), Ok(release)) = (
            std::env::var("SLURM_DEV_CLUSTER_SCRIPT"),
            std::env::var("SLURM_DEV_CLUSTER_RELEASE"),
        ) {
            let _ = Command::new(script)
                .args([
                    "--release",
                    &release,
                    "exec",
                    "scancel",
                    &self.0.to_string(),
                ])
                .status();
        }
    }
}

fn category(req: &CreateTaskRequest) -> TaskCategory {
    let t = req.template.as_ref().unwrap();
    TaskCategory {
        name: t.r#type.clone(),
        version: t.task_type_version,
    }
}

fn run_name(tag: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_007;
    format!("rmn{tag}{n}")
}

/// CreateTask; the guard cancels the job should the test end (or fail) before it does.
async fn create(
    c: &mut AsyncConnectorServiceClient<Channel>,
    req: CreateTaskRequest,
) -> (Vec<u8>, CancelOnDrop) {
    let meta = c.create_task(req).await.unwrap().into_inner().resource_meta;
    let cancel = CancelOnDrop(job_of(c, &meta).await);
    (meta, cancel)
}

async fn get(
    c: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
    cat: &TaskCategory,
) -> Resource {
    c.get_task(GetTaskRequest {
        resource_meta: meta.to_vec(),
        task_category: Some(cat.clone()),
        ..Default::default()
    })
    .await
    .expect("GetTask never fails")
    .into_inner()
    .resource
    .unwrap()
}

async fn wait_until(
    c: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
    cat: &TaskCategory,
    secs: u64,
    done: impl Fn(&Resource) -> bool,
) -> Resource {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = get(c, meta, cat).await;
        if done(&r) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "not there within {secs}s; last: {:?}\n{}",
            phase(&r),
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn info(r: &Resource, key: &str) -> serde_json::Value {
    r.custom_info
        .as_ref()
        .map(slurm_connector::proto::struct_to_json)
        .unwrap_or_default()[key]
        .clone()
}

fn o0(w: &Work) -> core::Literal {
    let bytes = std::fs::read(w.host.join("out/outputs.pb")).unwrap();
    let outputs = Outputs::decode(bytes.as_slice()).unwrap();
    assert_eq!(outputs.literals.len(), 1, "{outputs:?}");
    assert_eq!(outputs.literals[0].name, "o0");
    outputs.literals[0].value.clone().unwrap()
}

/// The job's stderr (srun --label: every line starts with its rank).
fn stderr_of(c: &Cluster, r: &Resource) -> String {
    let p = info(r, "stderr");
    let p = p.as_str().unwrap();
    std::fs::read_to_string(c.root.join(p.trim_start_matches('/'))).unwrap()
}

async fn clustered_2x2_ranks_across_both_nodes(runtime: &'static str) {
    let Some(c) = cluster2(runtime) else { return };
    let (_serve, mut client) = serve(&c, "sum").await;
    let w = work(&c, "sum", 100);
    let req = request(&c, "multinode_rank_sum", &w, &run_name("sum"));
    let cat = category(&req);
    assert_eq!((cat.name.as_str(), cat.version), ("clustered-task", 1));
    let (meta, _cancel) = create(&mut client, req).await;
    let r = wait_until(&mut client, &meta, &cat, 240, |r| phase(r).is_terminal()).await;
    assert_eq!(phase(&r), Phase::Succeeded, "{}", r.message);
    // Rank 0 returns 0+1+2+3 (what the rendezvous added up) + x.
    assert_eq!(o0(&w), int_literal(106));
    assert!(!w.host.join("out/error.pb").exists());
    // The job record's node list: both nodes ran ranks.
    assert_eq!(info(&r, "nodes"), "node[1-2]", "{:?}", r.custom_info);
    let err = stderr_of(&c, &r);
    for (rank, node) in [(0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")] {
        assert!(
            err.lines().any(|l| l.starts_with(&format!(
                "{rank}: rank {rank}/4 local {} node {} on {node}, master node1:",
                rank % 2,
                rank / 2
            ))),
            "rank {rank} did not report from {node}:\n{err}"
        );
    }
    // outputs.pb is written once, by rank 0: a0's own gate says so in each rank (and every
    // other rank returns a different value, which outputs.pb would then hold).
    for rank in 0..4 {
        let want = format!(
            "{rank}: rank {rank}: a0 writes the result: {}",
            if rank == 0 { "True" } else { "False" }
        );
        assert!(err.lines().any(|l| l == want), "no `{want}`:\n{err}");
    }
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clustered_task_runs_2x2_ranks_across_both_nodes() {
    clustered_2x2_ranks_across_both_nodes("apptainer").await;
}

/// The same gang through Pyxis + Enroot: each node's slurmstepd makes its container, the ranks
/// of a node share it, and the rendezvous crosses the nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_a_clustered_task_runs_2x2_ranks_across_both_nodes() {
    clustered_2x2_ranks_across_both_nodes("pyxis").await;
}

/// `rank_boom` with the rank that raises chosen by `x`'s last digit, run to its end.
async fn rank_boom(tag: &str, x: i64) -> (Work, Resource) {
    let c = cluster2("apptainer").expect("checked by the caller");
    let (_serve, mut client) = serve(&c, tag).await;
    let w = work(&c, tag, x);
    let req = request(&c, "multinode_rank_boom", &w, &run_name(tag));
    let cat = category(&req);
    let (meta, _cancel) = create(&mut client, req).await;
    let r = wait_until(&mut client, &meta, &cat, 240, |r| phase(r).is_terminal()).await;
    assert!(!w.host.join("out/outputs.pb").exists(), "{}", r.message);
    (w, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_raises_fails_the_task_with_its_own_message() {
    if cluster2("apptainer").is_none() {
        return;
    }
    let (w, r) = rank_boom("boom", 103).await;
    assert!(
        matches!(phase(&r), Phase::Failed | Phase::RetryableFailed),
        "{:?}: {}",
        phase(&r),
        r.message
    );
    assert!(
        r.message
            .contains("rank 3 on node node2 failed first (Exited with exit code"),
        "{}",
        r.message
    );
    let tail = r
        .message
        .split_once("--- last lines of rank 3 (node node2) ---")
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("no tail of rank 3: {}", r.message));
    assert!(
        tail.contains("rank 3 on node2 gives up (103)"),
        "{}",
        r.message
    );
    // Only rank 3's own lines (labels stripped), no other rank's.
    assert!(!tail.contains("rank 0/4"), "{}", r.message);
    // Rank 3 writes no error.pb (only rank 0 writes results): srun's account is the answer.
    assert!(
        !r.message.contains("rank 0: the task failed"),
        "{}",
        r.message
    );
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rank_0_raising_fails_the_task_with_its_error_pb() {
    if cluster2("apptainer").is_none() {
        return;
    }
    let (w, r) = rank_boom("boom0", 100).await;
    // Rank 0's a0 wrote error.pb (flyte 2.12.1 marks a user's ValueError recoverable): the
    // task's own account decides, as for one rank, and srun's names the rank and node after it.
    assert_eq!(phase(&r), Phase::RetryableFailed, "{}", r.message);
    assert!(w.host.join("out/error.pb").exists(), "{}", r.message);
    assert!(
        r.message
            .contains("rank 0: the task failed (recoverable user error ValueError)")
            && r.message.contains("rank 0 on node1 gives up (100)"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("rank 0 on node node1 failed first"),
        "{}",
        r.message
    );
    let _ = std::fs::remove_dir_all(&w.host);
}

/// The UTS namespace (= dev-cluster node) of each process.
fn nodes_of(procs: &[(u32, String)]) -> BTreeSet<String> {
    procs
        .iter()
        .filter_map(|(pid, _)| std::fs::read_link(format!("/proc/{pid}/ns/uts")).ok())
        .map(|l| l.to_string_lossy().to_string())
        .collect()
}

async fn cancel_leaves_no_process_on_either_node_in(runtime: &'static str) {
    let Some(c) = cluster2(runtime) else { return };
    let (_serve, mut client) = serve(&c, "cancel").await;
    let w = work(&c, "cancel", 100);
    let req = request(&c, "multinode_rank_sleep", &w, &run_name("cancel"));
    let cat = category(&req);
    let (meta, _cancel) = create(&mut client, req).await;
    let job = job_of(&mut client, &meta).await;
    let deadline = Instant::now() + Duration::from_secs(180);
    let before = loop {
        let procs = job_processes(job);
        let a0s: Vec<(u32, String)> = procs
            .iter()
            .filter(|(_, cmd)| cmd.contains("/opt/venv/bin/a0"))
            .cloned()
            .collect();
        // Four ranks' a0, on two nodes.
        if a0s.len() >= 4 && nodes_of(&a0s).len() == 2 {
            break procs;
        }
        assert!(
            Instant::now() < deadline,
            "the 4 ranks of job {job} never ran on 2 nodes; processes: {procs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // Through Pyxis each node's slurmstepd made the step's container in its own tree.
    if runtime == "pyxis" {
        let made = support::enroot_containers(&c, job);
        let trees: BTreeSet<&str> = made.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            trees,
            BTreeSet::from(["node1", "node2"]),
            "job {job}'s Enroot containers: {made:?}"
        );
    }
    client
        .delete_task(DeleteTaskRequest {
            resource_meta: meta.clone(),
            task_category: Some(cat.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let r = wait_until(&mut client, &meta, &cat, 120, |r| phase(r).is_terminal()).await;
    assert_eq!(phase(&r), Phase::Aborted, "{}", r.message);
    if runtime == "pyxis" {
        support::until_no_enroot_container(&c, job).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = job_processes(job);
        let alive: Vec<&(u32, String)> = before
            .iter()
            .filter(|(pid, cmd)| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == cmd)
            })
            .collect();
        if left.is_empty() && alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes of cancelled job {job} alive 60 s after ABORTED: {left:#?} {alive:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_leaves_no_process_on_either_node() {
    cancel_leaves_no_process_on_either_node_in("apptainer").await;
}

/// Enroot's containers on both nodes go too (their processes carry the job's environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_cancel_leaves_no_process_on_either_node() {
    cancel_leaves_no_process_on_either_node_in("pyxis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_slurm_task_from_the_plugin_gets_the_rank_environment() {
    let Some(c) = cluster2("apptainer") else {
        return;
    };
    let (_serve, mut client) = serve(&c, "native").await;
    let w = work(&c, "native", 100);
    let req = request(&c, "multinode_native_sum", &w, &run_name("native"));
    let cat = category(&req);
    assert_eq!(cat.name, "slurm");
    let (meta, _cancel) = create(&mut client, req).await;
    let r = wait_until(&mut client, &meta, &cat, 240, |r| phase(r).is_terminal()).await;
    assert_eq!(phase(&r), Phase::Succeeded, "{}", r.message);
    // Slurm(nodes=2, ntasks=2): ranks 0 and 1, one per node.
    assert_eq!(o0(&w), int_literal(101));
    assert_eq!(info(&r, "nodes"), "node[1-2]", "{:?}", r.custom_info);
    let err = stderr_of(&c, &r);
    assert!(err.contains("1: rank 1/2 local 0 node 1 on node2"), "{err}");
    let _ = std::fs::remove_dir_all(&w.host);
}

/// More nodes than the partition has: Slurm takes the job and keeps it pending with its reason
/// (PartitionNodeLimit; recorded with `srun -N3` on the 2-node cluster), which GetTask shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_nodes_than_the_partition_has_stays_queued_with_slurms_reason() {
    let Some(c) = cluster2("apptainer") else {
        return;
    };
    let (_serve, mut client) = serve(&c, "toomany").await;
    let w = work(&c, "toomany", 100);
    let mut req = request(&c, "multinode_rank_sum", &w, &run_name("toomany"));
    let t = req.template.as_mut().unwrap();
    let mut custom = slurm_connector::proto::struct_to_json(t.custom.as_ref().unwrap());
    custom["replicas"] = serde_json::json!(3.0);
    t.custom = Some(slurm_connector::proto::json_to_struct(&custom));
    let cat = category(&req);
    let (meta, _cancel) = create(&mut client, req).await;
    let r = wait_until(&mut client, &meta, &cat, 60, |r| {
        r.message
            .contains("waiting for all its nodes, reason: PartitionNodeLimit")
    })
    .await;
    assert_eq!(phase(&r), Phase::Queued, "{}", r.message);
    client
        .delete_task(DeleteTaskRequest {
            resource_meta: meta.clone(),
            task_category: Some(cat.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let r = wait_until(&mut client, &meta, &cat, 60, |r| phase(r).is_terminal()).await;
    assert_eq!(phase(&r), Phase::Aborted, "{}", r.message);
    let _ = std::fs::remove_dir_all(&w.host);
}
