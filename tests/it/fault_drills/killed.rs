//! The real `serve` SIGKILLed while the backend retries CreateTask.

use super::*;

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
    let deferred = metas.iter().filter(|m| job_id(m) == 0).count();
    let answered: HashSet<u32> = metas
        .iter()
        .filter_map(|m| answered_job(m, &per_key))
        .collect();
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
         retried {retried}; answered deferred (submit outlasted the wait) {deferred}; orphaned jobs (submitted, answer lost, connector killed) found on the cluster and adopted {adopted}; jobs on the cluster {}, keys {}, duplicate keys {}, submits answered \
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
