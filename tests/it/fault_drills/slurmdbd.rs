//! slurmdbd slow, then down, then slow again while a restarted connector adopts.

use super::*;

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
