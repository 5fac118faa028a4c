//! The batched state tracker against a fake cluster that counts every call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::slurmrestd::{ClientError, ExitCode, JobId, JobInfo, JobState};
use slurm_connector::tracker::{
    ExitMarker, FailureClass, MarkerCause, SlurmApi, Tracker, TrackerConfig,
};

#[derive(Default)]
struct Fake {
    /// What slurmctld knows.
    ctld: Mutex<HashMap<JobId, JobState>>,
    /// What slurmdbd knows.
    dbd: Mutex<HashMap<JobId, JobInfo>>,
    down: AtomicBool,
    dbd_down: AtomicBool,
    states_calls: AtomicUsize,
    states_ids: Mutex<Vec<usize>>,
    job_calls: AtomicUsize,
    acct_calls: AtomicUsize,
    /// Slurm's `restart_cnt` of a job (how often it requeued it).
    restarts: Mutex<HashMap<JobId, u32>>,
    /// The reason of a job that is not failed (a requeued job's BeginTime).
    reasons: Mutex<HashMap<JobId, &'static str>>,
    /// `GET jobs/` listings (the reasons of long-pending jobs).
    list_calls: AtomicUsize,
}

fn err() -> ClientError {
    ClientError::Unreachable {
        cluster: "c1".into(),
        operation: "jobs_state",
        detail: "connection refused".into(),
        connect: true,
    }
}

fn info(id: JobId, state: &[&str], rc: u32, reason: Option<&str>) -> JobInfo {
    JobInfo {
        job_id: id,
        name: format!("job{id}"),
        state: JobState::from_strings(state.iter().copied()),
        exit_code: Some(ExitCode {
            status: vec![if rc == 0 { "SUCCESS" } else { "ERROR" }.into()],
            return_code: Some(rc),
            signal: None,
            signal_name: None,
        }),
        reason: reason.map(String::from),
        comment: None,
        user: None,
        standard_output: None,
        standard_error: None,
        current_working_directory: None,
        partition: None,
        submit_time: None,
        start_time: None,
        end_time: None,
        nodes: None,
        restart_count: None,
        time_limit_minutes: None,
        memory_per_node_mib: None,
        array: None,
    }
}

impl Fake {
    fn set(&self, id: u32, state: &[&str]) {
        self.ctld
            .lock()
            .unwrap()
            .insert(JobId(id), JobState::from_strings(state.iter().copied()));
    }
    fn purge(&self, id: u32) {
        self.ctld.lock().unwrap().remove(&JobId(id));
    }
}

impl SlurmApi for Fake {
    fn states<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>> {
        Box::pin(async move {
            self.states_calls.fetch_add(1, Ordering::SeqCst);
            self.states_ids.lock().unwrap().push(ids.len());
            if self.down.load(Ordering::SeqCst) {
                return Err(err());
            }
            let ctld = self.ctld.lock().unwrap();
            Ok(ids
                .iter()
                .filter_map(|id| ctld.get(id).map(|s| (*id, s.clone())))
                .collect())
        })
    }
    fn job(&self, id: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>> {
        Box::pin(async move {
            self.job_calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(err());
            }
            let ctld = self.ctld.lock().unwrap();
            Ok(ctld.get(&id).map(|s| {
                let failed = s.base.as_str() != "COMPLETED";
                let mut i = info(
                    id,
                    &[s.base.as_str()],
                    if failed { 3 } else { 0 },
                    failed.then_some("NonZeroExitCode"),
                );
                i.state = s.clone();
                i.restart_count =
                    Some(self.restarts.lock().unwrap().get(&id).copied().unwrap_or(0));
                if let Some(r) = self.reasons.lock().unwrap().get(&id) {
                    i.reason = Some(r.to_string());
                }
                i
            }))
        })
    }
    fn jobs(&self) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async move {
            self.list_calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(err());
            }
            let reasons = self.reasons.lock().unwrap();
            Ok(self
                .ctld
                .lock()
                .unwrap()
                .iter()
                .map(|(id, s)| {
                    let mut i = info(*id, &[s.base.as_str()], 0, reasons.get(id).copied());
                    i.state = s.clone();
                    i
                })
                .collect())
        })
    }
    fn accounting_jobs<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>> {
        Box::pin(async move {
            self.acct_calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) || self.dbd_down.load(Ordering::SeqCst) {
                return Err(err());
            }
            let dbd = self.dbd.lock().unwrap();
            Ok(ids
                .iter()
                .filter_map(|id| dbd.get(id).map(|i| (*id, i.clone())))
                .collect())
        })
    }
}

