//! Job arrays: one tracked entry (the array's id) whose state is the aggregate of its elements.
//!
//! What real Slurm does (24.11, `tests/fixtures/slurmrestd/24.11_v0.0.42_arrays-*`):
//! `jobs/state?job_id=<array id>` answers one entry per element slurmctld still has, as
//! `<own id>_<index>`. The pending remainder is listed under the array's id; an element gets its
//! own id when it starts, except the last one to start, which keeps the array's. A finished
//! element leaves slurmctld `MinJobAge` after it ended, on its own, while the others run; the
//! array's id stays until all are done. slurmdbd's `jobs?step=<array id>` lists every element
//! under its own id, with the array's id and its index.
//!
//! So the array's id in the one `states` request of a tick brings every element; an element
//! that started since the last tick carries an id the tracker has not seen, and is attributed to
//! the one array with that index still pending under the array's id (when several tracked arrays
//! qualify, its record says which, read with the tick's ends). Elements slurmctld no longer lists
//! are read from slurmdbd (the array's id brings them all), in one slurmdbd request; the records
//! of elements that just ended come with every other end of the tick (`ends.rs`), never one by
//! one.
//!
//! An array whose id a restarted slurmctld gave to another job is lost at once
//! (`array_given_away.rs`).
//!
//! The aggregate: running while any element is not finished; once all are, SUCCEEDED when all
//! completed, else the state of the worst element (failure class: permanent, then the task's
//! code, then the cluster's; a cancelled element makes the task ABORTED when none failed).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::slurmrestd::{BaseState, ElementState, JobId, JobInfo, JobState};

use super::resolve::{apply_marker, apply_record, apply_state};
use super::{Base, Entry, FailureClass, JobSnapshot, Known, Packed, Tracker};

/// The elements of one tracked array (in its entry's `Extra`).
#[derive(Debug, Default)]
pub(super) struct ArrayTrack {
    /// Every index the array was submitted with, sorted (looked up by binary search).
    pub(super) indices: Vec<u32>,
    pub(super) elements: BTreeMap<u32, Element>,
    /// The key of the execution whose meta it is tracked for (a script array's task, or one
    /// element of a coalesced array): a record under the array's id that names it is the
    /// array's own, however slurmctld lists it (`array_given_away.rs`).
    pub(super) own: Option<Box<str>>,
    /// A coalesced array's elements' keys, by index, as their executions' GetTasks name them
    /// (`Tracker::element_key`): a plain record under the array's id that names one is that
    /// element's own job, not another execution's (`array_given_away.rs`).
    pub(super) keys: BTreeMap<u32, Box<str>>,
    /// Its own record came back as a plain job: not looked up again for that.
    pub(super) own_record_plain: bool,
    /// Another execution's job, which slurmctld gave the array's id (`array_given_away.rs`),
    /// as the last look at it found it: what a task of that job, asking by the id alone, is
    /// answered with while elements are left to follow.
    pub(super) taken_by: Option<Box<Entry>>,
}

#[derive(Debug)]
pub(super) struct Element {
    /// Its own job id (the array's while it is pending, and for the last one to start).
    pub(super) id: JobId,
    pub(super) entry: Entry,
}

/// An element slurmctld answered finished, whose record is read with the tick's other ends
/// (`ends.rs`).
#[derive(Debug)]
pub(super) struct EndedElement {
    pub(super) array: JobId,
    pub(super) index: u32,
    pub(super) state: JobState,
}

/// What a tick's answer about arrays leaves to be read with the tick's other ends.
#[derive(Debug, Default)]
pub(super) struct ArrayEnds {
    pub(super) ended: Vec<EndedElement>,
    /// Elements that started under an id of their own which more than one tracked array could own.
    pub(super) started: Vec<ElementState>,
}

/// One element as GetTask reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ElementSnapshot {
    pub index: u32,
    /// Its snapshot (`job_id` its own id, or the array's until it started).
    pub snapshot: JobSnapshot,
}

/// How bad an element's end is, for choosing the array's: higher is worse.
fn rank(class: Option<FailureClass>, base: Base) -> u8 {
    match class {
        Some(FailureClass::Permanent) => 4,
        Some(FailureClass::User) => 3,
        Some(FailureClass::Infrastructure) => 2,
        None if base == Base::Cancelled => 1,
        None => 0,
    }
}

