//! `slurm-connector`: the Flyte 2 connector for Slurm (see `--help`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve => {
            eprintln!(
                "slurm-connector: `serve` is not there yet (the connector service is being built)"
            );
            ExitCode::from(2)
        }
    }
}
