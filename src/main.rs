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
    /// Serve the connector gRPC API (:8000) and Prometheus metrics (:9090).
    Serve,
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
            Command::Serve => {
                eprintln!("slurm-connector: `serve` is not there yet (the connector service is being built)");
                ExitCode::from(2)
            }
            Command::Submit(args) => match cli::submit::run(args).await {
                Ok(code) => ExitCode::from(code),
                Err(e) => {
                    eprintln!("slurm-connector submit: {e}");
                    ExitCode::from(2)
                }
            },
            Command::Stager { listen, roots, token_file } => {
                let roots = match slurm_connector::staging::confine::Roots::parse(&roots) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("slurm-connector stager: --roots: {e}");
                        return ExitCode::from(2);
                    }
                };
                let opts = slurm_connector::staging::stager::StagerOptions { listen, roots, token_file };
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
