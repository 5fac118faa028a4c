//! Starting and stopping the mock: the accept loop, the "front door" that applies connection-level
//! faults (latency, injected statuses, dropped connections) and counts every request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tower::ServiceExt;

use crate::config::MockConfig;
use crate::faults::{Faults, Injected};
use crate::routes::{AppState, ClientAddr, router};
use crate::scheduler::Scheduler;
use crate::stats::{DROPPED, Stats, StatsSnapshot};

#[derive(Debug, thiserror::Error)]
pub enum MockError {
    #[error("cannot listen on {addr}: {source} (is the port free?)")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "cannot create the job script folder {path}: {source} (set MockConfig::state_dir to a writable folder)"
    )]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid mock configuration: {0}")]
    Config(String),
}

/// Returned by the front door to make hyper close the connection without answering.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
struct Dropped;

/// The operation name a request is counted under (and that faults can be scoped to).
pub fn classify(method: &hyper::Method, path: &str) -> &'static str {
    let p = path.trim_end_matches('/');
    if p.starts_with("/mock/") || p == "/mock" {
        return "admin";
    }
    if let Some(rest) = strip_version(p, "/slurm/") {
        return match (method.as_str(), rest) {
            ("POST", "job/submit") => "submit",
            ("GET", r) if r.starts_with("job/") && r.ends_with("/requeue") => "job_requeue",
            ("GET", r) if r.starts_with("job/") => "job_get",
            ("DELETE", r) if r.starts_with("job/") => "job_delete",
            ("POST", r) if r.starts_with("job/") => "job_update",
            ("GET", "jobs/state") => "jobs_state",
            ("GET", "jobs") => "jobs",
            (_, "ping") => "ping",
            (_, "partitions") => "partitions",
            (_, "diag") => "diag",
            _ => "other",
        };
    }
    if let Some(rest) = strip_version(p, "/slurmdb/") {
        return match rest {
            r if r.starts_with("job/") => "slurmdb_job",
            "jobs" => "slurmdb_jobs",
            _ => "other",
        };
    }
    "other"
}

/// The `v0.0.NN` of a `/slurm/...` or `/slurmdb/...` path.
pub(crate) fn path_version(path: &str) -> Option<&str> {
    let rest = path
        .strip_prefix("/slurm/")
        .or_else(|| path.strip_prefix("/slurmdb/"))?;
    let v = rest.split('/').next()?;
    let digits = v.strip_prefix("v0.0.")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(v)
}

/// `/slurm/v0.0.NN/rest` -> `rest` for any version (served or not: an unserved version's
/// request is counted under the operation it names).
fn strip_version<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?.strip_prefix("v0.0.")?;
    let (digits, rest) = rest.split_once('/')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(rest)
}

/// Starts mock servers.
pub struct MockServer;

