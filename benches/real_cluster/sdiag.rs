//! The `sdiag` section of benches/real_cluster.rs: slurmctld's RPCs, by message type and user,
//! for 200 short tasks created and polled to SUCCEEDED through the connector, per poll tick and
//! against an idle window of the same length.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use slurm_connector::proto::core::task_execution::Phase;

use crate::common::get_req;
use crate::support::*;

/// Tasks unless `SDIAG_TASKS` says otherwise (`SDIAG_TASKS=1`: a lone task's whole life).
const SHORT_TASKS: u32 = 200;

pub async fn sdiag() {
    let tasks: u32 = std::env::var("SDIAG_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SHORT_TASKS);
    println!("== sdiag (real slurmctld): {tasks} short tasks through the connector");
    let busy = cluster_exec(&["squeue", "-h", "-o", "%i %u %T"]);
    println!(
        "jobs on the cluster before: {} {}",
        busy.lines().count(),
        busy.lines().take(5).collect::<Vec<_>>().join("; ")
    );
    // Background: the same RPC counters over an idle window.
    cluster_exec(&["sdiag", "--reset"]);
    let idle = Duration::from_secs(20);
    tokio::time::sleep(idle).await;
    let (bg_type, bg_user) = sdiag_counts();
    println!("idle {idle:?}: by type {bg_type:?}; by user {bg_user:?}");

    RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let conn = start().await;
    let poll = conn.deployment.poll_interval;
    let mut c = grpc(conn.addr).await;
    cluster_exec(&["sdiag", "--reset"]);
    let m0 = metrics(conn.metrics);
    let t0 = Instant::now();
    let mut metas = Vec::new();
    for i in 0..tasks {
        metas.push(
            c.create_task(request("#!/bin/bash\ntrue\n", 50_000 + i))
                .await
                .expect("CreateTask")
                .into_inner()
                .resource_meta,
        );
    }
    let created = t0.elapsed();
    // A backend polls each task; here every task every 2 s until all are terminal.
    let mut phases: BTreeMap<usize, Phase> = BTreeMap::new();
    loop {
        for (i, m) in metas.iter().enumerate() {
            if phases
                .get(&i)
                .is_some_and(|p| *p == Phase::Succeeded || *p == Phase::Failed)
            {
                continue;
            }
            let r = c
                .get_task(get_req(m))
                .await
                .expect("GetTask")
                .into_inner()
                .resource
                .unwrap();
            phases.insert(i, Phase::of(r.phase));
        }
        let done = phases
            .values()
            .filter(|p| matches!(p, Phase::Succeeded | Phase::Failed))
            .count();
        if done == metas.len() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "only {done} done after 15 min"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let took = t0.elapsed();
    let (by_type, by_user) = sdiag_counts();
    let m1 = metrics(conn.metrics);
    let delta =
        |name: &str, having: &[&str]| metric_sum(&m1, name, having) - metric_sum(&m0, name, having);
    let ticks = delta("slurm_connector_poll_tick_seconds_count", &[]);
    let ops = requests_by_operation(&m0, &m1);
    let succeeded = phases.values().filter(|p| **p == Phase::Succeeded).count();
    println!(
        "{tasks} tasks created in {:.1}s, all terminal after {:.1}s ({succeeded} SUCCEEDED); \
         poll interval {poll:?}, {ticks} poll ticks; connector's slurmrestd requests by operation: {ops:?}",
        created.as_secs_f64(),
        took.as_secs_f64()
    );
    println!("slurmctld RPCs by user over the run: {by_user:?}");
    println!("type\tcount\tper tick\tper task\tidle-window rate x run length");
    for (t, n) in &by_type {
        let bg =
            bg_type.get(t).copied().unwrap_or(0) as f64 * took.as_secs_f64() / idle.as_secs_f64();
        println!(
            "{t}\t{n}\t{:.2}\t{:.2}\t{bg:.1}",
            *n as f64 / ticks.max(1.0),
            *n as f64 / f64::from(tasks)
        );
    }
    let user: u64 = by_user.get("flyte").copied().unwrap_or(0);
    println!(
        "slurmctld RPCs of the job user: {user} ({:.2} per task, CreateTask to terminal GetTask)",
        user as f64 / f64::from(tasks)
    );
    conn.stop.send(()).ok();
    conn.task.await.unwrap();
}
