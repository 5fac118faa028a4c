//! Fault drills (issue 9): the connector under the faults a production Slurm throws at it, with
//! load on, counting what a Flyte backend would see. Each drill prints one `DRILL` line of
//! numbers (run with `--nocapture`); BENCHMARKS.md records them.
//!
//! - `slurmrestd_down_60s_with_100_running_tasks`: slurmctld unreachable for the full 60 s while
//!   100 tasks run and are polled → zero GetTask errors, zero wrong phases, and every answer
//!   given after the first successful poll tick is the true one (recovery within one tick).
//! - `connector_sigkilled_while_backend_retries_create_task`: the real `slurm-connector serve`
//!   SIGKILLed three times while 60 executions are created by a client that retries like Flyte's
//!   backend → every execution gets exactly one job, and every job is some execution's.
//! - `short_lived_minted_tokens_renewed_and_rejections_survived`: 2 s minted tokens renewed
//!   through the run, plus tokens refused as expired mid-run → zero failed calls, all tasks done.
//! - `slow_then_down_slurmdbd`: jobs age out of slurmctld while slurmdbd is slow, then down, then
//!   a restarted connector adopts them while it is slow again → every GetTask inside Flyte's 10 s
//!   deadline, no wrong phase, all SUCCEEDED once slurmdbd answers.
//!
//! The mock really runs the batch scripts (`sleep`), so "running" means a process is running.
//! The 60 s drill dominates; the others run beside it (the test harness runs tests in parallel).

#[path = "common/drill.rs"]
mod drill;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drill::*;
use mock_slurmrestd::FaultConfig;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::meta::{Decoded, decode};

fn job_id(meta: &[u8]) -> u32 {
    match decode(meta).expect("our resource_meta") {
        Decoded::Ours(m) => m.job_id.0,
        Decoded::Python { .. } => panic!("the connector answered a Python-plugin meta"),
    }
}

/// Creates `n` executions (attempts `first..first+n`) in order, each with `script(i)`.
async fn create_all(
    c: &mut Grpc,
    first: u32,
    n: usize,
    script: impl Fn(usize) -> String,
) -> Vec<Vec<u8>> {
    let mut metas = Vec::new();
    for i in 0..n {
        let meta = create(c, request(first + i as u32, &script(i)))
            .await
            .unwrap_or_else(|e| panic!("CreateTask {i}: {e}"));
        metas.push(meta);
    }
    metas
}

