//! Soak: a day's traffic compressed. Tens of thousands of short tasks (every fourth with two
//! declared outputs staged to a `file://` store, so connector-side transfers run) go through the
//! real `slurm-connector serve` (a child process) against an in-process mock-slurmrestd that runs
//! each job's script; the connector is restarted (SIGTERM, a new one) every `SOAK_RESTART_EVERY`
//! tasks. Every 10 s it samples the serve's RSS and open file descriptors (`/proc/<pid>/`) and
//! its gauges `slurm_connector_tracked_jobs`, `slurm_connector_output_transfers` and
//! `slurm_connector_state_entries` (`/metrics`; the last printed only: its maps are bounded by a
//! day and a week, which a compressed soak does not reach). With `terminal_ttl` at 30 s (a day's hour, compressed), every one of them must
//! level off after warm-up within each process's life; the end prints, per process, the first
//! sample after warm-up and the last, and fails if the last exceeds the first by more than the
//! tolerance (`SOAK_TOLERANCE`, default 25 %, RSS; counts: 2x).
//!
//! Not run by CI: `SOAK_TASKS=20000 cargo test --bench soak` (the test profile: it reuses the
//! debug build; absolute RSS is a debug build's, the shape is what counts). Figures in
//! BENCHMARKS.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::RequestExt;
use common::drill::{FLYTE_DEADLINE, get_req};
use common::free_port;
use common::mock::Mock;
use mock_slurmrestd::FaultConfig;
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::core::task_execution::Phase;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

/// One `serve` process; SIGKILLed if still running when dropped.
struct Serve {
    child: std::process::Child,
    metrics: u16,
}

