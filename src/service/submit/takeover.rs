//! Takeovers: what a dead replica left unfinished, finished here instead.
//!
//! GetTask only reads. What it finds left undone it queues with the cluster's `Submitter`, and
//! answers QUEUED; the cluster's `takeovers[<cluster>]` background task (`run_takeovers`,
//! `deferred.rs`) does it:
//! - a deferred meta past its takeover age (`TAKE_OVER_AFTER`, `deferred.rs`) with no released
//!   job on the cluster ([`TakeOver`], `take_over`): the paced submit, which the once-only
//!   protocol keeps to one job even if the first replica was only slow. One queued takeover per
//!   execution (a GetTask repeated before the task drains the queue replaces it), and a submit
//!   already running for it is joined, not started again (`Executions::submit_or_join`);
//! - a job (or array) a task was answered with that is still held for its duplicate check long
//!   after ([`Settle`], `Submitter::settle_held`; the tracker tells, `Tracker::held_for_check`): its replica
//!   died between its held submit and its release, through a path that should have settled it
//!   and did not. `protocol::settle_orphan` checks it and releases (or cancels) it, at most once
//!   a [`SETTLE_EVERY`] per job however often GetTask asks; without this it would wait an hour,
//!   then be cancelled as abandoned (`idempotency::ABANDONED_AFTER`), only if a check ran.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::{JobDescription, JobId};

/// A deferred submit to make here: what its meta carries.
#[derive(Debug, Clone)]
pub struct TakeOver {
    pub key: String,
    pub job: JobDescription,
    /// The task's meta without its deferred part: completed with the job once it exists.
    pub template: ResourceMeta,
}

/// A held job a task was answered with, to settle here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    /// The job, or the coalesced array, the task's meta names.
    pub job_id: JobId,
    /// Whose it is (the meta's `slurm_user`): its release is that user's update.
    pub slurm_user: Option<String>,
    /// The execution's claim (the meta's `claim`), when it was made through one: released as
    /// the claim records it, not by the keys' check.
    pub claim: Option<String>,
}

/// A held job is settled at most this often, however many GetTasks find it still held (the
/// tracker's flag lags the release by up to its listing interval).
pub const SETTLE_EVERY: Duration = Duration::from_secs(60);

/// What the cluster's background task is to do, queued by GetTask.
#[derive(Debug)]
pub enum Queued {
    /// Boxed: a job description is large beside a job id.
    Submit(Box<TakeOver>),
    Settle(Settle),
}

/// The work queued by GetTask, waiting for the cluster's background task.
#[derive(Default)]
pub struct Takeovers {
    queued: Mutex<HashMap<String, TakeOver>>,
    settles: Mutex<Settles>,
    /// A permit is kept when nobody waits, so work queued while the task is busy starting the
    /// last is not missed.
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct Settles {
    queued: Vec<Settle>,
    /// When each job was last queued, for [`SETTLE_EVERY`]; pruned as it is read.
    at: HashMap<JobId, Instant>,
}

impl Takeovers {
    pub(super) fn queue(&self, t: TakeOver) {
        self.queued.lock().unwrap().insert(t.key.clone(), t);
        self.wake.notify_one();
    }

    /// Queues `s` unless it was queued less than [`SETTLE_EVERY`] ago.
    pub(super) fn queue_settle(&self, s: Settle) {
        {
            let mut st = self.settles.lock().unwrap();
            st.at.retain(|_, t| t.elapsed() < SETTLE_EVERY);
            if st.at.contains_key(&s.job_id) {
                return;
            }
            st.at.insert(s.job_id, Instant::now());
            st.queued.push(s);
        }
        self.wake.notify_one();
    }

    fn drain(&self) -> Vec<Queued> {
        let mut all: Vec<Queued> = self
            .queued
            .lock()
            .unwrap()
            .drain()
            .map(|(_, t)| Queued::Submit(Box::new(t)))
            .collect();
        let settles = std::mem::take(&mut self.settles.lock().unwrap().queued);
        all.extend(settles.into_iter().map(Queued::Settle));
        all
    }

    /// The work queued since the last call, once there is some.
    pub(super) async fn next(&self) -> Vec<Queued> {
        loop {
            self.wake.notified().await;
            let queued = self.drain();
            if !queued.is_empty() {
                return queued;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takeover(key: &str, job_name: &str) -> TakeOver {
        TakeOver {
            key: key.into(),
            job: JobDescription::default(),
            template: ResourceMeta::new("hpc", crate::slurmrestd::JobId(0), job_name, "", ""),
        }
    }

    async fn next(q: &Takeovers) -> Vec<Queued> {
        tokio::time::timeout(Duration::from_secs(1), q.next())
            .await
            .expect("woken by work queued before the wait")
    }

    #[tokio::test]
    async fn one_takeover_per_execution_is_queued_and_a_wake_is_not_lost() {
        let q = Takeovers::default();
        q.queue(takeover("k1", "first"));
        q.queue(takeover("k1", "again"));
        q.queue(takeover("k2", "other"));
        // Queued while nobody waited: the permit is kept for the task's next wait.
        let mut got: Vec<(String, String)> = next(&q)
            .await
            .into_iter()
            .map(|w| match w {
                Queued::Submit(t) => (t.key, t.template.job_name),
                Queued::Settle(s) => panic!("{s:?}"),
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [("k1".into(), "again".into()), ("k2".into(), "other".into())]
        );
        assert!(q.drain().is_empty());
    }

    #[tokio::test]
    async fn a_held_job_is_queued_for_settling_once_a_minute_whoever_asks() {
        let q = Takeovers::default();
        let s = |id| Settle {
            job_id: JobId(id),
            slurm_user: Some("alice".into()),
            claim: None,
        };
        q.queue_settle(s(7));
        q.queue_settle(s(7)); // the next GetTask, before the tracker saw the release
        q.queue_settle(s(8));
        let got: Vec<Settle> = next(&q)
            .await
            .into_iter()
            .map(|w| match w {
                Queued::Settle(s) => s,
                Queued::Submit(t) => panic!("{t:?}"),
            })
            .collect();
        assert_eq!(got, [s(7), s(8)]);
        // Drained, but settled less than a minute ago: not queued again yet.
        q.queue_settle(s(7));
        assert!(q.drain().is_empty());
    }
}
