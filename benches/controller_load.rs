//! Load driver for issue 9's connector figures (a `harness = false` bench: criterion's
//! statistics fit micro-benchmarks, not "requests per tick against a live mock").
//!
//! `cargo bench --bench controller_load -- SECTION...` with sections:
//! - `load`: slurmrestd requests per poll tick with 10, 100, 1k, 10k tracked jobs (mock counters).
//! - `gettask`: GetTask p50/p99 with 10k tracked jobs and 100 concurrent pollers, through gRPC
//!   (`serve_with`) and straight at the service layer (`Connector::get`).
//! - `create`: CreateTask wall time ÷ a raw slurmrestd submit of the same rendered body.
//! - `memory`: bytes per tracked job and RSS at 100k tracked jobs (run it alone: RSS is per process).
//! - `arrays`: requests per tick and tick time for job arrays (1×10 … 100×100 elements, held).
//!
//! No section: `load gettask create`. Jobs are submitted held (`hold: true`) so they stay PENDING
//! and the mock spawns nothing: the figures are the connector's, not the batch scripts'.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::mock::Mock;
use common::server::Server;
use common::{RequestExt, get_req, mock_request};
use futures::StreamExt;
use mock_slurmrestd::FaultConfig;
use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::service::ClusterRuntime;
use slurm_connector::service::Metrics;
use slurm_connector::service::ResourceMeta;
use slurm_connector::service::{Connector, task_spec};
use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, JobDescription, JobId, Secret};
use slurm_connector::tracker::{SlurmApi, Tracker, TrackerConfig};

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];
const TICKS: usize = 10;

