//! The poll: one request per tick, terminal records fetched once, adoption, hiccups, retries, eviction and the loop's interval.

use super::*;

#[tokio::test]
async fn one_states_request_per_tick_whatever_the_number_of_jobs() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    for id in 1..=1000 {
        fake.set(id, &["RUNNING"]);
        t.track(JobId(id));
    }
    for _ in 0..3 {
        assert_eq!(t.tick().await, 1000);
    }
    assert_eq!(fake.states_calls.load(Ordering::SeqCst), 3);
    assert_eq!(*fake.states_ids.lock().unwrap(), vec![1000, 1000, 1000]);
    // GetTask answers from the cache: no request at all.
    for id in 1..=1000 {
        assert_eq!(phase_of(&t.status(JobId(id)).await), Phase::Running);
    }
    assert_eq!(fake.states_calls.load(Ordering::SeqCst), 3);
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn terminal_job_record_fetched_once_then_no_longer_polled() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    fake.set(7, &["RUNNING"]);
    fake.set(8, &["RUNNING"]);
    t.track(JobId(7));
    t.track(JobId(8));
    t.tick().await;
    fake.set(7, &["FAILED"]);
    fake.set(8, &["COMPLETED"]);
    t.tick().await;
    let s = t.status(JobId(7)).await;
    assert_eq!(phase_of(&s), Phase::RetryableFailed);
    assert_eq!(s.exit_code.as_ref().unwrap().return_code, Some(3));
    assert_eq!(s.reason.as_deref(), Some("NonZeroExitCode"));
    assert_eq!(phase_of(&t.status(JobId(8)).await), Phase::Succeeded);
    // The completed job's record from slurmdbd; the failed one's from slurmctld, whose reason
    // says why it ended.
    assert_eq!(fake.acct_calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 0);
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 1);
    // Finished jobs with their record are not asked about again.
    assert_eq!(t.tick().await, 0);
    assert_eq!(fake.acct_calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.states_calls.load(Ordering::SeqCst), 2);
}

/// A thousand jobs that end in one tick: the records of those that completed are one slurmdbd
/// request whatever their number; those that failed are read from slurmctld, as they end.
#[tokio::test]
async fn the_records_of_every_job_that_ended_in_a_tick_are_one_request() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    for id in 1..=1000 {
        fake.set(id, &["RUNNING"]);
        t.track(JobId(id));
    }
    t.tick().await;
    for id in 1..=1000 {
        fake.set(id, &[if id % 2 == 0 { "COMPLETED" } else { "FAILED" }]);
    }
    t.tick().await;
    for id in 1..=1000 {
        let s = t.status(JobId(id)).await;
        let want = if id % 2 == 0 {
            Phase::Succeeded
        } else {
            Phase::RetryableFailed
        };
        assert_eq!(phase_of(&s), want, "{s:?}");
        if id % 2 == 1 {
            assert_eq!(s.reason.as_deref(), Some("NonZeroExitCode"), "{s:?}");
        }
    }
    assert_eq!(fake.acct_calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 500);
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 0);
    assert_eq!(fake.states_calls.load(Ordering::SeqCst), 2);
}

/// A map that succeeds costs slurmctld nothing for its ends: every record from slurmdbd.
#[tokio::test]
async fn completed_jobs_cost_slurmctld_no_read() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    for id in 1..=300 {
        fake.set(id, &["RUNNING"]);
        t.track(JobId(id));
    }
    t.tick().await;
    for id in 1..=300 {
        fake.set(id, &["COMPLETED"]);
    }
    t.tick().await;
    for id in 1..=300 {
        let s = t.status(JobId(id)).await;
        assert_eq!(phase_of(&s), Phase::Succeeded, "{s:?}");
        assert_eq!(s.exit_code.unwrap().return_code, Some(0));
    }
    assert_eq!(fake.acct_calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 0);
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 0);
}

