//! Job arrays, tick by tick, against a scripted slurmctld/slurmdbd.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::super::*;
use crate::domain::Phase;
use crate::service::snapshot_phase as phase_of;
use crate::slurmrestd::{
    ArrayMembership, ClientError, ElementState, ExitCode, JobInfo, JobState, States,
};

#[derive(Default)]
struct Scripted {
    elements: Mutex<Vec<ElementState>>,
    /// Plain jobs jobs/state lists (`<id>`, not `<id>_<index>`).
    plain: Mutex<HashMap<JobId, JobState>>,
    /// Records by the element's own id (slurmctld's `job/{id}`).
    records: Mutex<HashMap<JobId, JobInfo>>,
    /// slurmdbd's records by own id.
    accounting: Mutex<HashMap<JobId, JobInfo>>,
    job_calls: Mutex<Vec<JobId>>,
    states_calls: Mutex<u32>,
    /// Listings of slurmctld's jobs (`GET jobs/`).
    list_calls: Mutex<u32>,
    /// slurmdbd requests.
    acct_calls: Mutex<u32>,
    /// slurmdbd has not stored slurmctld's latest records yet.
    dbd_lags: Mutex<bool>,
}

impl Scripted {
    fn answer(&self, entries: &[(u32, u32, &str)]) {
        *self.elements.lock().unwrap() = entries
            .iter()
            .map(|(id, index, s)| ElementState {
                id: JobId(*id),
                index: *index,
                state: JobState::from_strings([*s]),
            })
            .collect();
    }
}

fn record(id: u32, array: u32, index: u32, state: &str, rc: u32) -> JobInfo {
    JobInfo {
        exit_code: Some(ExitCode {
            status: vec![if rc == 0 { "SUCCESS" } else { "ERROR" }.into()],
            return_code: Some(rc),
            signal: None,
            signal_name: None,
        }),
        nodes: Some("node1".into()),
        restart_count: Some(0),
        array: Some(ArrayMembership {
            array_job_id: JobId(array),
            task_id: Some(index),
        }),
        ..JobInfo::new(JobId(id), "j", JobState::from_strings([state]))
    }
}

impl SlurmApi for Scripted {
    fn states<'a>(
        &'a self,
        _: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>> {
        unreachable!("the tracker asks states_and_elements")
    }
    fn states_and_elements<'a>(
        &'a self,
        _: &'a [JobId],
    ) -> BoxFuture<'a, Result<States, ClientError>> {
        *self.states_calls.lock().unwrap() += 1;
        let elements = self.elements.lock().unwrap().clone();
        let jobs = self.plain.lock().unwrap().clone();
        Box::pin(async move { Ok(States { jobs, elements }) })
    }
    fn job(&self, id: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>> {
        self.job_calls.lock().unwrap().push(id);
        let r = self.records.lock().unwrap().get(&id).cloned();
        Box::pin(async move { Ok(r) })
    }
    fn job_records(&self, id: JobId) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        let r: Vec<JobInfo> = self
            .records
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.array.is_some_and(|a| a.array_job_id == id))
            .cloned()
            .collect();
        Box::pin(async move { Ok(r) })
    }
    fn jobs(&self) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        *self.list_calls.lock().unwrap() += 1;
        let r: Vec<JobInfo> = self.records.lock().unwrap().values().cloned().collect();
        Box::pin(async move { Ok(r) })
    }
    fn accounting_jobs<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>> {
        *self.acct_calls.lock().unwrap() += 1;
        // slurmdbd stores every job slurmctld reports (`records`), and keeps what left it.
        let mut known = if *self.dbd_lags.lock().unwrap() {
            HashMap::new()
        } else {
            self.records.lock().unwrap().clone()
        };
        known.extend(
            self.accounting
                .lock()
                .unwrap()
                .iter()
                .map(|(k, v)| (*k, v.clone())),
        );
        let r = known
            .into_iter()
            .filter(|(id, r)| {
                ids.contains(id) || r.array.is_some_and(|a| ids.contains(&a.array_job_id))
            })
            .collect();
        Box::pin(async move { Ok(r) })
    }
}

fn tracker() -> (Arc<Scripted>, Tracker) {
    let api = Arc::new(Scripted::default());
    let t = Tracker::new("c", api.clone(), TrackerConfig::default());
    (api, t)
}

