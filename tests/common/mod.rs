//! The helpers of the integration tests and benches, in one place (`mod common;` in a test,
//! `#[path = "../tests/common/mod.rs"] mod common;` in a bench; each uses part of it):
//! - `blackhole`: a forwarder on loopback that can start dropping packets (connects time out);
//! - `claim`: the claim store's conditional-write suite, run on every object-store backend;
//! - `mock`: an in-process mock-slurmrestd and the deployment pointing at it;
//! - `request`: the real CreateTaskRequest fixtures, what tests change in them, `get_req`;
//! - `flyte1`: the same for Flyte 1's requests (flytekitplugins-slurm's);
//! - `server`: the connector in-process (`serve_with`) and a gRPC client;
//! - `drill`: the harness of the fault drills;
//! - `fleet`: several real `serve` processes and a backend-like client (the real-tier drills);
//! - `hooked`: an object store that asks a hook before each request (fail it, count it);
//! - `identity`: identity rules as the tests write them;
//! - `staging`: the staging tests' folders, roots and stager;
//! - `emulator`: object-store emulators (moto, Azurite) and the output round trip;
//! - `skip`: the one way a test skips for a missing environment (a failure where CI requires it);
//! - `tls`: a throwaway CA and the certificates it signs (openssl CLI);
//! - here: recorded real slurmrestd exchanges, free ports and folders, commands run with a bound.
#![allow(dead_code, unused_imports)]

pub mod blackhole;
pub mod claim;
pub mod drill;
pub mod emulator;
pub mod fleet;
pub mod flyte1;
pub mod hooked;
pub mod identity;
pub mod mock;
pub mod request;
pub mod server;
pub mod skip;
pub mod staging;
pub mod tls;

pub use request::{RequestExt, get_req, mock_request, request};

/// An empty folder `<tmp>/<prefix>-<pid>-<n>`, new for each call in this process.
pub fn fresh_dir(prefix: &str) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `cmd`'s output, once it exits within `within`; past that the command is killed
/// (`kill_on_drop`) and the test fails naming it. For commands a test waits on that depend on
/// something outside it (`slurm-connector submit` polls until its job ends, Slurm's CLIs can
/// block on a stuck daemon): a hang then fails that test instead of holding CI until its limit.
pub async fn output_within(
    cmd: &mut tokio::process::Command,
    within: std::time::Duration,
) -> std::process::Output {
    let what = format!("{:?}", cmd.as_std());
    tokio::time::timeout(within, cmd.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("{what} still running after {within:?}: killed"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The same for a synchronous test's std `Command`, on a runtime of its own.
pub fn output_within_sync(
    cmd: &mut std::process::Command,
    within: std::time::Duration,
) -> std::process::Output {
    // tokio's Command is made from an owned std one: take it, leaving an unused one behind.
    let cmd = std::mem::replace(cmd, std::process::Command::new("true"));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(output_within(&mut cmd.into(), within))
}

/// A loopback port free right now (for a child process to listen on).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

use std::path::{Path, PathBuf};

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A recorded real slurmrestd exchange: (status, content type, body).
pub struct Recorded {
    pub status: u16,
    pub content_type: String,
    pub body: serde_json::Value,
}

impl Recorded {
    pub fn load(name: &str) -> Recorded {
        let path = fixture_dir()
            .join("slurmrestd")
            .join(format!("{name}.json"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        Recorded {
            status: v["response"]["status"].as_u64().unwrap() as u16,
            content_type: v["response"]["headers"]["Content-Type"]
                .as_str()
                .unwrap_or("application/json")
                .to_string(),
            body: v["response"]["body"].clone(),
        }
    }

    /// As a wiremock response, byte-faithful for text/plain bodies.
    pub fn response(&self) -> wiremock::ResponseTemplate {
        let t = wiremock::ResponseTemplate::new(self.status);
        match &self.body {
            serde_json::Value::String(s) if !self.content_type.starts_with("application/json") => {
                t.set_body_raw(s.clone().into_bytes(), &self.content_type)
            }
            body => t.set_body_raw(serde_json::to_vec(body).unwrap(), "application/json"),
        }
    }
}

/// A client of the wiremock slurmrestd at `server` for replaying recordings: a static token,
/// `attempts` tries of an idempotent call, 5 ms between them.
pub fn replay_client(
    server: &wiremock::MockServer,
    cluster: &str,
    attempts: u32,
) -> slurm_connector::slurmrestd::Client {
    use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, RetryPolicy, Secret};
    let mut cfg = ClientConfig::new(
        cluster,
        server.uri().parse().unwrap(),
        Auth::Static {
            token: Secret::new("a.b.c".to_string()),
        },
    );
    cfg.retry = RetryPolicy {
        max_attempts: attempts,
        base_delay: std::time::Duration::from_millis(5),
        max_delay: std::time::Duration::from_millis(5),
    };
    Client::new(cfg).unwrap()
}

/// A wiremock slurmrestd that serves exactly `release`'s recorded API versions
/// (`serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"])`): the connector's version probe
/// (`GET /slurm/<v>/ping/` of each version it speaks) gets that release's recorded ping for
/// those and slurmrestd's 404 "Invalid or unknown URL path" for every other version. The probes
/// take precedence over a test's own catch-all mocks.
pub async fn serving(release: &str, versions: &[&str]) -> wiremock::MockServer {
    use wiremock::matchers::{method, path, path_regex};
    let server = wiremock::MockServer::start().await;
    for v in versions {
        let sample = ["token-badsig-ping", "ping"]
            .iter()
            .map(|case| format!("{release}_{v}_{case}"))
            .find(|name| {
                fixture_dir()
                    .join(format!("slurmrestd/{name}.json"))
                    .exists()
            })
            .unwrap_or_else(|| format!("{release}_{v}_jobs-state-one"));
        wiremock::Mock::given(method("GET"))
            .and(path(format!("/slurm/{v}/ping/")))
            .respond_with(Recorded::load(&sample).response())
            .with_priority(1)
            .mount(&server)
            .await;
    }
    wiremock::Mock::given(method("GET"))
        .and(path_regex(r"^/slurm/v0\.0\.[0-9]+/ping/$"))
        .respond_with(
            wiremock::ResponseTemplate::new(404)
                .insert_header("Content-Type", "text/plain")
                .set_body_string("Invalid or unknown URL path"),
        )
        .with_priority(2)
        .mount(&server)
        .await;
    server
}
