//! The real tier for what a task used: a job that burns CPU and holds memory, then
//! `Client::usage` on the real Slurm (`deploy/dev-cluster`, which gathers per-task usage with
//! `jobacct_gather/linux`) reports its CPU time and peak RSS from slurmdbd (GetTaskMetrics'
//! source); and the same task through the connector's gRPC service carries them in its
//! terminal answer (`custom_info.accounting`, the message), equal to sacct's.
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

#[path = "real_slurm/connector.rs"]
mod connector;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_task_carries_its_accounting_equal_to_sacct() {
    let Some(c) = cluster() else { return };
    let server = common::server::Server::start(connector::deployment(&c, 3)).await;
    let mut g = server.client().await;
    let req = connector::request(
        "accounting",
        "#!/bin/bash\nend=$((SECONDS + 3)); while (( SECONDS < end )); do :; done\n\
         x=$(head -c 100M /dev/zero | tr '\\0' a)\nsleep 2\necho ${#x}\n",
    );
    let meta = g.create_task(req).await.unwrap().into_inner().resource_meta;
    let r = connector::poll_until(&mut g, &meta, 120, connector::terminal, |_| {}).await;
    assert_eq!(
        r.phase,
        slurm_connector::proto::core::task_execution::Phase::Succeeded as i32,
        "{}",
        r.message
    );
    let info = slurm_connector::proto::struct_to_json(r.custom_info.as_ref().unwrap());
    let a = &info["accounting"];
    eprintln!("accounting: {a}\nmessage: {}", r.message);
    assert!(r.message.contains("Slurm accounting: "), "{}", r.message);
    let job = info["job_id"].as_f64().unwrap() as u32;
    let out = c
        .dev_cluster(&[
            "exec",
            "sacct",
            "-j",
            &job.to_string(),
            "-X",
            "-n",
            "-P",
            "-o",
            "ElapsedRaw,CPUTimeRAW,AllocCPUS",
        ])
        .await;
    let f: Vec<f64> = out
        .lines()
        .next()
        .unwrap_or_else(|| panic!("sacct has no job {job}"))
        .split('|')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(a["elapsed_seconds"].as_f64(), Some(f[0]), "ElapsedRaw: {a}");
    assert_eq!(
        a["cpu_seconds_allocated"].as_f64(),
        Some(f[1]),
        "CPUTimeRAW: {a}"
    );
    assert_eq!(a["cpus"].as_f64(), Some(f[2]), "AllocCPUS: {a}");
    let used = a["cpu_seconds_used"].as_f64().expect("cpu_seconds_used");
    assert!(used >= 1.5, "a 3 s busy loop used {used} s: {a}");
    let eff = a["cpu_efficiency"].as_f64().expect("cpu_efficiency");
    assert!(eff > 0.0 && eff <= 1.0, "{eff}");
    let rss = a["max_rss_bytes"].as_f64().expect("max_rss_bytes");
    assert!(
        rss >= f64::from(100u32 << 20),
        "peak RSS {rss} for a 100 MiB buffer"
    );
    assert!(a["nodes"].as_f64() == Some(1.0) && a["node_hours"].as_f64().unwrap() > 0.0);
    server.stop().await;
}
