//! The batched state tracker of one cluster.
//!
//! Every tracked job of a cluster is polled together: ONE `states(ids)` request per tick (the
//! client chunks only very long id lists), so slurmctld's load does not grow with the number of
//! GetTask calls. GetTask reads the cache ([`Tracker::status`]); a job it has never seen (e.g. after
//! a restart) is adopted and fetched at once, batched with any other adoptions of that moment.
//!
//! - A job missing from `states` (aged out of slurmctld, `MinJobAge`) is resolved through slurmdbd,
//!   in one batch; while neither knows it, its last state is kept. A job neither has known for
//!   `lost_after` is reported FAILED with that explanation: it never stays RUNNING forever.
//! - Without accounting (slurmdbd off or down), such a job is resolved from the exit-status
//!   marker it left ([`ExitMarkers`], injected): COMPLETED for exit code 0, FAILED otherwise.
//! - A state this connector does not know keeps the last phase with a note; after
//!   `unknown_state_after` it is reported FAILED.
//! - When a job turns terminal its record is fetched once (slurmctld, else slurmdbd) for the
//!   exit code and reason. Terminal jobs are evicted `terminal_ttl` after they finished.
//! - While slurmrestd is unreachable or erroring, the last known states stay and every snapshot
//!   says since when the cluster has been unreachable.

mod api;
mod state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio::time::Instant;

pub use api::{ExitMarkers, SlurmApi};
pub use state::{Base, Packed};

use crate::proto::core::task_execution::Phase;
use crate::slurmrestd::{ExitCode, JobId, JobInfo, JobState};

#[derive(Debug, Clone)]
pub struct TrackerConfig {
    pub poll_interval: Duration,
    /// How long a finished job stays cached after it finished.
    pub terminal_ttl: Duration,
    /// How long a job may be unknown to both slurmctld and slurmdbd before it is reported lost.
    pub lost_after: Duration,
    /// How long an unknown Slurm state is tolerated before the job is reported FAILED.
    pub unknown_state_after: Duration,
    /// How long GetTask waits for an adoption's first answer.
    pub adopt_wait: Duration,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            poll_interval: Duration::from_secs(5),
            terminal_ttl: Duration::from_secs(3600),
            lost_after: Duration::from_secs(600),
            unknown_state_after: Duration::from_secs(600),
            adopt_wait: Duration::from_secs(4),
        }
    }
}

/// Where a tracked job stands, as far as the tracker knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Known {
    /// Adopted, no answer yet.
    NotYet,
    /// In slurmctld's answer on the last successful tick.
    Seen,
    /// Absent from slurmctld's answer, slurmdbd does not know it either (yet).
    Missing,
    /// Adopted, and neither slurmctld nor slurmdbd has known it so far.
    MissingUnseen,
    /// Missing from both for longer than `lost_after`: reported FAILED.
    Lost,
    /// Missing from both; the outcome was read from the job's exit-status marker (final).
    Marker,
}

/// One tracked job: 16 bytes plus a rare boxed extra (terminal record, unknown state text).
#[derive(Debug)]
struct Entry {
    state: Packed,
    known: Known,
    /// The terminal record was fetched (or found unavailable for good).
    record_done: bool,
    /// Seconds since the tracker's epoch: when the current condition began (missing since,
    /// unknown state since, finished at).
    since: u32,
    extra: Option<Box<Extra>>,
}

#[derive(Debug, Default)]
struct Extra {
    /// Text of a base state this connector does not know.
    other_state: Option<Box<str>>,
    exit_code: Option<ExitCode>,
    reason: Option<String>,
}

/// What GetTask reports for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSnapshot {
    pub job_id: JobId,
    pub phase: Phase,
    /// Slurm's state as text (`RUNNING+COMPLETING`), `None` before the first answer.
    pub state: Option<String>,
    pub exit_code: Option<ExitCode>,
    pub reason: Option<String>,
    /// Why the phase is what it is when Slurm did not say so directly (lost, unknown state, ...).
    pub note: Option<String>,
    /// Set while the cluster's slurmrestd is failing: since when, and the last error.
    pub unreachable: Option<Unreachable>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Unreachable {
    pub since: SystemTime,
    pub error: String,
}

