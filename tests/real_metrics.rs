//! The real tier for GetTaskMetrics' source: a job that burns CPU and holds memory, then
//! `Client::usage` on the real Slurm (`deploy/dev-cluster`, which gathers per-task usage with
//! `jobacct_gather/linux`) reports its CPU time and peak RSS from slurmdbd.
//!
//! Skips (with the reason on stderr) unless the dev cluster's environment is present; see
//! tests/real_slurm.rs.

use std::time::{Duration, Instant};

use slurm_connector::slurmrestd::BaseState;

mod common;

#[path = "real_slurm/support.rs"]
#[allow(dead_code)] // shared with tests/real_slurm.rs, which uses all of it
mod support;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reports_cpu_time_and_peak_rss_of_a_finished_job() {
    let Some(c) = cluster() else { return };
    let client = c.user_client();
    // 3 s of busy loop, then a 150 MiB shell string held for 3 s: the cluster samples usage every
    // second (deploy/dev-cluster's JobAcctGatherFrequency), so the peak is seen.
    let job = c.job(
        "usage",
        "#!/bin/bash\nend=$((SECONDS + 3)); while (( SECONDS < end )); do :; done\n\
         x=$(head -c 150M /dev/zero | tr '\\0' a)\nsleep 3\necho ${#x}\n",
    );
    let id = submit(&client, &job).await;
    wait_base(&client, id, BaseState::Completed).await;

    // slurmdbd's record trails the controller by a moment; the step's usage comes with it.
    let started = Instant::now();
    let usage = loop {
        let u = client.usage(id).await.expect("usage");
        if let Some(u) = u.filter(|u| u.source == "slurmdbd" && u.max_rss_bytes.is_some()) {
            break u;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "slurmdbd has no usage for job {id} after 60 s (is JobAcctGatherType set?)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let cpu = usage.cpu_total_secs.expect("cpu time");
    assert!(cpu >= 1.5, "cpu {cpu} s for a 3 s busy loop: {usage:?}");
    let rss = usage.max_rss_bytes.unwrap();
    assert!(
        rss >= 150 << 20,
        "peak RSS {rss} B for a 200 MiB buffer: {usage:?}"
    );
    assert!(usage.elapsed_secs.unwrap_or(0) >= 3, "{usage:?}");
    assert!(
        usage
            .allocated
            .iter()
            .any(|t| t.kind == "cpu" && t.count >= 1)
    );
}