/// Polls every task until all are in `want` (or terminal), panicking after `within`.
async fn wait_all(c: &mut Grpc, metas: &[Vec<u8>], want: &[Phase], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut done = 0;
        for m in metas {
            let (r, _) = get(c, m).await;
            let p = phase(r.expect("GetTask").phase);
            if want.contains(&p) {
                done += 1;
            }
        }
        if done == metas.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {done}/{} tasks reached {want:?} within {within:?}",
            metas.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One poller's record of one GetTask.
struct Seen {
    task: usize,
    issued: Instant,
    /// Successful `jobs/state` answers the mock had given when this GetTask was issued.
    state_ok_before: u64,
    result: Result<(Phase, String), String>,
    latency: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmrestd_down_60s_with_100_running_tasks() {
    const TASKS: usize = 100;
    const OUTAGE: Duration = Duration::from_secs(60);
    const POLL: Duration = Duration::from_secs(1);
    let started = Instant::now();
    let mock =
        Arc::new(Mock::start("outage", Duration::from_secs(600), FaultConfig::default()).await);
    let server = Server::start(deployment(mock.cluster(mock.static_auth(), None), POLL)).await;
    let mut c = server.client().await;
    // Even tasks end DURING the outage (their outcome must be learnt after it); odd ones still
    // run after it and are cancelled at the end.
    let ends_in_outage = |i: usize| i % 2 == 0;
    let metas = create_all(&mut c, 0, TASKS, |i| {
        if ends_in_outage(i) {
            "#!/bin/bash\nsleep 20\n"
        } else {
            "#!/bin/bash\nsleep 600\n"
        }
        .to_string()
    })
    .await;
    wait_all(&mut c, &metas, &[Phase::Running], Duration::from_secs(30)).await;

    let state_ok = |m: &Mock| m.handle.stats().count_status("jobs_state", 200);
    let base_ok = state_ok(&mock);
    mock.handle.faults().controller_down_for(OUTAGE);
    let outage_end = Instant::now() + OUTAGE;
    // 100 pollers, one per task, every 200 ms (Flyte's own cadence is 30 s: this is far more),
    // through the outage and 8 s past it.
    let until = outage_end + Duration::from_secs(8);
    let mut pollers = Vec::new();
    for (task, meta) in metas.iter().cloned().enumerate() {
        let (mut c, mock) = (c.clone(), mock.clone());
        pollers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while Instant::now() < until {
                let (issued, state_ok_before) = (Instant::now(), state_ok(&mock) - base_ok);
                let (r, latency) = get(&mut c, &meta).await;
                seen.push(Seen {
                    task,
                    issued,
                    state_ok_before,
                    result: r
                        .map(|r| (phase(r.phase), r.message))
                        .map_err(|e| e.to_string()),
                    latency,
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            seen
        }));
    }
    let mut seen = Vec::new();
    for p in pollers {
        seen.extend(p.await.unwrap());
    }
    seen.sort_by_key(|s| s.issued);

    let mut phases = Phases::default();
    let (mut errors, mut degraded, mut stale_after_first_tick) = (Vec::new(), 0u64, Vec::new());
    let mut lat_outage = Vec::new();
    let mut recovered_at = vec![None::<Instant>; TASKS];
    for s in &seen {
        let expected_end = if ends_in_outage(s.task) {
            Phase::Succeeded
        } else {
            Phase::Aborted
        };
        let (p, msg) = match &s.result {
            Ok(x) => x,
            Err(e) => {
                errors.push(format!("task {}: {e}", s.task));
                continue;
            }
        };
        phases.see(s.task, *p, expected_end, msg);
        let unreachable = msg.contains("unreachable since");
        if s.issued < outage_end {
            lat_outage.push(s.latency);
            degraded += u64::from(unreachable);
        }
        let truth = if ends_in_outage(s.task) {
            Phase::Succeeded
        } else {
            Phase::Running
        };
        let recovered = !unreachable && *p == truth;
        if recovered && s.issued >= outage_end && recovered_at[s.task].is_none() {
            recovered_at[s.task] = Some(s.issued);
        }
        // A second successful jobs/state answer means the first successful tick after the
        // outage has completed (ticks are serialised): every answer from then on must be true.
        if s.state_ok_before >= 2 && !recovered {
            stale_after_first_tick.push(format!("task {}: {p:?}: {msg}", s.task));
        }
    }
    let never: Vec<usize> = (0..TASKS).filter(|t| recovered_at[*t].is_none()).collect();
    let last = recovered_at.iter().flatten().max().copied();
    let (p50, p99, max) = percentiles(lat_outage.clone());

    // Clean up the still-running half through DeleteTask: ABORTED, as expected.
    for (i, m) in metas
        .iter()
        .enumerate()
        .filter(|(i, _)| !ends_in_outage(*i))
    {
        c.delete_task(delete_req(m))
            .await
            .unwrap_or_else(|e| panic!("DeleteTask {i}: {e}"));
    }
    let odd: Vec<Vec<u8>> = metas
        .iter()
        .enumerate()
        .filter(|(i, _)| !ends_in_outage(*i))
        .map(|(_, m)| m.clone())
        .collect();
    wait_all(&mut c, &odd, &[Phase::Aborted], Duration::from_secs(30)).await;

    println!(
        "DRILL outage: {TASKS} tasks ({} ending during the outage), slurmctld down {}s, poll tick {}s; \
         GetTask answered {} ({} during the outage, {degraded} of them flagged 'unreachable'), \
         errors {}, wrong phases {}; latency during outage p50 {p50:?} p99 {p99:?} max {max:?}; \
         all tasks true again {:.2}s after the outage ({} successful ticks before the last one's \
         first true answer), stale answers after the first tick {}; drill took {:.0}s",
        TASKS / 2,
        OUTAGE.as_secs(),
        POLL.as_secs(),
        phases.answers,
        lat_outage.len(),
        errors.len(),
        phases.wrong.len(),
        last.map(|l| l.saturating_duration_since(outage_end).as_secs_f64())
            .unwrap_or(f64::NAN),
        seen.iter()
            .filter(|s| Some(s.issued) == last)
            .map(|s| s.state_ok_before)
            .max()
            .unwrap_or(0),
        stale_after_first_tick.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        errors.is_empty(),
        "GetTask errors: {:?}",
        &errors[..errors.len().min(5)]
    );
    assert!(
        phases.wrong.is_empty(),
        "wrong phases: {:?}",
        &phases.wrong[..phases.wrong.len().min(5)]
    );
    assert!(
        degraded > 0,
        "the outage was never reported in GetTask's message"
    );
    assert!(never.is_empty(), "tasks never recovered: {never:?}");
    assert!(
        stale_after_first_tick.is_empty(),
        "answers still stale after the first tick: {:?}",
        &stale_after_first_tick[..stale_after_first_tick.len().min(5)]
    );
    server.stop().await;
    Arc::into_inner(mock).expect("pollers done").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_sigkilled_while_backend_retries_create_task() {
    const TASKS: usize = 60;
    const KILLS: usize = 3;
    let started = Instant::now();
    // Submits take 40 ms at the mock, so kills land while submits are in flight.
    let slow_submit = FaultConfig {
        latency_ms: 40,
        operations: vec!["submit".into()],
        ..FaultConfig::default()
    };
    let mock = Mock::start("sigkill", Duration::from_secs(600), slow_submit).await;
    let key = mock.key_file();
    let env = [
        ("FLYTE_SLURM_RESTD_URL", mock.handle.url()),
        ("FLYTE_SLURM_JWT_KEY_FILE", key.display().to_string()),
        ("FLYTE_SLURM_USERNAME", "flyte".to_string()),
        (
            "FLYTE_SLURM_WORKING_DIR",
            mock.dir.join("jobs").display().to_string(),
        ),
        ("FLYTE_SLURM_POLL_INTERVAL", "1s".to_string()),
    ];
    let log = mock.dir.join("serve.log");
    let port = free_port();
    let mut serve = ServeProcess::spawn(port, &env, &log);
    serve.wait_listening();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_lazy();

    // The backend: each execution created once, retried after any error (a refused connection,
    // a cut stream, UNAVAILABLE) until it returns a resource_meta — as Flyte's backend does.
    let mut clients = Vec::new();
    for i in 0..TASKS {
        let mut c = Grpc::new(channel.clone());
        clients.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(90 * i as u64)).await;
            let mut failed = 0u32;
            loop {
                match create(&mut c, request(1000 + i as u32, "#!/bin/bash\nsleep 1\n")).await {
                    Ok(meta) => return (meta, failed),
                    Err(_) => {
                        failed += 1;
                        assert!(failed < 400, "CreateTask {i} never succeeded");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }));
    }
    // SIGKILL mid-run, restart after 300 ms (a supervisor's restart, faster than Kubernetes').
    let mut submits_at_kill = Vec::new();
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        submits_at_kill.push(mock.handle.stats().count("submit"));
        serve.sigkill();
        tokio::time::sleep(Duration::from_millis(300)).await;
        serve = ServeProcess::spawn(port, &env, &log);
    }
    let mut metas = Vec::new();
    let mut retried = 0;
    for c in clients {
        let (meta, failed) = c.await.unwrap();
        retried += failed;
        metas.push(meta);
    }

    let per_key = jobs_per_key(&mock).await;
    let duplicates: Vec<_> = per_key.iter().filter(|(_, ids)| ids.len() > 1).collect();
    let on_cluster: HashSet<u32> = per_key.values().flatten().copied().collect();
    let answered: HashSet<u32> = metas.iter().map(|m| job_id(m)).collect();
    let submits = mock.handle.stats().count_status("submit", 200);
    // Executions whose job a killed connector had submitted (its answer lost) and a restarted
    // one found on the cluster instead of submitting again.
    let adopted = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .matches("already on the cluster: adopting it")
        .count();
    // Every job must then run to SUCCEEDED through the last connector (which adopts them).
    let mut c = connect(([127, 0, 0, 1], port).into()).await;
    wait_all(&mut c, &metas, &[Phase::Succeeded], Duration::from_secs(60)).await;
    let mut phases = Phases::default();
    for (i, m) in metas.iter().enumerate() {
        let (r, _) = get(&mut c, m).await;
        let r = r.expect("GetTask");
        phases.see(i, phase(r.phase), Phase::Succeeded, &r.message);
    }
    println!(
        "DRILL sigkill: {TASKS} executions created by a retrying client, connector SIGKILLed {KILLS} \
         times (after {submits_at_kill:?} submits) and restarted; CreateTask calls failed and \
         retried {retried}; executions whose job was found on the cluster after a restart {adopted}; jobs on the cluster {}, keys {}, duplicate keys {}, submits answered \
         {submits}, distinct job ids returned {}, jobs no execution got {}; all {} SUCCEEDED \
         (wrong phases {}); drill took {:.1}s",
        on_cluster.len(),
        per_key.len(),
        duplicates.len(),
        answered.len(),
        on_cluster.difference(&answered).count(),
        metas.len(),
        phases.wrong.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        duplicates.is_empty(),
        "executions with two jobs: {duplicates:?}"
    );
    assert_eq!(per_key.len(), TASKS, "one job per execution");
    assert_eq!(answered.len(), TASKS, "every execution got its own job id");
    assert_eq!(
        answered, on_cluster,
        "the ids returned are exactly the jobs on the cluster"
    );
    assert_eq!(
        submits, TASKS as u64,
        "the mock accepted exactly one submit per execution"
    );
    assert!(phases.wrong.is_empty(), "{:?}", phases.wrong);
    drop(serve);
    mock.stop().await;
}
