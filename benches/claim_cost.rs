//! What the claim (`service::claim`) adds to a CreateTask: the latency of its store requests and
//! how many it makes, per task, on a local filesystem and on S3 (moto). Slurm is a no-op here
//! (ids handed out at once), so the figures are the claim's alone. Sequential tasks, each a fresh
//! execution; then each again (a retried CreateTask answered from its claim); then the same
//! executions as batches of 100 (one array, an element per claim).
//!
//! `cargo bench --bench claim_cost` (S3 when `moto_server` is on PATH: `pip install
//! 'moto[server]'`; `CLAIM_BENCH_TASKS` sets how many tasks, default 200).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use object_store::ObjectStore;
use slurm_connector::service::claim::{self, ClaimStore, Holder, JobRef, Outcome, Slurm};
use slurm_connector::staging::objstore;

#[path = "../tests/common/hooked.rs"]
mod hooked;
use hooked::{Hook, Hooked, Op};

/// A cluster that answers at once: the claim's cost alone.
struct Instant0(AtomicU32);

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl Slurm for Instant0 {
    type Job = ();
    type Error = Never;

    async fn submit_held(&self, _: &(), _: &str, _: Option<&[u32]>) -> Result<u32, Never> {
        Ok(self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
    async fn held(&self, _: &str) -> Result<Vec<JobRef>, Never> {
        Ok(Vec::new())
    }
    async fn awaits_release(&self, _: JobRef, _: Option<&str>) -> Result<bool, Never> {
        Ok(false)
    }
    async fn release(&self, _: JobRef) -> Result<(), Never> {
        Ok(())
    }
    async fn cancel(&self, _: JobRef) -> Result<(), Never> {
        Ok(())
    }
}

/// Counts the requests a store is asked: puts, gets and listings.
#[derive(Debug, Default)]
struct Counts {
    puts: AtomicUsize,
    gets: AtomicUsize,
    lists: AtomicUsize,
}

impl Hook for Arc<Counts> {
    fn before(&self, op: Op) -> object_store::Result<()> {
        match op {
            Op::Put => &self.puts,
            Op::Get => &self.gets,
            Op::List => &self.lists,
            Op::Other => return Ok(()),
        }
        .fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Counts {
    fn take(&self) -> [usize; 3] {
        [
            self.puts.swap(0, Ordering::SeqCst),
            self.gets.swap(0, Ordering::SeqCst),
            self.lists.swap(0, Ordering::SeqCst),
        ]
    }
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// The tasks' claims under `prefix`, through one counting store.
fn claims_under(prefix: &str, run: &str, n: usize) -> (Arc<Counts>, Vec<ClaimStore>) {
    let dest = objstore::open(prefix).expect("open the store");
    let counting = Arc::new(Counts::default());
    let store: Arc<dyn ObjectStore> = Arc::new(Hooked {
        inner: dest.store,
        hook: counting.clone(),
    });
    let claims = (0..n)
        .map(|i| {
            let dir = dest
                .path
                .clone()
                .join(format!("{run}-{i}"))
                .join(claim::CLAIM_DIR);
            ClaimStore::new(store.clone(), dir, format!("{prefix}/{run}-{i}"))
        })
        .collect();
    (counting, claims)
}

fn per_task(counts: [usize; 3], n: usize) -> String {
    let [p, g, l] = counts.map(|c| c as f64 / n as f64);
    format!(
        "{:.1} requests (put {p:.1}, get {g:.1}, list {l:.1})",
        p + g + l
    )
}

async fn measure(backend: &str, prefix: &str, n: usize) {
    let slurm = Instant0(AtomicU32::new(0));
    let me = Holder {
        name: "bench-0".into(),
        lease: Duration::from_secs(60),
    };
    let (counting, claims) = claims_under(prefix, "single", n);
    for (what, want_fresh) in [("fresh CreateTask", true), ("retried CreateTask", false)] {
        let mut took = Vec::with_capacity(n);
        for (i, c) in claims.iter().enumerate() {
            let t = Instant::now();
            let got = claim::create(c, &slurm, &me, &(), &format!("fc-{i}"))
                .await
                .expect("create");
            took.push(t.elapsed());
            assert_eq!(matches!(got, Outcome::Submitted(_)), want_fresh, "{got:?}");
        }
        println!(
            "{backend:<6} {what:<20} p50 {:>7.2?}  p95 {:>7.2?}  {}",
            percentile(&mut took, 0.5),
            percentile(&mut took, 0.95),
            per_task(counting.take(), n)
        );
    }
    let (counting, claims) = claims_under(prefix, "batch", n);
    let t = Instant::now();
    for (b, chunk) in claims.chunks(100).enumerate() {
        for o in claim::create_batch(chunk, &slurm, &me, &(), &format!("fb-{b}")).await {
            assert!(matches!(o, Ok(Outcome::Submitted(_))), "{o:?}");
        }
    }
    println!(
        "{backend:<6} {:<20} {:>7.2?} a member  {}",
        "batches of 100",
        t.elapsed() / n as u32,
        per_task(counting.take(), n)
    );
}

fn main() {
    let n: usize = std::env::var("CLAIM_BENCH_TASKS")
        .ok()
        .map(|v| v.parse().expect("CLAIM_BENCH_TASKS is a count"))
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("bench-claim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    rt.block_on(measure("local", &format!("file://{}", dir.display()), n));
    std::fs::remove_dir_all(&dir).ok();

    let Some(moto) = which("moto_server") else {
        println!("S3: moto_server is not on PATH (pip install 'moto[server]'): not measured");
        return;
    };
    let port = 45_000 + (std::process::id() % 1000) as u16;
    let mut server = std::process::Command::new(moto)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start moto_server");
    let endpoint = format!("http://127.0.0.1:{port}");
    // SAFETY: set before any thread of this process reads the environment for S3.
    unsafe {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false"),
            ("AWS_ENDPOINT", endpoint.as_str()),
        ] {
            std::env::set_var(k, v);
        }
    }
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let made = reqwest::Client::new()
                .put(format!("{endpoint}/claims"))
                .send()
                .await;
            if made.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            assert!(Instant::now() < deadline, "moto did not come up");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        measure("S3", "s3://claims/runs", n).await;
    });
    let _ = server.kill();
    let _ = server.wait();
}

fn which(exe: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(exe))
        .find(|p| p.is_file())
}