impl Serve {
    fn spawn(port: u16, env: &[(&str, String)]) -> Serve {
        let metrics = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
        for (k, _) in std::env::vars() {
            if k.starts_with("FLYTE_SLURM_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--metrics-listen",
                &format!("127.0.0.1:{metrics}"),
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn slurm-connector serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "serve did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Serve { child, metrics }
    }

    /// SIGTERM, as Kubernetes stops a pod, and its exit within 60 s.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "serve did not exit within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn sample(&self) -> Sample {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
        let metrics = std::process::Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "5",
                &format!("http://127.0.0.1:{}/metrics", self.metrics),
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let gauge = |name: &str| {
            metrics
                .lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        let state = |which: &str| {
            let label = format!("state=\"{which}\"");
            metrics
                .lines()
                .filter(|l| l.starts_with("slurm_connector_state_entries") && l.contains(&label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        Sample {
            rss_mib: rss_kib as f64 / 1024.0,
            fds,
            tracked: gauge("slurm_connector_tracked_jobs"),
            transfers: gauge("slurm_connector_output_transfers"),
            executions: state("executions"),
            indexed: state("index_jobs"),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    rss_mib: f64,
    fds: usize,
    tracked: u64,
    transfers: u64,
    /// Bounded by time (a day after their last change; a week after the job left slurmctld),
    /// not by the soak's compressed hour: printed, not judged.
    executions: u64,
    indexed: u64,
}

fn request(i: usize, store: &std::path::Path) -> CreateTaskRequest {
    let mut r = if i.is_multiple_of(4) {
        let mut r = common::mock_request("script_preprocess.pb");
        r.output_prefix = format!("file://{}/t{i}", store.display());
        r
    } else {
        common::mock_request("script_no_io.pb").script("#!/bin/bash\ntrue\n")
    };
    r.template
        .as_mut()
        .unwrap()
        .custom
        .as_mut()
        .unwrap()
        .fields
        .remove("sbatch");
    r.run_name(&format!("soak{i}-{}", std::process::id()))
}

async fn run() {
    let tasks = env_or("SOAK_TASKS", 20_000);
    let restart_every = env_or("SOAK_RESTART_EVERY", 5_000);
    let in_flight = env_or("SOAK_IN_FLIGHT", 48);
    let tolerance = env_or("SOAK_TOLERANCE", 25) as f64 / 100.0;
    let ttl = std::env::var("SOAK_TERMINAL_TTL").unwrap_or_else(|_| "30s".into());
    // Jobs leave the mock's slurmctld 10 s after they end (resolved through its slurmdbd), as a
    // site's do after MinJobAge.
    let mock = Mock::start("soak", Duration::from_secs(10), FaultConfig::default()).await;
    let jobs = mock.jobs().display().to_string();
    let store = mock.dir.join("store");
    std::fs::create_dir_all(&store).unwrap();
    let env: Vec<(&str, String)> = vec![
        ("FLYTE_SLURM_RESTD_URL", mock.handle.url()),
        ("FLYTE_SLURM_JWT", mock.token()),
        ("FLYTE_SLURM_WORKING_DIR", jobs.clone()),
        ("FLYTE_SLURM_SHARED_MOUNTS", format!("{jobs}={jobs}")),
        ("FLYTE_SLURM_POLL_INTERVAL", "1s".into()),
        ("FLYTE_SLURM_TERMINAL_TTL", ttl.clone()),
        ("FLYTE_SLURM_JOB_FILES_RETENTION", "off".into()),
    ];
    let port = free_port();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_lazy();
    let client = AsyncConnectorServiceClient::new(channel);

    let done = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let mut samples: Vec<(usize, Duration, Sample)> = Vec::new();
    let mut segment = 0usize;
    eprintln!(
        "soak: {tasks} tasks, {in_flight} in flight, a restart every {restart_every}, \
         terminal_ttl {ttl}"
    );
    eprintln!("segment  elapsed  done  rss_mib  fds  tracked  transfers  executions  indexed");
    while next.load(Ordering::Relaxed) < tasks {
        let serve = Serve::spawn(port, &env);
        let stop_at = (segment + 1) * restart_every;
        let mut workers = Vec::new();
        for _ in 0..in_flight {
            let (client, next, done, failed, store) = (
                client.clone(),
                next.clone(),
                done.clone(),
                failed.clone(),
                store.clone(),
            );
            workers.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= tasks.min(stop_at) {
                        next.fetch_min(tasks.min(stop_at), Ordering::Relaxed);
                        return;
                    }
                    let req = request(i, &store);
                    let meta = loop {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(FLYTE_DEADLINE);
                        match client.clone().create_task(r).await {
                            Ok(a) => break a.into_inner().resource_meta,
                            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    };
                    let deadline = Instant::now() + Duration::from_secs(300);
                    loop {
                        if let Ok(a) = client.clone().get_task(get_req(&meta)).await {
                            let p = Phase::of(a.into_inner().resource.unwrap().phase);
                            if p.is_terminal() {
                                if p != Phase::Succeeded {
                                    failed.fetch_add(1, Ordering::Relaxed);
                                }
                                break;
                            }
                        }
                        assert!(Instant::now() < deadline, "task {i} not terminal in 5 min");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    let _ = std::fs::remove_dir_all(store.join(format!("t{i}")));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let all = futures::future::join_all(workers);
        tokio::pin!(all);
        loop {
            tokio::select! {
                _ = &mut all => break,
                _ = tokio::time::sleep(Duration::from_secs(10)) => {
                    let s = serve.sample();
                    let n = done.load(Ordering::Relaxed);
                    eprintln!(
                        "{segment:>7}  {:>6.0}s  {n:>5}  {:>7.1}  {:>3}  {:>7}  {:>9}  {:>10}  {:>7}",
                        began.elapsed().as_secs_f64(), s.rss_mib, s.fds, s.tracked, s.transfers,
                        s.executions, s.indexed
                    );
                    samples.push((segment, began.elapsed(), s));
                }
            }
        }
        serve.stop();
        segment += 1;
    }
    let took = began.elapsed();
    eprintln!(
        "soak: {} tasks in {:.0}s ({:.1}/s), {} not SUCCEEDED, {segment} serve processes",
        done.load(Ordering::Relaxed),
        took.as_secs_f64(),
        done.load(Ordering::Relaxed) as f64 / took.as_secs_f64(),
        failed.load(Ordering::Relaxed)
    );
    // Flat after warm-up: per process, the first sample past a third of its life against its
    // last. For the first process's RSS, warm-up also lasts until the duplicate check's query of
    // recent jobs covers a full window (its 300 s overlap plus its 30 s period:
    // src/service/submit/idempotency/mod.rs): until then each query reads more jobs than the last (in
    // pages of ~1000, but the allocator keeps its high-water mark), so the process that began on
    // an empty cluster climbs to the level the others start at. Its figures are printed, not
    // judged, when it ends before that.
    const WINDOW_FULL: Duration = Duration::from_secs(330);
    let mut grew = Vec::new();
    for seg in 0..segment {
        let s: Vec<_> = samples.iter().filter(|(g, _, _)| *g == seg).collect();
        if s.len() < 4 {
            continue;
        }
        let (first, last) = (s[s.len() / 3].2, s[s.len() - 1].2);
        // The others began with the window full (their first query read it, in pages).
        let rss_from = if seg == 0 {
            s.iter()
                .skip(s.len() / 3)
                .find(|(_, at, _)| *at >= WINDOW_FULL)
                .filter(|(_, at, _)| *at < s[s.len() - 1].1)
                .map(|(_, _, x)| x.rss_mib)
        } else {
            Some(first.rss_mib)
        };
        eprintln!(
            "process {seg}: after warm-up rss {:.1} -> {:.1} MiB, fds {} -> {}, tracked {} -> \
             {}, transfers {} -> {}, executions {} -> {}, indexed jobs {} -> {}",
            first.rss_mib,
            last.rss_mib,
            first.fds,
            last.fds,
            first.tracked,
            last.tracked,
            first.transfers,
            last.transfers,
            first.executions,
            last.executions,
            first.indexed,
            last.indexed
        );
        match rss_from {
            Some(from) if last.rss_mib > from * (1.0 + tolerance) => {
                grew.push(format!(
                    "process {seg}: RSS {from:.1} -> {:.1} MiB",
                    last.rss_mib
                ));
            }
            Some(_) => {}
            None => eprintln!(
                "process {seg}: RSS not judged: it ended before the duplicate check's window of \
                 recent jobs was full ({}s of traffic)",
                WINDOW_FULL.as_secs()
            ),
        }
        for (what, a, b) in [
            ("fds", first.fds as u64, last.fds as u64),
            ("tracked", first.tracked, last.tracked),
            ("transfers", first.transfers, last.transfers),
        ] {
            if b > 2 * a.max(16) {
                grew.push(format!("process {seg}: {what} {a} -> {b}"));
            }
        }
    }
    mock.stop().await;
    assert_eq!(failed.load(Ordering::Relaxed), 0, "tasks not SUCCEEDED");
    assert!(grew.is_empty(), "not flat after warm-up: {grew:#?}");
}
