//! The harness of the fault drills (tests/it/fault_drills/): an in-process mock-slurmrestd, the
//! connector in-process (`serve_with`) or as the real `slurm-connector serve` child process, a
//! tonic client that behaves like Flyte's backend (10 s per-RPC deadline, CreateTask retried),
//! and a phase checker that counts wrong and regressing phases.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::RequestExt;
use slurm_connector::proto::connector::{
    CreateTaskRequest, DeleteTaskRequest, GetTaskRequest, Resource,
};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::{Decoded, decode_meta as decode};

/// Flyte's connector plugin default per-RPC deadline (`defaultConnector.defaultTimeout: 10s`).
pub const FLYTE_DEADLINE: Duration = Duration::from_secs(10);

pub use super::mock::{KEY, Mock, deployment};
pub use super::server::{Grpc, Server, connect};

pub use super::free_port;

/// The real `slurm-connector serve` binary as a child process, configured by environment like a
/// deployment (none of the caller's FLYTE_SLURM_* leaks in). Killed (SIGKILL) when dropped.
pub struct ServeProcess {
    child: Child,
    pub port: u16,
}

impl ServeProcess {
    pub fn spawn(port: u16, env: &[(&str, String)], log: &Path) -> ServeProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
        for (k, _) in std::env::vars() {
            if k.starts_with("FLYTE_SLURM_") {
                cmd.env_remove(k);
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        // A serve restarted on its port: that port is free again, so free_port() can hand it
        // out for the metrics listener (CI: "cannot listen on 127.0.0.1:32829 (metrics): Address
        // already in use", and the replacement never listened).
        let metrics = std::iter::repeat_with(free_port)
            .find(|p| *p != port)
            .expect("a free port");
        let child = cmd
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--metrics-listen",
                &format!("127.0.0.1:{metrics}"),
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn slurm-connector serve");
        ServeProcess { child, port }
    }

    pub fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "serve did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM, as the kubelet does when a pod is deleted (through kill(1): no libc here).
    pub fn term(&self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
    }

    /// The exit status, once the process exited within `within` (`None`: still running).
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().expect("wait for serve") {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, as Kubernetes stops a pod, and wait (at most 60 s) for the process to exit.
    pub fn sigterm(mut self) {
        self.term();
        assert!(
            self.wait_exit(Duration::from_secs(60)).is_some(),
            "serve did not exit within 60 s of SIGTERM"
        );
    }

    /// SIGKILL (`Child::kill` on Unix): no graceful shutdown, no chance to save anything.
    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real CreateTaskRequest from the published plugin (`script_no_io`), with its script replaced
/// and its retry attempt set: each attempt is a distinct execution (its own idempotency key).
pub fn request(attempt: u32, script: &str) -> CreateTaskRequest {
    super::mock_request("script_no_io.pb")
        .script(script)
        .attempt(attempt)
}

/// GetTask with Flyte's deadline.
pub fn get_req(meta: &[u8]) -> tonic::Request<GetTaskRequest> {
    let mut r = tonic::Request::new(super::get_req(meta));
    r.set_timeout(FLYTE_DEADLINE);
    r
}

pub fn delete_req(meta: &[u8]) -> tonic::Request<DeleteTaskRequest> {
    let mut r = tonic::Request::new(DeleteTaskRequest {
        resource_meta: meta.to_vec(),
        task_category: Some(super::request::task_category()),
        ..Default::default()
    });
    r.set_timeout(FLYTE_DEADLINE);
    r
}

/// CreateTask with Flyte's deadline.
pub async fn create(c: &mut Grpc, req: CreateTaskRequest) -> Result<Vec<u8>, tonic::Status> {
    let mut r = tonic::Request::new(req);
    r.set_timeout(FLYTE_DEADLINE);
    c.create_task(r).await.map(|r| r.into_inner().resource_meta)
}

/// GetTask with Flyte's deadline: the answer and how long it took.
pub async fn get(c: &mut Grpc, meta: &[u8]) -> (Result<Resource, tonic::Status>, Duration) {
    let t = Instant::now();
    let r = c
        .get_task(get_req(meta))
        .await
        .map(|r| r.into_inner().resource.expect("GetTask answers a resource"));
    (r, t.elapsed())
}

/// Lifecycle order of the phases a Slurm task goes through; terminal ones last.
pub fn rank(p: Phase) -> u8 {
    match p {
        Phase::Undefined => 0,
        Phase::WaitingForResources | Phase::Queued => 1,
        Phase::Initializing => 2,
        Phase::Running => 3,
        _ => 4,
    }
}

pub fn phase(p: i32) -> Phase {
    Phase::of(p)
}

/// Per task: every phase seen, and what counts as wrong — a terminal phase other than the
/// expected one, or a phase that goes backwards (RUNNING then QUEUED, SUCCEEDED then RUNNING).
#[derive(Default)]
pub struct Phases {
    last: HashMap<usize, Phase>,
    pub answers: u64,
    pub wrong: Vec<String>,
}

impl Phases {
    pub fn see(&mut self, task: usize, p: Phase, expected_end: Phase, message: &str) {
        self.answers += 1;
        if p.is_terminal() && p != expected_end {
            self.wrong.push(format!(
                "task {task}: {p:?} (expected {expected_end:?}): {message}"
            ));
        }
        if let Some(prev) = self.last.get(&task)
            && rank(p) < rank(*prev)
        {
            self.wrong
                .push(format!("task {task}: {prev:?} then {p:?}: {message}"));
        }
        self.last.insert(task, p);
    }

    pub fn last(&self, task: usize) -> Option<Phase> {
        self.last.get(&task).copied()
    }
}

/// Latencies: (p50, p99, max).
pub fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    if v.is_empty() {
        return Default::default();
    }
    v.sort();
    let at = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.5), at(0.99), *v.last().unwrap())
}

