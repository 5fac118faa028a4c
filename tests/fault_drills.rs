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
//! - `sigterm_drains_a_create_task_caught_between_submit_and_release`: the real `serve` gets
//!   SIGTERM while a CreateTask's job is on the cluster, held, its release slow → health turns
//!   NOT_SERVING at once, a new CreateTask is answered with a hand-off (a deferred meta, nothing
//!   submitted here; not an error, which would cost the task an attempt), the one in flight
//!   completes with its job released, the process exits 0 within the drain deadline, and the
//!   replacement submits the handed-off task at its first GetTask: both SUCCEEDED, one job each.
//! - `drain_deadline_bounds_the_exit_and_the_retry_releases_the_held_job`: the same with a
//!   release slower than the deadline → the process still exits 0 at the deadline, the job stays
//!   held (never runs twice, never runs unchecked), and the backend's retry against a restarted
//!   connector adopts and releases that one job, which then runs.
//! - `sigterm_waits_for_a_deferred_submit_between_submit_and_release`: the same when the
//!   CreateTask already answered (a deferred resource_meta) and its submit goes on in its own
//!   task → the drain waits for that submit's release too; the job is released before exit 0.
//! - `short_lived_minted_tokens_renewed_and_rejections_survived`: 2 s minted tokens renewed
//!   through the run, plus tokens refused as expired mid-run → zero failed calls, all tasks done.
//! - `slow_then_down_slurmdbd`: jobs age out of slurmctld while slurmdbd is slow, then down, then
//!   a restarted connector adopts them while it is slow again → every GetTask inside Flyte's 10 s
//!   deadline, no wrong phase, all SUCCEEDED once slurmdbd answers.
//!
//! The mock really runs the batch scripts (`sleep`), so "running" means a process is running.
//! The 60 s drill dominates; the others run beside it (the test harness runs tests in parallel).

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::drill::*;
use mock_slurmrestd::FaultConfig;
use slurm_connector::config::AuthConfig;
use slurm_connector::proto::core::task_execution::Phase;

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
    let ends_in_outage = |i: usize| i.is_multiple_of(2);
    // The even tasks end when the test creates `release`, 20 s into the outage.
    let release = mock.dir.join("release");
    let wait_release = format!(
        "#!/bin/bash\nwhile [ ! -e '{}' ]; do sleep 1; done\n",
        release.display()
    );
    let t = Instant::now();
    let metas = create_all(&mut c, 0, TASKS, |i| {
        if ends_in_outage(i) {
            wait_release.clone()
        } else {
            "#!/bin/bash\nsleep 600\n".to_string()
        }
    })
    .await;
    let create_took = t.elapsed();
    wait_all(&mut c, &metas, &[Phase::Running], Duration::from_secs(30)).await;

    let state_ok = |m: &Mock| m.handle.stats().count_status("jobs_state", 200);
    let base_ok = state_ok(&mock);
    mock.handle.faults().controller_down_for(OUTAGE);
    let outage_end = Instant::now() + OUTAGE;
    // 100 pollers, one per task, every 200 ms (Flyte's own cadence is 30 s: this is far more),
    // through the outage and 8 s past it.
    let until = outage_end + Duration::from_secs(8);
    let releaser = {
        let release = release.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(20)).await;
            std::fs::write(&release, b"").unwrap();
        })
    };
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
    releaser.await.unwrap();

    let mut phases = Phases::default();
    let (mut errors, mut degraded, mut stale_after_first_tick) = (Vec::new(), 0u64, Vec::new());
    // The most successful jobs/state answers any not-yet-true answer came after.
    let mut last_stale_after_ok = 0;
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
        if !recovered && s.issued >= outage_end {
            last_stale_after_ok = last_stale_after_ok.max(s.state_ok_before);
        }
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
        "DRILL outage: {TASKS} tasks created in {:.1}s ({} ending during the outage), slurmctld down {}s, poll tick {}s; \
         GetTask answered {} ({} during the outage, {degraded} of them flagged 'unreachable'), \
         errors {}, wrong phases {}; latency during outage p50 {p50:?} p99 {p99:?} max {max:?}; \
         all tasks true again {:.2}s after the outage; the last stale answer was asked after {} \
         successful jobs/state answers (so none once the first tick was done: stale answers \
         after it {}); drill took {:.0}s",
        create_took.as_secs_f64(),
        TASKS / 2,
        OUTAGE.as_secs(),
        POLL.as_secs(),
        phases.answers,
        lat_outage.len(),
        errors.len(),
        phases.wrong.len(),
        last.map(|l| l.saturating_duration_since(outage_end).as_secs_f64())
            .unwrap_or(f64::NAN),
        last_stale_after_ok,
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
    let mock = Mock::start("sigkill", Duration::from_secs(600), slow_submit.clone()).await;
    let env = serve_env(&mock, None);
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
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut failed = 0u32;
            loop {
                match create(&mut c, request(1000 + i as u32, "#!/bin/bash\nsleep 1\n")).await {
                    Ok(meta) => return (meta, failed),
                    Err(e) => {
                        failed += 1;
                        assert!(
                            Instant::now() < deadline,
                            "CreateTask {i} never succeeded in 120 s ({failed} tries, last: {e})"
                        );
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }));
    }
    // SIGKILL mid-run, restart after 300 ms (a supervisor's restart, faster than Kubernetes').
    // Each kill follows a submit that slurmrestd carried out but whose answer never reached the
    // connector (`drop_after_handling`): the job exists, nobody has its id, and the process that
    // knew it might exist dies. Only the restarted connector's look at the cluster can then
    // prevent a second job.
    // The kills are spaced by submits, not by a clock: kill k once k/(KILLS+1) of the executions
    // were submitted, so executions are always left to submit into the armed drop. (Timed at
    // 1.5 s, a slow machine's clients could all be done before the last kill, whose wait for a
    // submit then never ended: one CI run hung there until its 90-minute limit.)
    let submits = || mock.handle.stats().count("submit");
    let mut submits_at_kill = Vec::new();
    for k in 1..=KILLS {
        let at = (k * TASKS / (KILLS + 1)) as u64;
        wait_for(
            &format!("kill {k}: {at} submits"),
            Duration::from_secs(120),
            || submits() >= at,
            || format!("{} submits", submits()),
        )
        .await;
        mock.handle.faults().set(FaultConfig {
            drop_next: 1,
            drop_after_handling: true,
            ..slow_submit.clone()
        });
        wait_for(
            &format!("kill {k}: a submit into the armed drop"),
            Duration::from_secs(60),
            || mock.handle.faults().get().drop_next == 0,
            || format!("{} submits", submits()),
        )
        .await;
        submits_at_kill.push(submits());
        serve.sigkill();
        mock.handle.faults().set(slow_submit.clone());
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
    // Submits slurmrestd carried out: answered, or answered into a dropped connection.
    let submits = mock.handle.stats().count_status("submit", 200)
        + mock
            .handle
            .stats()
            .count_status("submit", mock_slurmrestd::stats::DROPPED);
    // Executions whose job a killed connector had submitted (its answer lost) and a restarted
    // one found on the cluster instead of submitting again. (The client repeats a CreateTask only
    // after an error, so every repeat a restarted connector found had lost its answer.)
    let adopted = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .matches("CreateTask for an execution that already has a job on the cluster")
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
         retried {retried}; orphaned jobs (submitted, answer lost, connector killed) found on the cluster and adopted {adopted}; jobs on the cluster {}, keys {}, duplicate keys {}, submits answered \
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
    // Each kill followed a submit whose answer was dropped: a restarted connector must have met
    // such an orphan at least once, or the drill did not test what it is for.
    assert!(
        adopted >= 1,
        "no orphaned job was found by a restarted connector (kills after {submits_at_kill:?} submits)"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lived_minted_tokens_renewed_and_rejections_survived() {
    const TASKS: usize = 40;
    const LIFETIME: Duration = Duration::from_secs(2);
    const INJECTED: u32 = 6;
    let started = Instant::now();
    let mock =
        Arc::new(Mock::start("tokens", Duration::from_secs(600), FaultConfig::default()).await);
    // The connector mints its own tokens from the cluster's key, each living 2 s (renewed at 80%).
    let auth = AuthConfig::KeyFile {
        path: mock.key_file(),
        lifetime: LIFETIME,
    };
    let server = Server::start(deployment(
        mock.cluster(auth, Some("flyte")),
        Duration::from_millis(500),
    ))
    .await;
    let c = server.client().await;
    // Meanwhile slurmctld refuses a token as expired now and then (one at a time: the client
    // re-mints once per call, and a fresh token refused twice would be a real failure).
    let refuser = {
        let mock = mock.clone();
        tokio::spawn(async move {
            for _ in 0..INJECTED {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                mock.handle.faults().set(FaultConfig {
                    reject_next_tokens: 1,
                    ..FaultConfig::default()
                });
                wait_for(
                    "an injected token rejection consumed",
                    Duration::from_secs(60),
                    || mock.handle.faults().get().reject_next_tokens == 0,
                    || format!("{} rejections so far", rejections(&mock)),
                )
                .await;
            }
        })
    };
    // Executions created through the run (one every 250 ms), each running 3 s.
    let mut create_errors = Vec::new();
    let mut metas = Vec::new();
    {
        let mut c = c.clone();
        for i in 0..TASKS {
            match create(&mut c, request(2000 + i as u32, "#!/bin/bash\nsleep 3\n")).await {
                Ok(m) => metas.push(m),
                Err(e) => create_errors.push(format!("CreateTask {i}: {e}")),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let phases = Arc::new(std::sync::Mutex::new(Phases::default()));
    let (errors, lat, unreachable, _) = poll_to_the_end(
        &c,
        &metas,
        Phase::Succeeded,
        &phases,
        Duration::from_secs(60),
    )
    .await;
    refuser.await.unwrap();
    let wrong = std::mem::take(&mut phases.lock().unwrap().wrong);
    let rejected = rejections(&mock);
    println!(
        "DRILL tokens: {} tasks over {:.0}s with minted tokens living {}s (so ~{} renewals), \
         {INJECTED} tokens refused as expired mid-run, {rejected} rejections answered by the mock; \
         CreateTask errors {}, GetTask answers {} errors {} 'unreachable' {unreachable}, wrong \
         phases {}, all SUCCEEDED; drill took {:.1}s",
        metas.len(),
        started.elapsed().as_secs_f64(),
        LIFETIME.as_secs(),
        (started.elapsed().as_secs_f64() / (LIFETIME.as_secs_f64() * 0.8)) as u64,
        create_errors.len(),
        lat.len(),
        errors.len(),
        wrong.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(create_errors.is_empty(), "{create_errors:?}");
    assert!(errors.is_empty(), "{:?}", &errors[..errors.len().min(5)]);
    assert_eq!(
        unreachable, 0,
        "a refused token surfaced as an unreachable cluster"
    );
    assert!(wrong.is_empty(), "{wrong:?}");
    assert!(
        rejected >= u64::from(INJECTED),
        "the refusals did happen: {rejected}"
    );
    server.stop().await;
    Arc::into_inner(mock).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_then_down_slurmdbd() {
    const TASKS: usize = 20;
    let started = Instant::now();
    // Jobs leave slurmctld 1 s after they end (MinJobAge), sooner than the 3 s poll tick sees
    // them end: their outcome is slurmdbd's to give.
    const POLL: Duration = Duration::from_secs(3);
    let slow = |ms| FaultConfig {
        slurmdbd_latency_ms: ms,
        ..FaultConfig::default()
    };
    let mock = Arc::new(Mock::start("slurmdbd", Duration::from_secs(1), slow(3000)).await);
    let cluster = mock.cluster(mock.static_auth(), None);
    let server = Server::start(deployment(cluster.clone(), POLL)).await;
    let c = server.client().await;
    let t = Instant::now();
    // The first CreateTask indexes the cluster's jobs, slurmdbd's included: slow, not failed.
    let metas = {
        let mut c = c.clone();
        create_all(&mut c, 3000, TASKS, |i| {
            format!("#!/bin/bash\nsleep {}\n", 2 + i % 3)
        })
        .await
    };
    let create_took = t.elapsed();
    // slurmdbd goes down while the jobs end and age out, for 6 s; then slow (3 s) again.
    // A connector that has indexed the cluster keeps accepting CreateTasks with slurmdbd down.
    let flipper = {
        let (mock, mut c) = (mock.clone(), c.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            mock.handle.faults().set(FaultConfig {
                slurmdbd_down: true,
                ..FaultConfig::default()
            });
            let t = Instant::now();
            let extra = create_all(&mut c, 3100, 5, |_| "#!/bin/bash\nsleep 1\n".into()).await;
            tokio::time::sleep(Duration::from_secs(6).saturating_sub(t.elapsed())).await;
            mock.handle.faults().set(slow(3000));
            extra
        })
    };
    let phases = Arc::new(std::sync::Mutex::new(Phases::default()));
    let (errors, lat, _, dbd_flagged) = poll_to_the_end(
        &c,
        &metas,
        Phase::Succeeded,
        &phases,
        Duration::from_secs(90),
    )
    .await;
    let extra = flipper.await.unwrap();
    let (errors_x, _, _, _) = poll_to_the_end(
        &c,
        &extra,
        Phase::Succeeded,
        &phases,
        Duration::from_secs(60),
    )
    .await;
    let metas: Vec<Vec<u8>> = metas.into_iter().chain(extra).collect();
    let (p50, p99, max) = percentiles(lat.clone());
    let wrong1 = phases.lock().unwrap().wrong.clone();
    server.stop().await;

    // A restarted connector adopts the (long gone from slurmctld) jobs while slurmdbd is slow:
    // GetTask waits at most adopt_wait (4 s), never the backend's whole deadline.
    let slurmdb_before = mock.handle.stats().count("slurmdb_jobs");
    mock.handle.faults().set(slow(3000));
    let server = Server::start(deployment(cluster, Duration::from_millis(500))).await;
    let c = server.client().await;
    let phases2 = Arc::new(std::sync::Mutex::new(Phases::default()));
    let (errors2, lat2, _, _) = poll_to_the_end(
        &c,
        &metas,
        Phase::Succeeded,
        &phases2,
        Duration::from_secs(60),
    )
    .await;
    let (q50, q99, qmax) = percentiles(lat2.clone());
    let wrong2 = phases2.lock().unwrap().wrong.clone();
    println!(
        "DRILL slurmdbd: {TASKS} tasks, jobs leave slurmctld 1 s after ending, poll tick 3 s; slurmdbd slow (3 s), \
         down 6 s, slow again: first CreateTask batch {:.1}s, 5 more created while slurmdbd was \
         down; GetTask answers {} ({dbd_flagged} saying the job left slurmctld and slurmdbd has not answered) errors {} wrong \
         phases {} latency p50 {p50:?} p99 {p99:?} max {max:?}; after a restart (adoption through \
         slow slurmdbd, {} slurmdbd calls): answers {} errors {} wrong {} latency p50 {q50:?} p99 \
         {q99:?} max {qmax:?}; all SUCCEEDED; drill took {:.1}s",
        create_took.as_secs_f64(),
        lat.len(),
        errors.len() + errors_x.len(),
        wrong1.len(),
        mock.handle.stats().count("slurmdb_jobs") - slurmdb_before,
        lat2.len(),
        errors2.len(),
        wrong2.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        errors.is_empty() && errors2.is_empty(),
        "{errors:?} {errors2:?}"
    );
    assert!(
        wrong1.is_empty() && wrong2.is_empty(),
        "{wrong1:?} {wrong2:?}"
    );
    server.stop().await;

    // A connector that starts while slurmdbd is down cannot see the jobs that left slurmctld, so
    // its first CreateTask must not submit (it could duplicate one of them). Nor may it fail:
    // the backend would count a failed attempt. It answers, after its wait, with a deferred
    // meta; GetTask says QUEUED and why; once slurmdbd is back, the one job is submitted and the
    // same meta finds it.
    mock.handle.faults().set(FaultConfig {
        slurmdbd_down: true,
        ..FaultConfig::default()
    });
    let submits_before = mock.handle.stats().count("submit");
    let mut d = deployment(mock.cluster(mock.static_auth(), None), POLL);
    d.submit_wait = Duration::from_secs(1);
    let server = Server::start(d).await;
    let mut c = server.client().await;
    let deferred = create(&mut c, request(3200, "#!/bin/bash\ntrue\n"))
        .await
        .expect("CreateTask answers, deferred, while slurmdbd is down");
    let text = String::from_utf8_lossy(&deferred).to_string();
    assert!(text.contains(r#""deferred""#), "{text}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (r, _) = get(&mut c, &deferred).await;
    let r = r.expect("GetTask of a deferred submit never fails");
    assert_eq!(Phase::of(r.phase), Phase::Queued, "{}", r.message);
    assert!(
        r.message.starts_with("Not submitted yet: try") && r.message.contains("slurmdb"),
        "{}",
        r.message
    );
    assert_eq!(mock.handle.stats().count("submit"), submits_before);
    mock.handle.faults().clear();
    let until = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let (r, _) = get(&mut c, &deferred).await;
        let r = r.expect("GetTask never fails");
        if Phase::of(r.phase) == Phase::Succeeded {
            break r;
        }
        assert!(Instant::now() < until, "never submitted: {}", r.message);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(mock.handle.stats().count("submit"), submits_before + 1);
    println!(
        "DRILL slurmdbd: a fresh connector's CreateTask with slurmdbd down: answered deferred, \
         QUEUED ({}), nothing submitted; submitted once when slurmdbd came back: {}",
        r.message, done.message
    );
    server.stop().await;
    Arc::into_inner(mock).unwrap().stop().await;
}

/// The real `serve`'s environment for a mock cluster, as a deployment sets it.
fn serve_env(mock: &Mock, shutdown_grace: Option<&str>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("FLYTE_SLURM_RESTD_URL", mock.handle.url()),
        (
            "FLYTE_SLURM_JWT_KEY_FILE",
            mock.key_file().display().to_string(),
        ),
        ("FLYTE_SLURM_USERNAME", "flyte".to_string()),
        (
            "FLYTE_SLURM_WORKING_DIR",
            mock.dir.join("jobs").display().to_string(),
        ),
        ("FLYTE_SLURM_POLL_INTERVAL", "1s".to_string()),
    ];
    if let Some(g) = shutdown_grace {
        env.push(("FLYTE_SLURM_SHUTDOWN_GRACE", g.to_string()));
    }
    env
}

/// grpc.health.v1 Check of the whole server, on a new connection each time (as the kubelet's
/// gRPC probe does).
async fn health(port: u16) -> Result<i32, String> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let ch = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut r = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    r.set_timeout(Duration::from_secs(2));
    HealthClient::new(ch)
        .check(r)
        .await
        .map(|r| r.into_inner().status)
        .map_err(|s| format!("{s:?}"))
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

/// The mock's jobs (id, comment) as slurmrestd lists them.
async fn jobs_with_comments(mock: &Mock) -> Vec<(u32, String)> {
    use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, Secret};
    let client = Client::new(ClientConfig::new(
        "mock",
        url::Url::parse(&mock.handle.url()).unwrap(),
        Auth::Static {
            token: Secret::new(mock.handle.mint_token("flyte", Duration::from_secs(600))),
        },
    ))
    .unwrap();
    let mut jobs: Vec<(u32, String)> = client
        .jobs()
        .await
        .expect("list the mock's jobs")
        .into_iter()
        .map(|j| (j.job_id.0, j.comment.unwrap_or_default()))
        .collect();
    jobs.sort();
    jobs
}

/// Waits until the mock holds exactly one job, submitted held by the connector (awaiting its
/// duplicate check): the CreateTask is between its submit and its release.
async fn one_held_job(mock: &Mock) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let jobs = jobs_with_comments(mock).await;
        if let [(id, comment)] = jobs.as_slice()
            && comment.ends_with(slurm_connector::service::AWAITING_CHECK)
        {
            return *id;
        }
        assert!(jobs.len() <= 1, "more than one job: {jobs:?}");
        assert!(Instant::now() < deadline, "no held job appeared: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Release calls (`POST job/{id}`) that take `ms` at the mock.
fn slow_release(ms: u64) -> FaultConfig {
    FaultConfig {
        latency_ms: ms,
        operations: vec!["job_update".into()],
        ..FaultConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_create_task_caught_between_submit_and_release() {
    const GRACE: Duration = Duration::from_secs(20);
    let mock = Mock::start("sigterm", Duration::from_secs(600), slow_release(3000)).await;
    let log = mock.dir.join("serve.log");
    let port = free_port();
    let mut serve = ServeProcess::spawn(port, &serve_env(&mock, Some("20s")), &log);
    serve.wait_listening();
    assert_eq!(health(port).await, Ok(SERVING));

    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_lazy();
    let mut c = Grpc::new(channel.clone());
    let in_flight =
        tokio::spawn(async move { create(&mut c, request(4100, "#!/bin/bash\nsleep 1\n")).await });
    // Its job is on the cluster, held; its release sits in the mock's 3 s latency.
    let job = one_held_job(&mock).await;
    serve.term();
    let signalled = Instant::now();

    // Readiness turns NOT_SERVING at once, while the CreateTask is still in flight.
    let mut status = health(port).await;
    while status != Ok(NOT_SERVING) && signalled.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        status = health(port).await;
    }
    let turned = signalled.elapsed();
    assert_eq!(status, Ok(NOT_SERVING), "health after SIGTERM");
    assert!(
        !in_flight.is_finished(),
        "the CreateTask must still be in flight when health turns NOT_SERVING"
    );
    // A new CreateTask submits nothing here, and is not an error either (that would cost the
    // task an attempt): a deferred meta that another replica submits.
    let mut fresh = connect(([127, 0, 0, 1], port).into()).await;
    let submits = mock.handle.stats().count("submit");
    let handed = create(&mut fresh, request(4101, "#!/bin/bash\ntrue\n"))
        .await
        .expect("a CreateTask during the drain is answered, not refused");
    match slurm_connector::service::meta::decode(&handed).unwrap() {
        slurm_connector::service::meta::Decoded::Ours(m) => {
            assert!(m.deferred.is_some() && m.job_id.0 == 0, "{m:?}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        mock.handle.stats().count("submit"),
        submits,
        "nothing submitted"
    );
    drop(fresh);

    // The call in flight completes: its job released, with the task's own comment back.
    let meta = in_flight
        .await
        .unwrap()
        .expect("the CreateTask in flight completes during the drain");
    assert_eq!(job_id(&meta), job);
    let answered = signalled.elapsed();
    let exit = serve.wait_exit(GRACE + Duration::from_secs(5));
    let exited = signalled.elapsed();
    let exit = exit.unwrap_or_else(|| panic!("serve still running {exited:?} after SIGTERM"));
    assert!(exit.success(), "serve exited with {exit}");
    assert!(
        exited < GRACE,
        "exited {exited:?} after SIGTERM, past the drain deadline"
    );
    let jobs = jobs_with_comments(&mock).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert!(
        !jobs[0].1.contains(slurm_connector::service::AWAITING_CHECK),
        "the job was released: {jobs:?}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("shutting down"), "{log_text}");
    assert!(log_text.contains("shut down"), "{log_text}");

    // The other replica (here: the replacement) submits the handed-off execution at its first
    // GetTask; both tasks run to SUCCEEDED, one job each.
    mock.handle.faults().set(FaultConfig::default());
    let other = ServeProcess::spawn(port, &serve_env(&mock, Some("20s")), &log);
    other.wait_listening();
    let mut c = connect(([127, 0, 0, 1], port).into()).await;
    wait_all(
        &mut c,
        &[meta.clone(), handed.clone()],
        &[Phase::Succeeded],
        Duration::from_secs(30),
    )
    .await;
    let per_key = jobs_per_key(&mock).await;
    assert_eq!(per_key.len(), 2, "{per_key:?}");
    assert!(per_key.values().all(|ids| ids.len() == 1), "{per_key:?}");
    println!(
        "DRILL sigterm: health NOT_SERVING {:.0} ms after SIGTERM with a CreateTask between submit \
         and release; a new CreateTask answered with a hand-off (deferred meta), nothing submitted \
         here; the one in flight answered {:.2}s after SIGTERM (job {job} released); exit 0 after \
         {:.2}s (deadline {}s); the replacement submitted the handed-off one; both SUCCEEDED, one \
         job each",
        turned.as_secs_f64() * 1000.0,
        answered.as_secs_f64(),
        exited.as_secs_f64(),
        GRACE.as_secs()
    );
    drop(other);
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_deadline_bounds_the_exit_and_the_retry_releases_the_held_job() {
    const GRACE: Duration = Duration::from_secs(1);
    let mock = Mock::start("deadline", Duration::from_secs(600), slow_release(60_000)).await;
    let log = mock.dir.join("serve.log");
    let port = free_port();
    let mut serve = ServeProcess::spawn(port, &serve_env(&mock, Some("1s")), &log);
    serve.wait_listening();
    let mut c = connect(([127, 0, 0, 1], port).into()).await;
    let in_flight = tokio::spawn({
        let mut c = c.clone();
        async move { create(&mut c, request(4200, "#!/bin/bash\nsleep 1\n")).await }
    });
    let job = one_held_job(&mock).await;
    serve.term();
    let signalled = Instant::now();
    let exit = serve
        .wait_exit(Duration::from_secs(15))
        .expect("serve exits although a release never answers");
    let exited = signalled.elapsed();
    assert!(exit.success(), "serve exited with {exit}");
    // The deadline, plus the background loops' 2 s to stop, plus process exit.
    assert!(
        exited < GRACE + Duration::from_secs(4),
        "exited {exited:?} after SIGTERM with a {GRACE:?} deadline"
    );
    assert!(
        in_flight.await.unwrap().is_err(),
        "the CreateTask cut at the deadline fails (the backend retries it)"
    );
    let jobs = jobs_with_comments(&mock).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert!(
        jobs[0]
            .1
            .ends_with(slurm_connector::service::AWAITING_CHECK),
        "the job cut before its release stays held (it cannot run unchecked): {jobs:?}"
    );

    // The backend retries the CreateTask against the replacement: the same one job, released.
    mock.handle.faults().set(FaultConfig::default());
    let mut serve = ServeProcess::spawn(port, &serve_env(&mock, Some("1s")), &log);
    serve.wait_listening();
    c = connect(([127, 0, 0, 1], port).into()).await;
    let meta = create(&mut c, request(4200, "#!/bin/bash\nsleep 1\n"))
        .await
        .expect("the retried CreateTask");
    assert_eq!(job_id(&meta), job, "the retry adopts the held job");
    wait_all(
        &mut c,
        &[meta],
        &[Phase::Succeeded],
        Duration::from_secs(30),
    )
    .await;
    let jobs = jobs_with_comments(&mock).await;
    assert_eq!(jobs.len(), 1, "one job for the execution: {jobs:?}");
    assert!(
        !jobs[0].1.contains(slurm_connector::service::AWAITING_CHECK),
        "{jobs:?}"
    );
    println!(
        "DRILL drain deadline: release never answering, SIGTERM with a {}s deadline → exit 0 after \
         {:.2}s, job {job} left held; the retried CreateTask adopted and released it; it SUCCEEDED",
        GRACE.as_secs(),
        exited.as_secs_f64()
    );
    serve.term();
    assert!(
        serve
            .wait_exit(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_a_deferred_submit_between_submit_and_release() {
    const GRACE: Duration = Duration::from_secs(20);
    let mock = Mock::start(
        "sigterm-deferred",
        Duration::from_secs(600),
        slow_release(3000),
    )
    .await;
    let log = mock.dir.join("serve.log");
    let port = free_port();
    let mut env = serve_env(&mock, Some("20s"));
    // CreateTask answers after 1 s, the release takes 3: the submit outlives its CreateTask.
    env.push(("FLYTE_SLURM_SUBMIT_WAIT", "1s".to_string()));
    let mut serve = ServeProcess::spawn(port, &env, &log);
    serve.wait_listening();
    let mut c = connect(([127, 0, 0, 1], port).into()).await;
    let meta = create(&mut c, request(4300, "#!/bin/bash\nsleep 1\n"))
        .await
        .expect("CreateTask answers (deferred)");
    match slurm_connector::service::meta::decode(&meta).unwrap() {
        slurm_connector::service::meta::Decoded::Ours(m) => {
            assert!(
                m.deferred.is_some(),
                "answered before its submit settled: {m:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    let job = one_held_job(&mock).await;
    serve.term();
    let signalled = Instant::now();
    let exit = serve
        .wait_exit(GRACE + Duration::from_secs(5))
        .expect("serve exits within the drain deadline");
    let exited = signalled.elapsed();
    assert!(exit.success(), "serve exited with {exit}");
    let jobs = jobs_with_comments(&mock).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert!(
        !jobs[0].1.contains(slurm_connector::service::AWAITING_CHECK),
        "the drain let the submit release its job: {jobs:?}"
    );
    assert!(
        exited > Duration::from_millis(500),
        "it waited for the release ({exited:?})"
    );
    println!(
        "DRILL sigterm deferred: SIGTERM while a deferred submit (its CreateTask answered) waited \
         on its release → job {job} released, exit 0 after {:.2}s",
        exited.as_secs_f64()
    );
    mock.stop().await;
}