fn cfg() -> TrackerConfig {
    TrackerConfig {
        poll_interval: Duration::from_millis(50),
        terminal_ttl: Duration::from_secs(3600),
        lost_after: Duration::from_secs(3600),
        unknown_state_after: Duration::from_secs(3600),
        pending_detail_after: Duration::from_secs(3600),
        adopt_wait: Duration::from_secs(2),
    }
}

fn tracker(fake: &Arc<Fake>, cfg: TrackerConfig) -> Arc<Tracker> {
    Arc::new(Tracker::new("c1", fake.clone() as Arc<dyn SlurmApi>, cfg))
}

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
        assert_eq!(t.status(JobId(id)).await.phase, Phase::Running);
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
    assert_eq!(s.phase, Phase::RetryableFailed);
    assert_eq!(s.exit_code.as_ref().unwrap().return_code, Some(3));
    assert_eq!(s.reason.as_deref(), Some("NonZeroExitCode"));
    assert_eq!(t.status(JobId(8)).await.phase, Phase::Succeeded);
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 2);
    // Finished jobs with their record are not asked about again.
    assert_eq!(t.tick().await, 0);
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 2);
    assert_eq!(fake.states_calls.load(Ordering::SeqCst), 2);
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
        assert_eq!(a.phase, Phase::Running, "{a:?}");
    }
    assert_eq!(fake.states_calls.load(Ordering::SeqCst) - before, 1);
    assert_eq!(t2.len(), 10);
    stop_tx.send(()).ok();
    runner.await.unwrap();
    drop(t);
}

#[tokio::test]
async fn aging_out_of_slurmctld_resolves_through_slurmdbd_in_one_batch() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    for id in 1..=5 {
        fake.set(id, &["RUNNING"]);
        t.track(JobId(id));
    }
    t.tick().await;
    // All five finish and are purged before the next tick (e.g. the connector was busy).
    for id in 1..=5 {
        fake.purge(id);
    }
    fake.dbd
        .lock()
        .unwrap()
        .insert(JobId(1), info(JobId(1), &["COMPLETED"], 0, None));
    fake.dbd
        .lock()
        .unwrap()
        .insert(JobId(2), info(JobId(2), &["TIMEOUT"], 0, Some("TimeLimit")));
    t.tick().await;
    assert_eq!(
        fake.acct_calls.load(Ordering::SeqCst),
        1,
        "one slurmdbd request for all missing jobs"
    );
    assert_eq!(t.status(JobId(1)).await.phase, Phase::Succeeded);
    let s2 = t.status(JobId(2)).await;
    assert_eq!(s2.phase, Phase::RetryableFailed);
    assert_eq!(s2.reason.as_deref(), Some("TimeLimit"));
    // Neither knows 3..5 yet (purge window): the last state is kept, with a note.
    let s3 = t.status(JobId(3)).await;
    assert_eq!(s3.phase, Phase::Running);
    assert!(s3.note.as_deref().unwrap().contains("slurmdbd"), "{s3:?}");
    // slurmdbd catches up.
    fake.dbd
        .lock()
        .unwrap()
        .insert(JobId(3), info(JobId(3), &["CANCELLED"], 0, None));
    t.tick().await;
    assert_eq!(t.status(JobId(3)).await.phase, Phase::Aborted);
}

#[tokio::test]
async fn jobs_unknown_everywhere_do_not_stay_running_forever() {
    let fake = Arc::new(Fake::default());
    let mut c = cfg();
    c.lost_after = Duration::ZERO;
    let t = tracker(&fake, c);
    fake.set(9, &["RUNNING"]);
    t.track(JobId(9));
    t.tick().await;
    fake.purge(9);
    fake.dbd_down.store(true, Ordering::SeqCst);
    t.tick().await;
    let s = t.status(JobId(9)).await;
    assert_eq!(s.phase, Phase::RetryableFailed, "{s:?}");
    let note = s.note.unwrap();
    assert!(
        note.contains("cannot be determined") && note.contains("slurmdbd:"),
        "{note}"
    );
}

