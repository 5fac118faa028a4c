//! The records of what ended in a tick, read in batches: every job and array element that
//! slurmctld answered COMPLETED, and every element that started under an id more than one
//! tracked array could own, in ONE slurmdbd request per tick; what slurmdbd does not have yet is
//! asked again the next tick, and only then found in ONE listing of slurmctld's jobs. The ends
//! that did not complete are read from slurmctld as they end (below: why).
//!
//! Why slurmdbd first: a finished job's record (exit code, reason, nodes, limits, restarts) is
//! what GetTask's terminal answer needs, and slurmctld sends it to slurmdbd as the job ends. A
//! read there costs slurmctld nothing, while a read of each job from slurmctld (`job/{id}`) costs
//! it two RPCs (slurmrestd asks for the federation first) for every job and every array that
//! ended, on the daemon every user of the site shares.
//!
//! Why a tick's grace: slurmdbd stores the end a moment after slurmctld reports it, so a job that
//! ended just before the tick may not be there yet. Its end is held back one tick (its last
//! state stays, nothing is published without its record) and asked again; the listing is for
//! what is still missing then, and at once where there is no slurmdbd (its request fails). A
//! finished job is so answered at most one poll interval after the tick that saw it end.
//!
//! Why only COMPLETED ends go to slurmdbd: slurmdbd's reason is the one the job last waited for
//! (`Priority`, `JobArrayTaskLimit`; recorded in `tests/fixtures/slurmrestd/*slurmdb*`), while
//! slurmctld's says why it ended (`NonZeroExitCode`, `TimeLimit`, `OutOfMemory`), which a
//! failed task's answer carries. A completed job needs no reason. So the ends of a tick that did
//! not complete are read from slurmctld as they end (a job's record, or an array's in one read),
//! as rare as failures are; a map that succeeds costs slurmctld nothing for its ends.

use std::collections::HashMap;

use crate::slurmrestd::{BaseState, ElementState, JobId, JobInfo, JobState};

use super::array::{Element, EndedElement, track_mut};
use super::resolve::{apply_record, apply_state};
use super::{Packed, Tracker};

/// What one tick saw end, and wants records for.
#[derive(Debug, Default)]
pub(super) struct Ends {
    /// Plain jobs slurmctld answered finished, with that state.
    pub(super) jobs: Vec<(JobId, JobState)>,
    /// Array elements slurmctld answered finished: their array, index, own id and state.
    pub(super) elements: Vec<EndedElement>,
    /// Elements that started under an id of their own since the last tick, which more than one
    /// tracked array had pending at that index: only their record names the array.
    pub(super) started: Vec<ElementState>,
}

impl Ends {
    pub(super) fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.elements.is_empty() && self.started.is_empty()
    }

    /// Splits off the ends that did not complete (their reason is slurmctld's; module doc).
    fn split_off_uncompleted(&mut self) -> Ends {
        let completed = |s: &JobState| s.base == BaseState::Completed;
        let (jobs, uncompleted_jobs) = std::mem::take(&mut self.jobs)
            .into_iter()
            .partition(|(_, s)| completed(s));
        self.jobs = jobs;
        let (elements, uncompleted_elements) = std::mem::take(&mut self.elements)
            .into_iter()
            .partition(|e| completed(&e.state));
        self.elements = elements;
        // An element only a record attributes: slurmdbd's names its array whatever its state,
        // unless it has ended otherwise than completed.
        let (started, uncompleted_started) = std::mem::take(&mut self.started)
            .into_iter()
            .partition(|e| completed(&e.state) || !Packed::pack(&e.state).0.is_terminal());
        self.started = started;
        Ends {
            jobs: uncompleted_jobs,
            elements: uncompleted_elements,
            started: uncompleted_started,
        }
    }

    fn append(&mut self, other: Ends) {
        self.jobs.extend(other.jobs);
        self.elements.extend(other.elements);
        self.started.extend(other.started);
    }
}

/// What slurmdbd lacked at an earlier tick: asked of slurmctld's listing when still lacking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Awaited {
    Job(JobId),
    Element(JobId, u32),
    Started(JobId),
}

