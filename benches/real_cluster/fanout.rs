//! The `fanout` section of benches/real_cluster.rs: a map task's fan-out as Flyte's backend sends
//! it, and its whole life. `FANOUT_TASKS` CreateTasks (each its own execution; `FANOUT_PACE`
//! paces them as the backend does, else `FANOUT_IN_FLIGHT` at once, 50 by default; 10 s deadline
//! each) of jobs that run `true`, then GetTask of every task every 2 s until all are terminal
//! (`FANOUT_HELD=1`: jobs pending for an hour instead, measured until each has its job). Reports
//! errors, deferred answers, duplicates, slurmctld's RPCs (`sdiag`, by type, and the connector's
//! requests by operation) from the first CreateTask on, the Python SSH plugin's cost for the same
//! GetTasks (3 RPCs each, ../shared/design/python-plugin.md), then raw slurmrestd submits of the
//! same bodies at the same concurrency followed by one listing a poll (sbatch plus one `squeue`
//! a poll; `FANOUT_SKIP_RAW` skips them). `FANOUT_STEADY_S`: the steady state with every task
//! in flight, GetTasks at Flyte's rate; `FANOUT_REPLICAS=2`: two connectors, as two pods. The
//! connector coalesces the tasks into job arrays as `FLYTE_SLURM_COALESCE_WINDOW` says.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;

use slurm_connector::service::{render_config, task_spec};
use slurm_connector::slurmrestd::{Client, JobId};

use crate::common::get_req;
use crate::support::*;

/// CreateTasks (and raw submits) at once unless `FANOUT_IN_FLIGHT` says otherwise.
const DEFAULT_IN_FLIGHT: usize = 50;

/// Execution key → live job ids, from slurmctld's records, for the keys of this run.
async fn jobs_by_key(
    raw: &Client,
    keys: &std::collections::HashSet<String>,
) -> BTreeMap<String, Vec<JobId>> {
    let mut m: BTreeMap<String, Vec<JobId>> = BTreeMap::new();
    for j in raw.jobs().await.expect("jobs") {
        if j.state.base == slurm_connector::slurmrestd::BaseState::Cancelled {
            continue;
        }
        // A coalesced array's pending remainder carries every element's key.
        if let Some(all) = slurm_connector::render::record_keys(&j)
            && j.array.as_ref().is_none_or(|a| a.task_id.is_none())
        {
            for key in all.into_iter().filter(|k| keys.contains(k)) {
                m.entry(key).or_default().push(j.job_id);
            }
            continue;
        }
        let Some(key) =
            slurm_connector::render::key_of_record(&j, j.array.as_ref().and_then(|a| a.task_id))
        else {
            continue;
        };
        if keys.contains(&key) && j.state.base != slurm_connector::slurmrestd::BaseState::Cancelled
        {
            m.entry(key.to_string()).or_default().push(j.job_id);
        }
    }
    m
}