impl Element {
    pub(super) fn new(id: JobId, now: u32) -> Element {
        Element {
            id,
            entry: Entry {
                state: Packed {
                    base: Base::Pending,
                    flags: 0,
                },
                known: Known::NotYet,
                record_done: false,
                since: now,
                extra: None,
            },
        }
    }

    /// Finished for good: a terminal state, lost, or a state this connector does not know for
    /// longer than `unknown_after` (reported failed, as a plain job's is).
    fn is_over(&self, now: u32, unknown_after: u32) -> bool {
        self.entry.known == Known::Lost
            || self.entry.state.is_terminal()
            || self.unknown_too_long(now, unknown_after)
    }

    fn unknown_too_long(&self, now: u32, unknown_after: u32) -> bool {
        matches!(self.entry.known, Known::Seen | Known::Missing)
            && !self.entry.state.is_known()
            && now.saturating_sub(self.entry.since) >= unknown_after
    }

    fn class(&self, now: u32, unknown_after: u32) -> Option<FailureClass> {
        match self.entry.known {
            Known::Lost => Some(FailureClass::Infrastructure),
            _ if self.unknown_too_long(now, unknown_after) => Some(FailureClass::Permanent),
            _ => self.entry.state.class(),
        }
    }
}

pub(super) fn track(e: &Entry) -> Option<&ArrayTrack> {
    e.extra.as_deref()?.array.as_deref()
}

pub(super) fn track_mut(e: &mut Entry) -> Option<&mut ArrayTrack> {
    e.extra.as_deref_mut()?.array.as_deref_mut()
}

/// Applies one element's slurmdbd record (its state too) to its array.
fn apply_element_record(t: &mut ArrayTrack, info: &JobInfo, now: u32) {
    let Some(index) = info.array.and_then(|a| a.task_id) else {
        return;
    };
    if t.indices.binary_search(&index).is_err() {
        return;
    }
    let el = t
        .elements
        .entry(index)
        .or_insert_with(|| Element::new(info.job_id, now));
    el.id = info.job_id;
    apply_state(&mut el.entry, &info.state, now);
    apply_record(&mut el.entry, info);
    if el.entry.state.is_terminal() {
        el.entry.record_done = true;
    }
}

/// Whether the entry is a job array's.
pub(super) fn is_array(e: &Entry) -> bool {
    track(e).is_some()
}

impl Tracker {
    /// Element `index` of tracked array `array` was cancelled (DeleteTask) while pending:
    /// slurmctld drops such an element without a trace, in its own listing and in slurmdbd's
    /// (recorded, `tests/fixtures/slurmrestd/*_coalesce-array-held-delete-element*`), so its end
    /// is recorded here, as CANCELLED, as a job of its own cancelled while pending would show.
    /// An element that started has its own record, which says how it ended: left alone.
    pub fn element_cancelled_pending(&self, array: JobId, index: u32) {
        let now = self.now_secs();
        self.with_entry(array, |entry| {
            let Some(t) = track_mut(entry) else { return };
            if t.indices.binary_search(&index).is_err() {
                return;
            }
            let el = t
                .elements
                .entry(index)
                .or_insert_with(|| Element::new(array, now));
            if el.id == array && el.entry.state.base == Base::Pending {
                el.entry.state = Packed {
                    base: Base::Cancelled,
                    flags: 0,
                };
                el.entry.known = Known::Seen;
                el.entry.record_done = true;
                el.entry.since = now;
            }
        });
    }

