//! `slurm-connector serve`: the configured clusters, or — when none is configured — the embedded
//! default (an in-process slurmrestd stand-in running jobs on this machine, a local shared folder
//! and a local object store under the data directory), then the gRPC service until it stops.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::Failure;
use super::embedded;
use crate::config::DeploymentConfig;
use crate::service;

/// Where a configured deployment listens unless told otherwise: every interface (a pod's port,
/// reached through its Service and restricted by the ingress policy).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8000);
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 9090);

/// The embedded default runs every job's script on this machine as the user who started it, so
/// anyone who reaches its port runs code here: it listens on loopback unless `--listen` /
/// `FLYTE_SLURM_LISTEN` says otherwise.
fn embedded_default(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        addr.port(),
    )
}

pub async fn run(
    config: Option<&Path>,
    listen: Option<SocketAddr>,
    metrics_listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
) -> Result<(), Failure> {
    let deployment = DeploymentConfig::load(config).map_err(Failure::setup)?;
    // Keeps the embedded stand-in alive while serving.
    let mut _embedded = None;
    let embedded = deployment.clusters.is_empty();
    let pick = |given: Option<SocketAddr>, default: SocketAddr| {
        given.unwrap_or(if embedded {
            embedded_default(default)
        } else {
            default
        })
    };
    let (listen, metrics_listen) = (
        pick(listen, DEFAULT_LISTEN),
        pick(metrics_listen, DEFAULT_METRICS_LISTEN),
    );
    let deployment = if embedded {
        let dir = data_dir.unwrap_or_else(embedded::default_data_dir);
        let e = embedded::start(&dir, deployment)
            .await
            .map_err(Failure::setup)?;
        announce(&e, listen, metrics_listen);
        let config = e.config.clone();
        _embedded = Some(e);
        config
    } else {
        deployment
    };
    service::serve(service::ServeOptions {
        listen,
        metrics_listen,
        config: deployment,
    })
    .await
    .map_err(Failure::failed)
}

/// What the embedded default is made of, and what to try first.
fn announce(e: &embedded::Embedded, listen: SocketAddr, metrics_listen: SocketAddr) {
    let l = &e.layout;
    eprintln!(
        "slurm-connector: no slurmrestd configured (FLYTE_SLURM_RESTD_URL / --config): embedded default"
    );
    eprintln!(
        "  slurmrestd stand-in  {} (mock-slurmrestd, runs jobs on this machine)",
        e.mock.url()
    );
    eprintln!("  job files            {}", l.jobs.display());
    eprintln!("  object store         file://{}", l.objects.display());
    eprintln!("  JWT key              {}", l.key_file.display());
    eprintln!("  gRPC {listen}, metrics http://{metrics_listen}/metrics");
    if listen.ip().is_loopback() {
        eprintln!(
            "  loopback only: jobs run on this machine as you, so only this machine may ask \
             (--listen 0.0.0.0:{} to open it to the network)",
            listen.port()
        );
    } else {
        eprintln!(
            "  WARNING: listening on {listen}: anyone who reaches this port runs code on this \
             machine as you"
        );
    }
    eprintln!(
        "  try: slurm-connector submit SCRIPT.sbatch --connector http://127.0.0.1:{}",
        listen.port()
    );
}
