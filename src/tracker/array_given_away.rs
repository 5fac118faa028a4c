//! A job array whose id slurmctld gave to another job: slurmctld crashed after the array was
//! submitted, restarted from a state saved before it, lost the array and gave its id to a later
//! submit (as `tests/real_controller_drill.rs`'s crash drill makes happen: an array of two
//! elements, then a single job under its id). Its elements that are no longer listed will never be again;
//! they are lost at once, their record the other job's, so GetTask says so (its own exit marker
//! if the element ran, else the cluster's failure, retried by Flyte) instead of after
//! `lost_after`. The arrays themselves are tracked in `array.rs`.
//!
//! Once every element of such an array is over and the job under its id is another execution's,
//! the id is followed as that job (its own task asks for it by the id alone) and the array is
//! kept apart for its elements' GetTasks (`Tracker::given_away`).

use std::collections::HashSet;

use crate::slurmrestd::{ElementState, JobId, JobInfo};

use super::array::{ArrayTrack, Element, track, track_mut};
use super::resolve::{apply_record, apply_state};
use super::{Base, Entry, Known, Packed, Tracker};

impl Tracker {
    /// Arrays whose id slurmctld now lists as a plain job (module doc). Their elements this tick
    /// does not list (pending under the array's id, or started under an id of their own that
    /// went with the crash too) are lost now, their record the other job's
    /// (`service::report::own_job` reads it), while its task's follower would otherwise wait
    /// `lost_after`. An element started before slurmctld's last state save is still listed,
    /// under its own id, and followed there.
    pub(super) async fn arrays_given_away(&self, arrays: &[JobId], elements: &[ElementState]) {
        let listed: HashSet<(JobId, u32)> = elements.iter().map(|e| (e.id, e.index)).collect();
        let unlisted = |i: u32, el: Option<&Element>, m: JobId| match el {
            None => !listed.contains(&(m, i)),
            Some(el) => {
                !listed.contains(&(el.id, i))
                    && el.entry.known != Known::Lost
                    && !el.entry.record_done
                    && !el.entry.state.is_terminal()
            }
        };
        // Those with an element left to lose: each array's id is looked up once.
        let arrays: Vec<JobId> = {
            let jobs = self.jobs.lock().unwrap();
            arrays
                .iter()
                .copied()
                .filter(|m| {
                    jobs.get(m).and_then(track).is_some_and(|t| {
                        !t.own_record_plain
                            && t.indices
                                .iter()
                                .any(|i| unlisted(*i, t.elements.get(i), *m))
                    })
                })
                .collect()
        };
        for m in &arrays {
            let info = match self.api.job(*m).await {
                Ok(Some(info)) if info.array.is_none() => info,
                // Still an array (a race with the listing), or gone again: next tick says.
                Ok(_) => continue,
                Err(err) => {
                    tracing::debug!(cluster = %self.cluster, job_id = %m, error = %err, "record of a job listed under an array's id not fetched; retried next tick");
                    continue;
                }
            };
            let now = self.now_secs();
            let mut jobs = self.jobs.lock().unwrap();
            let Some(t) = jobs.get_mut(m).and_then(track_mut) else {
                continue;
            };
            let theirs =
                self.lose_elements(*m, t, &info, now, |i, el| listed.contains(&(el.id, i)));
            let over = t.elements.len() >= t.indices.len()
                && t.elements.values().all(|el| {
                    el.entry.known == Known::Lost
                        || el.entry.record_done
                        || el.entry.state.is_terminal()
                });
            if !theirs {
                // The array's own record, or an element's own execution: no other job's.
                t.taken_by = None;
                continue;
            }
            let mut job = Entry {
                state: Packed {
                    base: Base::Pending,
                    flags: 0,
                },
                known: Known::Seen,
                record_done: false,
                since: now,
                extra: None,
            };
            apply_state(&mut job, &info.state, now);
            apply_record(&mut job, &info);
            job.record_done = job.state.is_terminal();
            if over {
                let array = jobs.insert(*m, job).expect("tracked");
                tracing::info!(cluster = %self.cluster, job_id = %m, job_name = %info.name, "every element of the array is over: its id is followed as the other execution's job, the array kept for its elements' tasks");
                self.given_away.lock().unwrap().insert(*m, array);
            } else {
                t.taken_by = Some(Box::new(job));
            }
        }
    }