    /// The tick's part for arrays: their elements from the tick's `states` answer. Elements that
    /// ended, and those only a record can attribute, are returned (read with the tick's other
    /// ends, `ends.rs`); slurmdbd is asked for the ones slurmctld no longer lists. Each array's
    /// aggregate follows the ends ([`Tracker::aggregate_arrays`]).
    pub(super) async fn refresh_arrays(
        &self,
        arrays: &[JobId],
        elements: &[ElementState],
    ) -> ArrayEnds {
        let mut ends = ArrayEnds::default();
        let now = self.now_secs();
        let mut missing: Vec<JobId> = Vec::new();
        let mut requeued: Vec<(JobId, u32, JobId)> = Vec::new();
        {
            let mut jobs = self.jobs.lock().unwrap();
            let wanted: HashSet<JobId> = arrays.iter().copied().collect();
            // Ids already attributed: element id -> array.
            let mut owner: HashMap<JobId, JobId> = HashMap::new();
            for m in arrays {
                if let Some(t) = jobs.get(m).and_then(track) {
                    for el in t.elements.values() {
                        owner.insert(el.id, *m);
                    }
                    owner.insert(*m, *m);
                }
            }
            let mut assigned: HashMap<JobId, Vec<&ElementState>> = HashMap::new();
            for e in elements {
                let m = match owner.get(&e.id) {
                    Some(m) if wanted.contains(m) => Some(*m),
                    _ => {
                        // Started since the last tick: the array that still had this index
                        // pending under its own id (or never saw it).
                        let candidates: Vec<JobId> = arrays
                            .iter()
                            .copied()
                            .filter(|m| {
                                jobs.get(m).and_then(track).is_some_and(|t| {
                                    t.indices.binary_search(&e.index).is_ok()
                                        && t.elements.get(&e.index).is_none_or(|el| el.id == *m)
                                })
                            })
                            .collect();
                        match candidates[..] {
                            [m] => Some(m),
                            _ => None,
                        }
                    }
                };
                match m {
                    Some(m) => assigned.entry(m).or_default().push(e),
                    None => ends.started.push(e.clone()),
                }
            }
            for m in arrays {
                let Some(entry) = jobs.get_mut(m) else {
                    continue;
                };
                let Some(t) = track_mut(entry) else { continue };
                let mut listed = HashSet::new();
                for e in assigned.get(m).into_iter().flatten() {
                    if t.indices.binary_search(&e.index).is_err() {
                        continue;
                    }
                    listed.insert(e.index);
                    let el = t
                        .elements
                        .entry(e.index)
                        .or_insert_with(|| Element::new(e.id, now));
                    // Under the array's id: still pending, or v0.0.40, which lists every
                    // element so; the own id a record gave it stays.
                    if e.id != *m {
                        el.id = e.id;
                    }
                    if Packed::pack(&e.state).0.is_terminal() && !el.entry.record_done {
                        // Published with its record (`ends.rs`).
                        ends.ended.push(EndedElement {
                            array: *m,
                            index: e.index,
                            state: e.state.clone(),
                        });
                        continue;
                    }
                    // Back in the queue after it ran: Slurm requeued the element (node
                    // failure, preemption); its record says how often.
                    let back = e.state.base == BaseState::Pending
                        && el.entry.known == Known::Seen
                        && el.entry.state.base != Base::Pending;
                    if back || (e.state.has_flag("REQUEUED") && !el.entry.state.has("REQUEUED")) {
                        requeued.push((*m, e.index, e.id));
                    }
                    apply_state(&mut el.entry, &e.state, now);
                }
                // Unattributed elements may be this array's: not missing until their record
                // says otherwise.
                let maybe_mine = |i: u32| ends.started.iter().any(|u| u.index == i);
                for i in t.indices.clone() {
                    if listed.contains(&i) || maybe_mine(i) {
                        continue;
                    }
                    let el = t.elements.entry(i).or_insert_with(|| Element::new(*m, now));
                    if el.entry.record_done || el.entry.known == Known::Lost {
                        continue;
                    }
                    match el.entry.known {
                        Known::Missing | Known::MissingUnseen => {}
                        Known::NotYet => {
                            el.entry.known = Known::MissingUnseen;
                            el.entry.since = now;
                        }
                        _ => {
                            el.entry.known = Known::Missing;
                            el.entry.since = now;
                        }
                    }
                    missing.push(*m);
                }
            }
        }
        // A requeue is rare (a preemption, a node failure): its record is read when it happens.
        for (m, index, id) in requeued {
            match self.api.job(id).await {
                Ok(Some(info)) => {
                    tracing::info!(cluster = %self.cluster, array = %m, index, job_id = %id, restarts = ?info.restart_count, "Slurm requeued an array element");
                    self.with_entry(m, |entry| {
                        if let Some(el) = track_mut(entry).and_then(|t| t.elements.get_mut(&index))
                        {
                            apply_record(&mut el.entry, &info);
                        }
                    });
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::debug!(cluster = %self.cluster, job_id = %id, error = %err, "record of a requeued array element not fetched");
                }
            }
        }
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            self.resolve_missing_elements(&missing).await;
        }
        ends
    }

    /// Each array's state from its elements, once the tick's ends are read.
    pub(super) fn aggregate_arrays(&self, arrays: &[JobId]) {
        let now = self.now_secs();
        let unknown_after =
            u32::try_from(self.cfg.unknown_state_after.as_secs()).unwrap_or(u32::MAX);
        let mut jobs = self.jobs.lock().unwrap();
        for m in arrays {
            if let Some(e) = jobs.get_mut(m) {
                aggregate(e, now, unknown_after);
            }
        }
    }

    /// Elements slurmctld no longer lists: slurmdbd, one request for all these arrays (their
    /// ids bring every element). An element neither knows for `lost_after` is lost.
    async fn resolve_missing_elements(&self, arrays: &[JobId]) {
        let found = match self.api.accounting_jobs(arrays).await {
            Ok(f) => {
                self.health.lock().unwrap().accounting_error = None;
                f
            }
            Err(e) => {
                tracing::debug!(cluster = %self.cluster, error = %e, "slurmdbd lookup of array elements failed; keeping last states");
                self.health.lock().unwrap().accounting_error = Some(e.to_string());
                HashMap::new()
            }
        };
        let now = self.now_secs();
        {
            let mut jobs = self.jobs.lock().unwrap();
            for m in arrays {
                let Some(t) = jobs.get_mut(m).and_then(track_mut) else {
                    continue;
                };
                // slurmdbd's record under the array's id is no array: the id was given away,
                // and that job left slurmctld before a tick saw it there.
                if let Some(other) = found.get(m).filter(|r| r.array.is_none()) {
                    // Those this tick listed are alive; the others are missing.
                    let _ = self
                        .lose_elements(*m, t, other, now, |_, el| el.entry.known == Known::Seen);
                }
                for info in found
                    .values()
                    .filter(|r| r.array.is_some_and(|a| a.array_job_id == *m))
                {
                    let done = t
                        .elements
                        .get(&info.array.and_then(|a| a.task_id).unwrap_or(u32::MAX))
                        .is_some_and(|el| el.entry.record_done);
                    if !done {
                        apply_element_record(t, info, now);
                    }
                }
            }
        }
        self.read_element_markers(arrays).await;
        let now = self.now_secs();
        let lost_after = self.cfg.lost_after;
        let mut jobs = self.jobs.lock().unwrap();
        for m in arrays {
            let Some(t) = jobs.get_mut(m).and_then(track_mut) else {
                continue;
            };
            for el in t.elements.values_mut() {
                let away = matches!(el.entry.known, Known::Missing | Known::MissingUnseen);
                let age =
                    std::time::Duration::from_secs(u64::from(now.saturating_sub(el.entry.since)));
                if away && !el.entry.record_done && age >= lost_after {
                    tracing::warn!(cluster = %self.cluster, job_id = %el.id, array = %m, "array element unknown to slurmctld and slurmdbd; reporting it lost");
                    el.entry.known = Known::Lost;
                    el.entry.since = now;
                }
            }
        }
    }

    /// Elements neither slurmctld nor slurmdbd knows: the exit-status marker each element left
    /// (`<job>_<index>.exit`), a few at a time, as for plain jobs (`resolve::read_markers`).
    async fn read_element_markers(&self, arrays: &[JobId]) {
        let Some(markers) = &self.markers else { return };
        let wanted: Vec<(JobId, u32)> = {
            let jobs = self.jobs.lock().unwrap();
            arrays
                .iter()
                .filter_map(|m| Some((*m, jobs.get(m).and_then(track)?)))
                .flat_map(|(m, t)| {
                    t.elements
                        .iter()
                        .filter(|(_, el)| {
                            matches!(el.entry.known, Known::Missing | Known::MissingUnseen)
                                && !el.entry.record_done
                        })
                        .map(move |(i, _)| (m, *i))
                })
                .collect()
        };
        if wanted.is_empty() {
            return;
        }
        use futures::StreamExt;
        let lookups: Vec<_> = wanted
            .iter()
            .map(|(m, i)| markers.element_exit_code(*m, *i))
            .collect();
        let answers: Vec<_> = futures::stream::iter(lookups)
            .buffered(super::resolve::RECORD_FETCH_CONCURRENCY)
            .collect()
            .await;
        let now = self.now_secs();
        let mut jobs = self.jobs.lock().unwrap();
        for ((m, i), answer) in wanted.into_iter().zip(answers) {
            match answer {
                Ok(Some(marker)) => {
                    tracing::info!(cluster = %self.cluster, array = %m, index = i, code = marker.code, "array element resolved from its exit-status marker");
                    if let Some(el) = jobs
                        .get_mut(&m)
                        .and_then(track_mut)
                        .and_then(|t| t.elements.get_mut(&i))
                    {
                        apply_marker(&mut el.entry, &marker, now);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(cluster = %self.cluster, array = %m, index = i, error = %e, "exit-status marker of an array element not readable");
                }
            }
        }
    }

    /// The elements of an array entry, for its snapshot.
    pub(super) fn element_snapshots(&self, id: JobId, e: &Entry) -> Vec<ElementSnapshot> {
        let Some(t) = track(e) else {
            return Vec::new();
        };
        t.indices
            .iter()
            .map(|i| ElementSnapshot {
                index: *i,
                snapshot: match t.elements.get(i) {
                    Some(el) => self.snapshot(el.id, &el.entry),
                    None => self.snapshot_unknown(id),
                },
            })
            .collect()
    }
}

