//! GetTask latency with the connector in ANOTHER process (issue 9): the real `slurm-connector
//! serve` binary (release, as `cargo bench` builds it) is spawned as a child, configured by
//! environment against a mock-slurmrestd running in this process; 10k held jobs are tracked and
//! 100 concurrent pollers in this process call GetTask over gRPC (one HTTP/2 channel, like
//! Flyte's backend's one ClientConn), p50/p99.
//!
//! `cargo bench --bench gettask_process` (env `GETTASK_CHANNELS=N` spreads the pollers over N
//! channels; `GETTASK_POLLERS=N` changes the number of pollers). Modes: *paced* (each poller
//! calls every 50 ms on a fixed, staggered schedule: 2k GetTask/s spread evenly, every one of
//! 10k tasks polled every 5 s) and *closed loop* (back to back: saturation).

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::drill::free_port;
use common::get_req;
use common::mock::Mock;
use futures::StreamExt;
use mock_slurmrestd::FaultConfig;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::service::ResourceMeta;
use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, JobDescription, Secret};
use tonic::transport::Channel;

const JOBS: usize = 10_000;
/// Concurrent pollers (env `GETTASK_POLLERS` overrides, e.g. 1 for the unloaded floor).
const POLLERS: usize = 100;
const WINDOW: Duration = Duration::from_secs(10);

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Kills the child connector whatever happens to the bench.
struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn run() {
    let mock = Mock::start(
        "bench-gettask-proc",
        Duration::from_secs(3600),
        FaultConfig::default(),
    )
    .await;
    let token = mock.token();
    let client = Client::new(ClientConfig::new(
        "mock",
        url::Url::parse(&mock.handle.url()).unwrap(),
        Auth::Static {
            token: Secret::new(token.clone()),
        },
    ))
    .expect("client");
    // Held jobs stay PENDING and run nothing: the figures are the connector's.
    let t = Instant::now();
    let jobs_dir = mock.jobs().display().to_string();
    let ids: Vec<_> = futures::stream::iter(0..JOBS)
        .map(|i| {
            let (c, dir) = (client.clone(), jobs_dir.clone());
            async move {
                c.submit(&JobDescription {
                    name: format!("bench-{i}"),
                    script: "#!/bin/bash\nsleep 3600\n".into(),
                    current_working_directory: dir,
                    environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
                    hold: Some(true),
                    ..JobDescription::default()
                })
                .await
                .expect("submit")
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    eprintln!("submitted {JOBS} held jobs in {:?}", t.elapsed());

    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
    for (k, _) in std::env::vars() {
        if k.starts_with("FLYTE_SLURM_") {
            cmd.env_remove(k);
        }
    }
    let _child = Child(
        cmd.args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-listen",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .env("FLYTE_SLURM_RESTD_URL", mock.handle.url())
        .env("FLYTE_SLURM_JWT", &token)
        .env("FLYTE_SLURM_WORKING_DIR", &jobs_dir)
        .env("FLYTE_SLURM_POLL_INTERVAL", "5s")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn slurm-connector serve"),
    );
    let metas: Arc<Vec<Vec<u8>>> = Arc::new(
        ids.iter()
            .map(|id| {
                ResourceMeta::new(
                    "default",
                    *id,
                    format!("bench-{id}"),
                    format!("{jobs_dir}/slurm-{id}.out"),
                    format!("{jobs_dir}/slurm-{id}.err"),
                )
                .encode()
            })
            .collect(),
    );
    let channels: usize = std::env::var("GETTASK_CHANNELS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let pollers: usize = std::env::var("GETTASK_POLLERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(POLLERS);
    let mut clients = Vec::new();
    for _ in 0..channels {
        clients.push(connect(port).await);
    }
    let t = Instant::now();
    futures::stream::iter(metas.iter().cloned().enumerate())
        .map(|(i, m)| {
            let mut c = clients[i % channels].clone();
            async move { c.get_task(get_req(&m)).await.expect("GetTask") }
        })
        .buffer_unordered(POLLERS)
        .collect::<Vec<_>>()
        .await;
    eprintln!(
        "adopted {JOBS} jobs through GetTask in {:?} (connector in its own process)",
        t.elapsed()
    );
    println!(
        "== gettask-process: {JOBS} tracked jobs, {pollers} pollers in this process, connector \
         in a child process, {channels} channel(s), {WINDOW:?} each"
    );
    for (what, pause) in [
        ("process paced 50ms", Duration::from_millis(50)),
        ("process closed-loop", Duration::ZERO),
    ] {
        let until = Instant::now() + WINDOW;
        let mut tasks = Vec::new();
        for p in 0..pollers {
            let (metas, mut c) = (metas.clone(), clients[p % channels].clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = p * 97;
                // Paced pollers start staggered and keep a fixed schedule, so the calls are
                // spread evenly over time (pollers that all sleep 50 ms after each call fall
                // into step and arrive in bursts of 100, which measures the burst's queue).
                let mut tick = (!pause.is_zero()).then(|| {
                    let offset = pause.mul_f64(p as f64 / pollers as f64);
                    let mut iv =
                        tokio::time::interval_at(tokio::time::Instant::now() + offset, pause);
                    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    iv
                });
                while Instant::now() < until {
                    if let Some(iv) = tick.as_mut() {
                        iv.tick().await;
                    }
                    i = (i + 7919) % metas.len();
                    let t = Instant::now();
                    c.get_task(get_req(&metas[i]))
                        .await
                        .expect("GetTask never fails");
                    lat.push(t.elapsed());
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort();
        println!(
            "{what}\tcalls={}\t{:.0}/s\tp50={:?}\tp99={:?}\tmax={:?}",
            all.len(),
            all.len() as f64 / WINDOW.as_secs_f64(),
            pct(&all, 0.50),
            pct(&all, 0.99),
            all.last().unwrap()
        );
    }
    mock.stop().await;
}

async fn connect(port: u16) -> AsyncConnectorServiceClient<Channel> {
    for _ in 0..200 {
        if let Ok(c) =
            AsyncConnectorServiceClient::connect(format!("http://127.0.0.1:{port}")).await
        {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("connector did not start");
}