/// The jobs on the mock per idempotency key (from `comment`, else the job name), as the
/// connector itself would index them: more than one job for a key is a duplicate submission.
pub async fn jobs_per_key(mock: &Mock) -> HashMap<String, Vec<u32>> {
    use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, Secret};
    let client = Client::new(ClientConfig::new(
        "mock",
        url::Url::parse(&mock.handle.url()).unwrap(),
        Auth::Static {
            token: Secret::new(mock.handle.mint_token("flyte", Duration::from_secs(600))),
        },
    ))
    .unwrap();
    let mut m: HashMap<String, Vec<u32>> = HashMap::new();
    for j in client.jobs().await.expect("list the mock's jobs") {
        let element = j.array.as_ref().and_then(|a| a.task_id);
        let key = slurm_connector::render::key_of_record(&j, element);
        if let Some(k) = key {
            m.entry(k).or_default().push(j.job_id.0);
        }
    }
    m
}

/// The job a CreateTask's answer names: its job id, or, for a deferred answer (the submit
/// outlasted the CreateTask's wait, as it may on a loaded machine), the cluster's one job of
/// its key, which is what a GetTask of it resolves to (`None`: the cluster has no single job).
pub fn answered_job(meta: &[u8], per_key: &HashMap<String, Vec<u32>>) -> Option<u32> {
    match decode(meta).expect("our resource_meta") {
        Decoded::Ours(m) => match &m.deferred {
            None => Some(m.job_id.0),
            Some(d) => match per_key.get(&d.key).map(Vec::as_slice) {
                Some([id]) => Some(*id),
                _ => None,
            },
        },
        Decoded::Python { .. } => panic!("the connector answered a Python-plugin meta"),
    }
}

pub fn job_id(meta: &[u8]) -> u32 {
    match decode(meta).expect("our resource_meta") {
        Decoded::Ours(m) => m.job_id.0,
        Decoded::Python { .. } => panic!("the connector answered a Python-plugin meta"),
    }
}

