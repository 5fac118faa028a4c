//! The `create`, `create-run` and `create-process` sections of benches/real_cluster.rs: CreateTask
//! against a raw slurmrestd submit of the same rendered body, interleaved, with held jobs or jobs
//! that run `true`, the connector in this process or the `serve` binary in its own.

use std::process::Command;
use std::time::Instant;

use slurm_connector::service::{render_config, task_spec};

use crate::support::*;

const ROUNDS: u32 = 60;

/// Kills the child connector whatever happens to the bench.
struct ChildServe(std::process::Child);
impl Drop for ChildServe {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The release `slurm-connector serve` as a child process, configured by this process's
/// environment (the dev cluster's `FLYTE_SLURM_*`, as a deployment would set them).
fn spawn_serve() -> (ChildServe, std::net::SocketAddr) {
    let port = |()| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (g, m) = (port(()), port(()));
    let child = Command::new(env!("CARGO_BIN_EXE_slurm-connector"))
        .args([
            "serve",
            "--listen",
            &g.to_string(),
            "--metrics-listen",
            &m.to_string(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn slurm-connector serve");
    (ChildServe(child), g)
}

/// `held`: jobs submitted held (nothing runs); otherwise `true` jobs that really run (and are
/// scheduled at submit, which is part of what a real submit costs). `process`: CreateTask goes
/// to the `serve` binary in its own process (as deployed) instead of `serve_with` in this one.
pub async fn create(held: bool, process: bool) {
    println!(
        "== create (real slurmrestd, {}, connector {}): CreateTask ÷ raw submit, {ROUNDS} pairs, \
         interleaved",
        if held {
            "held jobs"
        } else {
            "jobs that run `true`"
        },
        if process {
            "in its own process"
        } else {
            "in this process"
        }
    );
    RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let conn = start().await;
    let child = process.then(spawn_serve);
    let mut c = grpc(child.as_ref().map_or(conn.addr, |(_, a)| *a)).await;
    let raw = raw_client(&conn.deployment);
    let render_cfg = render_config(&conn.deployment.clusters[&conn.deployment.default_cluster]);
    let script = if held {
        "#!/bin/bash\n#SBATCH --hold\ntrue\n"
    } else {
        "#!/bin/bash\ntrue\n"
    };
    let mut ids = Vec::new();
    // Warm-up: the first CreateTask indexes the cluster's jobs (slurmctld and slurmdbd) once.
    ids.push(job_id(
        &c.create_task(request(script, 90_000))
            .await
            .expect("CreateTask")
            .into_inner()
            .resource_meta,
    ));
    let (mut ours, mut direct) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        let req = request(script, i);
        let rendered =
            slurm_connector::render::render(&task_spec(&req).expect("spec"), &render_cfg)
                .expect("render");
        let t = Instant::now();
        ids.push(raw.submit(&rendered.job).await.expect("raw submit"));
        direct.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let meta = c
            .create_task(request(script, ROUNDS + i))
            .await
            .expect("CreateTask")
            .into_inner()
            .resource_meta;
        ours.push(t.elapsed().as_secs_f64() * 1e3);
        ids.push(job_id(&meta));
    }
    for id in &ids {
        let _ = raw.cancel(*id, None).await;
    }
    let (mo, mr) = (median(&mut ours), median(&mut direct));
    println!(
        "CreateTask (gRPC) median {mo:.2} ms, raw slurmrestd submit median {mr:.2} ms, ratio {:.3}; \
         min/max CreateTask {:.2}/{:.2} ms, raw {:.2}/{:.2} ms; {} jobs (cancelled if still there)",
        mo / mr,
        ours[0],
        ours[ours.len() - 1],
        direct[0],
        direct[direct.len() - 1],
        ids.len()
    );
    drop(child);
    conn.stop.send(()).ok();
    conn.task.await.unwrap();
}
