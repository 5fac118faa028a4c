//! SIGTERM: the drain of CreateTasks and submits caught between submit and release.

use super::*;

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
    match slurm_connector::service::decode_meta(&handed).unwrap() {
        slurm_connector::service::Decoded::Ours(m) => {
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
    match slurm_connector::service::decode_meta(&meta).unwrap() {
        slurm_connector::service::Decoded::Ours(m) => {
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
