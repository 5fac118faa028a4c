//! `slurm-connector serve`: the configured clusters, or — when none is configured — the embedded
//! default (an in-process slurmrestd stand-in running jobs on this machine, a local shared folder
//! and a local object store under the data directory), then the gRPC service until it stops.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::Failure;
use super::embedded;
use crate::config::DeploymentConfig;
use crate::service;

pub async fn run(
    config: Option<&Path>,
    listen: SocketAddr,
    metrics_listen: SocketAddr,
    data_dir: Option<PathBuf>,
) -> Result<(), Failure> {
    let deployment = DeploymentConfig::load(config).map_err(Failure::setup)?;
    // Keeps the embedded stand-in alive while serving.
    let mut _embedded = None;
    let deployment = if deployment.clusters.is_empty() {
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
    eprintln!(
        "  try: slurm-connector submit SCRIPT.sbatch --connector http://127.0.0.1:{}",
        listen.port()
    );
}