#[tokio::test]
async fn unknown_slurm_states_are_not_running_and_end_as_failed() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    fake.set(5, &["SOMETHING_NEW"]);
    t.track(JobId(5));
    t.tick().await;
    let s = t.status(JobId(5)).await;
    assert_eq!(s.phase, Phase::Queued);
    assert!(s.note.unwrap().contains("SOMETHING_NEW"));

    let mut c = cfg();
    c.unknown_state_after = Duration::ZERO;
    let t = tracker(&fake, c);
    t.track(JobId(5));
    t.tick().await;
    let s = t.status(JobId(5)).await;
    assert_eq!(s.phase, Phase::Failed);
    assert!(s.note.unwrap().contains("does not know"));
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
            s.phase,
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
    assert_eq!(s.phase, Phase::Queued);
    assert!(s.unreachable.is_some() && s.note.is_some(), "{s:?}");
    fake.down.store(false, Ordering::SeqCst);
    t.tick().await;
    let s = t.status(JobId(1)).await;
    assert_eq!(s.phase, Phase::Succeeded);
    assert!(s.unreachable.is_none());
}

#[tokio::test]
async fn record_fetch_is_retried_when_it_fails() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    fake.set(1, &["FAILED"]);
    t.track(JobId(1));
    // states works, the record fetch fails once.
    struct Flaky(Arc<Fake>, AtomicBool);
    impl SlurmApi for Flaky {
        fn states<'a>(
            &'a self,
            ids: &'a [JobId],
        ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>> {
            self.0.states(ids)
        }
        fn job(&self, id: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>> {
            if self.1.swap(false, Ordering::SeqCst) {
                return Box::pin(async { Err(err()) });
            }
            self.0.job(id)
        }
        fn accounting_jobs<'a>(
            &'a self,
            ids: &'a [JobId],
        ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>> {
            self.0.accounting_jobs(ids)
        }
    }
    let t2 = Tracker::new(
        "c1",
        Arc::new(Flaky(fake.clone(), AtomicBool::new(true))),
        cfg(),
    );
    t2.track(JobId(1));
    t2.tick().await;
    assert_eq!(t2.status(JobId(1)).await.phase, Phase::RetryableFailed);
    assert!(t2.status(JobId(1)).await.exit_code.is_none());
    t2.tick().await;
    assert_eq!(
        t2.status(JobId(1)).await.exit_code.unwrap().return_code,
        Some(3)
    );
    drop(t);
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
    while t.status(JobId(1)).await.phase != Phase::Running {
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

/// Exit-status markers as the service would read them: id → marker, or an error.
#[derive(Default)]
struct Markers {
    codes: Mutex<HashMap<JobId, Result<ExitMarker, String>>>,
    calls: AtomicUsize,
}

impl slurm_connector::tracker::ExitMarkers for Markers {
    fn exit_code(&self, id: JobId) -> BoxFuture<'_, Result<Option<ExitMarker>, String>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match self.codes.lock().unwrap().get(&id) {
                None => Ok(None),
                Some(r) => r.clone().map(Some),
            }
        })
    }
}