#[derive(Default)]
struct Health {
    unreachable: Option<Unreachable>,
    /// The last slurmdbd error, for the notes of jobs only slurmdbd could resolve.
    accounting_error: Option<String>,
    /// Completed refresh rounds (successful or not), so adoption waiters know one has run.
    rounds: u64,
}

/// Hooks for metrics: observed after every tick.
pub type TickObserver = Arc<dyn Fn(&str, Duration, usize) + Send + Sync>;

pub struct Tracker {
    cluster: String,
    api: Arc<dyn SlurmApi>,
    cfg: TrackerConfig,
    epoch: Instant,
    jobs: Mutex<HashMap<JobId, Entry>>,
    health: Mutex<Health>,
    /// Adoption requests waiting for the adopter; waiters are woken by `adopted`.
    adopt_queue: Mutex<Vec<JobId>>,
    adopt_wake: Notify,
    adopted: Notify,
    /// Serializes ticks and adoption rounds so two never race on the same entries.
    round: tokio::sync::Mutex<()>,
    observer: Option<TickObserver>,
    markers: Option<Arc<dyn ExitMarkers>>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("cluster", &self.cluster)
            .field("jobs", &self.len())
            .finish()
    }
}

impl Tracker {
    pub fn new(cluster: impl Into<String>, api: Arc<dyn SlurmApi>, cfg: TrackerConfig) -> Tracker {
        Tracker {
            cluster: cluster.into(),
            api,
            cfg,
            epoch: Instant::now(),
            jobs: Mutex::new(HashMap::new()),
            health: Mutex::new(Health::default()),
            adopt_queue: Mutex::new(Vec::new()),
            adopt_wake: Notify::new(),
            adopted: Notify::new(),
            round: tokio::sync::Mutex::new(()),
            observer: None,
            markers: None,
        }
    }

    /// Resolve jobs neither slurmctld nor slurmdbd knows from their exit-status markers.
    pub fn with_exit_markers(mut self, markers: Arc<dyn ExitMarkers>) -> Tracker {
        self.markers = Some(markers);
        self
    }