fn states(s: &JobSnapshot) -> Vec<(u32, u32, String)> {
    s.elements
        .iter()
        .map(|e| {
            (
                e.index,
                e.snapshot.job_id.0,
                e.snapshot.state.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn set_records(api: &Scripted, recs: &[JobInfo]) {
    let mut m = api.records.lock().unwrap();
    for r in recs {
        m.insert(r.job_id, r.clone());
    }
}

/// Arrays with gaps (a burst whose claims split between two replicas): each is followed with
/// the union of the indices its tasks' metas name, and an element that starts is attributed to
/// the one array that has its index, without reading a record.
#[tokio::test]
async fn arrays_with_gaps_are_followed_with_the_indices_their_metas_name() {
    let (api, t) = tracker();
    // A meta read from an older claim names its own element only; a newer one the array's.
    t.track_array(JobId(100), &[0], None);
    t.track_array(JobId(100), &[0, 2], None);
    t.track_array(JobId(200), &[1, 3], None);
    api.answer(&[
        (100, 0, "PENDING"),
        (100, 2, "PENDING"),
        (200, 1, "PENDING"),
        (200, 3, "PENDING"),
    ]);
    t.tick().await;
    api.answer(&[
        (301, 0, "RUNNING"),
        (100, 2, "PENDING"),
        (302, 1, "RUNNING"),
        (200, 3, "PENDING"),
    ]);
    t.tick().await;
    assert!(api.job_calls.lock().unwrap().is_empty());
    assert_eq!(*api.acct_calls.lock().unwrap(), 0);
    assert_eq!(
        states(&t.status(JobId(100)).await),
        [(0, 301, "RUNNING".into()), (2, 100, "PENDING".into())]
    );
    assert_eq!(
        states(&t.status(JobId(200)).await),
        [(1, 302, "RUNNING".into()), (3, 200, "PENDING".into())]
    );
}

/// Two tracked arrays both start their element 0 in the same tick: the new ids cannot be
/// told apart from jobs/state alone, so each element's record says which array it is in
/// (once, from the tick's one slurmdbd request); known ids are attributed without asking again,
/// and the ends of all elements are that one request too. slurmctld is asked for no record.
#[tokio::test]
async fn elements_of_two_arrays_starting_together_are_told_apart_by_their_records() {
    let (api, t) = tracker();
    t.track_array(JobId(100), &[0, 1], None);
    t.track_array(JobId(200), &[0, 1], None);
    api.answer(&[
        (100, 0, "PENDING"),
        (100, 1, "PENDING"),
        (200, 0, "PENDING"),
        (200, 1, "PENDING"),
    ]);
    t.tick().await;
    assert_eq!(phase_of(&t.status(JobId(100)).await), Phase::Queued);
    set_records(
        &api,
        &[
            record(301, 100, 0, "RUNNING", 0),
            record(302, 200, 0, "RUNNING", 0),
        ],
    );
    api.answer(&[
        (302, 0, "RUNNING"),
        (301, 0, "RUNNING"),
        (100, 1, "PENDING"),
        (200, 1, "PENDING"),
    ]);
    t.tick().await;
    assert!(api.job_calls.lock().unwrap().is_empty());
    assert_eq!(*api.acct_calls.lock().unwrap(), 1);
    let a = t.status(JobId(100)).await;
    assert_eq!(phase_of(&a), Phase::Running);
    assert_eq!(
        states(&a),
        [(0, 301, "RUNNING".into()), (1, 100, "PENDING".into())]
    );
    assert_eq!(states(&t.status(JobId(200)).await)[0].1, 302);

    // They end; element 0 of 200 fails.
    set_records(
        &api,
        &[
            record(301, 100, 0, "COMPLETED", 0),
            record(302, 200, 0, "FAILED", 3),
            record(100, 100, 1, "COMPLETED", 0),
            record(200, 200, 1, "COMPLETED", 0),
        ],
    );
    api.answer(&[
        (301, 0, "COMPLETED"),
        (302, 0, "FAILED"),
        (100, 1, "COMPLETED"),
        (200, 1, "COMPLETED"),
    ]);
    api.job_calls.lock().unwrap().clear();
    t.tick().await;
    assert!(
        api.job_calls.lock().unwrap().is_empty(),
        "known ids are not asked about again"
    );
    let a = t.status(JobId(100)).await;
    assert_eq!(phase_of(&a), Phase::Succeeded);
    assert_eq!(a.class, None);
    let b = t.status(JobId(200)).await;
    assert_eq!(phase_of(&b), Phase::RetryableFailed);
    assert_eq!(b.class, Some(FailureClass::User));
    assert_eq!(b.state.as_deref(), Some("FAILED"));
    assert_eq!(b.exit_code.as_ref().and_then(|c| c.return_code), Some(3));
    assert_eq!(
        b.elements[0]
            .snapshot
            .exit_code
            .as_ref()
            .unwrap()
            .return_code,
        Some(3)
    );
    assert_eq!(
        *api.acct_calls.lock().unwrap(),
        2,
        "one slurmdbd request per tick"
    );
    // The failed element's record (its reason) from slurmctld's records of its array.
    assert_eq!(*api.list_calls.lock().unwrap(), 0);
    // Finished with their records: no longer polled.
    assert_eq!(t.tick().await, 0);
    assert_eq!(*api.states_calls.lock().unwrap(), 3, "one request per tick");
}

/// An element that ended before slurmdbd stored its end keeps its last state one tick (the
/// array's task never sees it ended without its record); the next tick finds the record in
/// ONE listing of slurmctld's jobs, never by reading the element or the array alone.
#[tokio::test]
async fn an_element_end_slurmdbd_lacks_waits_a_tick_then_comes_from_the_listing() {
    let (api, t) = tracker();
    t.track_array(JobId(500), &[0, 1], None);
    set_records(
        &api,
        &[
            record(501, 500, 0, "RUNNING", 0),
            record(500, 500, 1, "RUNNING", 0),
        ],
    );
    api.answer(&[(501, 0, "RUNNING"), (500, 1, "RUNNING")]);
    t.tick().await;
    *api.dbd_lags.lock().unwrap() = true;
    let mut done = record(501, 500, 0, "COMPLETED", 0);
    done.nodes = Some("node7".into());
    set_records(&api, &[done]);
    api.answer(&[(501, 0, "COMPLETED"), (500, 1, "RUNNING")]);
    t.tick().await;
    let s = t.status(JobId(500)).await;
    assert_eq!(states(&s)[0], (0, 501, "RUNNING".into()), "held a tick");
    assert_eq!(*api.list_calls.lock().unwrap(), 0);
    t.tick().await;
    let s = t.status(JobId(500)).await;
    assert_eq!(states(&s)[0], (0, 501, "COMPLETED".into()));
    assert_eq!(s.elements[0].snapshot.nodes.as_deref(), Some("node7"));
    assert_eq!(*api.list_calls.lock().unwrap(), 1);
    assert!(api.job_calls.lock().unwrap().is_empty());
}

/// One array whose elements 0 and 1 left slurmctld before the tracker saw them (an
/// adoption): slurmdbd's records of the array's id resolve them, by index.
#[tokio::test]
async fn elements_gone_from_slurmctld_are_read_from_slurmdbd() {
    let (api, t) = tracker();
    {
        let mut acc = api.accounting.lock().unwrap();
        acc.insert(JobId(401), record(401, 400, 0, "COMPLETED", 0));
        acc.insert(JobId(402), record(402, 400, 1, "OUT_OF_MEMORY", 0));
    }
    api.answer(&[(400, 2, "RUNNING")]);
    // GetTask after a restart adopts it; the adopter answers (`run` would, here by hand).
    let (s, ()) = tokio::join!(
        t.status_of(JobId(400), Some(&[0, 1, 2]), None, None),
        async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            t.adopt_round().await
        }
    );
    // The adoption's answer: two ended, one running.
    assert_eq!(phase_of(&s), Phase::Running);
    assert_eq!(
        states(&s),
        [
            (0, 401, "COMPLETED".into()),
            (1, 402, "OUT_OF_MEMORY".into()),
            (2, 400, "RUNNING".into())
        ]
    );
    set_records(&api, &[record(400, 400, 2, "FAILED", 1)]);
    api.answer(&[(400, 2, "FAILED")]);
    t.tick().await;
    let s = t.status(JobId(400)).await;
    // Two user failures: the lowest index is the array's.
    assert_eq!(s.class, Some(FailureClass::User));
    assert_eq!(s.state.as_deref(), Some("OUT_OF_MEMORY"));
}

/// slurmctld crashed after an array was submitted, restarted from an older state save and
/// gave the array's id to a later single job (the crash drill's case): the elements still
/// under that id are lost at once, their record that job's key (GetTask then reports the
/// task's own marker or the cluster's failure), not pending until `lost_after`; an element
/// that had started under its own id keeps being followed there.
/// slurmctld restarted from an older state save and listed a script array's id as a plain
/// job whose record is the array's own (its task's key in the name; the crash drill's case,
/// whose elements then complete): not another job's, so its elements are not lost at once,
/// and the record is read once.
/// A coalesced array lost in slurmctld's crash, and one of its executions submitted again (its
/// CreateTask retried on another replica found no job for its key) under the array's id: that
/// job is the element's own, followed as the element, whose end is that job's; the other
/// element is lost, its record another's.
/// The same when the execution submitted again is the one the array is tracked for (its `own`
/// key): that job is still that element's, not the array's own record listed plain.
/// The same, when the job that took the array's id ended and left slurmctld before a tick
/// saw it: slurmdbd's record under the array's id is no array.
/// Slurm requeues an element (it stays under its own id, pending again; recorded as
/// `arrays-requeued-*`): its record is fetched for the restart count, which the array's
/// snapshot reports while it is live.
#[tokio::test]
async fn a_requeued_element_brings_its_restart_count() {
    let (api, t) = tracker();
    t.track_array(JobId(2259), &[0, 1], None);
    set_records(&api, &[record(2260, 2259, 0, "RUNNING", 0)]);
    api.answer(&[(2260, 0, "RUNNING"), (2259, 1, "RUNNING")]);
    t.tick().await;
    assert_eq!(t.status(JobId(2259)).await.restart_count, None);
    let mut requeued = record(2260, 2259, 0, "PENDING", 0);
    requeued.restart_count = Some(1);
    set_records(&api, &[requeued]);
    api.answer(&[(2260, 0, "PENDING"), (2259, 1, "RUNNING")]);
    api.job_calls.lock().unwrap().clear();
    t.tick().await;
    assert_eq!(*api.job_calls.lock().unwrap(), [JobId(2260)]);
    let s = t.status(JobId(2259)).await;
    assert_eq!(s.restart_count, Some(1));
    assert_eq!(phase_of(&s), Phase::Running);
    // Pending again, not requeued again: not asked twice.
    api.job_calls.lock().unwrap().clear();
    t.tick().await;
    assert!(api.job_calls.lock().unwrap().is_empty());
}

/// The worst element decides: a permanent failure over a user one over the cluster's; a
/// cancelled element makes the array aborted when none failed.
#[tokio::test]
async fn the_worst_element_decides() {
    for (ends, want_state, want_phase) in [
        (
            ["COMPLETED", "NODE_FAIL", "FAILED"],
            "FAILED",
            Phase::RetryableFailed,
        ),
        (
            ["NODE_FAIL", "COMPLETED", "COMPLETED"],
            "NODE_FAIL",
            Phase::RetryableFailed,
        ),
        (
            ["CANCELLED", "COMPLETED", "COMPLETED"],
            "CANCELLED",
            Phase::Aborted,
        ),
        (
            ["CANCELLED", "TIMEOUT", "COMPLETED"],
            "TIMEOUT",
            Phase::RetryableFailed,
        ),
        (
            ["COMPLETED", "COMPLETED", "COMPLETED"],
            "COMPLETED",
            Phase::Succeeded,
        ),
    ] {
        let (api, t) = tracker();
        t.track_array(JobId(500), &[0, 1, 2], None);
        let recs: Vec<JobInfo> = ends
            .iter()
            .enumerate()
            .map(|(i, s)| record(501 + i as u32, 500, i as u32, s, 0))
            .collect();
        set_records(&api, &recs);
        api.answer(
            &ends
                .iter()
                .enumerate()
                .map(|(i, s)| (501 + i as u32, i as u32, *s))
                .collect::<Vec<_>>(),
        );
        t.tick().await;
        let s = t.status(JobId(500)).await;
        assert_eq!(s.state.as_deref(), Some(want_state), "{ends:?}");
        assert_eq!(phase_of(&s), want_phase, "{ends:?}");
    }
}

/// The same met by a replica that adopts the array (GetTask after a restart, or another
/// replica's array): the element's key comes with its GetTask, before the adoption's round,
/// which is the one that meets the job under the array's id: the key must be known by then.
/// The same on a replica that followed a coalesced array through another element's GetTasks
/// only: it cannot name element 0's execution, so the job under the array's id with a key it
/// does not know may be element 0's own; that element is not lost on that alone, and once its
/// GetTask names its key, it is that job. The element whose key it knows (another) is lost.
mod given_away;

/// v0.0.40's `jobs/state` lists every element under the array's id (recorded:
/// `24.11_v0.0.40_arrays-state-ended`): an element that failed is published with its own record
/// (exit code, own id) all the same, read with the tick's other ends, and later ticks keep the
/// own id its record gave it.
#[tokio::test]
async fn elements_listed_under_the_arrays_id_get_their_own_records() {
    let (api, t) = tracker();
    t.track_array(JobId(500), &[0, 1], None);
    api.answer(&[(500, 0, "RUNNING"), (500, 1, "RUNNING")]);
    t.tick().await;
    set_records(
        &api,
        &[
            record(501, 500, 0, "FAILED", 3),
            record(500, 500, 1, "COMPLETED", 0),
        ],
    );
    api.answer(&[(500, 0, "FAILED"), (500, 1, "COMPLETED")]);
    for _ in 0..2 {
        t.tick().await;
        let s = t.status(JobId(500)).await;
        assert_eq!(
            states(&s),
            [(0, 501, "FAILED".into()), (1, 500, "COMPLETED".into())]
        );
        let failed = &s.elements[0].snapshot;
        assert_eq!(
            failed.exit_code.as_ref().and_then(|e| e.return_code),
            Some(3)
        );
    }
    assert_eq!(*api.list_calls.lock().unwrap(), 0, "no listing");
}