pub async fn fanout() {
    let n: u32 = std::env::var("FANOUT_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let in_flight: usize = std::env::var("FANOUT_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_IN_FLIGHT);
    // `FANOUT_PACE=QPS/BURST` (e.g. `10/100`, Flyte's backend's write limiter): CreateTasks let
    // out by a token bucket, as the backend sends them, instead of a closed loop.
    let pace: Option<(f64, u32)> = std::env::var("FANOUT_PACE").ok().map(|v| {
        let (q, b) = v
            .split_once('/')
            .expect("FANOUT_PACE=QPS/BURST, e.g. 10/100");
        (
            q.parse().expect("FANOUT_PACE's QPS"),
            b.parse().expect("FANOUT_PACE's burst"),
        )
    });
    let deadline = Duration::from_secs(
        std::env::var("FANOUT_DEADLINE_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10),
    );
    let in_flight = if pace.is_some() {
        n as usize
    } else {
        in_flight
    };
    let held = std::env::var_os("FANOUT_HELD").is_some();
    println!(
        "== fanout (real slurmrestd): {n} CreateTasks of {} jobs, {}, {deadline:?} deadline each",
        if held {
            "held (FANOUT_HELD)"
        } else {
            "running"
        },
        match pace {
            Some((q, b)) => format!("paced at {q}/s after a burst of {b} (FANOUT_PACE)"),
            None => format!("{in_flight} in flight"),
        }
    );
    RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let conn = start().await;
    let render_cfg = render_config(&conn.deployment.clusters[&conn.deployment.default_cluster]);
    let c = grpc(conn.addr).await;
    // `FANOUT_REPLICAS=2`: a second connector beside the first (as two pods behind Flyte's
    // round_robin): CreateTasks and GetTasks alternate between them.
    let second = match std::env::var("FANOUT_REPLICAS").as_deref() {
        Ok("2") => Some(start().await),
        Ok("1") | Err(_) => None,
        Ok(other) => panic!("FANOUT_REPLICAS={other}: 1 or 2"),
    };
    let replicas = match &second {
        Some(s) => vec![c.clone(), grpc(s.addr).await],
        None => vec![c.clone()],
    };
    if second.is_some() {
        println!("two connectors (FANOUT_REPLICAS=2), calls alternating");
    }
    let raw = raw_client(&conn.deployment);
    // Pending for an hour (`--begin`), so the shared machine runs nothing; not `--hold`, which
    // a task may set for itself and which is then never coalesced. One absolute time for the
    // whole run: `now+1hour` is rendered as an absolute `begin_time`, which changed every second
    // and with it the array shape, so each second's elements were a batch of their own (a map's
    // elements share their shape).
    let begin = (chrono::Local::now() + chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M:%S");
    let script = if held {
        format!("#!/bin/bash\n#SBATCH --begin={begin}\ntrue\n")
    } else {
        "#!/bin/bash\ntrue\n".to_string()
    };
    let script = script.as_str();
    let coalesce = std::env::var("FLYTE_SLURM_COALESCE_WINDOW").unwrap_or_else(|_| "auto".into());
    println!("coalescing: {coalesce} (FLYTE_SLURM_COALESCE_WINDOW)");
    cluster_exec(&["sdiag", "--reset"]);
    let m0 = metrics(conn.metrics);
    let t0 = Instant::now();
    let start = tokio::time::Instant::now();
    // Each CreateTask's send time (from the start) and how long its answer took.
    let timings = std::sync::Mutex::new(Vec::<(Duration, Duration)>::new());
    let results: Vec<(u32, Result<Vec<u8>, tonic::Status>)> = futures::stream::iter(0..n)
        .map(|i| {
            let mut c = replicas[i as usize % replicas.len()].clone();
            let timings = &timings;
            async move {
                if let Some((qps, burst)) = pace {
                    let after = f64::from(i.saturating_sub(burst)) / qps;
                    tokio::time::sleep_until(start + Duration::from_secs_f64(after)).await;
                }
                let mut r = tonic::Request::new(element(script, i));
                r.set_timeout(deadline);
                let sent = start.elapsed();
                let answer = c.create_task(r).await.map(|r| r.into_inner().resource_meta);
                timings.lock().unwrap().push((sent, start.elapsed() - sent));
                (i, answer)
            }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut timings = timings.into_inner().unwrap();
    timings.sort();
    let mut took: Vec<Duration> = timings.iter().map(|t| t.1).collect();
    took.sort();
    // Sent late (more than 100 ms after its turn): the bench's own bound on calls in flight
    // held it, and the arrivals the connector saw were bunched, not paced.
    let late = match pace {
        Some((qps, burst)) => timings
            .iter()
            .enumerate()
            .filter(|(k, (sent, _))| {
                let due = f64::from((*k as u32).saturating_sub(burst)) / qps;
                sent.as_secs_f64() > due + 0.1
            })
            .count(),
        None => 0,
    };
    println!(
        "CreateTask answers: p50 {:?}, p90 {:?}, max {:?}; sent more than 100 ms after their \
         turn: {late}",
        took[took.len() / 2],
        took[took.len() * 9 / 10],
        took[took.len() - 1]
    );
    let answered = t0.elapsed();
    let last_sent = match pace {
        Some((qps, burst)) => Duration::from_secs_f64(f64::from(n.saturating_sub(burst)) / qps),
        None => Duration::ZERO,
    };
    let errors: Vec<String> = results
        .iter()
        .filter_map(|(i, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{i}: {:?} {}", e.code(), e.message()))
        })
        .collect();
    let metas: Vec<Vec<u8>> = results.into_iter().filter_map(|(_, r)| r.ok()).collect();
    let deferred = metas
        .iter()
        .filter(|m| String::from_utf8_lossy(m).contains("\"deferred\""))
        .count();
    // Every task has its job once GetTask no longer says it is waiting to be submitted.
    let mut waiting: Vec<&Vec<u8>> = metas.iter().collect();
    let mut get_errors = 0usize;
    let mut throttled_messages = 0usize;
    while !waiting.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(3600),
            "{} still unsubmitted after an hour",
            waiting.len()
        );
        let mut still = Vec::new();
        for m in waiting {
            let mut c = c.clone();
            match c.get_task(get_req(m)).await {
                Ok(r) => {
                    let msg = r.into_inner().resource.unwrap().message;
                    if msg.starts_with("Not submitted yet") {
                        if msg.contains("throttling") {
                            throttled_messages += 1;
                        }
                        still.push(m);
                    }
                }
                Err(_) => {
                    get_errors += 1;
                    still.push(m);
                }
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    let all_submitted = t0.elapsed();
    // Jobs that run: GetTask of every task not finished every 2 s until each is terminal.
    let life = if held {
        None
    } else {
        Some(until_terminal(&replicas, &metas, t0).await)
    };
    let (by_type, by_user) = sdiag_counts();
    let total_rpcs: u64 = by_user
        .get("flyte")
        .copied()
        .unwrap_or_else(|| by_user.values().sum());
    let ours: std::collections::HashSet<String> = (0..n)
        .map(|i| {
            let req = element(script, i);
            slurm_connector::render::render(&task_spec(&req).expect("spec"), &render_cfg)
                .expect("render")
                .key
        })
        .collect();
    let keys = jobs_by_key(&raw, &ours).await;
    let dupes = keys.values().filter(|v| v.len() > 1).count();
    let jobs: usize = keys.values().map(|v| v.len()).sum();
    println!(
        "connector: {n} CreateTasks answered in {:.1}s ({} errors, {deferred} deferred); every task had its job after {:.1}s ({:.1}/s; {:.1}s after the last CreateTask was sent); {} keys with jobs, {jobs} live jobs, {dupes} keys with more than one; GetTask errors {get_errors}, QUEUED 'throttling' answers {throttled_messages}; slurmctld RPCs of the job user {total_rpcs} ({:.2} per task)",
        answered.as_secs_f64(),
        errors.len(),
        all_submitted.as_secs_f64(),
        f64::from(n) / all_submitted.as_secs_f64(),
        all_submitted.saturating_sub(last_sent).as_secs_f64(),
        keys.len(),
        total_rpcs as f64 / f64::from(n),
    );
    println!("slurmctld RPCs by type: {by_type:?}");
    println!(
        "the first connector's slurmrestd requests by operation: {:?}",
        requests_by_operation(&m0, &metrics(conn.metrics))
    );
    if let Some(life) = &life {
        let per = |t: &str| by_type.get(t).copied().unwrap_or(0) as f64 / f64::from(n);
        println!(
            "whole life: every task terminal after {:.1}s ({} SUCCEEDED, {} other, {} GetTasks, {} GetTask errors); per element: {:.3} slurmctld RPCs of the job user; reads of single jobs (REQUEST_JOB_INFO_SINGLE) {:.3}, federation reads (REQUEST_FED_INFO) {:.3}, listings (REQUEST_JOB_INFO) {:.3}, jobs/state (REQUEST_JOB_STATE) {:.3}, submits+releases (REQUEST_SUBMIT_BATCH_JOB + REQUEST_UPDATE_JOB) {:.3}",
            life.took.as_secs_f64(),
            life.succeeded,
            life.other,
            life.gets,
            life.get_errors,
            total_rpcs as f64 / f64::from(n),
            per("REQUEST_JOB_INFO_SINGLE"),
            per("REQUEST_FED_INFO"),
            per("REQUEST_JOB_INFO"),
            per("REQUEST_JOB_STATE"),
            per("REQUEST_SUBMIT_BATCH_JOB") + per("REQUEST_UPDATE_JOB"),
        );
        // The Python SSH plugin reads each task alone at each GetTask: `squeue -j` is job,
        // partition and federation info, 3 RPCs (../shared/design/python-plugin.md); the same
        // GetTasks would cost it this, besides its n sbatch.
        println!(
            "the Python SSH plugin for the same {} GetTasks: {} RPCs for its polls ({:.2} per element), plus {n} submits",
            life.gets,
            3 * life.gets,
            (3 * life.gets) as f64 / f64::from(n)
        );
    }
    for e in errors.iter().take(5) {
        println!("  error {e}");
    }
    if let Some(secs) = std::env::var("FANOUT_STEADY_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        steady(&replicas, &metas, Duration::from_secs(secs)).await;
    }
    let ids: std::collections::BTreeSet<JobId> = keys.values().flatten().copied().collect();
    for id in ids {
        let _ = raw.cancel(id, None).await;
    }
    if let Some(s) = second {
        s.stop.send(()).ok();
        s.task.await.unwrap();
    }
    if std::env::var_os("FANOUT_SKIP_RAW").is_some() {
        // Under rl_enable the raw half alone takes the bucket's pace (487 s for 1000, issue 27).
        println!("raw submits: skipped (FANOUT_SKIP_RAW)");
        conn.stop.send(()).ok();
        conn.task.await.unwrap();
        return;
    }
    // Raw submits of the same bodies (other attempts: other keys) at the same concurrency.
    let slow_raw = raw
        .with_request_timeout(Duration::from_secs(120))
        .expect("client");
    cluster_exec(&["sdiag", "--reset"]);
    let t1 = Instant::now();
    let raw_results: Vec<Result<JobId, String>> = futures::stream::iter(0..n)
        .map(|i| {
            let raw = slow_raw.clone();
            let req = element(script, n + i);
            let rendered =
                slurm_connector::render::render(&task_spec(&req).expect("spec"), &render_cfg)
                    .expect("render");
            async move { raw.submit(&rendered.job).await.map_err(|e| e.to_string()) }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let raw_took = t1.elapsed();
    let raw_errors = raw_results.iter().filter(|r| r.is_err()).count();
    // Jobs that run: one listing of the jobs per poll interval (`squeue` a poll) until every job
    // submitted is terminal or gone.
    let mut raw_polls = 0u32;
    if !held {
        let poll = conn.deployment.poll_interval;
        let mine: std::collections::HashSet<JobId> =
            raw_results.iter().flatten().copied().collect();
        loop {
            raw_polls += 1;
            let listed = raw.jobs().await.expect("jobs");
            let live = listed
                .iter()
                .filter(|j| {
                    mine.contains(&j.array.map_or(j.job_id, |a| a.array_job_id))
                        && !slurm_connector::tracker::Packed::pack(&j.state)
                            .0
                            .is_terminal()
                })
                .count();
            if live == 0 {
                break;
            }
            assert!(
                t1.elapsed() < Duration::from_secs(3600),
                "{live} raw jobs live after an hour"
            );
            tokio::time::sleep(poll).await;
        }
    }
    let (raw_by_type, raw_by_user) = sdiag_counts();
    if !held {
        println!(
            "raw: every job terminal after {:.1}s, {raw_polls} listings; slurmctld RPCs by type: {raw_by_type:?}",
            t1.elapsed().as_secs_f64()
        );
    }
    println!(
        "raw submits: {n} in {:.1}s ({:.1}/s), {raw_errors} errors; slurmctld RPCs of the job user {} (with the listings, jobs that run); connector ÷ raw time to submit all: {:.2}",
        raw_took.as_secs_f64(),
        f64::from(n) / raw_took.as_secs_f64(),
        raw_by_user
            .get("flyte")
            .copied()
            .unwrap_or_else(|| raw_by_user.values().sum()),
        all_submitted.as_secs_f64() / raw_took.as_secs_f64(),
    );
    for id in raw_results.into_iter().flatten() {
        let _ = raw.cancel(id, None).await;
    }
    conn.stop.send(()).ok();
    conn.task.await.unwrap();
}

/// The steady state with every task in flight (`FANOUT_STEADY_S` seconds): GetTasks at
/// `FANOUT_GET_QPS` (default 40: Flyte's 10 a second per executor × 4) over the tasks, each with
/// Flyte's 10 s deadline and not waiting for the one before, alternating between the replicas;
/// then their latency, slurmctld's RPCs a second meanwhile (`sdiag`, reset first: every
/// replica's poll ticks and the accounting reads), and this process's memory (the connectors,
/// and the bench's own client and metas: an upper bound).
async fn steady(
    replicas: &[slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient<tonic::transport::Channel>],
    metas: &[Vec<u8>],
    secs: Duration,
) {
    let qps: f64 = std::env::var("FANOUT_GET_QPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40.0);
    // Every replica asked once for each job first: a replica adopts a job another created on
    // the first GetTask for it (one listing each), which is the start of a steady state, not
    // the state itself.
    let mut first_of_job = BTreeMap::new();
    for m in metas {
        if let Ok(slurm_connector::service::Decoded::Ours(d)) =
            slurm_connector::service::decode_meta(m)
        {
            first_of_job.entry(d.job_id).or_insert(m);
        }
    }
    for r in replicas {
        futures::stream::iter(first_of_job.values())
            .for_each_concurrent(20, |m| {
                let mut c = r.clone();
                async move {
                    let _ = c.get_task(get_req(m)).await;
                }
            })
            .await;
    }
    println!(
        "steady state: each replica asked once for each of the {} jobs first (adopted)",
        first_of_job.len()
    );
    cluster_exec(&["sdiag", "--reset"]);
    let t0 = tokio::time::Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    let mut k = 0usize;
    while t0.elapsed() < secs {
        tokio::time::sleep_until(t0 + Duration::from_secs_f64(k as f64 / qps)).await;
        let mut c = replicas[k % replicas.len()].clone();
        let mut r = tonic::Request::new(get_req(&metas[k * 7919 % metas.len()]));
        r.set_timeout(Duration::from_secs(10));
        calls.spawn(async move {
            let t = Instant::now();
            let ok = c.get_task(r).await.is_ok();
            (t.elapsed(), ok)
        });
        k += 1;
    }
    let mut took = Vec::new();
    let mut errors = 0usize;
    while let Some(r) = calls.join_next().await {
        let (d, ok) = r.expect("GetTask task");
        took.push(d);
        errors += usize::from(!ok);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    took.sort();
    let (by_type, by_user) = sdiag_counts();
    let ours = by_user
        .get("flyte")
        .copied()
        .unwrap_or_else(|| by_user.values().sum());
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    println!(
        "steady state, {} tasks in flight, {} replica(s), {elapsed:.0} s: {} GetTasks ({:.0}/s), \
         {errors} errors, p50 {:?}, p99 {:?}, max {:?}; slurmctld RPCs of the job user {ours} \
         ({:.2}/s): {by_type:?}; this process VmRSS {} MiB, VmHWM {} MiB",
        metas.len(),
        replicas.len(),
        took.len(),
        took.len() as f64 / elapsed,
        took[took.len() / 2],
        took[took.len() * 99 / 100],
        took[took.len() - 1],
        ours as f64 / elapsed,
        kib("VmRSS:") / 1024,
        kib("VmHWM:") / 1024,
    );
}

/// How a map's tasks ended (`until_terminal`).
struct Life {
    took: Duration,
    succeeded: usize,
    other: usize,
    gets: u64,
    get_errors: u64,
}

/// GetTask of every task not terminal yet, every 2 s, alternating between the replicas, until
/// all are terminal (at most an hour after `t0`).
async fn until_terminal(
    replicas: &[slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient<tonic::transport::Channel>],
    metas: &[Vec<u8>],
    t0: Instant,
) -> Life {
    use slurm_connector::proto::core::task_execution::Phase;
    let mut open: Vec<usize> = (0..metas.len()).collect();
    let mut life = Life {
        took: Duration::ZERO,
        succeeded: 0,
        other: 0,
        gets: 0,
        get_errors: 0,
    };
    while !open.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(3600),
            "{} tasks not terminal after an hour",
            open.len()
        );
        let mut still = Vec::new();
        for i in open {
            let mut c = replicas[i % replicas.len()].clone();
            life.gets += 1;
            match c.get_task(get_req(&metas[i])).await {
                Ok(r) => {
                    let p = Phase::of(r.into_inner().resource.unwrap().phase);
                    match p {
                        Phase::Succeeded => life.succeeded += 1,
                        p if p.is_terminal() => life.other += 1,
                        _ => still.push(i),
                    }
                }
                Err(_) => {
                    life.get_errors += 1;
                    still.push(i);
                }
            }
        }
        open = still;
        if !open.is_empty() {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    life.took = t0.elapsed();
    life
}

/// Element `i` of a map as Flyte sends it: an action of its own (`e<i>`) in the bench's run,
/// attempt 0.
fn element(script: &str, i: u32) -> slurm_connector::proto::connector::CreateTaskRequest {
    let mut req = request(script, 0);
    let node = req
        .task_execution_metadata
        .as_mut()
        .and_then(|m| m.task_execution_id.as_mut())
        .and_then(|t| t.node_execution_id.as_mut())
        .expect("the fixture has a node execution id");
    node.node_id = format!("e{i}");
    req
}