#[tokio::test]
async fn jobs_unknown_to_slurmctld_and_slurmdbd_are_resolved_from_their_markers() {
    let fake = Arc::new(Fake::default());
    fake.dbd_down.store(true, Ordering::SeqCst);
    let markers = Arc::new(Markers::default());
    let mut c = cfg();
    c.lost_after = Duration::ZERO;
    let t = Arc::new(
        Tracker::new("c1", fake.clone() as Arc<dyn SlurmApi>, c)
            .with_exit_markers(markers.clone() as Arc<dyn slurm_connector::tracker::ExitMarkers>),
    );
    for id in [1, 2, 3, 4, 5, 6, 7] {
        fake.set(id, &["RUNNING"]);
        t.track(JobId(id));
    }
    t.tick().await;
    assert_eq!(
        markers.calls.load(Ordering::SeqCst),
        0,
        "running jobs: no marker read"
    );
    // All finish and age out between two polls; most left a marker, one a broken one.
    for id in [1, 2, 3, 4, 5, 6, 7] {
        fake.purge(id);
    }
    {
        let signalled = |code, signal: &str, cause| ExitMarker {
            code,
            signal: Some(signal.into()),
            cause,
            job_id: None,
        };
        let mut m = markers.codes.lock().unwrap();
        m.insert(JobId(1), Ok(ExitMarker::code(0)));
        m.insert(JobId(2), Ok(ExitMarker::code(3)));
        m.insert(JobId(3), Err("malformed".into()));
        m.insert(
            JobId(5),
            Ok(signalled(143, "TERM", Some(MarkerCause::TimeLimit))),
        );
        m.insert(JobId(6), Ok(signalled(143, "TERM", None)));
        m.insert(
            JobId(7),
            Ok(ExitMarker {
                code: 137,
                signal: None,
                cause: Some(MarkerCause::OutOfMemory),
                job_id: Some(7),
            }),
        );
    }
    t.tick().await;
    let s = t.status(JobId(1)).await;
    assert_eq!(s.phase, Phase::Succeeded, "{s:?}");
    assert_eq!(s.state.as_deref(), Some("COMPLETED"));
    assert!(
        s.note.as_deref().unwrap().contains("exit-status marker"),
        "{s:?}"
    );
    let s = t.status(JobId(2)).await;
    // The user's code failed: Flyte's retries apply.
    assert_eq!(s.phase, Phase::RetryableFailed, "{s:?}");
    assert_eq!(s.class, Some(FailureClass::User));
    assert_eq!(s.exit_code.as_ref().unwrap().to_string(), "3:0");
    // Without accounting, the marker still tells a timeout, a cancel and an OOM kill apart.
    let s = t.status(JobId(5)).await;
    assert_eq!(
        (s.state.as_deref(), s.phase, s.class, s.signal.as_deref()),
        (
            Some("TIMEOUT"),
            Phase::RetryableFailed,
            Some(FailureClass::User),
            Some("TERM")
        ),
        "{s:?}"
    );
    let s = t.status(JobId(6)).await;
    assert_eq!(
        (s.state.as_deref(), s.phase, s.class),
        (Some("CANCELLED"), Phase::Aborted, None),
        "{s:?}"
    );
    let s = t.status(JobId(7)).await;
    assert_eq!(
        (s.state.as_deref(), s.phase),
        (Some("OUT_OF_MEMORY"), Phase::RetryableFailed),
        "{s:?}"
    );
    // No (readable) marker: the existing rule applies (lost after `lost_after`, zero here). A
    // job lost with no trace is the cluster's failure, not the code's.
    for id in [3, 4] {
        let s = t.status(JobId(id)).await;
        assert_eq!(s.phase, Phase::RetryableFailed, "{s:?}");
        assert_eq!(s.class, Some(FailureClass::Infrastructure), "{s:?}");
        assert!(
            s.note.as_deref().unwrap().contains("cannot be determined"),
            "{s:?}"
        );
    }
    // Resolved jobs are final: no more reads for them.
    let calls = markers.calls.load(Ordering::SeqCst);
    t.tick().await;
    assert_eq!(markers.calls.load(Ordering::SeqCst), calls);
}

/// Slurm requeues a job itself after a node failure or a preemption: RUNNING, then PENDING again
/// under the same id. The tracker reads the record once for it (the restart count the message
/// and the budget use), keeps polling the job, and reports it queued, not failed.
#[tokio::test]
async fn a_job_slurm_requeued_is_queued_with_its_restart_count_read_once() {
    let fake = Arc::new(Fake::default());
    let t = tracker(&fake, cfg());
    fake.set(4, &["RUNNING"]);
    t.track(JobId(4));
    t.tick().await;
    assert_eq!(t.status(JobId(4)).await.phase, Phase::Running);
    assert_eq!(
        fake.job_calls.load(Ordering::SeqCst),
        0,
        "no record while it runs"
    );

    fake.restarts.lock().unwrap().insert(JobId(4), 1);
    fake.set(4, &["PENDING"]);
    fake.reasons.lock().unwrap().insert(JobId(4), "BeginTime");
    t.tick().await;
    let s = t.status(JobId(4)).await;
    assert_eq!((s.phase, s.class), (Phase::Queued, None), "{s:?}");
    assert_eq!(s.restart_count, Some(1), "{s:?}");
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 1);
    // Still pending: no second read.
    t.tick().await;
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 1);

    assert_eq!(s.reason.as_deref(), Some("BeginTime"));
    // It runs again and completes: the terminal record is still fetched, and succeeds.
    fake.reasons.lock().unwrap().remove(&JobId(4));
    fake.set(4, &["RUNNING"]);
    t.tick().await;
    fake.set(4, &["COMPLETED"]);
    t.tick().await;
    let s = t.status(JobId(4)).await;
    assert_eq!(s.phase, Phase::Succeeded, "{s:?}");
    assert_eq!(s.restart_count, Some(1));
    assert_eq!(s.reason, None, "the requeue's reason does not stay: {s:?}");
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 2);

    // A REQUEUED flag seen on the way (PENDING+REQUEUED) counts once too.
    fake.set(5, &["RUNNING"]);
    t.track(JobId(5));
    t.tick().await;
    fake.set(5, &["PENDING", "REQUEUED"]);
    t.tick().await;
    fake.set(5, &["PENDING"]);
    t.tick().await;
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 3);
    assert_eq!(t.status(JobId(5)).await.phase, Phase::Queued);
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
        (s.phase, s.reason.as_deref()),
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
