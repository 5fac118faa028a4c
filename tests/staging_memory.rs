//! Memory bound: moving a 1 GiB output keeps this process's peak RSS (VmHWM) small, whatever
//! the size — parts are streamed, never the whole file. Prints the numbers; asserts a bound.
//! Both paths: the staging backends into a `file://` store (a kernel copy), and the streamed
//! multipart upload that remote stores (S3, GCS, Azure) get, forced here into the same store.
//! `STAGING_MEMORY_BYTES` overrides the size (default 1 GiB).

mod common;
use common::staging as support;

use slurm_connector::staging::objstore;
use slurm_connector::staging::outputs::{self, output_uri};
use slurm_connector::staging::transfer::TransferCtl;
use slurm_connector::staging::{Ceiling, DeclaredOutput, OutputKind, TransferOutcome, UploadMode};
use support::{Fixture, peak_rss_kib};

/// Against reading the file whole (1 GiB). Measured 2026-12-04: 109-110 MiB peak after the
/// kernel copy of either backend (11 MiB before any transfer), 127-128 MiB after the streamed
/// path, idle machine or loaded; the old bound of 128 MiB failed CI at 128.05. Most of the
/// ~100 MiB appears with the first kernel copy and is not the ~24 MiB of parts in flight: not
/// yet understood (allocator arenas of the blocking pool's threads are a suspect;
/// MALLOC_ARENA_MAX=2 did not change it).
const PEAK_RSS_BOUND_MIB: u64 = 160;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_large_output_keeps_memory_bounded() {
    let size: u64 = std::env::var("STAGING_MEMORY_BYTES")
        .ok()
        .map(|v| v.parse().expect("STAGING_MEMORY_BYTES is a byte count"))
        .unwrap_or(1 << 30);
    let fx = Fixture::new("memory");
    // Sparse source: reading it costs no disk; the destination is really written.
    let src = fx.local("/cluster/shared/big.bin");
    std::fs::File::create(&src).unwrap().set_len(size).unwrap();
    let before = peak_rss_kib();
    for (name, s) in fx.backends().await {
        let uri = output_uri(&fx.store_uri(name), "big.bin");
        let started = std::time::Instant::now();
        let t = outputs::start(
            s,
            "1".into(),
            vec![DeclaredOutput {
                name: "big".into(),
                kind: OutputKind::File,
                upload: UploadMode::Connector,
                written_to: "/cluster/shared/big.bin".into(),
                uri,
            }],
            Ok(Ceiling::Unlimited),
        );
        let outcome = t.wait().await;
        assert!(
            matches!(outcome, TransferOutcome::Succeeded(_)),
            "{name}: {outcome:?}"
        );
        let dest = fx.store_path(&format!("{name}/big.bin"));
        assert_eq!(std::fs::metadata(&dest).unwrap().len(), size, "{name}");
        std::fs::remove_file(&dest).unwrap();
        let peak = peak_rss_kib();
        println!(
            "staging_memory: {name}: moved {size} bytes to file:// in {:.1?}; peak RSS (VmHWM) {} KiB ({} MiB; {} MiB before any transfer)",
            started.elapsed(),
            peak,
            peak / 1024,
            before / 1024
        );
        assert!(
            peak < PEAK_RSS_BOUND_MIB * 1024,
            "{name}: peak RSS {peak} KiB is above {PEAK_RSS_BOUND_MIB} MiB"
        );
    }

    let mut dest = objstore::open(&output_uri(&fx.store_uri("streamed"), "big.bin")).unwrap();
    dest.local_path = None;
    let (ctl, _cancel) = TransferCtl::new();
    let file = tokio::fs::File::open(&src).await.unwrap();
    let sent = objstore::upload_reader(file, size, &dest, &ctl)
        .await
        .unwrap();
    assert_eq!(sent, size);
    let peak = peak_rss_kib();
    println!(
        "staging_memory: streamed multipart: moved {size} bytes; peak RSS (VmHWM) {} MiB",
        peak / 1024
    );
    assert!(
        peak < PEAK_RSS_BOUND_MIB * 1024,
        "streamed: peak RSS {peak} KiB is above {PEAK_RSS_BOUND_MIB} MiB"
    );
}