    /// The elements of array `m` that are not `alive`, lost: `other`, a job that is no array,
    /// has the array's id now (its key is their record's, for `service::report::own_job`).
    /// Whether `other` is another execution's job: neither the array's own record nor one of
    /// its elements' executions submitted again.
    pub(super) fn lose_elements(
        &self,
        m: JobId,
        t: &mut ArrayTrack,
        other: &JobInfo,
        now: u32,
        alive: impl Fn(u32, &Element) -> bool,
    ) -> bool {
        let keyed = crate::render::key_of_record(other, None);
        // A Flyte execution's job (it carries a key), not some other user's.
        let an_execution = keyed.is_some();
        let theirs = keyed.unwrap_or_else(|| other.name.clone());
        // A coalesced element's own execution, submitted again after the crash lost the array
        // (a CreateTask retried on another replica found no job for its key) and given the
        // array's id: that job is the element's, and its end is the element's (the crash drill).
        // Checked first: its key may also be the one the array is tracked for (`own`), which is
        // not the array's own record here.
        let mine = t
            .keys
            .iter()
            .find(|(_, k)| ***k == *theirs)
            .map(|(i, _)| *i);
        if mine.is_none()
            && let Some(own) = t.own.as_deref()
            && (theirs == own
                || crate::render::record_keys(other)
                    .is_some_and(|keys| keys.iter().any(|k| k == own)))
        {
            // The array's own record, without its array membership: a slurmctld restarted from
            // an older state save lists a script array's id so (the crash drill; its elements go
            // on and complete). Not another job's: its elements
            // are followed as any unlisted element is (slurmdbd, markers), not lost.
            if !t.own_record_plain {
                tracing::info!(cluster = %self.cluster, array = %m, job_name = %other.name, "slurmctld lists the array's id as a plain job, but the record is the array's own: its elements are followed, not lost");
            }
            t.own_record_plain = true;
            return false;
        }
        let mut lost = Vec::new();
        for i in t.indices.clone() {
            let el = t.elements.entry(i).or_insert_with(|| Element::new(m, now));
            let ended = el.entry.record_done || el.entry.state.is_terminal();
            if alive(i, el) || ended || el.entry.known == Known::Lost {
                continue;
            }
            if mine == Some(i) {
                el.id = other.job_id;
                apply_state(&mut el.entry, &other.state, now);
                apply_record(&mut el.entry, other);
                if el.entry.state.is_terminal() {
                    el.entry.record_done = true;
                }
                tracing::info!(cluster = %self.cluster, array = %m, index = i, job_name = %other.name, "the job under the array's id is this element's own execution's: followed as the element");
                continue;
            }
            if an_execution && !t.keys.is_empty() && !t.keys.contains_key(&i) {
                // A coalesced array (its elements are executions of their own) whose element `i`
                // this replica cannot name yet (its GetTasks went to another replica): the job
                // may be that element's own execution, submitted again under the array's id (the
                // crash drill). Not lost on that alone: it is followed as any unlisted
                // element (slurmdbd, its marker, `lost_after`), and once a GetTask names its key,
                // as that job (above). A script's own array has no element keys: lost as before.
                continue;
            }
            el.entry.known = Known::Lost;
            el.entry.since = now;
            el.entry.extra.get_or_insert_with(Default::default).key = Some(theirs.as_str().into());
            lost.push(i);
        }
        if !lost.is_empty() {
            tracing::warn!(cluster = %self.cluster, array = %m, indices = ?lost, job_name = %other.name, "the array's id is another job's (slurmctld lost the array in a restart from an older state save): its elements under that id are lost");
        }
        an_execution && mine.is_none()
    }
}
