//! Figures against the REAL slurmrestd of the dev cluster (issue 9). Needs its environment:
//!
//! ```text
//! eval "$(deploy/dev-cluster/dev-cluster --release 24.11 env)"
//! cargo bench --bench real_cluster -- create     # CreateTask ÷ raw slurmrestd submit (held jobs)
//! cargo bench --bench real_cluster -- create-run # the same with jobs that run `true`
//! cargo bench --bench real_cluster -- create-process # held, the `serve` binary in its own process
//! cargo bench --bench real_cluster -- sdiag      # slurmctld RPCs for 200 short tasks
//! FANOUT_TASKS=1000 cargo bench --bench real_cluster -- fanout # 1000 CreateTasks, 50 in flight
//! ```
//!
//! The connector runs in this process (`serve_with`, configured from that environment exactly as
//! `serve` would be) and is driven over gRPC by a tonic client.
//! - `create`: held jobs (`#SBATCH --hold`, so the shared cluster runs nothing), 60 rounds, each a
//!   raw `Client::submit` of the body rendered from a request and a CreateTask of another attempt
//!   of it, interleaved; every job is cancelled afterwards.
//! - `sdiag`: `sdiag --reset` (root, via `dev-cluster exec`), 200 tasks of `true` created and
//!   polled by GetTask to SUCCEEDED, then `sdiag`: RPCs by message type and user, divided by the
//!   connector's poll ticks (its own `/metrics`). An idle window of the same length first gives
//!   the background (slurmd's pings, other users) to tell apart.
//! - `fanout`: a map task's fan-out as Flyte's backend sends it: `FANOUT_TASKS` (default 1000)
//!   CreateTasks of held jobs, 50 in flight, each with the backend's 10 s deadline; then GetTask
//!   of every meta until each names its job (deferred ones included). Reports CreateTask errors,
//!   deferred answers, the time until every task had its job, slurmctld RPCs per task (sdiag),
//!   jobs per execution key (duplicates), and raw slurmrestd submits of the same bodies at the
//!   same concurrency (120 s client timeout). Run it on a `--rate-limit` cluster too.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;

use common::{RequestExt, get_req, mock_request};
use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::meta::{Decoded, decode};
use slurm_connector::service::{cluster, convert, serve_with};
use slurm_connector::slurmrestd::{Client, ClientConfig, JobId};
use tonic::transport::Channel;

fn main() {
    if std::env::var("FLYTE_SLURM_RESTD_URL").is_err() {
        eprintln!(
            "real_cluster: no FLYTE_SLURM_RESTD_URL; run eval \"$(deploy/dev-cluster/dev-cluster \
             --release 24.11 env)\" first"
        );
        std::process::exit(2);
    }
    let sections: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for s in if sections.is_empty() {
        vec!["create".to_string()]
    } else {
        sections
    } {
        match s.as_str() {
            "create" => rt.block_on(create(true, false)),
            "create-run" => rt.block_on(create(false, false)),
            "create-process" => rt.block_on(create(true, true)),
            "sdiag" => rt.block_on(sdiag()),
            "fanout" => rt.block_on(fanout()),
            other => {
                eprintln!("unknown section `{other}`; use create or sdiag");
                std::process::exit(2);
            }
        }
    }
}

