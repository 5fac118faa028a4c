//! Takeovers: deferred submits whose replica never made them, made here instead.
//!
//! GetTask only reads. When one finds a deferred meta past its takeover age (`TAKE_OVER_AFTER`,
//! `deferred.rs`) with no released job on the cluster, it queues a [`TakeOver`] with the
//! cluster's `Submitter` (`take_over`) and answers QUEUED; the cluster's `takeovers[<cluster>]`
//! background task (`run_takeovers`, `deferred.rs`) starts the paced submit, which the once-only
//! protocol keeps to one job even if the first replica was only slow. One queued takeover per
//! execution (a GetTask repeated before the task drains the queue replaces it), and a submit
//! already running for it is joined, not started again (`Executions::submit_or_join`).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::JobDescription;

/// A deferred submit to make here: what its meta carries.
#[derive(Debug, Clone)]
pub struct TakeOver {
    pub key: String,
    pub job: JobDescription,
    /// The task's meta without its deferred part: completed with the job once it exists.
    pub template: ResourceMeta,
}

/// The takeovers queued by GetTask, waiting for the cluster's background task.
#[derive(Default)]
pub struct Takeovers {
    queued: Mutex<HashMap<String, TakeOver>>,
    /// A permit is kept when nobody waits, so a takeover queued while the task is busy starting
    /// the last ones is not missed.
    wake: tokio::sync::Notify,
}

impl Takeovers {
    pub(super) fn queue(&self, t: TakeOver) {
        self.queued.lock().unwrap().insert(t.key.clone(), t);
        self.wake.notify_one();
    }

    fn drain(&self) -> Vec<TakeOver> {
        self.queued
            .lock()
            .unwrap()
            .drain()
            .map(|(_, t)| t)
            .collect()
    }

    /// The takeovers queued since the last call, once there is one.
    pub(super) async fn next(&self) -> Vec<TakeOver> {
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

    #[tokio::test]
    async fn one_takeover_per_execution_is_queued_and_a_wake_is_not_lost() {
        let q = Takeovers::default();
        q.queue(takeover("k1", "first"));
        q.queue(takeover("k1", "again"));
        q.queue(takeover("k2", "other"));
        // Queued while nobody waited: the permit is kept for the task's next wait.
        let mut got: Vec<(String, String)> =
            tokio::time::timeout(std::time::Duration::from_secs(1), q.next())
                .await
                .expect("woken by takeovers queued before the wait")
                .into_iter()
                .map(|t| (t.key, t.template.job_name))
                .collect();
        got.sort();
        assert_eq!(
            got,
            [("k1".into(), "again".into()), ("k2".into(), "other".into())]
        );
        assert!(q.drain().is_empty());
    }
}
