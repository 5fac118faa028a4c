//! Adoption and the paths for jobs slurmctld does not answer for: adoption rounds (GetTask for a
//! job never seen), slurmdbd in one batch for jobs that aged out, exit-status markers when
//! slurmdbd has no record, and the records of requeued jobs.

use std::collections::HashMap;

use crate::slurmrestd::{ExitCode, JobId, JobInfo, JobState};

use super::api::{ExitMarker, MarkerCause};

use super::{Base, Entry, Known, Packed, Tracker};

/// Records of requeued jobs (each one slurmctld read) and exit-status markers read at once.
pub(super) const RECORD_FETCH_CONCURRENCY: usize = 8;

impl Tracker {
    /// Answers queued adoptions in one batch (the adopter task).
    pub async fn adopt_round(&self) {
        let _round = self.round.lock().await;
        let queued: Vec<JobId> = std::mem::take(&mut *self.adopt_queue.lock().unwrap());
        // A tick may have answered some of them meanwhile.
        let ids: Vec<JobId> = {
            let jobs = self.jobs.lock().unwrap();
            queued
                .into_iter()
                .filter(|id| jobs.get(id).is_some_and(|e| e.known == Known::NotYet))
                .collect()
        };
        if !ids.is_empty() {
            self.refresh(&ids).await;
        }
        self.adopted.notify_waiters();
    }

    /// Jobs slurmctld no longer lists: slurmdbd, in one batch. Keeps the last state while neither
    /// knows a job; declares it lost after `lost_after`.
    pub(super) async fn resolve_missing(&self, ids: &[JobId]) {
        let found = match self.api.accounting_jobs(ids).await {
            Ok(f) => {
                self.health.lock().unwrap().accounting_error = None;
                f
            }
            Err(e) => {
                tracing::debug!(cluster = %self.cluster, error = %e, "slurmdbd lookup failed; keeping last states");
                self.health.lock().unwrap().accounting_error = Some(e.to_string());
                HashMap::new()
            }
        };
        let markers = self.read_markers(ids, &found).await;
        let now = self.now_secs();
        let mut jobs = self.jobs.lock().unwrap();
        for id in ids {
            let Some(e) = jobs.get_mut(id) else { continue };
            if let Some(marker) = markers.get(id) {
                apply_marker(e, marker, now);
                continue;
            }
            match found.get(id) {
                Some(info) => {
                    apply_state(e, &info.state, now);
                    apply_record(e, info);
                    // slurmdbd only lists a job that got past the controller; a pending record
                    // there is still worth polling, a finished one is final.
                    e.record_done = e.state.is_terminal();
                }
                None if self.age(e.since) >= self.cfg.lost_after && e.known != Known::Lost => {
                    tracing::warn!(cluster = %self.cluster, job_id = %id, "job unknown to slurmctld and slurmdbd; reporting it lost");
                    e.known = Known::Lost;
                    e.since = now;
                }
                None => {}
            }
        }
    }

    /// Exit-status markers of the jobs slurmdbd did not know (none without an injected reader).
    /// A job reads its marker once it is gone from slurmctld, so each lookup is one small read;
    /// a reader error keeps the job missing (it is retried next tick, then reported lost).
    pub(super) async fn read_markers(
        &self,
        ids: &[JobId],
        found: &HashMap<JobId, JobInfo>,
    ) -> HashMap<JobId, ExitMarker> {
        let Some(markers) = &self.markers else {
            return HashMap::new();
        };
        let wanted: Vec<JobId> = ids
            .iter()
            .filter(|id| !found.contains_key(id))
            .copied()
            .collect();
        // Bounded like the record fetches: after an outage many jobs can be missing at once, and
        // each lookup is a read on the shared filesystem (or a request to the stager).
        use futures::StreamExt;
        // Collected first: a closure inside the stream would make the poll loop's future not `Send`.
        let lookups: Vec<_> = wanted.iter().map(|id| markers.exit_code(*id)).collect();
        let answers: Vec<_> = futures::stream::iter(lookups)
            .buffered(RECORD_FETCH_CONCURRENCY)
            .collect()
            .await;
        let mut out = HashMap::new();
        for (id, answer) in wanted.into_iter().zip(answers) {
            match answer {
                Ok(Some(marker)) => {
                    tracing::info!(cluster = %self.cluster, job_id = %id, code = marker.code, signal = ?marker.signal, cause = ?marker.cause, "job resolved from its exit-status marker");
                    out.insert(id, marker);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(cluster = %self.cluster, job_id = %id, error = %e, "exit-status marker not readable");
                }
            }
        }
        out
    }

