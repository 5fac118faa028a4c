//! The batched state tracker against a fake cluster that counts every call.

mod polling;
mod resolution;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use slurm_connector::domain::Phase;
use slurm_connector::service::snapshot_phase as phase_of;
use slurm_connector::slurmrestd::{ClientError, ExitCode, JobId, JobInfo, JobState};
use slurm_connector::tracker::{
    ExitMarker, FailureClass, MarkerCause, Packed, SlurmApi, Tracker, TrackerConfig,
};

#[derive(Default)]
struct Fake {
    /// What slurmctld knows.
    ctld: Mutex<HashMap<JobId, JobState>>,
    /// What slurmdbd knows besides the jobs slurmctld still has (whose records it mirrors, as a
    /// real slurmdbd stores each job as slurmctld reports it).
    dbd: Mutex<HashMap<JobId, JobInfo>>,
    down: AtomicBool,
    dbd_down: AtomicBool,
    /// slurmdbd has not stored the latest ends yet: it answers the jobs slurmctld has with the
    /// state they had before (RUNNING).
    dbd_lags: AtomicBool,
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
    /// A job's comment in those listings.
    comments: Mutex<HashMap<JobId, String>>,
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
        exit_code: Some(ExitCode {
            status: vec![if rc == 0 { "SUCCESS" } else { "ERROR" }.into()],
            return_code: Some(rc),
            signal: None,
            signal_name: None,
        }),
        reason: reason.map(String::from),
        ..JobInfo::new(
            id,
            format!("job{id}"),
            JobState::from_strings(state.iter().copied()),
        )
    }
}

impl Fake {
    /// Job `id`'s record in state `s`, as slurmctld's `job/{id}` and slurmdbd both give it: a
    /// job that did not complete exited 3 with `NonZeroExitCode`.
    fn record_of(&self, id: JobId, s: &JobState) -> JobInfo {
        let ended = Packed::pack(s).0.is_terminal();
        let failed = ended && s.base.as_str() != "COMPLETED";
        let mut i = info(
            id,
            &[s.base.as_str()],
            if failed { 3 } else { 0 },
            failed.then_some("NonZeroExitCode"),
        );
        i.state = s.clone();
        i.restart_count = Some(self.restarts.lock().unwrap().get(&id).copied().unwrap_or(0));
        if let Some(r) = self.reasons.lock().unwrap().get(&id) {
            i.reason = Some(r.to_string());
        }
        i
    }

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
            Ok(ctld.get(&id).map(|s| self.record_of(id, s)))
        })
    }
    fn jobs(&self) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async move {
            self.list_calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(err());
            }
            let comments = self.comments.lock().unwrap();
            Ok(self
                .ctld
                .lock()
                .unwrap()
                .iter()
                .map(|(id, s)| {
                    let mut i = self.record_of(*id, s);
                    i.comment = comments.get(id).cloned();
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
            let ctld = self.ctld.lock().unwrap();
            let lags = self.dbd_lags.load(Ordering::SeqCst);
            Ok(ids
                .iter()
                .filter_map(|id| {
                    let mirrored = ctld.get(id).map(|s| {
                        if lags {
                            self.record_of(*id, &JobState::from_strings(["RUNNING"]))
                        } else {
                            self.record_of(*id, s)
                        }
                    });
                    dbd.get(id).cloned().or(mirrored).map(|i| (*id, i))
                })
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
        accounting_wait: Duration::from_secs(60),
    }
}

fn tracker(fake: &Arc<Fake>, cfg: TrackerConfig) -> Arc<Tracker> {
    Arc::new(Tracker::new("c1", fake.clone() as Arc<dyn SlurmApi>, cfg))
}