struct Connector {
    addr: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
    deployment: DeploymentConfig,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

async fn start() -> Connector {
    let deployment = DeploymentConfig::load(None).expect("connector config from the environment");
    let g = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let m = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (addr, metrics) = (g.local_addr().unwrap(), m.local_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let d = deployment.clone();
    let task = tokio::spawn(async move {
        serve_with(d, g, m, async {
            rx.await.ok();
        })
        .await
        .expect("serve");
    });
    Connector {
        addr,
        metrics,
        deployment,
        stop,
        task,
    }
}

async fn grpc(addr: std::net::SocketAddr) -> AsyncConnectorServiceClient<Channel> {
    for _ in 0..100 {
        if let Ok(c) = AsyncConnectorServiceClient::connect(format!("http://{addr}")).await {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("connector did not start");
}

/// The deployment's own client (same URL, credentials, user) for raw submits and cleanup.
fn raw_client(d: &DeploymentConfig) -> Client {
    let c = &d.clusters[&d.default_cluster];
    let mut cc = ClientConfig::new(
        c.name.clone(),
        c.restd_url.clone(),
        cluster::client_auth(c).expect("credentials"),
    );
    cc.user_name = c.username.clone();
    Client::new(cc).expect("client")
}

/// `script_no_io` from the published plugin with its script replaced; partition left to Slurm's
/// default. A run name unique to this process keeps its keys apart from earlier runs'.
fn request(script: &str, attempt: u32) -> CreateTaskRequest {
    request_in(
        RUN.load(std::sync::atomic::Ordering::Relaxed),
        script,
        attempt,
    )
}

/// Bumped by each section, so a section's executions are new ones (not adopted from a previous
/// section of the same process, which the idempotency index would rightly do).
static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn request_in(run: u32, script: &str, attempt: u32) -> CreateTaskRequest {
    let mut req = mock_request("script_no_io.pb")
        .script(script)
        .attempt(attempt);
    let exec = common::request::execution_id(&mut req);
    exec.name = format!("bench-{}-{run}-{}", std::process::id(), exec.name);
    req
}

fn job_id(meta: &[u8]) -> JobId {
    match decode(meta).expect("meta") {
        Decoded::Ours(m) => m.job_id,
        Decoded::Python { .. } => unreachable!(),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

const ROUNDS: u32 = 60;

/// Kills the child connector whatever happens to the bench.
struct ChildServe(std::process::Child);
impl Drop for ChildServe {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The release `slurm-connector serve` as a child process, configured by this process's
/// environment (the dev cluster's `FLYTE_SLURM_*`, as a deployment would set them).
fn spawn_serve() -> (ChildServe, std::net::SocketAddr) {
    let port = |()| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (g, m) = (port(()), port(()));
    let child = Command::new(env!("CARGO_BIN_EXE_slurm-connector"))
        .args([
            "serve",
            "--listen",
            &g.to_string(),
            "--metrics-listen",
            &m.to_string(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn slurm-connector serve");
    (ChildServe(child), g)
}

/// `held`: jobs submitted held (nothing runs); otherwise `true` jobs that really run (and are
/// scheduled at submit, which is part of what a real submit costs). `process`: CreateTask goes
/// to the `serve` binary in its own process (as deployed) instead of `serve_with` in this one.
async fn create(held: bool, process: bool) {
    println!(
        "== create (real slurmrestd, {}, connector {}): CreateTask ÷ raw submit, {ROUNDS} pairs, \
         interleaved",
        if held {
            "held jobs"
        } else {
            "jobs that run `true`"
        },
        if process {
            "in its own process"
        } else {
            "in this process"
        }
    );
    RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let conn = start().await;
    let child = process.then(spawn_serve);
    let mut c = grpc(child.as_ref().map_or(conn.addr, |(_, a)| *a)).await;
    let raw = raw_client(&conn.deployment);
    let render_cfg =
        cluster::render_config(&conn.deployment.clusters[&conn.deployment.default_cluster]);
    let script = if held {
        "#!/bin/bash\n#SBATCH --hold\ntrue\n"
    } else {
        "#!/bin/bash\ntrue\n"
    };
    let mut ids = Vec::new();
    // Warm-up: the first CreateTask indexes the cluster's jobs (slurmctld and slurmdbd) once.
    ids.push(job_id(
        &c.create_task(request(script, 90_000))
            .await
            .expect("CreateTask")
            .into_inner()
            .resource_meta,
    ));
    let (mut ours, mut direct) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        let req = request(script, i);
        let rendered =
            slurm_connector::render::render(&convert::task_spec(&req).expect("spec"), &render_cfg)
                .expect("render");
        let t = Instant::now();
        ids.push(raw.submit(&rendered.job).await.expect("raw submit"));
        direct.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let meta = c
            .create_task(request(script, ROUNDS + i))
            .await
            .expect("CreateTask")
            .into_inner()
            .resource_meta;
        ours.push(t.elapsed().as_secs_f64() * 1e3);
        ids.push(job_id(&meta));
    }
    for id in &ids {
        let _ = raw.cancel(*id, None).await;
    }
    let (mo, mr) = (median(&mut ours), median(&mut direct));
    println!(
        "CreateTask (gRPC) median {mo:.2} ms, raw slurmrestd submit median {mr:.2} ms, ratio {:.3}; \
         min/max CreateTask {:.2}/{:.2} ms, raw {:.2}/{:.2} ms; {} jobs (cancelled if still there)",
        mo / mr,
        ours[0],
        ours[ours.len() - 1],
        direct[0],
        direct[direct.len() - 1],
        ids.len()
    );
    drop(child);
    conn.stop.send(()).ok();
    conn.task.await.unwrap();
}

/// `dev-cluster exec ARGS` on the cluster of the environment.
fn cluster_exec(args: &[&str]) -> String {
    let script = std::env::var("SLURM_DEV_CLUSTER_SCRIPT").expect("SLURM_DEV_CLUSTER_SCRIPT");
    let release = std::env::var("SLURM_DEV_CLUSTER_RELEASE").unwrap_or_else(|_| "24.11".into());
    let out = Command::new(script)
        .args(["--release", &release, "exec"])
        .args(args)
        .output()
        .expect("dev-cluster exec");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `sdiag`'s RPC counts: (by message type, by user).
fn sdiag_counts() -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let text = cluster_exec(&["sdiag"]);
    let (mut by_type, mut by_user) = (BTreeMap::new(), BTreeMap::new());
    let mut section = 0;
    for line in text.lines() {
        if line.contains("by message type") {
            section = 1;
        } else if line.contains("by user") {
            section = 2;
        } else if line.contains("Pending RPC") {
            section = 0;
        }
        let Some((name, rest)) = line.trim().split_once('(') else {
            continue;
        };
        let Some(count) = rest
            .split_whitespace()
            .find_map(|w| w.strip_prefix("count:"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        match section {
            1 => by_type.insert(name.trim().to_string(), count),
            2 => by_user.insert(name.trim().to_string(), count),
            _ => None,
        };
    }
    (by_type, by_user)
}

/// The connector's `/metrics` (Prometheus text), fetched with a bare HTTP/1.0 GET.
fn metrics(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Sum of a metric's samples whose line contains every one of `having`.
fn metric_sum(text: &str, name: &str, having: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && having.iter().all(|h| l.contains(h)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

const SHORT_TASKS: u32 = 200;

async fn sdiag() {
    println!("== sdiag (real slurmctld): {SHORT_TASKS} short tasks through the connector");
    let busy = cluster_exec(&["squeue", "-h", "-o", "%i %u %T"]);
    println!(
        "jobs on the cluster before: {} {}",
        busy.lines().count(),
        busy.lines().take(5).collect::<Vec<_>>().join("; ")
    );
    // Background: the same RPC counters over an idle window.
    cluster_exec(&["sdiag", "--reset"]);
    let idle = Duration::from_secs(20);
    tokio::time::sleep(idle).await;
    let (bg_type, bg_user) = sdiag_counts();
    println!("idle {idle:?}: by type {bg_type:?}; by user {bg_user:?}");

    RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let conn = start().await;
    let poll = conn.deployment.poll_interval;
    let mut c = grpc(conn.addr).await;
    cluster_exec(&["sdiag", "--reset"]);
    let m0 = metrics(conn.metrics);
    let t0 = Instant::now();
    let mut metas = Vec::new();
    for i in 0..SHORT_TASKS {
        metas.push(
            c.create_task(request("#!/bin/bash\ntrue\n", 50_000 + i))
                .await
                .expect("CreateTask")
                .into_inner()
                .resource_meta,
        );
    }
    let created = t0.elapsed();
    // A backend polls each task; here every task every 2 s until all are terminal.
    let mut phases: BTreeMap<usize, Phase> = BTreeMap::new();
    loop {
        for (i, m) in metas.iter().enumerate() {
            if phases
                .get(&i)
                .is_some_and(|p| *p == Phase::Succeeded || *p == Phase::Failed)
            {
                continue;
            }
            let r = c
                .get_task(get_req(m))
                .await
                .expect("GetTask")
                .into_inner()
                .resource
                .unwrap();
            phases.insert(i, Phase::of(r.phase));
        }
        let done = phases
            .values()
            .filter(|p| matches!(p, Phase::Succeeded | Phase::Failed))
            .count();
        if done == metas.len() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "only {done} done after 15 min"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let took = t0.elapsed();
    let (by_type, by_user) = sdiag_counts();
    let m1 = metrics(conn.metrics);
    let delta =
        |name: &str, having: &[&str]| metric_sum(&m1, name, having) - metric_sum(&m0, name, having);
    let ticks = delta("slurm_connector_poll_tick_seconds_count", &[]);
    let mut ops = BTreeMap::new();
    for l in m1
        .lines()
        .filter(|l| l.starts_with("slurm_connector_slurmrestd_requests_total"))
    {
        if let Some(op) = l
            .split("operation=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        {
            ops.insert(
                op.to_string(),
                delta(
                    "slurm_connector_slurmrestd_requests_total",
                    &[&format!("operation=\"{op}\"")],
                ),
            );
        }
    }
    let succeeded = phases.values().filter(|p| **p == Phase::Succeeded).count();
    println!(
        "{SHORT_TASKS} tasks created in {:.1}s, all terminal after {:.1}s ({succeeded} SUCCEEDED); \
         poll interval {poll:?}, {ticks} poll ticks; connector's slurmrestd requests by operation: {ops:?}",
        created.as_secs_f64(),
        took.as_secs_f64()
    );
    println!("slurmctld RPCs by user over the run: {by_user:?}");
    println!("type\tcount\tper tick\tidle-window rate x run length");
    for (t, n) in &by_type {
        let bg =
            bg_type.get(t).copied().unwrap_or(0) as f64 * took.as_secs_f64() / idle.as_secs_f64();
        println!("{t}\t{n}\t{:.2}\t{bg:.1}", *n as f64 / ticks.max(1.0));
    }
    conn.stop.send(()).ok();
    conn.task.await.unwrap();
}

const FANOUT_IN_FLIGHT: usize = 50;

/// Execution key → live job ids, from slurmctld's records, for the keys of this run.
async fn jobs_by_key(
    raw: &Client,
    keys: &std::collections::HashSet<String>,
) -> BTreeMap<String, Vec<JobId>> {
    let mut m: BTreeMap<String, Vec<JobId>> = BTreeMap::new();
    for j in raw.jobs().await.expect("jobs") {
        let Some(key) = j
            .comment
            .as_deref()
            .and_then(slurm_connector::render::key_from_comment)
        else {
            continue;
        };
        if keys.contains(key) && j.state.base != slurm_connector::slurmrestd::BaseState::Cancelled {
            m.entry(key.to_string()).or_default().push(j.job_id);
        }
    }
    m
}

async fn fanout() {
    let n: u32 = std::env::var("FANOUT_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    println!(
        "== fanout (real slurmrestd): {n} CreateTasks of held jobs, {FANOUT_IN_FLIGHT} in flight, 10 s deadline each"
    );
    RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let conn = start().await;
    let render_cfg =
        cluster::render_config(&conn.deployment.clusters[&conn.deployment.default_cluster]);
    let c = grpc(conn.addr).await;
    let raw = raw_client(&conn.deployment);
    let script = "#!/bin/bash\n#SBATCH --hold\ntrue\n";
    cluster_exec(&["sdiag", "--reset"]);
    let t0 = Instant::now();
    let results: Vec<(u32, Result<Vec<u8>, tonic::Status>)> = futures::stream::iter(0..n)
        .map(|i| {
            let mut c = c.clone();
            async move {
                let mut r = tonic::Request::new(request(script, i));
                r.set_timeout(Duration::from_secs(10));
                (
                    i,
                    c.create_task(r).await.map(|r| r.into_inner().resource_meta),
                )
            }
        })
        .buffer_unordered(FANOUT_IN_FLIGHT)
        .collect()
        .await;
    let answered = t0.elapsed();
    let errors: Vec<String> = results
        .iter()
        .filter_map(|(i, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{i}: {:?} {}", e.code(), e.message()))
        })
        .collect();
    let metas: Vec<Vec<u8>> = results.into_iter().filter_map(|(_, r)| r.ok()).collect();
    let deferred = metas
        .iter()
        .filter(|m| String::from_utf8_lossy(m).contains("\"deferred\""))
        .count();
    // Every task has its job once GetTask no longer says it is waiting to be submitted.
    let mut waiting: Vec<&Vec<u8>> = metas.iter().collect();
    let mut get_errors = 0usize;
    let mut throttled_messages = 0usize;
    while !waiting.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(3600),
            "{} still unsubmitted after an hour",
            waiting.len()
        );
        let mut still = Vec::new();
        for m in waiting {
            let mut c = c.clone();
            match c.get_task(get_req(m)).await {
                Ok(r) => {
                    let msg = r.into_inner().resource.unwrap().message;
                    if msg.starts_with("Not submitted yet") {
                        if msg.contains("throttling") {
                            throttled_messages += 1;
                        }
                        still.push(m);
                    }
                }
                Err(_) => {
                    get_errors += 1;
                    still.push(m);
                }
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    let all_submitted = t0.elapsed();
    let (by_type, by_user) = sdiag_counts();
    let total_rpcs: u64 = by_user
        .get("flyte")
        .copied()
        .unwrap_or_else(|| by_user.values().sum());
    let ours: std::collections::HashSet<String> = (0..n)
        .map(|i| {
            let req = request(script, i);
            slurm_connector::render::render(&convert::task_spec(&req).expect("spec"), &render_cfg)
                .expect("render")
                .key
        })
        .collect();
    let keys = jobs_by_key(&raw, &ours).await;
    let dupes = keys.values().filter(|v| v.len() > 1).count();
    let jobs: usize = keys.values().map(|v| v.len()).sum();
    println!(
        "connector: {n} CreateTasks answered in {:.1}s ({} errors, {deferred} deferred); every task had its job after {:.1}s ({:.1}/s); {} keys with jobs, {jobs} live jobs, {dupes} keys with more than one; GetTask errors {get_errors}, QUEUED 'throttling' answers {throttled_messages}; slurmctld RPCs of the job user {total_rpcs} ({:.2} per task)",
        answered.as_secs_f64(),
        errors.len(),
        all_submitted.as_secs_f64(),
        f64::from(n) / all_submitted.as_secs_f64(),
        keys.len(),
        total_rpcs as f64 / f64::from(n),
    );
    println!("slurmctld RPCs by type: {by_type:?}");
    for e in errors.iter().take(5) {
        println!("  error {e}");
    }
    for ids in keys.values() {
        for id in ids {
            let _ = raw.cancel(*id, None).await;
        }
    }
    // Raw submits of the same bodies (other attempts: other keys) at the same concurrency.
    let slow_raw = raw
        .with_request_timeout(Duration::from_secs(120))
        .expect("client");
    cluster_exec(&["sdiag", "--reset"]);
    let t1 = Instant::now();
    let raw_results: Vec<Result<JobId, String>> = futures::stream::iter(0..n)
        .map(|i| {
            let raw = slow_raw.clone();
            let req = request(script, n + i);
            let rendered = slurm_connector::render::render(
                &convert::task_spec(&req).expect("spec"),
                &render_cfg,
            )
            .expect("render");
            async move { raw.submit(&rendered.job).await.map_err(|e| e.to_string()) }
        })
        .buffer_unordered(FANOUT_IN_FLIGHT)
        .collect()
        .await;
    let raw_took = t1.elapsed();
    let raw_errors = raw_results.iter().filter(|r| r.is_err()).count();
    let (_, raw_by_user) = sdiag_counts();
    println!(
        "raw submits: {n} in {:.1}s ({:.1}/s), {raw_errors} errors; slurmctld RPCs of the job user {}; connector ÷ raw time to submit all: {:.2}",
        raw_took.as_secs_f64(),
        f64::from(n) / raw_took.as_secs_f64(),
        raw_by_user
            .get("flyte")
            .copied()
            .unwrap_or_else(|| raw_by_user.values().sum()),
        all_submitted.as_secs_f64() / raw_took.as_secs_f64(),
    );
    for id in raw_results.into_iter().flatten() {
        let _ = raw.cancel(id, None).await;
    }
    conn.stop.send(()).ok();
    conn.task.await.unwrap();
}