    /// The records of jobs Slurm put back in the queue (once per requeue): how often it did,
    /// and why. A failed fetch is only logged; the count shows at the next requeue or the end.
    pub(super) async fn fetch_requeued(&self, ids: &[JobId]) {
        use futures::StreamExt;
        let requests: Vec<_> = ids
            .iter()
            .map(|id| {
                let (api, id) = (self.api.clone(), *id);
                async move { (id, api.job(id).await) }
            })
            .collect();
        let fetched: Vec<_> = futures::stream::iter(requests)
            .buffer_unordered(RECORD_FETCH_CONCURRENCY)
            .collect()
            .await;
        for (id, fetched) in fetched {
            match fetched {
                Ok(Some(info)) => {
                    // Why: slurmdbd closed each earlier run's record as that run ended (one
                    // request per requeue, never per GetTask; none without accounting).
                    let requeues = match self.api.accounting_runs(id).await {
                        Ok(runs) => requeues_of(&runs),
                        Err(err) => {
                            tracing::debug!(cluster = %self.cluster, job_id = %id, error = %err, "runs of a requeued job not read from slurmdbd");
                            None
                        }
                    };
                    tracing::info!(cluster = %self.cluster, job_id = %id, restarts = ?info.restart_count, reason = ?info.reason, ?requeues, "Slurm requeued the job");
                    self.with_entry(id, |e| {
                        apply_record(e, &info);
                        if requeues.is_some() {
                            e.extra.get_or_insert_with(Default::default).requeues = requeues;
                        }
                    });
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::debug!(cluster = %self.cluster, job_id = %id, error = %err, "record of a requeued job not fetched");
                }
            }
        }
    }

    pub(super) fn with_entry(&self, id: JobId, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = self.jobs.lock().unwrap().get_mut(&id) {
            f(e);
        }
    }
}

/// Why a job was requeued, from slurmdbd's records of its runs: the earlier runs ended
/// PREEMPTED or NODE_FAIL. `None` when no record says either (no accounting, not recorded yet,
/// or requeued for another reason, e.g. `scontrol requeue`).
pub(super) fn requeues_of(runs: &[JobInfo]) -> Option<super::Requeues> {
    use crate::slurmrestd::BaseState;
    let mut r = super::Requeues::default();
    for run in runs {
        match run.state.base {
            BaseState::Preempted => r.preempted += 1,
            BaseState::NodeFail => r.node_failures += 1,
            _ => {}
        }
    }
    (r.preempted + r.node_failures > 0).then_some(r)
}

/// Applies a state from slurmctld or slurmdbd.
pub(super) fn apply_state(e: &mut Entry, s: &JobState, now: u32) {
    let (packed, other) = Packed::pack(s);
    let changed = packed != e.state || e.known != Known::Seen;
    e.state = packed;
    e.known = Known::Seen;
    if changed {
        // `since` = when this state began: ages unknown states and terminal TTLs.
        e.since = now;
        // A pending job's reason (why it waited) does not carry over to its run.
        if packed.base == Base::Running
            && let Some(x) = e.extra.as_deref_mut()
        {
            x.reason = None;
        }
    }
    match other {
        Some(t) => e.extra.get_or_insert_with(Default::default).other_state = Some(t),
        None => {
            if let Some(x) = e.extra.as_deref_mut() {
                x.other_state = None;
            }
        }
    }
    if !packed.is_terminal() {
        // A requeued job runs again: its old record, and what its old run used, no longer apply.
        e.record_done = false;
        if let Some(x) = e.extra.as_deref_mut() {
            x.usage = None;
        }
    }
}

/// The state Slurm would have given the job the marker describes: the time limit's TERM is
/// TIMEOUT, an OOM kill OUT_OF_MEMORY, any other terminating signal a cancel (scancel); else
/// COMPLETED for 0 and FAILED otherwise.
pub fn marker_state(m: &ExitMarker) -> &'static str {
    match (m.cause, &m.signal, m.code) {
        (Some(MarkerCause::TimeLimit), _, _) => "TIMEOUT",
        (Some(MarkerCause::OutOfMemory), _, _) => "OUT_OF_MEMORY",
        (None, Some(_), _) => "CANCELLED",
        (None, None, 0) => "COMPLETED",
        (None, None, _) => "FAILED",
    }
}

/// The job's outcome from its marker: final, like a slurmdbd record.
pub(super) fn apply_marker(e: &mut Entry, m: &ExitMarker, now: u32) {
    apply_state(e, &JobState::from_strings([marker_state(m)]), now);
    e.known = Known::Marker;
    e.record_done = true;
    let x = e.extra.get_or_insert_with(Default::default);
    x.exit_code = Some(ExitCode {
        status: vec![if m.code == 0 { "SUCCESS" } else { "ERROR" }.to_string()],
        return_code: u32::try_from(m.code).ok(),
        signal: None,
        signal_name: None,
    });
    x.signal = m.signal.clone();
}

pub(super) fn apply_record(e: &mut Entry, info: &JobInfo) {
    let x = e.extra.get_or_insert_with(Default::default);
    if info.exit_code.is_some() {
        x.exit_code = info.exit_code.clone();
    }
    // A newer record's "no reason" replaces an older one's (a requeued job's BeginTime must not
    // stay on the record of its successful run).
    x.reason = info.reason.clone();
    if info.nodes.is_some() {
        x.nodes = info.nodes.clone();
    }
    if info.restart_count.is_some() {
        x.restart_count = info.restart_count;
    }
    if info.time_limit_minutes.is_some() {
        x.time_limit_minutes = info.time_limit_minutes;
    }
    if info.memory_per_node_mib.is_some() {
        x.memory_per_node_mib = info.memory_per_node_mib;
    }
    if let Some(name) = info.exit_code.as_ref().and_then(|c| c.signal_name.clone()) {
        x.signal = Some(name);
    }
    let element = info.array.as_ref().and_then(|a| a.task_id);
    if let Some(k) = crate::render::key_of_record(info, element) {
        x.key = Some(k.into());
    }
}
