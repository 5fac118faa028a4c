//! `slurm-connector`: the Flyte 2 connector (and Flyte 1 agent) for Slurm (see `--help`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slurm_connector::cli::{self, Failure};
use slurm_connector::staging::{Roots, stager};

#[derive(Parser)]
#[command(
    name = "slurm-connector",
    version = slurm_connector::build_info::long_version(),
    about = "Runs Flyte 2 and Flyte 1 tasks on Slurm through slurmrestd (REST + JWT), no SSH"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the connector gRPC API (:8000) and Prometheus metrics (:9090). With no cluster
    /// configured, runs the embedded default: an in-process slurmrestd stand-in, a local shared
    /// folder and a local object store under the data directory, on loopback only.
    Serve {
        /// A config file with several clusters (also FLYTE_SLURM_CONFIG).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Where gRPC listens [default: 0.0.0.0:8000; 127.0.0.1:8000 with the embedded default,
        /// which runs every job's script on this machine as you]
        #[arg(long, env = "FLYTE_SLURM_LISTEN")]
        listen: Option<SocketAddr>,
        /// Where /metrics (and /healthz) listen [default: 0.0.0.0:9090; 127.0.0.1:9090 with the
        /// embedded default]
        #[arg(long, env = "FLYTE_SLURM_METRICS_LISTEN")]
        metrics_listen: Option<SocketAddr>,
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
    /// With --connector, instead: a running connector as Flyte's backend reaches it.
    Check {
        #[arg(long, conflicts_with = "connector")]
        config: Option<PathBuf>,
        /// An output prefix to test writing to (e.g. s3://bucket/flyte-outputs).
        #[arg(long, conflicts_with = "connector")]
        output_prefix: Option<String>,
        /// Check a running connector from here instead (HOST:PORT or http://HOST:PORT, e.g. the
        /// chart's headless Service slurm-connector-headless.flyte.svc.cluster.local:8000, or
        /// 127.0.0.1:8000 in the connector's own pod): gRPC health SERVING and the task types of
        /// both protocols, at each address the name resolves to. `helm test` runs it in a pod
        /// with Flyte's backend's labels, which tests the NetworkPolicy too.
        #[arg(long, value_name = "URL")]
        connector: Option<String>,
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

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Command::Serve { .. } => "serve",
            Command::Render { .. } => "render",
            Command::Check { .. } => "check",
            Command::Submit(_) => "submit",
            Command::Stager { .. } => "stager",
        }
    }
}

fn main() -> ExitCode {
    if let Err(e) = cli::logging::init() {
        eprintln!("slurm-connector: {e}");
        return ExitCode::from(2);
    }
    let command = Cli::parse().command;
    let name = command.name();
    match run(command) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("slurm-connector {name}: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// Runs the subcommand; `Ok` is the exit code of one that ran to its end.
fn run(command: Command) -> Result<u8, Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::setup(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        match command {
            Command::Serve {
                config,
                listen,
                metrics_listen,
                data_dir,
            } => cli::serve::run(config.as_deref(), listen, metrics_listen, data_dir)
                .await
                .map(|()| 0),
            Command::Render {
                request,
                config,
                api_version,
            } => {
                let body = cli::render::run(&request, config.as_deref(), api_version)
                    .map_err(Failure::failed)?;
                println!("{body}");
                Ok(0)
            }
            Command::Check {
                connector: Some(url),
                ..
            } => {
                let rows = cli::connector_check::check_connector(&url).await;
                Ok(if cli::check::print(&rows) { 0 } else { 1 })
            }
            Command::Check {
                config,
                output_prefix,
                connector: None,
            } => match cli::check::run(config.as_deref(), output_prefix.as_deref()).await {
                Ok(all_good) => Ok(if all_good { 0 } else { 1 }),
                Err(e) => Err(Failure::setup(e)),
            },
            Command::Submit(args) => cli::submit::run(args).await.map_err(Failure::setup),
            Command::Stager {
                listen,
                roots,
                token_file,
            } => {
                let roots =
                    Roots::parse(&roots).map_err(|e| Failure::setup(format!("--roots: {e}")))?;
                stager::serve(stager::StagerOptions {
                    listen,
                    roots,
                    token_file,
                })
                .await
                .map(|()| 0)
                .map_err(Failure::failed)
            }
        }
    })
}
