//! Figures against the REAL slurmrestd of the dev cluster (issue 9). Needs its environment:
//!
//! ```text
//! eval "$(deploy/dev-cluster/dev-cluster --release 24.11 env)"
//! cargo bench --bench real_cluster -- create     # CreateTask ÷ raw slurmrestd submit (held jobs)
//! cargo bench --bench real_cluster -- create-run # the same with jobs that run `true`
//! cargo bench --bench real_cluster -- create-process # held, the `serve` binary in its own process
//! cargo bench --bench real_cluster -- sdiag      # slurmctld RPCs for 200 short tasks (SDIAG_TASKS=1: one)
//! FANOUT_TASKS=1000 cargo bench --bench real_cluster -- fanout # 1000 tasks run to the end (FANOUT_HELD=1: held)
//! ```
//!
//! The connector runs in this process (`serve_with`, configured from that environment exactly as
//! `serve` would be) and is driven over gRPC by a tonic client.
//! - `create`: held jobs (`#SBATCH --hold`, so the shared cluster runs nothing), 60 rounds, each a
//!   raw `Client::submit` of the body rendered from a request and a CreateTask of another attempt
//!   of it, interleaved; every job is cancelled afterwards.
//! - `sdiag`: `sdiag --reset` (root, via `dev-cluster exec`), 200 tasks of `true` created and
//!   polled by GetTask to SUCCEEDED, then `sdiag`: RPCs by message type and user, divided by the
//!   connector's poll ticks (its own `/metrics`). An idle window of the same length first gives
//!   the background (slurmd's pings, other users) to tell apart.
//! - `fanout`: a map task's fan-out as Flyte's backend sends it: `FANOUT_TASKS` (default 1000)
//!   CreateTasks of held jobs, 50 in flight, each with the backend's 10 s deadline; then GetTask
//!   of every meta until each names its job (deferred ones included). Reports CreateTask errors,
//!   deferred answers, the time until every task had its job, slurmctld RPCs per task (sdiag),
//!   jobs per execution key (duplicates), and raw slurmrestd submits of the same bodies at the
//!   same concurrency (120 s client timeout). Run it on a `--rate-limit` cluster too.

#[path = "../tests/common/mod.rs"]
mod common;

// Each section in its own file (`create` also runs create-run and create-process), and what they
// share in support.rs; root files of benches look for modules next to them, hence the paths.
#[path = "real_cluster/create.rs"]
mod create;
#[path = "real_cluster/fanout.rs"]
mod fanout;
#[path = "real_cluster/sdiag.rs"]
mod sdiag;
#[path = "real_cluster/support.rs"]
mod support;

use create::create;
use fanout::fanout;
use sdiag::sdiag;

fn main() {
    if std::env::var("FLYTE_SLURM_RESTD_URL").is_err() {
        eprintln!(
            "real_cluster: no FLYTE_SLURM_RESTD_URL; run eval \"$(deploy/dev-cluster/dev-cluster \
             --release 24.11 env)\" first"
        );
        std::process::exit(2);
    }
    // The connector's own log lines (e.g. each batch it submitted, with its size) when asked
    // for: `RUST_LOG=slurm_connector=info`.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let sections: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for s in if sections.is_empty() {
        vec!["create".to_string()]
    } else {
        sections
    } {
        match s.as_str() {
            "create" => rt.block_on(create(true, false)),
            "create-run" => rt.block_on(create(false, false)),
            "create-process" => rt.block_on(create(true, true)),
            "sdiag" => rt.block_on(sdiag()),
            "fanout" => rt.block_on(fanout()),
            other => {
                eprintln!("unknown section `{other}`; use create or sdiag");
                std::process::exit(2);
            }
        }
    }
}