/// slurmdbd stores an end a moment after slurmctld reports it. A job whose record it does not
/// have yet keeps its last phase one tick; the next tick asks slurmdbd again and, as it still
/// lags, finds the record in ONE listing of slurmctld's jobs.
#[tokio::test]
async fn an_end_slurmdbd_has_not_stored_waits_one_tick_then_comes_from_one_listing() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    for id in [7, 8] {
        fake.set(id, &["RUNNING"]);
        t.track(JobId(id));
    }
    t.tick().await;
    fake.dbd_lags.store(true, Ordering::SeqCst);
    fake.set(7, &["COMPLETED"]);
    fake.set(8, &["COMPLETED"]);
    t.tick().await;
    assert_eq!(phase_of(&t.status(JobId(7)).await), Phase::Running);
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 0);
    t.tick().await;
    for id in [7, 8] {
        let s = t.status(JobId(id)).await;
        assert_eq!(phase_of(&s), Phase::Succeeded, "{s:?}");
        assert_eq!(s.exit_code.as_ref().unwrap().return_code, Some(0), "{s:?}");
    }
    assert_eq!(
        fake.list_calls.load(Ordering::SeqCst),
        1,
        "one listing for both"
    );
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 0);
    // Caught up: the next end comes from slurmdbd again, in the tick that saw it.
    fake.dbd_lags.store(false, Ordering::SeqCst);
    fake.set(9, &["RUNNING"]);
    t.track(JobId(9));
    t.tick().await;
    fake.set(9, &["COMPLETED"]);
    t.tick().await;
    assert_eq!(phase_of(&t.status(JobId(9)).await), Phase::Succeeded);
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 1);
}

/// Without slurmdbd (none configured, or down) the records of the jobs that completed come from
/// ONE listing of slurmctld's jobs in the tick that saw them end.
#[tokio::test]
async fn without_slurmdbd_the_ends_of_a_tick_are_one_listing() {
    let fake = Arc::new(Fake::default());
    fake.dbd_down.store(true, Ordering::SeqCst);
    let t = tracker(&fake, cfg());
    for id in 1..=50 {
        fake.set(id, &["RUNNING"]);
        t.track(JobId(id));
    }
    t.tick().await;
    for id in 1..=50 {
        fake.set(id, &["COMPLETED"]);
    }
    t.tick().await;
    for id in 1..=50 {
        let s = t.status(JobId(id)).await;
        assert_eq!(phase_of(&s), Phase::Succeeded, "{s:?}");
        assert_eq!(s.exit_code.unwrap().return_code, Some(0));
    }
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 1);
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_job_never_seen_is_adopted_and_fetched_at_once() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut c = cfg();
    c.poll_interval = Duration::from_secs(3600); // only the adopter can answer
    let t2 = Arc::new(Tracker::new("c1", fake.clone() as Arc<dyn SlurmApi>, c));
    let runner = tokio::spawn(t2.clone().run(async {
        stop_rx.await.ok();
    }));
    // First tick of `run` fires at once; let it pass with nothing tracked.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = fake.states_calls.load(Ordering::SeqCst);
    for id in 40..50 {
        fake.set(id, &["RUNNING"]);
    }
    // A burst of GetTasks for unknown jobs (a restart) is answered by ONE batched request.
    let answers = futures::future::join_all((40..50).map(|id| {
        let t2 = t2.clone();
        async move { t2.status(JobId(id)).await }
    }))
    .await;
    for a in &answers {
        assert_eq!(phase_of(a), Phase::Running, "{a:?}");
    }
    assert_eq!(fake.states_calls.load(Ordering::SeqCst) - before, 1);
    assert_eq!(t2.len(), 10);
    stop_tx.send(()).ok();
    runner.await.unwrap();
    drop(t);
}

#[tokio::test]
async fn hiccups_keep_the_last_state_and_say_since_when() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    fake.set(1, &["RUNNING"]);
    t.track(JobId(1));
    t.tick().await;
    fake.down.store(true, Ordering::SeqCst);
    fake.set(1, &["COMPLETED"]);
    for _ in 0..5 {
        t.tick().await;
        let s = t.status(JobId(1)).await;
        assert_eq!(
            phase_of(&s),
            Phase::Running,
            "no wrong terminal phase during a fault"
        );
        let u = s.unreachable.expect("says it is unreachable");
        assert!(u.error.contains("connection refused"));
    }
    let since = t.status(JobId(1)).await.unreachable.unwrap().since;
    t.tick().await;
    assert_eq!(
        t.status(JobId(1)).await.unreachable.unwrap().since,
        since,
        "since = the first failure"
    );
    // An adoption during the fault answers quickly, without an error.
    let started = tokio::time::Instant::now();
    let (s, _) = tokio::join!(t.status(JobId(2)), async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        t.adopt_round().await
    });
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the failed round releases the waiter"
    );
    assert_eq!(phase_of(&s), Phase::Queued);
    assert!(s.unreachable.is_some() && s.note.is_some(), "{s:?}");
    fake.down.store(false, Ordering::SeqCst);
    t.tick().await;
    let s = t.status(JobId(1)).await;
    assert_eq!(phase_of(&s), Phase::Succeeded);
    assert!(s.unreachable.is_none());
}