impl MockServer {
    /// Bind `addr` (use port 0 for a free one) and start serving.
    pub async fn start(cfg: MockConfig, addr: SocketAddr) -> Result<MockHandle, MockError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| MockError::Bind { addr, source })?;
        Self::start_on(cfg, listener).await
    }

    /// Serve on an already bound listener.
    pub async fn start_on(cfg: MockConfig, listener: TcpListener) -> Result<MockHandle, MockError> {
        if cfg.cpus == 0 || cfg.nodes == 0 {
            return Err(MockError::Config(
                "cpus and nodes must be at least 1".into(),
            ));
        }
        if cfg.api_versions.is_empty() {
            return Err(MockError::Config(
                "api_versions is empty: serve at least one API version, e.g. v0.0.42".into(),
            ));
        }
        let addr = listener.local_addr().map_err(|source| MockError::Bind {
            addr: "0.0.0.0:0".parse().expect("valid"),
            source,
        })?;
        let (script_dir, owned_dir) = match &cfg.state_dir {
            Some(d) => (d.clone(), None),
            None => {
                let d = std::env::temp_dir().join(format!(
                    "mock-slurmrestd-{}-{}",
                    std::process::id(),
                    addr.port()
                ));
                (d.clone(), Some(d))
            }
        };
        std::fs::create_dir_all(&script_dir).map_err(|source| MockError::StateDir {
            path: script_dir.clone(),
            source,
        })?;
        let faults = Arc::new(Faults::new(cfg.faults.clone()));
        let stats = Arc::new(Stats::default());
        let cfg = Arc::new(cfg);
        let sched = Scheduler::new(cfg.clone(), script_dir);
        let state = AppState {
            cfg: cfg.clone(),
            sched: sched.clone(),
            faults: faults.clone(),
            stats: stats.clone(),
        };
        let app = router(state);
        let sched_task = tokio::spawn(sched.clone().run_loop());
        let accept_task = tokio::spawn(accept_loop(listener, app, faults.clone(), stats.clone()));
        tracing::info!(%addr, cluster = %cfg.cluster_name, cpus = cfg.cpus, nodes = cfg.nodes, "mock-slurmrestd listening");
        Ok(MockHandle {
            addr,
            faults,
            stats,
            sched,
            tasks: vec![sched_task, accept_task],
            owned_dir,
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    app: axum::Router,
    faults: Arc<Faults>,
    stats: Arc<Stats>,
) {
    let mut conns = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let _ = stream.set_nodelay(true);
        let (app, faults, stats) = (app.clone(), faults.clone(), stats.clone());
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                let (app, faults, stats) = (app.clone(), faults.clone(), stats.clone());
                async move {
                    req.extensions_mut().insert(ClientAddr(peer));
                    let op = classify(req.method(), req.uri().path());
                    let version = path_version(req.uri().path()).map(str::to_string);
                    let version = version.as_deref();
                    let req = req.map(Body::new);
                    if op == "admin" {
                        return Ok::<_, Dropped>(
                            app.oneshot(req).await.unwrap_or_else(|e| match e {}),
                        );
                    }
                    let delay = faults.latency(op, op.starts_with("slurmdb"));
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    match faults.inject(op) {
                        Injected::Drop { after_handling } => {
                            if after_handling {
                                let _ = app.oneshot(req).await;
                            }
                            stats.record(op, version, DROPPED);
                            return Err(Dropped);
                        }
                        Injected::Status(s) => {
                            stats.record(op, version, s);
                            // A bare status with an empty body, like a proxy or a crashed daemon.
                            let mut resp = axum::response::Response::new(Body::empty());
                            *resp.status_mut() = hyper::StatusCode::from_u16(s)
                                .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
                            resp.headers_mut().insert(
                                hyper::header::CONNECTION,
                                hyper::header::HeaderValue::from_static("Close"),
                            );
                            return Ok(resp);
                        }
                        Injected::None => {}
                    }
                    let resp = app.oneshot(req).await.unwrap_or_else(|e| match e {});
                    stats.record(op, version, resp.status().as_u16());
                    Ok(resp)
                }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, %peer, "connection ended");
            }
        });
    }
}

/// A running mock. Dropping it stops the server and kills running jobs, like `shutdown`.
pub struct MockHandle {
    addr: SocketAddr,
    faults: Arc<Faults>,
    stats: Arc<Stats>,
    sched: Arc<Scheduler>,
    tasks: Vec<JoinHandle<()>>,
    owned_dir: Option<PathBuf>,
}

impl MockHandle {
    /// Base URL, e.g. `http://127.0.0.1:40123` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A copy of the request counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    pub fn reset_stats(&self) {
        self.stats.reset()
    }

    /// The live faults: `handle.faults().set(FaultConfig{..})`, `.clear()`, `.controller_down_for(d)`.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    pub fn config(&self) -> &MockConfig {
        &self.sched.cfg
    }

    /// Whether slurmctld still lists job `id` (a finished job leaves it MinJobAge after its end).
    pub fn in_slurmctld(&self, id: u32) -> bool {
        self.sched.lock().jobs.contains_key(&id)
    }

    /// Mint an HS256 token with the mock's key (`sun`, `iat`, `exp` = now + lifetime), like
    /// `scontrol token`.
    pub fn mint_token(&self, user: &str, lifetime: Duration) -> String {
        crate::mint_token(&self.sched.cfg.jwt_key, user, lifetime)
    }

    /// Stop serving and kill the processes of running jobs.
    pub async fn shutdown(mut self) {
        self.stop();
        // Give runners a moment to reap their children.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.sched.kill_all();
        if let Some(d) = self.owned_dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Drop for MockHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