    pub fn with_observer(mut self, observer: TickObserver) -> Tracker {
        self.observer = Some(observer);
        self
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Number of tracked jobs.
    pub fn len(&self) -> usize {
        self.jobs.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn now_secs(&self) -> u32 {
        u32::try_from(self.epoch.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    fn age(&self, since: u32) -> Duration {
        Duration::from_secs(u64::from(self.now_secs().saturating_sub(since)))
    }

    /// Starts tracking a job just submitted (PENDING until the next tick says otherwise).
    pub fn track(&self, id: JobId) {
        let since = self.now_secs();
        self.jobs.lock().unwrap().entry(id).or_insert(Entry {
            state: Packed {
                base: Base::Pending,
                flags: 0,
            },
            known: Known::Seen,
            record_done: false,
            since,
            extra: None,
        });
    }

    /// Stops tracking a job (e.g. after a cancel the caller no longer cares about).
    pub fn forget(&self, id: JobId) {
        self.jobs.lock().unwrap().remove(&id);
    }

    /// The cached snapshot, if the job is tracked.
    pub fn cached(&self, id: JobId) -> Option<JobSnapshot> {
        let jobs = self.jobs.lock().unwrap();
        let e = jobs.get(&id)?;
        Some(self.snapshot(id, e))
    }

    /// GetTask's answer: from the cache; a job never seen is adopted and fetched at once (waiting
    /// at most `adopt_wait`). Never fails: while Slurm cannot be asked, the snapshot says so.
    pub async fn status(&self, id: JobId) -> JobSnapshot {
        let adopting = {
            let mut jobs = self.jobs.lock().unwrap();
            match jobs.get(&id) {
                Some(e) if e.known != Known::NotYet => return self.snapshot(id, e),
                Some(_) => false,
                None => {
                    jobs.insert(
                        id,
                        Entry {
                            state: Packed {
                                base: Base::Pending,
                                flags: 0,
                            },
                            known: Known::NotYet,
                            record_done: false,
                            since: self.now_secs(),
                            extra: None,
                        },
                    );
                    true
                }
            }
        };
        if adopting {
            tracing::info!(cluster = %self.cluster, job_id = %id, "adopting a job not tracked yet");
            self.adopt_queue.lock().unwrap().push(id);
            self.adopt_wake.notify_one();
        }
        // Wait until a round has answered for this job (or failed), bounded by adopt_wait.
        let start_round = self.health.lock().unwrap().rounds;
        let deadline = Instant::now() + self.cfg.adopt_wait;
        loop {
            let notified = self.adopted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let jobs = self.jobs.lock().unwrap();
                match jobs.get(&id) {
                    Some(e) if e.known != Known::NotYet => return self.snapshot(id, e),
                    None => break,
                    Some(_) => {}
                }
            }
            {
                let h = self.health.lock().unwrap();
                if h.unreachable.is_some() && h.rounds > start_round {
                    break;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        self.cached(id).unwrap_or_else(|| self.snapshot_unknown(id))
    }

    fn snapshot_unknown(&self, id: JobId) -> JobSnapshot {
        JobSnapshot {
            job_id: id,
            phase: Phase::Queued,
            state: None,
            exit_code: None,
            reason: None,
            note: Some("state not known yet".into()),
            unreachable: self.health.lock().unwrap().unreachable.clone(),
        }
    }

    fn snapshot(&self, id: JobId, e: &Entry) -> JobSnapshot {
        let extra = e.extra.as_deref();
        let other = extra.and_then(|x| x.other_state.as_deref());
        let (phase, state, note) = match e.known {
            Known::NotYet => (Phase::Queued, None, Some("state not known yet".to_string())),
            Known::Lost => (
                Phase::Failed,
                Some(e.state.text(other)),
                Some(format!(
                    "Slurm job {id} is not known to slurmctld, and slurmdbd has had no record of \
                     it for {}s{}: its outcome cannot be determined (enable accounting, or raise \
                     MinJobAge, so finished jobs stay visible)",
                    self.cfg.lost_after.as_secs(),
                    self.accounting_note()
                )),
            ),
            Known::MissingUnseen => (
                Phase::Queued,
                None,
                Some(format!(
                    "Slurm job {id} is not known to slurmctld, nor (yet) to slurmdbd{}",
                    self.accounting_note()
                )),
            ),
            Known::Marker => (
                e.state.phase().unwrap_or(Phase::Failed),
                Some(e.state.text(other)),
                Some(format!(
                    "Slurm job {id} is no longer known to slurmctld and not in slurmdbd{}; its \
                     outcome was read from the exit-status marker the job left",
                    self.accounting_note()
                )),
            ),
            Known::Seen | Known::Missing => {
                let text = e.state.text(other);
                let missing = (e.known == Known::Missing).then(|| {
                    format!(
                        "no longer listed by slurmctld and not yet in slurmdbd{}; last known state {text}",
                        self.accounting_note()
                    )
                });
                match e.state.phase() {
                    Some(p) => (p, Some(text), missing),
                    None if self.age(e.since) >= self.cfg.unknown_state_after => (
                        Phase::Failed,
                        Some(text.clone()),
                        Some(format!(
                            "Slurm reports state {text}, which this connector does not know, for \
                             more than {}s; reporting the task as failed rather than running forever",
                            self.cfg.unknown_state_after.as_secs()
                        )),
                    ),
                    None => (
                        // Not a guess at RUNNING: the job is somewhere between queued and done.
                        Phase::Queued,
                        Some(text.clone()),
                        Some(format!(
                            "Slurm reports state {text}, which this connector does not know"
                        )),
                    ),
                }
            }
        };
        JobSnapshot {
            job_id: id,
            phase,
            state,
            exit_code: extra.and_then(|x| x.exit_code.clone()),
            reason: extra.and_then(|x| x.reason.clone()),
            note,
            unreachable: self.health.lock().unwrap().unreachable.clone(),
        }
    }

    fn accounting_note(&self) -> String {
        match &self.health.lock().unwrap().accounting_error {
            Some(e) => format!(" (slurmdbd: {e})"),
            None => String::new(),
        }
    }

    /// One poll round: ONE `states` call for every job not finished, then slurmdbd for the
    /// missing ones (one call) and the records of jobs that just finished. Returns the number of
    /// jobs asked about.
    pub async fn tick(&self) -> usize {
        let _round = self.round.lock().await;
        let started = Instant::now();
        self.evict();
        let ids: Vec<JobId> = {
            let jobs = self.jobs.lock().unwrap();
            jobs.iter()
                .filter(|(_, e)| {
                    e.known != Known::Lost && !(e.state.is_terminal() && e.record_done)
                })
                .map(|(id, _)| *id)
                .collect()
        };
        if !ids.is_empty() {
            self.refresh(&ids).await;
        }
        self.adopted.notify_waiters();
        if let Some(o) = &self.observer {
            o(&self.cluster, started.elapsed(), ids.len());
        }
        ids.len()
    }

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

    async fn refresh(&self, ids: &[JobId]) {
        let states = match self.api.states(ids).await {
            Ok(s) => {
                let mut h = self.health.lock().unwrap();
                if h.unreachable.take().is_some() {
                    tracing::info!(cluster = %self.cluster, "slurmrestd reachable again");
                }
                s
            }
            Err(e) => {
                self.mark_unreachable(&e.to_string());
                // Adoptees must not wait the full adopt_wait for an answer that cannot come.
                self.health.lock().unwrap().rounds += 1;
                self.adopted.notify_waiters();
                return;
            }
        };
        let now = self.now_secs();
        let mut missing = Vec::new();
        let mut finished = Vec::new();
        {
            let mut jobs = self.jobs.lock().unwrap();
            for id in ids {
                let Some(e) = jobs.get_mut(id) else { continue };
                match states.get(id) {
                    Some(s) => {
                        // A job that just finished is published together with its record (exit
                        // code, reason), so no GetTask sees FAILED without saying why.
                        if Packed::pack(s).0.is_terminal() && !e.record_done {
                            finished.push((*id, s.clone()));
                        } else {
                            apply_state(e, s, now);
                        }
                    }
                    None => {
                        match e.known {
                            Known::Missing | Known::MissingUnseen => {}
                            Known::NotYet => {
                                e.known = Known::MissingUnseen;
                                e.since = now;
                            }
                            _ => {
                                e.known = Known::Missing;
                                e.since = now;
                            }
                        }
                        missing.push(*id);
                    }
                }
            }
        }
        if !missing.is_empty() {
            self.resolve_missing(&missing).await;
        }
        if !finished.is_empty() {
            self.fetch_records(&finished).await;
        }
        self.health.lock().unwrap().rounds += 1;
    }

    /// Jobs slurmctld no longer lists: slurmdbd, in one batch. Keeps the last state while neither
    /// knows a job; declares it lost after `lost_after`.
    async fn resolve_missing(&self, ids: &[JobId]) {
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
            if let Some(code) = markers.get(id) {
                apply_marker(e, *code, now);
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
    async fn read_markers(
        &self,
        ids: &[JobId],
        found: &HashMap<JobId, JobInfo>,
    ) -> HashMap<JobId, i32> {
        let Some(markers) = &self.markers else {
            return HashMap::new();
        };
        let wanted: Vec<JobId> = ids
            .iter()
            .filter(|id| !found.contains_key(id))
            .copied()
            .collect();
        let answers =
            futures::future::join_all(wanted.iter().map(|id| markers.exit_code(*id))).await;
        let mut out = HashMap::new();
        for (id, answer) in wanted.into_iter().zip(answers) {
            match answer {
                Ok(Some(code)) => {
                    tracing::info!(cluster = %self.cluster, job_id = %id, code, "job resolved from its exit-status marker");
                    out.insert(id, code);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(cluster = %self.cluster, job_id = %id, error = %e, "exit-status marker not readable");
                }
            }
        }
        out
    }

    /// The records of jobs that just finished: slurmctld first, slurmdbd (batched) for the rest;
    /// each job's terminal state is applied with its record.
    async fn fetch_records(&self, finished: &[(JobId, JobState)]) {
        let mut need_accounting = Vec::new();
        for (id, state) in finished {
            let fetched = self.api.job(*id).await;
            let now = self.now_secs();
            match fetched {
                Ok(Some(info)) => self.with_entry(*id, |e| {
                    apply_state(e, state, now);
                    apply_record(e, &info);
                    e.record_done = true;
                }),
                Ok(None) => need_accounting.push((*id, state)),
                // Published without a record; record_done stays false, so the next tick retries.
                Err(err) => {
                    tracing::debug!(cluster = %self.cluster, job_id = %id, error = %err, "record fetch failed");
                    self.with_entry(*id, |e| {
                        apply_state(e, state, now);
                    });
                }
            }
        }
        if need_accounting.is_empty() {
            return;
        }
        let ids: Vec<JobId> = need_accounting.iter().map(|(id, _)| *id).collect();
        let found = self.api.accounting_jobs(&ids).await.unwrap_or_default();
        let now = self.now_secs();
        for (id, state) in need_accounting {
            self.with_entry(id, |e| {
                apply_state(e, state, now);
                if let Some(info) = found.get(&id) {
                    apply_record(e, info);
                }
                // Nobody has more to say about this job: stop asking.
                e.record_done = true;
            });
        }
    }

    fn with_entry(&self, id: JobId, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = self.jobs.lock().unwrap().get_mut(&id) {
            f(e);
        }
    }

    fn mark_unreachable(&self, error: &str) {
        let mut h = self.health.lock().unwrap();
        match &mut h.unreachable {
            Some(u) => u.error = error.to_string(),
            None => {
                tracing::warn!(cluster = %self.cluster, error, "slurmrestd unreachable; answering from the last known states");
                h.unreachable = Some(Unreachable {
                    since: SystemTime::now(),
                    error: error.to_string(),
                });
            }
        }
    }

    /// Drops finished jobs older than the TTL.
    fn evict(&self) {
        let ttl = self.cfg.terminal_ttl;
        let now = self.now_secs();
        self.jobs.lock().unwrap().retain(|_, e| {
            let finished = e.known == Known::Lost || (e.state.is_terminal() && e.record_done);
            !(finished && Duration::from_secs(u64::from(now.saturating_sub(e.since))) >= ttl)
        });
    }

    /// Runs the poll loop and the adopter until `shutdown` resolves.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        let mut interval = tokio::time::interval(self.cfg.poll_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = interval.tick() => { self.tick().await; }
                _ = self.adopt_wake.notified() => {
                    // A short pause gathers the GetTasks of a restart's burst into one request.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    self.adopt_round().await;
                }
            }
        }
    }
}

/// Applies a state from slurmctld or slurmdbd.
fn apply_state(e: &mut Entry, s: &JobState, now: u32) {
    let (packed, other) = Packed::pack(s);
    let changed = packed != e.state || e.known != Known::Seen;
    e.state = packed;
    e.known = Known::Seen;
    if changed {
        // `since` = when this state began: ages unknown states and terminal TTLs.
        e.since = now;
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
        // A requeued job runs again: its old record no longer applies.
        e.record_done = false;
    }
}

/// The job's own exit code, from its marker: final, like a slurmdbd record. The state is the one
/// Slurm would have given a batch script exiting so (COMPLETED for 0, FAILED otherwise).
fn apply_marker(e: &mut Entry, code: i32, now: u32) {
    let base = if code == 0 { "COMPLETED" } else { "FAILED" };
    apply_state(e, &JobState::from_strings([base]), now);
    e.known = Known::Marker;
    e.record_done = true;
    let x = e.extra.get_or_insert_with(Default::default);
    x.exit_code = Some(ExitCode {
        status: vec![if code == 0 { "SUCCESS" } else { "ERROR" }.to_string()],
        return_code: u32::try_from(code).ok(),
        signal: None,
        signal_name: None,
    });
}

fn apply_record(e: &mut Entry, info: &JobInfo) {
    let x = e.extra.get_or_insert_with(Default::default);
    if info.exit_code.is_some() {
        x.exit_code = info.exit_code.clone();
    }
    if info.reason.is_some() {
        x.reason = info.reason.clone();
    }
}

#[cfg(test)]
mod tests;