/// Waits until `done()` holds, checking every 2 ms; panics after `within`, saying `what` and
/// `state()` then. Every wait of a drill on an event from elsewhere (a mock's counter, a fault
/// consumed) goes through this: an unbounded `while` held one CI run until its 90-minute limit.
pub async fn wait_for(
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> bool,
    state: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {within:?} ({})",
            state()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Creates `n` executions (attempts `first..first+n`) in order, each with `script(i)`.
pub async fn create_all(
    c: &mut Grpc,
    first: u32,
    n: usize,
    script: impl Fn(usize) -> String,
) -> Vec<Vec<u8>> {
    let mut metas = Vec::new();
    for i in 0..n {
        let meta = create(c, request(first + i as u32, &script(i)))
            .await
            .unwrap_or_else(|e| panic!("CreateTask {i}: {e}"));
        metas.push(meta);
    }
    metas
}

/// Polls every task until all are in `want` (or terminal), panicking after `within`.
pub async fn wait_all(c: &mut Grpc, metas: &[Vec<u8>], want: &[Phase], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut done = 0;
        let mut behind = Vec::new();
        for (i, m) in metas.iter().enumerate() {
            let (r, _) = get(c, m).await;
            let r = r.expect("GetTask");
            let p = phase(r.phase);
            if want.contains(&p) {
                done += 1;
            } else if behind.len() < 3 {
                behind.push(format!("task {i}: {p:?} {}", r.message));
            }
        }
        if done == metas.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {done}/{} tasks reached {want:?} within {within:?}; e.g. {behind:#?}",
            metas.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Polls every task every 200 ms until all are terminal; GetTask with Flyte's deadline. Returns
/// (errors, latencies, answers flagged unreachable, answers naming slurmdbd) and records phases.
pub async fn poll_to_the_end(
    c: &Grpc,
    metas: &[Vec<u8>],
    expected_end: Phase,
    phases: &Arc<std::sync::Mutex<Phases>>,
    within: Duration,
) -> (Vec<String>, Vec<Duration>, u64, u64) {
    let deadline = Instant::now() + within;
    let mut pollers = Vec::new();
    for (task, meta) in metas.iter().cloned().enumerate() {
        let (mut c, phases) = (c.clone(), phases.clone());
        pollers.push(tokio::spawn(async move {
            let (mut errors, mut lat, mut unreachable, mut dbd) =
                (Vec::new(), Vec::new(), 0u64, 0u64);
            loop {
                let (r, l) = get(&mut c, &meta).await;
                lat.push(l);
                match r {
                    Ok(r) => {
                        let p = phase(r.phase);
                        unreachable += u64::from(r.message.contains("unreachable since"));
                        dbd += u64::from(
                            r.message.contains("not yet in slurmdbd")
                                || r.message.contains("(slurmdbd:"),
                        );
                        phases
                            .lock()
                            .unwrap()
                            .see(task, p, expected_end, &r.message);
                        if p.is_terminal() {
                            break;
                        }
                    }
                    Err(e) => errors.push(format!("task {task}: {e}")),
                }
                assert!(
                    Instant::now() < deadline,
                    "task {task} not terminal within {within:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (errors, lat, unreachable, dbd)
        }));
    }
    let (mut errors, mut lat, mut unreachable, mut dbd) = (Vec::new(), Vec::new(), 0, 0);
    for p in pollers {
        let (e, l, u, d) = p.await.unwrap();
        errors.extend(e);
        lat.extend(l);
        unreachable += u;
        dbd += d;
    }
    (errors, lat, unreachable, dbd)
}

/// Token rejections the mock answered: 511 from slurmctld paths, 502 from slurmdbd ones.
pub fn rejections(m: &Mock) -> u64 {
    let s = m.handle.stats();
    s.operations
        .iter()
        .map(|(op, by)| {
            by.get(&511).copied().unwrap_or(0)
                + if op.starts_with("slurmdb") {
                    by.get(&502).copied().unwrap_or(0)
                } else {
                    0
                }
        })
        .sum()
}

/// GetTask every 100 ms until the task is terminal; panics after `secs` seconds.
pub async fn wait_terminal(
    c: &mut Grpc,
    meta: &[u8],
    secs: u64,
) -> slurm_connector::proto::connector::Resource {
    for _ in 0..secs * 10 {
        let r = get(c, meta).await.0.expect("GetTask never fails");
        if phase(r.phase).is_terminal() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no terminal phase within {secs} s");
}

/// Every job slurmctld (the mock) has, as slurmrestd lists them (what an admin's `squeue` shows).
pub async fn cluster_jobs(mock: &Mock) -> Vec<slurm_connector::slurmrestd::JobInfo> {
    use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, Secret};
    let cfg = ClientConfig::new(
        "mock",
        mock.handle.url().parse().unwrap(),
        Auth::Static {
            token: Secret::new(mock.token()),
        },
    );
    Client::new(cfg).unwrap().jobs().await.unwrap()
}

/// The mock's jobs by execution key (every job the keys' protocol made carries its key).
pub async fn jobs_by_key(
    mock: &Mock,
) -> HashMap<String, Vec<slurm_connector::slurmrestd::JobInfo>> {
    let mut m: HashMap<String, Vec<_>> = HashMap::new();
    for j in cluster_jobs(mock).await {
        let element = j.array.as_ref().and_then(|a| a.task_id);
        let key =
            slurm_connector::render::key_of_record(&j, element).expect("every job carries its key");
        m.entry(key).or_default().push(j);
    }
    m
}

/// The jobs of one execution that were not cancelled.
pub async fn live_jobs(mock: &Mock, key: &str) -> Vec<slurm_connector::slurmrestd::JobInfo> {
    jobs_by_key(mock)
        .await
        .remove(key)
        .unwrap_or_default()
        .into_iter()
        .filter(|j| j.state.base != slurm_connector::slurmrestd::BaseState::Cancelled)
        .collect()
}

/// GetTask on `c` until the phase is `want`, within 60 s; the last message.
pub async fn until_phase(c: &mut Grpc, meta: &[u8], want: Phase) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (r, _) = get(c, meta).await;
        let r = r.expect("GetTask never fails");
        if Phase::of(r.phase) == want {
            return r.message;
        }
        assert!(
            Instant::now() < until,
            "never {want:?}: {:?} {}",
            Phase::of(r.phase),
            r.message
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Submits slower than CreateTask waits: `ms` per submit at the mock.
pub fn slow_submits(ms: u64) -> mock_slurmrestd::FaultConfig {
    mock_slurmrestd::FaultConfig {
        latency_ms: ms,
        operations: vec!["submit".into()],
        ..mock_slurmrestd::FaultConfig::default()
    }
}

/// Whether CreateTask answered before its submit was done (a deferred meta).
pub fn is_deferred(meta: &[u8]) -> bool {
    let v: serde_json::Value = serde_json::from_slice(meta).unwrap();
    v.get("deferred").is_some()
}

/// A deferred meta's execution key.
pub fn deferred_key(meta: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(meta).unwrap();
    v["deferred"]["key"].as_str().unwrap().to_string()
}