/// slurmdbd fails and so does the listing of slurmctld's jobs: the end is published with the
/// state slurmctld answered, and the record is asked for again at the next tick.
#[tokio::test]
async fn record_fetch_is_retried_when_it_fails() {
    let fake = Arc::new(Fake::default());
    fake.set(1, &["COMPLETED"]);
    // states works; slurmdbd and the listing fail once each.
    struct Flaky(Arc<Fake>, AtomicBool, AtomicBool);
    impl SlurmApi for Flaky {
        fn states<'a>(
            &'a self,
            ids: &'a [JobId],
        ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>> {
            self.0.states(ids)
        }
        fn job(&self, id: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>> {
            self.0.job(id)
        }
        fn jobs(&self) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
            if self.2.swap(false, Ordering::SeqCst) {
                return Box::pin(async { Err(err()) });
            }
            self.0.jobs()
        }
        fn accounting_jobs<'a>(
            &'a self,
            ids: &'a [JobId],
        ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>> {
            if self.1.swap(false, Ordering::SeqCst) {
                return Box::pin(async { Err(err()) });
            }
            self.0.accounting_jobs(ids)
        }
    }
    let t = Tracker::new(
        "c1",
        Arc::new(Flaky(
            fake.clone(),
            AtomicBool::new(true),
            AtomicBool::new(true),
        )),
        cfg(),
    );
    t.track(JobId(1));
    t.tick().await;
    assert_eq!(phase_of(&t.status(JobId(1)).await), Phase::Succeeded);
    assert!(t.status(JobId(1)).await.exit_code.is_none());
    t.tick().await;
    assert_eq!(
        t.status(JobId(1)).await.exit_code.unwrap().return_code,
        Some(0)
    );
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn finished_jobs_are_evicted_after_the_ttl() {
    let fake = Arc::new(Fake::default());
    let mut c = cfg();
    c.terminal_ttl = Duration::ZERO;
    let t = tracker(&fake, c);
    fake.set(1, &["COMPLETED"]);
    fake.set(2, &["RUNNING"]);
    t.track(JobId(1));
    t.track(JobId(2));
    t.tick().await;
    assert_eq!(t.len(), 2);
    t.tick().await;
    assert_eq!(
        t.len(),
        1,
        "the finished job is gone, the running one stays"
    );
    assert!(t.cached(JobId(1)).is_none());
}

#[tokio::test]
async fn poll_loop_runs_on_its_interval() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    fake.set(1, &["PENDING"]);
    t.track(JobId(1));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let h = tokio::spawn(t.clone().run(async {
        rx.await.ok();
    }));
    tokio::time::sleep(Duration::from_millis(80)).await;
    fake.set(1, &["RUNNING"]);
    // The loop's next ticks see it (50 ms apart; a loaded CI machine may be late, so wait for
    // it rather than for a fixed time).
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while phase_of(&t.status(JobId(1)).await) != Phase::Running {
        assert!(
            tokio::time::Instant::now() < until,
            "the poll loop never saw RUNNING"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.send(()).ok();
    h.await.unwrap();
    assert!(fake.states_calls.load(Ordering::SeqCst) >= 2);
}

/// A restarted slurmctld that holds jobs back (it re-allocated jobs that had already run, and
/// drained the node "Duplicate jobid") left their tasks saying only "PENDING" for minutes. A job
/// pending for `pending_detail_after` gets slurmctld's reason, from ONE listing for all such
/// jobs, at most once per that interval; jobs pending briefly cost no listing at all.
#[tokio::test]
async fn a_job_pending_long_says_why_from_one_listing_per_interval() {
    let fake = Arc::new(Fake::default());
    let mut c = cfg();
    c.pending_detail_after = Duration::from_millis(300);
    let t = tracker(&fake, c);
    for id in [7, 8, 9] {
        fake.set(id, &["PENDING"]);
        t.track(JobId(id));
    }
    fake.reasons.lock().unwrap().insert(
        JobId(7),
        "ReqNodeNotAvail (ReqNodeNotAvail, UnavailableNodes:node1)",
    );
    fake.reasons.lock().unwrap().insert(JobId(8), "Priority");
    t.tick().await;
    assert_eq!(
        fake.list_calls.load(Ordering::SeqCst),
        0,
        "pending briefly: no listing"
    );
    assert_eq!(t.status(JobId(7)).await.reason, None);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    t.tick().await;
    t.tick().await;
    assert_eq!(
        fake.list_calls.load(Ordering::SeqCst),
        1,
        "one listing for the three jobs, not one per tick"
    );
    let s = t.status(JobId(7)).await;
    assert_eq!(
        (phase_of(&s), s.reason.as_deref()),
        (
            Phase::Queued,
            Some("ReqNodeNotAvail (ReqNodeNotAvail, UnavailableNodes:node1)")
        ),
        "{s:?}"
    );
    assert_eq!(t.status(JobId(8)).await.reason.as_deref(), Some("Priority"));
    assert_eq!(t.status(JobId(9)).await.reason, None, "Slurm gave none");
    // It runs: why it waited no longer shows.
    fake.set(7, &["RUNNING"]);
    t.tick().await;
    assert_eq!(t.status(JobId(7)).await.reason, None);
    tokio::time::sleep(Duration::from_millis(400)).await;
    t.tick().await;
    assert_eq!(
        fake.list_calls.load(Ordering::SeqCst),
        2,
        "once per interval"
    );
    // Nothing pending long: no listing.
    fake.set(8, &["RUNNING"]);
    fake.set(9, &["RUNNING"]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    t.tick().await;
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 2);
}

/// A task answered with a job its replica left held for the duplicate check (it died between
/// its held submit and its release) would wait for ever: the listing that gives long-pending
/// jobs their reason also tells which of them still carry the check's mark, for the service to
/// settle. A task's own `--hold` (held, no mark) is not one; a job released is one no longer.
#[tokio::test]
async fn a_job_left_held_for_the_duplicate_check_is_told_from_a_tasks_own_hold() {
    let fake = Arc::new(Fake::default());
    let mut c = cfg();
    c.pending_detail_after = Duration::from_millis(300);
    let t = tracker(&fake, c);
    for id in [7, 8] {
        fake.set(id, &["PENDING"]);
        fake.reasons
            .lock()
            .unwrap()
            .insert(JobId(id), "JobHeldUser");
        t.track(JobId(id));
    }
    let marked = format!("theirs{}", slurm_connector::service::AWAITING_CHECK);
    fake.comments.lock().unwrap().insert(JobId(7), marked);
    fake.comments
        .lock()
        .unwrap()
        .insert(JobId(8), "its own --hold".into());
    t.tick().await;
    assert!(!t.held_for_check(JobId(7)), "pending briefly: not told yet");
    // The tracker counts a job's age in whole seconds.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    t.tick().await;
    assert!(t.held_for_check(JobId(7)));
    assert!(
        !t.held_for_check(JobId(8)),
        "a task's own hold is left alone"
    );
    // Released (the mark removed in the same update), still waiting in the queue.
    fake.comments
        .lock()
        .unwrap()
        .insert(JobId(7), "theirs".into());
    fake.reasons.lock().unwrap().insert(JobId(7), "Priority");
    tokio::time::sleep(Duration::from_millis(400)).await;
    t.tick().await;
    assert!(!t.held_for_check(JobId(7)), "released: no longer held");
    // Held again by a dying replica's twin, then running: not pending, not held.
    fake.comments.lock().unwrap().insert(
        JobId(7),
        format!("theirs{}", slurm_connector::service::AWAITING_CHECK),
    );
    fake.reasons.lock().unwrap().insert(JobId(7), "JobHeldUser");
    tokio::time::sleep(Duration::from_millis(400)).await;
    t.tick().await;
    assert!(t.held_for_check(JobId(7)));
    fake.set(7, &["RUNNING"]);
    t.tick().await;
    assert!(!t.held_for_check(JobId(7)), "running: nothing to settle");
}
