//! `slurm-connector`: the Flyte 2 connector for Slurm (see `--help`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slurm_connector::cli;

#[derive(Parser)]
#[command(
    name = "slurm-connector",
    version,
    about = "Runs Flyte 2 tasks on Slurm through slurmrestd (REST + JWT), no SSH"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the connector gRPC API (:8000) and Prometheus metrics (:9090). With no cluster
    /// configured, runs the embedded default: an in-process slurmrestd stand-in, a local shared
    /// folder and a local object store under the data directory.
    Serve {
        /// A config file with several clusters (also FLYTE_SLURM_CONFIG).
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, default_value = "0.0.0.0:8000", env = "FLYTE_SLURM_LISTEN")]
        listen: SocketAddr,
        #[arg(
            long,
            default_value = "0.0.0.0:9090",
            env = "FLYTE_SLURM_METRICS_LISTEN"
        )]
        metrics_listen: SocketAddr,
        /// The embedded default's data directory (default ~/.local/share/slurm-connector).
        #[arg(long, env = "FLYTE_SLURM_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Print the JSON body CreateTask would submit for a CreateTaskRequest (.pb or protobuf .json).
    Render {
        #[arg(long)]
        request: PathBuf,
        #[arg(long)]
        config: Option<PathBuf>,
        /// The slurmrestd API version to render for (e.g. v0.0.45); default: the cluster's pinned
        /// api_version, else v0.0.42 (render contacts no cluster, so it cannot negotiate).
        /// Options a version cannot express are refused, naming it.
        #[arg(long)]
        api_version: Option<slurm_connector::slurmrestd::ApiVersion>,
    },
    /// Preflight the configured cluster(s): reachable, token accepted, API version, partitions,
    /// job files through staging, object store writable. Exits non-zero on any ✗.
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
        /// An output prefix to test writing to (e.g. s3://bucket/flyte-outputs).
        #[arg(long)]
        output_prefix: Option<String>,
    },
    /// Drive a running connector like Flyte's backend would: create, poll to the end, show logs.
    Submit(cli::submit::SubmitArgs),
    /// The staging sidecar: serves the shared filesystem's job files to the connector over HTTP.
    Stager {
        /// Where to listen.
        #[arg(
            long,
            default_value = "0.0.0.0:8090",
            env = "FLYTE_SLURM_STAGER_LISTEN"
        )]
        listen: SocketAddr,
        /// What the stager may touch: `cluster_prefix=local_path[,...]` (a bare path maps to itself).
        #[arg(long, env = "FLYTE_SLURM_SHARED_MOUNTS")]
        roots: String,
        /// A file holding the bearer token clients must present.
        #[arg(long, env = "FLYTE_SLURM_STAGER_TOKEN_FILE")]
        token_file: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("slurm-connector: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Serve {
                config,
                listen,
                metrics_listen,
                data_dir,
            } => serve(config, listen, metrics_listen, data_dir).await,
            Command::Render {
                request,
                config,
                api_version,
            } => match cli::render::run(&request, config.as_deref(), api_version) {
                Ok(body) => {
                    println!("{body}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("slurm-connector render: {e}");
                    ExitCode::from(1)
                }
            },
            Command::Check {
                config,
                output_prefix,
            } => match cli::check::run(config.as_deref(), output_prefix.as_deref()).await {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("slurm-connector check: {e}");
                    ExitCode::from(2)
                }
            },
            Command::Submit(args) => match cli::submit::run(args).await {
                Ok(code) => ExitCode::from(code),
                Err(e) => {
                    eprintln!("slurm-connector submit: {e}");
                    ExitCode::from(2)
                }
            },
            Command::Stager {
                listen,
                roots,
                token_file,
            } => {
                let roots = match slurm_connector::staging::confine::Roots::parse(&roots) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("slurm-connector stager: --roots: {e}");
                        return ExitCode::from(2);
                    }
                };
                let opts = slurm_connector::staging::stager::StagerOptions {
                    listen,
                    roots,
                    token_file,
                };
                match slurm_connector::staging::stager::serve(opts).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("slurm-connector stager: {e}");
                        ExitCode::from(1)
                    }
                }
            }
        }
    })
}

async fn serve(
    config: Option<PathBuf>,
    listen: SocketAddr,
    metrics_listen: SocketAddr,
    data_dir: Option<PathBuf>,
) -> ExitCode {
    use slurm_connector::{config::DeploymentConfig, service};
    let deployment = match DeploymentConfig::load(config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("slurm-connector serve: {e}");
            return ExitCode::from(2);
        }
    };
    // Keeps the embedded stand-in alive while serving.
    let mut _embedded = None;
    let deployment = if deployment.clusters.is_empty() {
        let dir = data_dir.unwrap_or_else(cli::embedded::default_data_dir);
        match cli::embedded::start(&dir, deployment).await {
            Ok(e) => {
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
                let config = e.config.clone();
                _embedded = Some(e);
                config
            }
            Err(e) => {
                eprintln!("slurm-connector serve: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        deployment
    };
    match service::serve(service::ServeOptions {
        listen,
        metrics_listen,
        config: deployment,
    })
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slurm-connector serve: {e}");
            ExitCode::from(1)
        }
    }
}
