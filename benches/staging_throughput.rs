//! Transfers (issue 9): staging throughput relative to `cp` of the same file, and the peak RSS
//! of moving it. A `harness = false` bench: one real file, copied in turn by `cp`, by the
//! connector's output staging (local backend → `file://` store: a kernel copy, as `cp`), and by
//! the streamed multipart upload every remote store (S3, GCS, Azure) takes, here into the same
//! `file://` store; medians of `ROUNDS`. Peak RSS is the streamed path's (the kernel copy holds
//! no data in the process).
//!
//! `cargo bench --bench staging_throughput` (`STAGING_BENCH_BYTES` sets the size, default 2 GiB: the
//! issue's figure; the source, `cp`'s copy and staging's copy need 6 GiB of disk).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use slurm_connector::staging::objstore;
use slurm_connector::staging::outputs::{self, output_uri};
use slurm_connector::staging::transfer::TransferCtl;
use slurm_connector::staging::{
    Ceiling, DeclaredOutput, LocalStaging, OutputKind, Roots, TransferOutcome, UploadMode,
};

const ROUNDS: usize = 5;
const PREFIX: &str = "/cluster/shared";

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Untimed `sync` before each copy: with GiBs in flight, a copy must not pay the writeback of
/// the data the previous one (or the source's creation) left dirty in the page cache.
fn flush_dirty_pages() {
    let st = std::process::Command::new("sync").status().expect("sync");
    assert!(st.success(), "sync failed");
}

/// A real (not sparse) file: reading a sparse one costs nothing and would flatter both sides.
fn write_source(path: &Path, size: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("source file"));
    let mut block = vec![0u8; 1 << 20];
    let mut written = 0u64;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while written < size {
        for b in block.iter_mut().step_by(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let n = (size - written).min(block.len() as u64) as usize;
        f.write_all(&block[..n]).expect("write source");
        written += n as u64;
    }
    f.flush().expect("flush source");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let size: u64 = std::env::var("STAGING_BENCH_BYTES")
        .ok()
        .map(|v| v.parse().expect("STAGING_BENCH_BYTES is a byte count"))
        .unwrap_or(2 << 30);
    let dir: PathBuf = std::env::temp_dir().join(format!("bench-staging-{}", std::process::id()));
    let shared = dir.join("shared");
    let store = dir.join("store");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&store).unwrap();
    let src = shared.join("big.bin");
    write_source(&src, size);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let roots = Roots::parse(&format!("{PREFIX}={}", shared.display())).expect("roots");
    let staging: Arc<dyn slurm_connector::staging::Staging> = Arc::new(LocalStaging::new(roots));
    let hwm_before = status_kib("VmHWM:");

    // Warm the page cache once so the first round is not the only one reading from disk.
    // Streamed, so it does not count in the peak RSS.
    let mut f = std::fs::File::open(&src).expect("open source");
    std::io::copy(&mut f, &mut std::io::sink()).expect("read source");
    let (mut cp_s, mut ours_s, mut streamed_s) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let dest = store.join(format!("cp-{round}.bin"));
        flush_dirty_pages();
        let t = Instant::now();
        let st = std::process::Command::new("cp")
            .arg(&src)
            .arg(&dest)
            .status()
            .expect("cp");
        assert!(st.success(), "cp failed");
        // Both sides end with the data handed to the kernel, not necessarily on disk.
        cp_s.push(t.elapsed().as_secs_f64());
        std::fs::remove_file(&dest).unwrap();

        let uri = output_uri(
            &format!("file://{}", store.display()),
            &format!("ours-{round}.bin"),
        );
        flush_dirty_pages();
        let t = Instant::now();
        let staging = staging.clone();
        // Transfer::spawn needs a runtime: start and wait inside it.
        let outcome = rt.block_on(async move {
            outputs::start(
                staging,
                format!("{round}"),
                vec![DeclaredOutput {
                    name: "big".into(),
                    kind: OutputKind::File,
                    upload: UploadMode::Connector,
                    written_to: format!("{PREFIX}/big.bin"),
                    uri,
                }],
                Ok(Ceiling::Unlimited),
            )
            .wait()
            .await
        });
        ours_s.push(t.elapsed().as_secs_f64());
        assert!(
            matches!(outcome, TransferOutcome::Succeeded(_)),
            "{outcome:?}"
        );
        let dest = store.join(format!("ours-{round}.bin"));
        assert_eq!(std::fs::metadata(&dest).unwrap().len(), size);
        std::fs::remove_file(&dest).unwrap();

        // The streamed path: what an s3:// / gs:// / abfs:// destination gets.
        let uri = output_uri(
            &format!("file://{}", store.display()),
            &format!("streamed-{round}.bin"),
        );
        flush_dirty_pages();
        let t = Instant::now();
        let src_path = src.clone();
        let sent = rt.block_on(async move {
            let mut dest = objstore::open(&uri).expect("destination");
            dest.local_path = None;
            let file = tokio::fs::File::open(&src_path).await.expect("open source");
            let (ctl, _cancel) = TransferCtl::new();
            objstore::upload_reader(file, size, &dest, &ctl)
                .await
                .expect("streamed upload")
        });
        streamed_s.push(t.elapsed().as_secs_f64());
        assert_eq!(sent, size);
        let dest = store.join(format!("streamed-{round}.bin"));
        assert_eq!(std::fs::metadata(&dest).unwrap().len(), size);
        std::fs::remove_file(&dest).unwrap();
    }
    let hwm = status_kib("VmHWM:");
    let (c, o, st) = (
        median(&mut cp_s),
        median(&mut ours_s),
        median(&mut streamed_s),
    );
    let mib = size as f64 / (1 << 20) as f64;
    println!("== staging: {mib:.0} MiB file, local backend → file:// store, {ROUNDS} rounds");
    println!(
        "cp: median {c:.3} s ({:.0} MiB/s); runs {cp_s:.3?}",
        mib / c
    );
    println!(
        "staging (file://, kernel copy): median {o:.3} s ({:.0} MiB/s); runs {ours_s:.3?}",
        mib / o
    );
    println!(
        "streamed multipart (remote stores' path): median {st:.3} s ({:.0} MiB/s); runs {streamed_s:.3?}",
        mib / st
    );
    println!("throughput ratio staging/cp: {:.3}", c / o);
    println!("throughput ratio streamed/cp: {:.3}", c / st);
    println!(
        "peak RSS (VmHWM): {:.1} MiB (before any transfer {:.1} MiB)",
        hwm as f64 / 1024.0,
        hwm_before as f64 / 1024.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}