/// The array's own state from its elements (see the module's docs).
fn aggregate(e: &mut Entry, now: u32, unknown_after: u32) {
    let Some(t) = track(e) else { return };
    let els: Vec<Option<&Element>> = t.indices.iter().map(|i| t.elements.get(i)).collect();
    let over = els
        .iter()
        .all(|el| el.is_some_and(|el| el.is_over(now, unknown_after)));
    // The requeue budget speaks for elements the cluster keeps putting back: one that ended on
    // its own (completed, or its code failed) says so itself, whatever its restarts.
    let restarts = els
        .iter()
        .flatten()
        .filter(|el| {
            !(el.entry.state.completed()
                || el.class(now, unknown_after) == Some(FailureClass::User))
        })
        .filter_map(|el| el.entry.extra.as_deref().and_then(|x| x.restart_count))
        .max();
    let (state, known, record_done, from) = if over {
        let worst = t
            .indices
            .iter()
            .zip(&els)
            .filter_map(|(i, el)| el.map(|el| (i, el)))
            // The lowest index among equals: `max_by_key` keeps the last maximum.
            .max_by_key(|(i, el)| {
                (
                    rank(el.class(now, unknown_after), el.entry.state.base),
                    std::cmp::Reverse(**i),
                )
            })
            .map(|(_, el)| el)
            .expect("an array has elements");
        let done = els
            .iter()
            .flatten()
            .all(|el| el.entry.record_done || el.entry.known == Known::Lost);
        let known = match worst.entry.known {
            Known::Lost => Known::Lost,
            _ => Known::Seen,
        };
        (worst.entry.state, known, done, Some(worst))
    } else {
        let running = els
            .iter()
            .flatten()
            .any(|el| el.entry.known != Known::NotYet && el.entry.state.base == Base::Running);
        let base = if running {
            Base::Running
        } else {
            Base::Pending
        };
        (Packed { base, flags: 0 }, Known::Seen, false, None)
    };
    let copied = from.and_then(|w| w.entry.extra.as_deref()).map(|x| {
        (
            x.exit_code.clone(),
            x.reason.clone(),
            x.nodes.clone(),
            x.time_limit_minutes,
            x.memory_per_node_mib,
            x.signal.clone(),
            x.other_state.clone(),
        )
    });
    if state != e.state || known != e.known {
        e.since = now;
    }
    e.state = state;
    e.known = known;
    e.record_done = record_done;
    let x = e.extra.get_or_insert_with(Default::default);
    let (exit_code, reason, nodes, limit, mem, signal, other) = copied.unwrap_or_default();
    x.exit_code = exit_code;
    x.reason = reason;
    x.nodes = nodes;
    x.time_limit_minutes = limit;
    x.memory_per_node_mib = mem;
    x.signal = signal;
    x.other_state = other;
    x.restart_count = restarts;
}
