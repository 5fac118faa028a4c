//! Jobs slurmctld no longer knows, or whose state it does not: slurmdbd, exit markers, unknown states, requeues.

use super::*;

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
    assert_eq!(phase_of(&t.status(JobId(1)).await), Phase::Succeeded);
    let s2 = t.status(JobId(2)).await;
    assert_eq!(phase_of(&s2), Phase::RetryableFailed);
    assert_eq!(s2.reason.as_deref(), Some("TimeLimit"));
    // Neither knows 3..5 yet (purge window): the last state is kept, with a note.
    let s3 = t.status(JobId(3)).await;
    assert_eq!(phase_of(&s3), Phase::Running);
    assert!(s3.note.as_deref().unwrap().contains("slurmdbd"), "{s3:?}");
    // slurmdbd catches up.
    fake.dbd
        .lock()
        .unwrap()
        .insert(JobId(3), info(JobId(3), &["CANCELLED"], 0, None));
    t.tick().await;
    assert_eq!(phase_of(&t.status(JobId(3)).await), Phase::Aborted);
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
    assert_eq!(phase_of(&s), Phase::RetryableFailed, "{s:?}");
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
    assert_eq!(phase_of(&s), Phase::Queued);
    assert!(s.note.unwrap().contains("SOMETHING_NEW"));

    let mut c = cfg();
    c.unknown_state_after = Duration::ZERO;
    let t = tracker(&fake, c);
    t.track(JobId(5));
    t.tick().await;
    let s = t.status(JobId(5)).await;
    assert_eq!(phase_of(&s), Phase::Failed);
    assert!(s.note.unwrap().contains("does not know"));
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
    assert_eq!(phase_of(&s), Phase::Succeeded, "{s:?}");
    assert_eq!(s.state.as_deref(), Some("COMPLETED"));
    assert!(
        s.note.as_deref().unwrap().contains("exit-status marker"),
        "{s:?}"
    );
    let s = t.status(JobId(2)).await;
    // The user's code failed: Flyte's retries apply.
    assert_eq!(phase_of(&s), Phase::RetryableFailed, "{s:?}");
    assert_eq!(s.class, Some(FailureClass::User));
    assert_eq!(s.exit_code.as_ref().unwrap().to_string(), "3:0");
    // Without accounting, the marker still tells a timeout, a cancel and an OOM kill apart.
    let s = t.status(JobId(5)).await;
    assert_eq!(
        (
            s.state.as_deref(),
            phase_of(&s),
            s.class,
            s.signal.as_deref()
        ),
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
        (s.state.as_deref(), phase_of(&s), s.class),
        (Some("CANCELLED"), Phase::Aborted, None),
        "{s:?}"
    );
    let s = t.status(JobId(7)).await;
    assert_eq!(
        (s.state.as_deref(), phase_of(&s)),
        (Some("OUT_OF_MEMORY"), Phase::RetryableFailed),
        "{s:?}"
    );
    // No (readable) marker: the existing rule applies (lost after `lost_after`, zero here). A
    // job lost with no trace is the cluster's failure, not the code's.
    for id in [3, 4] {
        let s = t.status(JobId(id)).await;
        assert_eq!(phase_of(&s), Phase::RetryableFailed, "{s:?}");
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
    assert_eq!(phase_of(&t.status(JobId(4)).await), Phase::Running);
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
    assert_eq!((phase_of(&s), s.class), (Phase::Queued, None), "{s:?}");
    assert_eq!(s.restart_count, Some(1), "{s:?}");
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 1);
    // Still pending: no second read.
    t.tick().await;
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 1);

    assert_eq!(s.reason.as_deref(), Some("BeginTime"));
    // It runs again and completes: the terminal record is still read (slurmdbd's, with the
    // tick's other ends), and succeeds.
    fake.reasons.lock().unwrap().remove(&JobId(4));
    fake.set(4, &["RUNNING"]);
    t.tick().await;
    fake.set(4, &["COMPLETED"]);
    t.tick().await;
    let s = t.status(JobId(4)).await;
    assert_eq!(phase_of(&s), Phase::Succeeded, "{s:?}");
    assert_eq!(s.restart_count, Some(1));
    assert_eq!(s.reason, None, "the requeue's reason does not stay: {s:?}");
    assert_eq!(
        fake.job_calls.load(Ordering::SeqCst),
        1,
        "no read of slurmctld for its end"
    );

    // A REQUEUED flag seen on the way (PENDING+REQUEUED) counts once too.
    fake.set(5, &["RUNNING"]);
    t.track(JobId(5));
    t.tick().await;
    fake.set(5, &["PENDING", "REQUEUED"]);
    t.tick().await;
    fake.set(5, &["PENDING"]);
    t.tick().await;
    assert_eq!(fake.job_calls.load(Ordering::SeqCst), 2);
    assert_eq!(phase_of(&t.status(JobId(5)).await), Phase::Queued);
}