fn main() {
    let mut sections: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if sections.is_empty() {
        sections = ["load", "gettask", "create"].map(String::from).to_vec();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for s in &sections {
        match s.as_str() {
            "memory" => rt.block_on(memory::run()),
            "load" | "gettask" | "create" | "arrays" => rt.block_on(with_mock(s)),
            other => {
                eprintln!("unknown section `{other}`; use load, gettask, create, arrays or memory");
                std::process::exit(2);
            }
        }
    }
}

struct Env {
    mock: Mock,
    client: Client,
}

async fn env() -> Env {
    let mock = Mock::start(
        "bench-load",
        Duration::from_secs(3600),
        FaultConfig::default(),
    )
    .await;
    let cc = ClientConfig::new(
        "mock",
        url::Url::parse(&mock.handle.url()).unwrap(),
        Auth::Static {
            token: Secret::new(mock.token()),
        },
    );
    Env {
        client: Client::new(cc).expect("client"),
        mock,
    }
}

async fn with_mock(section: &str) {
    let e = env().await;
    match section {
        "load" => load(&e).await,
        "gettask" => gettask(&e).await,
        "create" => create(&e).await,
        "arrays" => arrays(&e).await,
        _ => unreachable!(),
    }
    e.mock.stop().await;
}

fn held_job(i: usize, jobs: &Path) -> JobDescription {
    JobDescription {
        name: format!("bench-{i}"),
        script: "#!/bin/bash\nsleep 3600\n".into(),
        current_working_directory: jobs.display().to_string(),
        environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
        hold: Some(true),
        ..JobDescription::default()
    }
}

/// Submits held jobs `from..to`, 32 in flight.
async fn submit_held(e: &Env, from: usize, to: usize) -> Vec<JobId> {
    futures::stream::iter(from..to)
        .map(|i| {
            let c = e.client.clone();
            let d = held_job(i, &e.mock.jobs());
            async move { c.submit(&d).await.expect("submit") }
        })
        .buffer_unordered(32)
        .collect()
        .await
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Job arrays: one tracker over the real client, tracking `count` held arrays of `size`
/// elements each (every element listed in the one `jobs/state` answer of its array's id).
async fn arrays(e: &Env) {
    println!("== arrays: slurmrestd requests per poll tick (mock counters, {TICKS} ticks each)");
    println!("arrays\telements each\telements\trequests/tick\tjobs_state/tick\tmedian tick ms");
    let mut next = 0;
    for (count, size) in [(1, 10), (10, 100), (10, 1_000), (100, 100)] {
        let indices: Vec<u32> = (0..size).collect();
        let mut ids = Vec::new();
        for _ in 0..count {
            let mut d = held_job(next, &e.mock.jobs());
            next += 1;
            d.array = Some(format!("0-{}", size - 1));
            ids.push(e.client.submit(&d).await.expect("submit"));
        }
        let tracker = Tracker::new(
            "mock",
            Arc::new(e.client.clone()) as Arc<dyn SlurmApi>,
            TrackerConfig::default(),
        );
        for id in &ids {
            tracker.track_array(*id, &indices, None);
        }
        tracker.tick().await;
        let s = tracker.status(ids[0]).await;
        assert_eq!(s.elements.len(), size as usize, "every element seen");
        e.mock.handle.reset_stats();
        let mut took = Vec::new();
        for _ in 0..TICKS {
            let t = Instant::now();
            tracker.tick().await;
            took.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let st = e.mock.handle.stats();
        let per = |x: u64| x as f64 / TICKS as f64;
        let state = st.count("jobs_state");
        println!(
            "{count}\t{size}\t{}\t{:.2}\t{:.2}\t{:.2}",
            count * size as usize,
            per(st.total()),
            per(state),
            median(&mut took)
        );
        assert_eq!(st.total(), state, "only jobs/state is polled: {st:?}");
        for id in ids {
            e.client.cancel(id, None).await.expect("cancel");
        }
    }
}

/// Requests per tick: one tracker over the real client, fed 10 … 10k jobs.
async fn load(e: &Env) {
    println!("== load: slurmrestd requests per poll tick (mock counters, {TICKS} ticks each)");
    println!("tracked\trequests/tick\tjobs_state/tick\tother/tick\tmedian tick ms");
    let mut ids = Vec::new();
    for n in SIZES {
        let t = Instant::now();
        ids.extend(submit_held(e, ids.len(), n).await);
        eprintln!("submitted {n} held jobs in {:?}", t.elapsed());
        let tracker = Tracker::new(
            "mock",
            Arc::new(e.client.clone()) as Arc<dyn SlurmApi>,
            TrackerConfig::default(),
        );
        for id in &ids {
            tracker.track(*id);
        }
        tracker.tick().await; // the first answer for every job
        e.mock.handle.reset_stats();
        let mut took = Vec::new();
        for _ in 0..TICKS {
            let t = Instant::now();
            tracker.tick().await;
            took.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let s = e.mock.handle.stats();
        let per = |x: u64| x as f64 / TICKS as f64;
        let state = s.count("jobs_state");
        println!(
            "{n}\t{:.2}\t{:.2}\t{:.2}\t{:.2}",
            per(s.total()),
            per(state),
            per(s.total() - state),
            median(&mut took)
        );
        assert_eq!(
            s.total(),
            state,
            "only jobs/state is polled for held jobs: {s:?}"
        );
    }
}

fn deployment(e: &Env, poll: Duration) -> DeploymentConfig {
    let mut c = e.mock.cluster(e.mock.static_auth(), None);
    c.ssh_hosts = vec!["login1".into()];
    common::mock::deployment(c, poll)
}

fn meta_for(id: JobId, e: &Env) -> Vec<u8> {
    let dir = e.mock.jobs().display().to_string();
    ResourceMeta::new(
        "mock",
        id,
        format!("bench-{id}"),
        format!("{dir}/slurm-{id}.out"),
        format!("{dir}/slurm-{id}.err"),
    )
    .encode()
}

const POLLERS: usize = 100;
const GET_WINDOW: Duration = Duration::from_secs(10);

/// Runs `POLLERS` loops calling `call` on spread-out metas for `GET_WINDOW`, each calling every
/// `pause` on a staggered schedule (zero: closed loop, i.e. saturation); sorted latencies.
async fn poll_window<F, Fut>(metas: Arc<Vec<Vec<u8>>>, pause: Duration, call: F) -> Vec<Duration>
where
    F: Fn(Vec<u8>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let until = Instant::now() + GET_WINDOW;
    let mut tasks = Vec::new();
    for p in 0..POLLERS {
        let metas = metas.clone();
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = p * 97;
            // Paced pollers start staggered and keep a fixed schedule, so calls arrive evenly
            // (pollers that all sleep after each call fall into step and arrive in bursts).
            let mut tick = (!pause.is_zero()).then(|| {
                let offset = pause.mul_f64(p as f64 / POLLERS as f64);
                let mut iv = tokio::time::interval_at(tokio::time::Instant::now() + offset, pause);
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                iv
            });
            while Instant::now() < until {
                if let Some(iv) = tick.as_mut() {
                    iv.tick().await;
                }
                i = (i + 7919) % metas.len();
                let t = Instant::now();
                call(metas[i].clone()).await;
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
    all
}

fn report(what: &str, lat: &[Duration]) {
    println!(
        "{what}\tcalls={}\t{:.0}/s\tp50={:?}\tp99={:?}\tmax={:?}",
        lat.len(),
        lat.len() as f64 / GET_WINDOW.as_secs_f64(),
        pct(lat, 0.50),
        pct(lat, 0.99),
        lat.last().unwrap()
    );
}

/// GetTask latency with 10k tracked jobs, 100 concurrent pollers.
async fn gettask(e: &Env) {
    let n = 10_000;
    let t = Instant::now();
    let ids = submit_held(e, 0, n).await;
    eprintln!("submitted {n} held jobs in {:?}", t.elapsed());
    let metas: Arc<Vec<Vec<u8>>> = Arc::new(ids.iter().map(|id| meta_for(*id, e)).collect());
    println!("== gettask: {n} tracked jobs, {POLLERS} concurrent pollers, {GET_WINDOW:?} each");

    // 1. Through gRPC: a tonic client (HTTP/2, one channel) against serve_with.
    let server = Server::start(deployment(e, Duration::from_secs(5))).await;
    let client = server.client().await;
    // Adopt all 10k first (a connector restarted under load does the same), then measure.
    let t = Instant::now();
    futures::stream::iter(metas.iter().cloned())
        .map(|m| {
            let mut c = client.clone();
            async move { c.get_task(get_req(&m)).await.expect("GetTask") }
        })
        .buffer_unordered(POLLERS)
        .collect::<Vec<_>>()
        .await;
    eprintln!("adopted {n} jobs through GetTask in {:?}", t.elapsed());
    // Paced: each poller every 50 ms (2k GetTask/s in all, 10k tasks polled every 5 s), then
    // closed loop (every poller back-to-back: the saturation point, latency = queueing).
    for (what, pause) in [
        ("grpc paced 50ms", Duration::from_millis(50)),
        ("grpc closed-loop", Duration::ZERO),
    ] {
        let client = client.clone();
        let lat = poll_window(metas.clone(), pause, move |m| {
            let mut c = client.clone();
            async move {
                c.get_task(get_req(&m)).await.expect("GetTask never fails");
            }
        })
        .await;
        report(what, &lat);
    }
    server.stop().await;

    // 2. The service layer alone: Connector::get (decode meta, tracker cache, build Resource).
    let d = deployment(e, Duration::from_secs(5));
    let cfg = d.clusters["mock"].clone();
    let rt = Arc::new(
        ClusterRuntime::build(cfg, TrackerConfig::default(), None, None).expect("cluster"),
    );
    for id in &ids {
        rt.tracker.track(*id);
    }
    rt.tracker.tick().await;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let poll = tokio::spawn(rt.tracker.clone().run(async {
        stop_rx.await.ok();
    }));
    let mut clusters = BTreeMap::new();
    clusters.insert("mock".to_string(), rt);
    let conn = Arc::new(Connector::new(d, clusters, Metrics::new()));
    for (what, pause) in [
        ("service paced 50ms", Duration::from_millis(50)),
        ("service closed-loop", Duration::ZERO),
    ] {
        let conn = conn.clone();
        let lat = poll_window(metas.clone(), pause, move |m| {
            let conn = conn.clone();
            async move {
                conn.get(&m).await.expect("get");
            }
        })
        .await;
        report(what, &lat);
    }
    stop_tx.send(()).ok();
    poll.await.unwrap();
}

/// Held (a directive: `sbatch.hold` is no key of the task config), so nothing runs and both
/// sides do the same work.
fn held_fixture(name: &str) -> CreateTaskRequest {
    mock_request(name).script("#!/bin/bash\n#SBATCH --hold\nsleep 3600\n")
}

const CREATES: u32 = 300;

/// CreateTask (gRPC, fresh execution each time) ÷ raw submit of the same rendered body.
async fn create(e: &Env) {
    println!("== create: CreateTask ÷ raw slurmrestd submit, {CREATES} pairs, interleaved");
    let server = Server::start(deployment(e, Duration::from_secs(5))).await;
    let mut c = server.client().await;
    let base = held_fixture("script_no_io.pb");
    let d = deployment(e, Duration::from_secs(5));
    let render_cfg = slurm_connector::service::render_config(&d.clusters["mock"]);
    // The service layer alone (Connector::create: convert, render, key lock, submit, track),
    // to split CreateTask's overhead into gRPC and the connector's own work.
    let rt = Arc::new(
        ClusterRuntime::build(
            d.clusters["mock"].clone(),
            TrackerConfig::default(),
            None,
            None,
        )
        .expect("cluster"),
    );
    let mut clusters = BTreeMap::new();
    clusters.insert("mock".to_string(), rt);
    let conn = Connector::new(d, clusters, Metrics::new());
    // Warm up all paths (the first CreateTask of each indexes the cluster's jobs once).
    c.create_task(base.clone().attempt(100_000)).await.unwrap();
    let request = |r: &CreateTaskRequest| slurm_connector::service::flyte2_request(r).unwrap();
    conn.create_task(request(&base.clone().attempt(100_001)), None)
        .await
        .unwrap();
    e.mock.handle.reset_stats();
    let (mut ours, mut raw, mut svc) = (Vec::new(), Vec::new(), Vec::new());
    // The three series interleaved, so machine load hits them alike.
    for i in 0..CREATES {
        let req = base.clone().attempt(i);
        // The same body CreateTask sends: rendered from the same request.
        let spec = task_spec(&req).expect("spec");
        let rendered = slurm_connector::render::render(&spec, &render_cfg).expect("render");
        let t = Instant::now();
        e.client.submit(&rendered.job).await.expect("raw submit");
        raw.push(t.elapsed().as_secs_f64() * 1e6);
        // Other attempts, so CreateTask submits a fresh job rather than returning the raw one
        // (same fixture, same size of body; only the attempt number in name/comment differs).
        let req = base.clone().attempt(CREATES + i);
        let t = Instant::now();
        c.create_task(req).await.expect("CreateTask");
        ours.push(t.elapsed().as_secs_f64() * 1e6);
        let req = base.clone().attempt(2 * CREATES + i);
        let t = Instant::now();
        conn.create_task(request(&req), None)
            .await
            .expect("Connector::create_task");
        svc.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let s = e.mock.handle.stats();
    let (mo, mr, ms) = (median(&mut ours), median(&mut raw), median(&mut svc));
    println!(
        "CreateTask (gRPC) median {mo:.0} µs, Connector::create_task median {ms:.0} µs, raw submit \
         median {mr:.0} µs; ratios gRPC {:.3}, service {:.3} \
         (submits counted by the mock: {}, other requests: {})",
        mo / mr,
        ms / mr,
        s.count("submit"),
        s.total() - s.count("submit")
    );
    server.stop().await;
}

mod memory {
    //! Bytes per tracked job: VmRSS of this process before and after tracking 100k jobs.
    use std::collections::HashMap;
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use slurm_connector::slurmrestd::{ClientError, JobId, JobInfo, JobState};
    use slurm_connector::tracker::{SlurmApi, Tracker, TrackerConfig};

    /// Answers RUNNING for every id, without a network: only the tracker's memory is measured.
    struct AllRunning;

    impl SlurmApi for AllRunning {
        fn states<'a>(
            &'a self,
            ids: &'a [JobId],
        ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>> {
            Box::pin(async move {
                Ok(ids
                    .iter()
                    .map(|id| (*id, JobState::from_strings(["RUNNING"])))
                    .collect())
            })
        }
        fn job(&self, _: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>> {
            Box::pin(async { Ok(None) })
        }
        fn accounting_jobs<'a>(
            &'a self,
            _: &'a [JobId],
        ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>> {
            Box::pin(async { Ok(HashMap::new()) })
        }
    }

    fn status_kib(field: &str) -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    pub async fn run() {
        const N: u32 = 100_000;
        println!("== memory: {N} tracked jobs (tracker over an in-memory API)");
        let (rss0, hwm0) = (status_kib("VmRSS:"), status_kib("VmHWM:"));
        let tracker = Tracker::new("mem", Arc::new(AllRunning), TrackerConfig::default());
        for i in 0..N {
            tracker.track(JobId(1_000_000 + i));
        }
        let rss_tracked = status_kib("VmRSS:");
        // A tick gives every job a state (the steady state of a busy cluster).
        tracker.tick().await;
        for i in (0..N).step_by(997) {
            std::hint::black_box(tracker.cached(JobId(1_000_000 + i)));
        }
        let (rss1, hwm1) = (status_kib("VmRSS:"), status_kib("VmHWM:"));
        println!(
            "VmRSS before {rss0} KiB, after track {rss_tracked} KiB, after tick {rss1} KiB; \
             VmHWM before {hwm0} KiB, after {hwm1} KiB"
        );
        println!(
            "bytes per tracked job (RSS delta after tick / N): {:.0}; (after track only): {:.0}",
            (rss1.saturating_sub(rss0) * 1024) as f64 / f64::from(N),
            (rss_tracked.saturating_sub(rss0) * 1024) as f64 / f64::from(N)
        );
        println!(
            "process RSS at {N} tracked jobs: {:.1} MiB (peak {:.1} MiB)",
            rss1 as f64 / 1024.0,
            hwm1 as f64 / 1024.0
        );
        assert_eq!(tracker.len(), N as usize);
    }
}
