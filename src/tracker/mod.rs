//! The batched state tracker of one cluster.
//!
//! Every tracked job of a cluster is polled together: ONE `states(ids)` request per tick (the
//! client chunks only very long id lists), so slurmctld's load does not grow with the number of
//! GetTask calls. GetTask reads the cache ([`Tracker::status`]); a job it has never seen (e.g. after
//! a restart) is adopted and fetched at once, batched with any other adoptions of that moment.
//!
//! - A job missing from `states` (aged out of slurmctld, `MinJobAge`) is resolved through slurmdbd,
//!   in one batch; while neither knows it, its last state is kept. A job neither has known for
//!   `lost_after` is lost (the cluster's failure) with that explanation: it never stays RUNNING
//!   forever.
//! - Without accounting (slurmdbd off or down), such a job is resolved from the exit-status
//!   marker it left ([`ExitMarkers`], injected): COMPLETED for exit code 0, FAILED otherwise.
//! - A state this connector does not know is kept with a note; after `unknown_state_after` it is
//!   classed a permanent failure.
//! - When a job (or an array's element) turns terminal it is published with its record (exit
//!   code, reason): every record a tick wants comes from ONE slurmdbd request, and what slurmdbd
//!   has not stored yet a tick later from ONE listing of slurmctld's jobs (`ends`). Terminal jobs
//!   are evicted `terminal_ttl` after they finished.
//! - What a finished job used comes from slurmdbd, all jobs that finished in one request per
//!   tick (`accounting`); its snapshot says while that is awaited.
//! - While slurmrestd is unreachable or erroring, the last known states stay and every snapshot
//!   says since when the cluster has been unreachable.
//!
//! Files: this one holds the cache and GetTask's entry point ([`Tracker::status`]); `poll` the
//! poll loop; `ends` the records of what ended; `resolve` adoption, slurmdbd for jobs that
//! left slurmctld, markers and requeues; `snapshot` what a
//! cached entry reports; `state` the packed Slurm state and its failure class; `api` the injected
//! Slurm and marker readers; `array` job arrays (one entry, its elements inside);
//! `array_given_away` an array whose id a restarted slurmctld gave to another job;
//! `accounting` what finished jobs used.

mod accounting;
mod api;
mod array;
mod array_given_away;
mod ends;
mod poll;
mod resolve;
mod snapshot;
mod state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio::time::Instant;

pub use accounting::Accounting;
pub use api::{ExitMarker, ExitMarkers, MarkerCause, SlurmApi};
pub use array::ElementSnapshot;
pub use resolve::marker_state;
pub use state::{Base, FailureClass, Packed, Slurm};

use crate::slurmrestd::{ExitCode, JobId};

#[derive(Debug, Clone)]
pub struct TrackerConfig {
    pub poll_interval: Duration,
    /// How long a finished job stays cached after it finished.
    pub terminal_ttl: Duration,
    /// How long a job may be unknown to both slurmctld and slurmdbd before it is reported lost.
    pub lost_after: Duration,
    /// How long an unknown Slurm state is tolerated before the job is reported FAILED.
    pub unknown_state_after: Duration,
    /// A job pending this long has its reason fetched (one listing of slurmctld's jobs per
    /// such tick, at most once per this interval): a task QUEUED for minutes says why.
    pub pending_detail_after: Duration,
    /// How long GetTask waits for an adoption's first answer.
    pub adopt_wait: Duration,
    /// How long a finished job's accounting is awaited from slurmdbd (its terminal answer held
    /// back meanwhile); zero: accounting is not read.
    pub accounting_wait: Duration,
}

