//! `mock-slurmrestd --listen ADDR:PORT --jwt-key FILE [...]`: the mock as a standalone server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use mock_slurmrestd::{ApiVersion, FaultConfig, MockConfig, MockServer, SlurmVersion};

#[derive(Parser, Debug)]
#[command(
    name = "mock-slurmrestd",
    about = "A slurmrestd stand-in (API versions v0.0.40-46) that runs batch jobs locally, with faults on demand"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6820")]
    listen: SocketAddr,
    /// HS256 key file (raw bytes, like slurm's jwt_hs256.key).
    #[arg(long)]
    jwt_key: PathBuf,
    /// CPUs per node.
    #[arg(long, default_value_t = 8)]
    cpus: u32,
    /// Number of nodes.
    #[arg(long, default_value_t = 1)]
    nodes: u32,
    /// MinJobAge in seconds: finished jobs then only show in the slurmdb view.
    #[arg(long, default_value_t = 300)]
    min_job_age: u64,
    /// A cluster without slurmdbd: the slurmdb paths are not served (404, as slurmrestd run
    /// with `-s openapi/slurmctld`).
    #[arg(long)]
    no_accounting: bool,
    /// Seconds one minute of time_limit lasts (tests use e.g. 0.5).
    #[arg(long, default_value_t = 60.0)]
    time_scale: f64,
    /// Seconds between SIGTERM and SIGKILL on cancel/timeout.
    #[arg(long, default_value_t = 5.0)]
    kill_wait: f64,
    /// Which Slurm release to imitate where releases differ (24.11, 26.05 or 26.11). A served
    /// API version this release does not serve answers as the nearest release that does.
    #[arg(long, default_value = "24.11")]
    slurm_version: SlurmVersion,
    /// API versions to serve, comma-separated (e.g. v0.0.42,v0.0.46); every other version
    /// answers 404 like the real slurmrestd.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "v0.0.40,v0.0.41,v0.0.42,v0.0.43,v0.0.44,v0.0.45,v0.0.46"
    )]
    api_versions: Vec<ApiVersion>,
    /// SlurmUser (may act for other users).
    #[arg(long, default_value = "slurm")]
    slurm_user: String,
    #[arg(long, default_value = "mock")]
    cluster_name: String,
    #[arg(long, default_value = "debug")]
    partition: String,
    /// Folder for job scripts (default: a temp folder).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Fault: added latency per request (ms).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Fault: fraction of requests answered 500/502/503.
    #[arg(long, default_value_t = 0.0)]
    error_rate: f64,
    /// Fault: fraction of connections dropped without an answer.
    #[arg(long, default_value_t = 0.0)]
    drop_rate: f64,
    /// Fault: reject every token (511).
    #[arg(long)]
    reject_tokens: bool,
    /// Fault: slurmctld down for this many seconds after start.
    #[arg(long, default_value_t = 0)]
    controller_down_secs: u64,
    /// Fault: extra latency on slurmdb paths (ms).
    #[arg(long, default_value_t = 0)]
    slurmdbd_latency_ms: u64,
    /// Fault: slurmdbd unreachable (502 / 7000).
    #[arg(long)]
    slurmdbd_down: bool,
}

fn fraction(name: &str, v: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("--{name} must be between 0 and 1, got {v}"))
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("mock-slurmrestd: {e}");
        std::process::exit(2);
    }
}

async fn run(a: Args) -> Result<(), String> {
    let key = std::fs::read(&a.jwt_key)
        .map_err(|e| format!("cannot read --jwt-key {}: {e}", a.jwt_key.display()))?;
    if key.is_empty() {
        return Err(format!(
            "--jwt-key {} is empty: write a random key into it (e.g. 32 bytes)",
            a.jwt_key.display()
        ));
    }
    // NaN, infinite or negative values would make Duration::from_secs_f64 panic.
    let valid = |v: f64, min_exclusive: bool| {
        v.is_finite() && if min_exclusive { v > 0.0 } else { v >= 0.0 }
    };
    if !valid(a.time_scale, true) || !valid(a.kill_wait, false) {
        return Err("--time-scale must be > 0 and --kill-wait >= 0".into());
    }
    let faults = FaultConfig {
        latency_ms: a.latency_ms,
        error_rate: fraction("error-rate", a.error_rate)?,
        drop_rate: fraction("drop-rate", a.drop_rate)?,
        reject_tokens: a.reject_tokens,
        controller_down_secs: a.controller_down_secs,
        slurmdbd_latency_ms: a.slurmdbd_latency_ms,
        slurmdbd_down: a.slurmdbd_down,
        ..FaultConfig::default()
    };
    let cfg = MockConfig {
        cpus: a.cpus,
        nodes: a.nodes,
        jwt_key: key,
        slurm_user: a.slurm_user,
        min_job_age: Duration::from_secs(a.min_job_age),
        accounting: !a.no_accounting,
        minute: Duration::from_secs_f64(a.time_scale),
        kill_wait: Duration::from_secs_f64(a.kill_wait),
        cluster_name: a.cluster_name,
        partition: a.partition,
        state_dir: a.state_dir,
        faults,
        slurm_version: a.slurm_version,
        api_versions: {
            let mut v = a.api_versions;
            v.sort();
            v.dedup();
            v
        },
        ..MockConfig::default()
    };
    let handle = MockServer::start(cfg, a.listen)
        .await
        .map_err(|e| e.to_string())?;
    let served: Vec<&str> = handle
        .config()
        .api_versions
        .iter()
        .map(|v| v.as_str())
        .collect();
    println!(
        "mock-slurmrestd listening on {} (API versions {})",
        handle.url(),
        served.join(",")
    );
    // SIGINT or SIGTERM: stop and kill running jobs' process groups (they would outlive us).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("installing the SIGTERM handler: {e}"))?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.map_err(|e| format!("waiting for Ctrl-C: {e}"))?,
        _ = term.recv() => {}
    }
    handle.shutdown().await;
    Ok(())
}
