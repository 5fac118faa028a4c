//! Each finished job's accounting (what it used: elapsed, CPU time, peak memory, allocated TRES,
//! billing, energy), read from slurmdbd in ONE request per tick for every job that finished and
//! has none yet, never per GetTask. The reads have a loop of their own (`poll.rs`, woken after each
//! tick) beside the states' ticks: a slow slurmdbd delays accounting, not states.
//!
//! Flyte's backend stops polling at the first terminal answer, so a figure that comes later
//! would never reach it: while a finished job's record is awaited, its snapshot says
//! [`Accounting::Awaited`] and GetTask holds the terminal answer back (`service/report`). The
//! record usually comes at the next tick (slurmctld sends the job's end to slurmdbd at once);
//! the wait is bounded by `accounting_wait`, after which the job is reported without it
//! ([`Accounting::Unavailable`], saying why). A cluster without accounting answers that at the
//! first read: nothing is held there.
//!
//! A job array's elements are read one by one (each is its own task when coalesced); the
//! array's own snapshot (a script task's array) rolls up what its elements used.

use std::sync::Arc;
use std::time::Duration;

use crate::slurmrestd::{JobId, JobUsage};

use super::array::{track, track_mut};
use super::{ElementSnapshot, Entry, Known, Tracker};

/// A finished job's accounting as GetTask sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Accounting {
    /// Not finished, or not read on this deployment (`accounting_wait` 0): nothing to say.
    #[default]
    None,
    /// Finished; slurmdbd's record is being read (at most `accounting_wait` after the end).
    Awaited,
    /// What the job used: one record, or one per element of a job array (the roll-up's parts).
    Read(Vec<Arc<JobUsage>>),
    /// It will not come: why (no accounting on the cluster, slurmdbd had no record in time).
    Unavailable(String),
}

/// What an entry holds once its accounting was settled.
#[derive(Debug)]
pub(super) enum UsageSlot {
    Read(Arc<JobUsage>),
    Unavailable(Box<str>),
}

/// Where a record read in a tick goes.
enum Target {
    Job(JobId),
    Element(JobId, u32),
}

impl Tracker {
    /// ONE slurmdbd request for every finished job (and finished element of a tracked array)
    /// whose accounting is still awaited; a no-op when there is none. Not under the round lock:
    /// what it settles is re-checked (a job requeued meanwhile is not settled).
    pub(super) async fn read_accounting(&self) {
        let wait = self.cfg.accounting_wait;
        if wait.is_zero() {
            return;
        }
        let wanted: Vec<(JobId, Target)> = {
            let jobs = self.jobs.lock().unwrap();
            let mut out = Vec::new();
            for (id, e) in jobs.iter() {
                match track(e) {
                    Some(t) => out.extend(
                        t.elements
                            .iter()
                            .filter(|(_, el)| self.awaits(&el.entry, wait))
                            .map(|(i, el)| (el.id, Target::Element(*id, *i))),
                    ),
                    None if self.awaits(e, wait) => out.push((*id, Target::Job(*id))),
                    None => {}
                }
            }
            out
        };
        if wanted.is_empty() {
            return;
        }
        let ids: Vec<JobId> = wanted.iter().map(|(id, _)| *id).collect();
        let found = match self.api.accounting_usages(&ids).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                // Said once per job, not per tick: the next read has nothing to ask.
                self.settle(&wanted, |_| {
                    Some(UsageSlot::Unavailable(
                        "the cluster has no accounting (slurmrestd serves no slurmdb), so Slurm \
                         keeps no record of what the job used"
                            .into(),
                    ))
                });
                return;
            }
            Err(e) => {
                // Asked again next tick; after `accounting_wait` the snapshot gives up, naming it.
                tracing::debug!(cluster = %self.cluster, error = %e, jobs = ids.len(), "accounting not read; retried next tick");
                self.health.lock().unwrap().accounting_error = Some(e.to_string());
                return;
            }
        };
        self.health.lock().unwrap().accounting_error = None;
        // A record without an end is of a run slurmdbd has not closed yet (a requeued job's
        // earlier run, or the end still on its way): the final figures come with the end.
        self.settle(&wanted, |id| {
            found
                .get(&id)
                .filter(|u| u.end_time.is_some())
                .map(|u| UsageSlot::Read(Arc::new(u.clone())))
        });
    }

    fn settle(&self, wanted: &[(JobId, Target)], slot: impl Fn(JobId) -> Option<UsageSlot>) {
        let mut jobs = self.jobs.lock().unwrap();
        for (id, target) in wanted {
            let Some(s) = slot(*id) else { continue };
            let entry = match target {
                Target::Job(j) => jobs.get_mut(j),
                Target::Element(a, i) => jobs
                    .get_mut(a)
                    .and_then(track_mut)
                    .and_then(|t| t.elements.get_mut(i))
                    .map(|el| &mut el.entry),
            };
            // The job may have been requeued meanwhile: its end is not this one.
            if let Some(e) = entry.filter(|e| finished(e)) {
                e.extra.get_or_insert_with(Default::default).usage = Some(s);
            }
        }
    }

    /// Finished with a final record, no accounting settled, and still within the wait.
    fn awaits(&self, e: &Entry, wait: Duration) -> bool {
        finished(e) && usage(e).is_none() && self.age(e.since) < wait
    }

    /// What the snapshot of a plain job (or one element) says of its accounting.
    pub(super) fn accounting_of(&self, e: &Entry) -> Accounting {
        let wait = self.cfg.accounting_wait;
        if wait.is_zero() || !finished(e) {
            return Accounting::None;
        }
        match usage(e) {
            Some(UsageSlot::Read(u)) => Accounting::Read(vec![u.clone()]),
            Some(UsageSlot::Unavailable(why)) => Accounting::Unavailable(why.to_string()),
            None if self.age(e.since) < wait => Accounting::Awaited,
            None => Accounting::Unavailable(format!(
                "slurmdbd had no final record of the job {}s after it ended{}",
                wait.as_secs(),
                self.accounting_note()
            )),
        }
    }
}

/// A job array's accounting from its elements' (the array must be over): awaited while any
/// element's is, else every record read (the roll-up's parts), else the first reason none was.
pub(super) fn rolled_up(array_over: bool, elements: &[ElementSnapshot]) -> Accounting {
    if !array_over || elements.is_empty() {
        return Accounting::None;
    }
    let mut read = Vec::new();
    let mut unavailable = None;
    for e in elements {
        match &e.snapshot.accounting {
            Accounting::Awaited => return Accounting::Awaited,
            Accounting::Read(u) => read.extend(u.iter().cloned()),
            Accounting::Unavailable(why) => {
                unavailable.get_or_insert_with(|| why.clone());
            }
            Accounting::None => {}
        }
    }
    match (read.is_empty(), unavailable) {
        (false, _) => Accounting::Read(read),
        (true, Some(why)) => Accounting::Unavailable(why),
        (true, None) => Accounting::None,
    }
}

/// Ended, by Slurm's word (slurmctld's or slurmdbd's state; an element's record may come a tick
/// later than its state, and is not needed here): what slurmdbd will have accounted. A lost job
/// or one read from its exit marker (no slurmdbd record) has no accounting to wait for, and a
/// cancelled one was aborted by Flyte (DeleteTask) or by hand: nobody waits for its answer.
fn finished(e: &Entry) -> bool {
    matches!(e.known, Known::Seen | Known::Missing)
        && e.state.is_terminal()
        && e.state.base != super::Base::Cancelled
}

fn usage(e: &Entry) -> Option<&UsageSlot> {
    e.extra.as_deref()?.usage.as_ref()
}