impl Default for TrackerConfig {
    /// The deployment's defaults (`crate::config`) for what an operator can set; the rest are the
    /// tracker's own.
    fn default() -> Self {
        TrackerConfig {
            poll_interval: crate::config::DEFAULT_POLL_INTERVAL,
            terminal_ttl: crate::config::DEFAULT_TERMINAL_TTL,
            lost_after: Duration::from_secs(600),
            unknown_state_after: Duration::from_secs(600),
            pending_detail_after: Duration::from_secs(30),
            adopt_wait: Duration::from_secs(4),
            accounting_wait: crate::config::DEFAULT_ACCOUNTING_WAIT,
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
    /// From the terminal record (or the marker): where it ran, how often Slurm requeued it, its
    /// limits, the signal that ended it.
    nodes: Option<String>,
    restart_count: Option<u32>,
    /// Why Slurm requeued it, from slurmdbd's records of its earlier runs.
    requeues: Option<Requeues>,
    time_limit_minutes: Option<u32>,
    memory_per_node_mib: Option<u64>,
    signal: Option<String>,
    /// A job array's elements; the entry's own state is their aggregate.
    array: Option<Box<array::ArrayTrack>>,
    /// The execution key of the job's record (its comment, else its name): a slurmctld restarted
    /// from an older state save gives a lost job's id to the next submit, and only this tells
    /// that record from the task's own.
    key: Option<Box<str>>,
    /// What the finished job used, once slurmdbd said (or it was settled that it will not).
    usage: Option<accounting::UsageSlot>,
}

/// What GetTask reports for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSnapshot {
    pub job_id: JobId,
    /// What the tracker knows of the job's state.
    pub slurm: Slurm,
    /// Slurm's state as text (`RUNNING+COMPLETING`), `None` before the first answer.
    pub state: Option<String>,
    pub exit_code: Option<ExitCode>,
    pub reason: Option<String>,
    /// What Slurm did not say directly (lost, an unknown state, read from a marker, ...).
    pub note: Option<String>,
    /// Why a failed job failed, as Flyte should treat it (`None`: not failed).
    pub class: Option<FailureClass>,
    /// The signal that ended the job (Slurm's record, or the one the exit marker recorded).
    pub signal: Option<String>,
    pub nodes: Option<String>,
    pub restart_count: Option<u32>,
    /// Why it was requeued (preemptions, node failures), when slurmdbd's records say.
    pub requeues: Option<Requeues>,
    pub time_limit_minutes: Option<u32>,
    pub memory_per_node_mib: Option<u64>,
    /// Set while the cluster's slurmrestd is failing: since when, and the last error.
    pub unreachable: Option<Unreachable>,
    /// A job array's elements, by index (empty for a job that is not an array).
    pub elements: Vec<ElementSnapshot>,
    /// The execution key in the job's record, once a record was read (terminal or requeued).
    pub key: Option<String>,
    /// What the finished job used (slurmdbd), or why that is not known (yet).
    pub accounting: Accounting,
    /// The job (or array) is still held for the connector's duplicate check at the last
    /// listing of long-pending jobs ([`Tracker::held_for_check`]).
    pub held_for_check: bool,
}

impl JobSnapshot {
    /// Job `job_id`, nothing known of it yet: what the other snapshots add to.
    pub fn bare(job_id: JobId) -> JobSnapshot {
        JobSnapshot {
            job_id,
            slurm: Slurm::NotYet,
            state: None,
            exit_code: None,
            reason: None,
            note: None,
            class: None,
            signal: None,
            nodes: None,
            restart_count: None,
            requeues: None,
            time_limit_minutes: None,
            memory_per_node_mib: None,
            unreachable: None,
            elements: Vec::new(),
            key: None,
            accounting: Accounting::None,
            held_for_check: false,
        }
    }

    /// Slurm runs the job (or it is still ending), in Slurm's terms.
    pub fn is_running(&self) -> bool {
        match self.slurm {
            Slurm::State(p) | Slurm::Marker(p) => self.class.is_none() && p.running(),
            _ => false,
        }
    }

    /// The job will not change again: a terminal state, a failure the tracker classed (lost, a
    /// state it does not know for too long), or a marker's state it does not know.
    pub fn is_over(&self) -> bool {
        self.class.is_some()
            || match self.slurm {
                Slurm::State(p) => p.is_terminal(),
                Slurm::Marker(p) => p.is_terminal() || !p.is_known(),
                _ => false,
            }
    }
}

/// Why Slurm put a job back in the queue, counted from slurmdbd's records of its earlier runs
/// (each ends as its run did).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requeues {
    pub preempted: u32,
    pub node_failures: u32,
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
    /// Wakes the accounting loop after a tick (`accounting.rs`).
    accounting_wake: Notify,
    /// Serializes ticks and adoption rounds so two never race on the same entries.
    round: tokio::sync::Mutex<()>,
    observer: Option<TickObserver>,
    markers: Option<Arc<dyn ExitMarkers>>,
    /// When the reasons of long-pending jobs were last listed (`pending_detail_after` apart).
    detail_at: Mutex<Option<Instant>>,
    /// When long-pending arrays were last listed (`poll.rs`: `HELD_ARRAYS_EVERY` apart).
    held_arrays_at: Mutex<Option<Instant>>,
    /// The long-pending jobs (an array: by its id) that listing showed still held for the
    /// connector's duplicate check, which their replica should have ended within a second
    /// ([`Tracker::held_for_check`]).
    held_for_check: Mutex<std::collections::HashSet<JobId>>,
    /// Ends whose record slurmdbd lacked at a tick, since when (`ends.rs`).
    awaited: Mutex<HashMap<ends::Awaited, u32>>,
    /// Arrays whose id slurmctld gave to another execution's job, every element over: their
    /// elements' GetTasks are answered from here, while `jobs` follows the id as that job
    /// (`array_given_away.rs`). Evicted as finished jobs are.
    given_away: Mutex<HashMap<JobId, Entry>>,
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
            accounting_wake: Notify::new(),
            round: tokio::sync::Mutex::new(()),
            observer: None,
            markers: None,
            detail_at: Mutex::new(None),
            held_arrays_at: Mutex::new(None),
            held_for_check: Default::default(),
            awaited: Default::default(),
            given_away: Default::default(),
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

