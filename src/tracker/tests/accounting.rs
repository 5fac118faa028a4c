//! What finished jobs used: one slurmdbd request per tick for all of them, none per GetTask;
//! awaited, then read, or given up on (no accounting, no record in time).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use super::super::*;
use crate::service::snapshot_phase as phase_of;
use crate::slurmrestd::{ClientError, JobInfo, JobState, JobUsage, Tres};

#[derive(Default)]
struct Fake {
    states: Mutex<HashMap<JobId, JobState>>,
    usages: Mutex<HashMap<JobId, JobUsage>>,
    /// `Some(false)`: slurmdbd answers an error; `Some(true)` or `None`: it answers.
    no_accounting: Mutex<bool>,
    failing: Mutex<bool>,
    /// The ids of each `accounting_usages` request.
    usage_calls: Mutex<Vec<Vec<JobId>>>,
}

impl SlurmApi for Fake {
    fn states<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>> {
        let all = self.states.lock().unwrap().clone();
        let r = ids
            .iter()
            .filter_map(|id| Some((*id, all.get(id)?.clone())))
            .collect();
        Box::pin(async move { Ok(r) })
    }
    fn job(&self, id: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>> {
        let s = self.states.lock().unwrap().get(&id).cloned();
        Box::pin(async move { Ok(s.map(|s| JobInfo::new(id, "j", s))) })
    }
    /// slurmdbd's records mirror slurmctld's states (it stores each job as slurmctld reports
    /// it); a cluster without accounting answers an error.
    fn accounting_jobs<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>> {
        let r = if *self.no_accounting.lock().unwrap() {
            Err(ClientError::Timeout {
                cluster: "c".into(),
                operation: "accounting_jobs",
            })
        } else {
            let all = self.states.lock().unwrap();
            Ok(ids
                .iter()
                .filter_map(|id| Some((*id, JobInfo::new(*id, "j", all.get(id)?.clone()))))
                .collect())
        };
        Box::pin(async move { r })
    }
    fn accounting_usages<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<Option<HashMap<JobId, JobUsage>>, ClientError>> {
        let mut asked = ids.to_vec();
        asked.sort();
        self.usage_calls.lock().unwrap().push(asked);
        let r = if *self.failing.lock().unwrap() {
            Err(ClientError::Timeout {
                cluster: "c".into(),
                operation: "accounting_usages",
            })
        } else if *self.no_accounting.lock().unwrap() {
            Ok(None)
        } else {
            let all = self.usages.lock().unwrap();
            Ok(Some(
                ids.iter()
                    .filter_map(|id| Some((*id, all.get(id)?.clone())))
                    .collect(),
            ))
        };
        Box::pin(async move { r })
    }
}

fn usage(id: u32, elapsed: i64, cpus: i64, cpu_used: f64) -> JobUsage {
    JobUsage {
        job_id: JobId(id),
        state: JobState::from_strings(["COMPLETED"]),
        start_time: Some(1000),
        end_time: Some(1000 + elapsed),
        elapsed_secs: Some(elapsed),
        cpu_total_secs: Some(cpu_used),
        cpu_user_secs: Some(cpu_used),
        cpu_system_secs: Some(0.0),
        max_rss_bytes: Some(10 << 20),
        energy_joules: None,
        allocated: vec![
            Tres {
                kind: "cpu".into(),
                name: String::new(),
                count: cpus,
            },
            Tres {
                kind: "node".into(),
                name: String::new(),
                count: 1,
            },
        ],
        source: "slurmdbd",
        array: None,
    }
}

/// A states tick, then the accounting loop's turn (as `run` interleaves them).
async fn round(t: &Tracker) {
    t.tick().await;
    t.read_accounting().await;
}

fn tracker(wait: Duration) -> (Arc<Fake>, Tracker) {
    let api = Arc::new(Fake::default());
    let cfg = TrackerConfig {
        accounting_wait: wait,
        ..TrackerConfig::default()
    };
    (api.clone(), Tracker::new("c", api, cfg))
}

fn finish(api: &Fake, ids: impl IntoIterator<Item = u32>, state: &str) {
    let mut s = api.states.lock().unwrap();
    for id in ids {
        s.insert(JobId(id), JobState::from_strings([state]));
    }
}

#[tokio::test]
async fn fifty_jobs_that_finish_together_cost_one_request_and_getask_none() {
    let (api, t) = tracker(Duration::from_secs(60));
    for id in 1..=50 {
        t.track(JobId(id));
    }
    finish(&api, 1..=50, "RUNNING");
    round(&t).await;
    assert!(
        api.usage_calls.lock().unwrap().is_empty(),
        "nothing finished yet"
    );
    finish(&api, 1..=50, "COMPLETED");
    {
        let mut u = api.usages.lock().unwrap();
        for id in 1..=50 {
            u.insert(JobId(id), usage(id, 10, 2, 15.0));
        }
    }
    round(&t).await;
    let calls = api.usage_calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one request for all: {calls:?}");
    assert_eq!(calls[0].len(), 50);
    for _ in 0..20 {
        for id in 1..=50 {
            let s = t.status(JobId(id)).await;
            match &s.accounting {
                Accounting::Read(u) => assert_eq!(u[0].job_id, JobId(id)),
                other => panic!("job {id}: {other:?}"),
            }
        }
    }
    round(&t).await;
    assert_eq!(
        api.usage_calls.lock().unwrap().len(),
        1,
        "1000 GetTasks and another tick: no more slurmdbd requests"
    );
}

#[tokio::test]
async fn a_record_slurmdbd_has_not_yet_is_awaited_then_read_at_a_later_tick() {
    let (api, t) = tracker(Duration::from_secs(60));
    t.track(JobId(7));
    finish(&api, [7], "FAILED");
    round(&t).await;
    let s = t.status(JobId(7)).await;
    assert!(
        phase_of(&s).is_terminal(),
        "the tracker's phase is Slurm's: {:?}",
        phase_of(&s)
    );
    assert_eq!(s.accounting, Accounting::Awaited);
    // The run's record without its end is not the final one.
    let mut open = usage(7, 3, 1, 1.0);
    open.end_time = None;
    api.usages.lock().unwrap().insert(JobId(7), open);
    round(&t).await;
    assert_eq!(t.status(JobId(7)).await.accounting, Accounting::Awaited);
    api.usages
        .lock()
        .unwrap()
        .insert(JobId(7), usage(7, 3, 1, 1.0));
    round(&t).await;
    assert!(matches!(
        t.status(JobId(7)).await.accounting,
        Accounting::Read(_)
    ));
    assert_eq!(api.usage_calls.lock().unwrap().len(), 3);
    round(&t).await;
    assert_eq!(api.usage_calls.lock().unwrap().len(), 3, "read once");
}

#[tokio::test]
async fn a_cluster_without_accounting_is_said_at_once_and_not_asked_again() {
    let (api, t) = tracker(Duration::from_secs(60));
    *api.no_accounting.lock().unwrap() = true;
    t.track(JobId(3));
    finish(&api, [3], "COMPLETED");
    round(&t).await;
    match t.status(JobId(3)).await.accounting {
        Accounting::Unavailable(why) => assert!(why.contains("no accounting"), "{why}"),
        other => panic!("{other:?}"),
    }
    round(&t).await;
    assert_eq!(api.usage_calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn slurmdbd_failing_past_the_wait_gives_up_naming_the_error() {
    let (api, t) = tracker(Duration::from_secs(2));
    *api.failing.lock().unwrap() = true;
    t.track(JobId(4));
    finish(&api, [4], "COMPLETED");
    round(&t).await;
    assert_eq!(t.status(JobId(4)).await.accounting, Accounting::Awaited);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    round(&t).await;
    match t.status(JobId(4)).await.accounting {
        Accounting::Unavailable(why) => {
            assert!(why.contains("no final record"), "{why}");
            assert!(
                why.contains("did not answer"),
                "names slurmdbd's error: {why}"
            );
        }
        other => panic!("{other:?}"),
    }
    let n = api.usage_calls.lock().unwrap().len();
    round(&t).await;
    assert_eq!(
        api.usage_calls.lock().unwrap().len(),
        n,
        "not asked after the wait"
    );
}

#[tokio::test]
async fn a_zero_wait_reads_nothing_and_holds_nothing() {
    let (api, t) = tracker(Duration::ZERO);
    t.track(JobId(5));
    finish(&api, [5], "COMPLETED");
    round(&t).await;
    assert_eq!(t.status(JobId(5)).await.accounting, Accounting::None);
    assert!(api.usage_calls.lock().unwrap().is_empty());
}

/// A finished job is no longer polled, but one whose terminal record fetch failed still is: if
/// Slurm requeues it meanwhile, what its old run used must not stand for the new run.
#[test]
fn a_state_that_runs_again_drops_the_old_runs_figures() {
    let mut e = Entry {
        state: Packed {
            base: Base::Completed,
            flags: 0,
        },
        known: Known::Seen,
        record_done: false,
        since: 0,
        extra: Some(Box::new(Extra {
            usage: Some(super::super::accounting::UsageSlot::Read(Arc::new(usage(
                8, 3, 1, 1.0,
            )))),
            ..Default::default()
        })),
    };
    super::super::resolve::apply_state(&mut e, &JobState::from_strings(["PENDING"]), 5);
    assert!(e.extra.as_ref().unwrap().usage.is_none());
}
