//! Helpers of benches/real_cluster.rs that its sections share: the connector in this process
//! (`serve_with` configured from the environment) and a gRPC client of it, the deployment's own
//! slurmrestd client for raw submits and cleanup, the bench's CreateTaskRequests (a run name per
//! process and section), and the counters read around a run: `sdiag` through `dev-cluster exec`,
//! and the connector's `/metrics`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::service::{Decoded, decode_meta as decode};
use slurm_connector::service::{client_auth, serve_with};
use slurm_connector::slurmrestd::{Client, ClientConfig, JobId};
use tonic::transport::Channel;

use crate::common;
use crate::common::{RequestExt, mock_request};
pub struct Connector {
    pub addr: std::net::SocketAddr,
    pub metrics: std::net::SocketAddr,
    pub deployment: DeploymentConfig,
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<()>,
}

pub async fn start() -> Connector {
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

pub async fn grpc(addr: std::net::SocketAddr) -> AsyncConnectorServiceClient<Channel> {
    for _ in 0..100 {
        if let Ok(c) = AsyncConnectorServiceClient::connect(format!("http://{addr}")).await {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("connector did not start");
}

/// The deployment's own client (same URL, credentials, user) for raw submits and cleanup.
pub fn raw_client(d: &DeploymentConfig) -> Client {
    let c = &d.clusters[&d.default_cluster];
    let mut cc = ClientConfig::new(
        c.name.clone(),
        c.restd_url.clone(),
        client_auth(c).expect("credentials"),
    );
    cc.user_name = c.username.clone();
    Client::new(cc).expect("client")
}

/// `script_no_io` from the published plugin with its script replaced; partition left to Slurm's
/// default. A run name unique to this process keeps its keys apart from earlier runs'.
pub fn request(script: &str, attempt: u32) -> CreateTaskRequest {
    request_in(
        RUN.load(std::sync::atomic::Ordering::Relaxed),
        script,
        attempt,
    )
}

/// Bumped by each section, so a section's executions are new ones (not adopted from a previous
/// section of the same process, which the idempotency index would rightly do).
pub static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn request_in(run: u32, script: &str, attempt: u32) -> CreateTaskRequest {
    let mut req = mock_request("script_no_io.pb")
        .script(script)
        .attempt(attempt);
    let exec = common::request::execution_id(&mut req);
    exec.name = format!("bench-{}-{run}-{}", std::process::id(), exec.name);
    req
}

pub fn job_id(meta: &[u8]) -> JobId {
    match decode(meta).expect("meta") {
        Decoded::Ours(m) => m.job_id,
        Decoded::Python { .. } => unreachable!(),
    }
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `dev-cluster exec ARGS` on the cluster of the environment.
pub fn cluster_exec(args: &[&str]) -> String {
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
pub fn sdiag_counts() -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
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
pub fn metrics(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Sum of a metric's samples whose line contains every one of `having`.
pub fn metric_sum(text: &str, name: &str, having: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && having.iter().all(|h| l.contains(h)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The connector's slurmrestd requests by operation between two `/metrics` texts.
pub fn requests_by_operation(before: &str, after: &str) -> BTreeMap<String, f64> {
    let name = "slurm_connector_slurmrestd_requests_total";
    let mut ops = BTreeMap::new();
    for l in after.lines().filter(|l| l.starts_with(name)) {
        if let Some(op) = l
            .split("operation=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        {
            let having = [format!("operation=\"{op}\"")];
            let having: Vec<&str> = having.iter().map(String::as_str).collect();
            ops.insert(
                op.to_string(),
                metric_sum(after, name, &having) - metric_sum(before, name, &having),
            );
        }
    }
    ops
}