    /// How long a finished job stays known (what bounds the service's per-job state too).
    pub fn terminal_ttl(&self) -> Duration {
        self.cfg.terminal_ttl
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

    /// Starts tracking a job array just submitted, with the indices it was submitted with, for
    /// the execution of key `own`. An array tracked already keeps the union of the indices its
    /// tasks' metas name: each names what it knows of its array (a claim's record names the
    /// array's indices; an older one only its own element's).
    pub fn track_array(&self, id: JobId, indices: &[u32], own: Option<&str>) {
        let since = self.now_secs();
        let mut jobs = self.jobs.lock().unwrap();
        let entry = jobs
            .entry(id)
            .or_insert_with(|| Self::array_entry(indices, own, Known::Seen, since));
        if let Some(t) = array::track_mut(entry)
            && indices.iter().any(|i| t.indices.binary_search(i).is_err())
        {
            t.indices.extend_from_slice(indices);
            t.indices.sort_unstable();
            t.indices.dedup();
            // Elements it did not follow yet: followed from the next tick on.
            entry.record_done = false;
        }
    }

    fn array_entry(indices: &[u32], own: Option<&str>, known: Known, since: u32) -> Entry {
        Entry {
            state: Packed {
                base: Base::Pending,
                flags: 0,
            },
            known,
            record_done: false,
            since,
            extra: Some(Box::new(Extra {
                array: Some(Box::new(array::ArrayTrack {
                    indices: {
                        let mut v = indices.to_vec();
                        v.sort_unstable();
                        v.dedup();
                        v
                    },
                    elements: Default::default(),
                    own: own.map(Into::into),
                    keys: Default::default(),
                    own_record_plain: false,
                    taken_by: None,
                })),
                ..Default::default()
            })),
        }
    }

    /// Element `index` of tracked array `array` is the execution of key `key` (a coalesced
    /// array's element, as its meta says). Kept so that a record under the array's id naming
    /// that key is read as the element's own (`array_given_away.rs`).
    pub fn element_key(&self, array: JobId, index: u32, key: &str) {
        Self::note_element_key(&mut self.jobs.lock().unwrap(), array, index, key);
    }

    fn note_element_key(jobs: &mut HashMap<JobId, Entry>, array: JobId, index: u32, key: &str) {
        if let Some(t) = jobs.get_mut(&array).and_then(array::track_mut)
            && t.indices.binary_search(&index).is_ok()
            && !t.keys.contains_key(&index)
        {
            t.keys.insert(index, key.into());
        }
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

    /// Whether job (or array) `id`, pending for `pending_detail_after` at least, was still held
    /// for the connector's duplicate check at the last listing of such jobs: a task answered
    /// with it waits for a release its replica never made (it died between its held submit and
    /// its release). The service settles it (`submit/takeover.rs`).
    pub fn held_for_check(&self, id: JobId) -> bool {
        self.held_for_check.lock().unwrap().contains(&id)
    }

    /// GetTask's answer: from the cache; a job never seen is adopted and fetched at once (waiting
    /// at most `adopt_wait`). Never fails: while Slurm cannot be asked, the snapshot says so.
    pub async fn status(&self, id: JobId) -> JobSnapshot {
        self.status_of(id, None, None, None).await
    }

    /// [`Tracker::status`] of a job array (`array`: the indices it was submitted with, for the
    /// execution of key `own`), adopted as one when it is not tracked yet; with whether it is
    /// [held for the connector's check](Tracker::held_for_check).
    pub async fn status_of(
        &self,
        id: JobId,
        array: Option<&[u32]>,
        own: Option<&str>,
        element: Option<u32>,
    ) -> JobSnapshot {
        // An element of an array whose id is another job's now: the array as it ended.
        if element.is_some()
            && let Some(e) = self.given_away.lock().unwrap().get(&id)
        {
            return self.snapshot(id, e);
        }
        let adopting = {
            let mut jobs = self.jobs.lock().unwrap();
            // The element's key before the first tick that may meet a record under the array's
            // id naming it (`array_given_away.rs`): an adopted array is looked at in that tick.
            let note = |jobs: &mut HashMap<JobId, Entry>| {
                if let (Some(i), Some(k)) = (element, own) {
                    Self::note_element_key(jobs, id, i, k);
                }
            };
            note(&mut jobs);
            // A task of a job of its own asks by the id alone.
            let plain = array.is_none() && element.is_none();
            match jobs.get(&id) {
                Some(e) if e.known != Known::NotYet => {
                    return self.snapshot(id, answering(e, plain));
                }
                Some(_) => false,
                None => {
                    let since = self.now_secs();
                    jobs.insert(
                        id,
                        match array {
                            Some(indices) => Self::array_entry(indices, own, Known::NotYet, since),
                            None => Entry {
                                state: Packed {
                                    base: Base::Pending,
                                    flags: 0,
                                },
                                known: Known::NotYet,
                                record_done: false,
                                since,
                                extra: None,
                            },
                        },
                    );
                    note(&mut jobs);
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
}

/// The entry that answers a GetTask for `e`'s id: for a task of a job of its own (`plain`),
/// the job slurmctld gave a tracked array's id to, when it did; else `e`.
fn answering(e: &Entry, plain: bool) -> &Entry {
    match array::track(e).and_then(|t| t.taken_by.as_deref()) {
        Some(job) if plain => job,
        _ => e,
    }
}

#[cfg(test)]
mod tests;
