//! slurmctld unreachable for a minute while 100 tasks run.

use super::*;

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
        // A job that ended is told as RUNNING while its accounting is read (one slurmdbd
        // request after the tick, `report/accounting.rs`): Slurm's state is current, the
        // terminal phase is held on purpose, not stale.
        let held = truth == Phase::Succeeded
            && *p == Phase::Running
            && msg.contains("ended (COMPLETED); reading what it used from slurmdbd");
        let recovered = !unreachable && (*p == truth || held);
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