/// Where a record was looked for.
enum Source<'a> {
    /// slurmdbd answered (these records, by the job's own id).
    Accounting(&'a HashMap<JobId, JobInfo>),
    /// slurmctld's listing answered (its records, by the job's own id).
    Listing(&'a HashMap<JobId, JobInfo>),
}

/// What becomes of one item after a source was asked.
enum Outcome {
    Applied,
    /// Not there yet: asked again next tick.
    Held,
    /// Not there, and slurmctld's listing is asked now.
    ToListing,
}

fn finished_record(r: &JobInfo) -> bool {
    Packed::pack(&r.state).0.is_terminal()
}

/// Records of array elements by (array id, index). Not by the element's own id: v0.0.40's
/// `jobs/state` names every element by its array's id (`<array>_<index>`, recorded:
/// `24.11_v0.0.40_arrays-state-ended`), while its record carries the element's own.
fn by_element(records: &HashMap<JobId, JobInfo>) -> HashMap<(JobId, u32), &JobInfo> {
    records
        .values()
        .filter_map(|r| {
            let a = r.array?;
            Some(((a.array_job_id, a.task_id?), r))
        })
        .collect()
}

impl Tracker {
    /// Reads the records of `ends` (module doc): one slurmdbd request, then, for what it lacked
    /// a tick ago too (or when it failed), one listing of slurmctld's jobs.
    pub(super) async fn read_ends(&self, mut ends: Ends) {
        self.forget_stale_awaits();
        if ends.is_empty() {
            return;
        }
        let uncompleted = ends.split_off_uncompleted();
        let mut ids: Vec<JobId> = ends
            .jobs
            .iter()
            .map(|(id, _)| *id)
            .chain(ends.elements.iter().map(|e| e.array))
            .chain(ends.started.iter().map(|e| e.id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let accounting = if ids.is_empty() {
            Some(HashMap::new())
        } else {
            match self.api.accounting_jobs(&ids).await {
                Ok(found) => Some(found),
                Err(e) => {
                    tracing::debug!(cluster = %self.cluster, error = %e, "records of ended jobs not read from slurmdbd; asking slurmctld's listing");
                    None
                }
            }
        };
        let mut left = match &accounting {
            Some(found) => self.apply_ends(ends, Source::Accounting(found)),
            None => ends,
        };
        // The ends that did not complete: slurmctld's records, as they end (module doc).
        let read = self.read_uncompleted(uncompleted).await;
        left.append(self.apply_ends(read.0, Source::Listing(&read.1)));
        if left.is_empty() {
            return;
        }
        let listed = match self.api.jobs().await {
            Ok(l) => l,
            Err(e) => {
                // Published with the state slurmctld answered and no record; the next tick asks
                // again (`record_done` stays false).
                tracing::debug!(cluster = %self.cluster, error = %e, "records of ended jobs not listed; retried next tick");
                self.publish_without_records(left, false);
                return;
            }
        };
        let listed: HashMap<JobId, JobInfo> = listed.into_iter().map(|j| (j.job_id, j)).collect();
        let rest = self.apply_ends(left, Source::Listing(&listed));
        // Neither has more to say about these: their state is final without a record.
        self.publish_without_records(rest, true);
    }

    /// slurmctld's records of the ends that did not complete: each plain job's, and each array's
    /// (every element it still has, in one read). A failed read leaves the end to the listing.
    async fn read_uncompleted(&self, ends: Ends) -> (Ends, HashMap<JobId, JobInfo>) {
        let mut records = HashMap::new();
        let mut arrays: Vec<JobId> = ends.elements.iter().map(|e| e.array).collect();
        arrays.sort_unstable();
        arrays.dedup();
        for (id, _) in &ends.jobs {
            match self.api.job(*id).await {
                Ok(Some(info)) => {
                    records.insert(*id, info);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(cluster = %self.cluster, job_id = %id, error = %e, "record of a job that ended not read");
                }
            }
        }
        for m in arrays {
            match self.api.job_records(m).await {
                Ok(all) => records.extend(
                    all.into_iter()
                        .filter(|r| r.array.is_some_and(|a| a.array_job_id == m))
                        .map(|r| (r.job_id, r)),
                ),
                Err(e) => {
                    tracing::debug!(cluster = %self.cluster, job_id = %m, error = %e, "records of an array's ended elements not read");
                }
            }
        }
        (ends, records)
    }

    /// Applies what `source` has of `ends`; returns what must be asked of slurmctld's listing.
    fn apply_ends(&self, ends: Ends, source: Source<'_>) -> Ends {
        let now = self.now_secs();
        let mut awaited = self.awaited.lock().unwrap();
        let mut left = Ends::default();
        let mut decide = |key: Awaited, found: bool| match (&source, found) {
            (_, true) => {
                awaited.remove(&key);
                Outcome::Applied
            }
            (Source::Listing(_), false) => {
                awaited.remove(&key);
                Outcome::ToListing
            }
            (Source::Accounting(_), false) if awaited.contains_key(&key) => {
                awaited.remove(&key);
                Outcome::ToListing
            }
            (Source::Accounting(_), false) => {
                awaited.insert(key, now);
                Outcome::Held
            }
        };
        let records = match &source {
            Source::Accounting(r) | Source::Listing(r) => *r,
        };
        let elements = by_element(records);
        let mut jobs = self.jobs.lock().unwrap();
        for (id, state) in ends.jobs {
            let record = records.get(&id).filter(|r| finished_record(r));
            match decide(Awaited::Job(id), record.is_some()) {
                Outcome::Applied => {
                    if let Some(e) = jobs.get_mut(&id) {
                        apply_state(e, &state, now);
                        apply_record(e, record.expect("found"));
                        e.record_done = true;
                    }
                }
                Outcome::Held => {}
                Outcome::ToListing => left.jobs.push((id, state)),
            }
        }
        for ended in ends.elements {
            let record = elements
                .get(&(ended.array, ended.index))
                .copied()
                .filter(|r| finished_record(r));
            match decide(Awaited::Element(ended.array, ended.index), record.is_some()) {
                Outcome::Applied => {
                    if let Some(el) = jobs
                        .get_mut(&ended.array)
                        .and_then(track_mut)
                        .and_then(|t| t.elements.get_mut(&ended.index))
                    {
                        let record = record.expect("found");
                        el.id = record.job_id;
                        apply_state(&mut el.entry, &ended.state, now);
                        apply_record(&mut el.entry, record);
                        el.entry.record_done = true;
                    }
                }
                Outcome::Held => {}
                Outcome::ToListing => left.elements.push(ended),
            }
        }
        for started in ends.started {
            let record = records
                .get(&started.id)
                .filter(|r| r.array.is_some_and(|a| a.task_id == Some(started.index)));
            match decide(Awaited::Started(started.id), record.is_some()) {
                Outcome::Applied => {
                    let info = record.expect("found");
                    let array = info.array.expect("filtered").array_job_id;
                    if let Some(t) = jobs.get_mut(&array).and_then(track_mut)
                        && t.indices.binary_search(&started.index).is_ok()
                    {
                        let el = t
                            .elements
                            .entry(started.index)
                            .or_insert_with(|| Element::new(started.id, now));
                        el.id = started.id;
                        let ended = Packed::pack(&started.state).0.is_terminal();
                        // An element that ended too is published with its final record only:
                        // the next tick finds it attributed, and ended.
                        if !ended || finished_record(info) {
                            apply_state(&mut el.entry, &started.state, now);
                            if ended {
                                apply_record(&mut el.entry, info);
                                el.entry.record_done = true;
                            }
                        }
                    }
                }
                Outcome::Held => {}
                Outcome::ToListing => left.started.push(started),
            }
        }
        left
    }

    /// Publishes the states slurmctld answered for `ends` without a record: `done`, none will
    /// come (else the next tick asks again). An element started under an unattributed id stays
    /// unattributed: the next tick's answer lists it again.
    fn publish_without_records(&self, ends: Ends, done: bool) {
        let now = self.now_secs();
        let mut jobs = self.jobs.lock().unwrap();
        for (id, state) in ends.jobs {
            if let Some(e) = jobs.get_mut(&id) {
                apply_state(e, &state, now);
                e.record_done = done;
            }
        }
        for ended in ends.elements {
            if let Some(el) = jobs
                .get_mut(&ended.array)
                .and_then(track_mut)
                .and_then(|t| t.elements.get_mut(&ended.index))
            {
                apply_state(&mut el.entry, &ended.state, now);
                el.entry.record_done = done;
            }
        }
    }

    /// Awaited records of jobs no tick asked about since: evicted, or resolved by another path
    /// (slurmdbd as missing jobs). Kept two poll intervals and a bit.
    fn forget_stale_awaits(&self) {
        let keep = u32::try_from(self.cfg.poll_interval.as_secs().saturating_mul(2) + 2)
            .unwrap_or(u32::MAX);
        let now = self.now_secs();
        self.awaited
            .lock()
            .unwrap()
            .retain(|_, since| now.saturating_sub(*since) <= keep);
    }
}
