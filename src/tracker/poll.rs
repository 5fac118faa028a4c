//! The poll loop: ONE `states` request per tick for every job not finished, eviction of old
//! finished jobs, and the health bookkeeping while slurmrestd fails. Jobs the answer lacks go to
//! [`super::resolve`], what it answers finished to [`super::ends`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::slurmrestd::{BaseState, JobId};

use super::ends::Ends;
use super::resolve::apply_state;
use super::{Base, Known, Packed, Tracker, Unreachable};

/// How often at most the long-pending arrays are listed to tell whether one is held for the
/// duplicate check ([`Tracker::held_for_check`]).
const HELD_ARRAYS_EVERY: Duration = Duration::from_secs(300);

impl Tracker {
    /// One poll round: ONE `states` call for every job not finished, then slurmdbd for the
    /// missing ones (one call) and for the records of jobs that just finished (one call; see
    /// `ends.rs`). Returns the number of jobs asked about.
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
        // Jobs that just finished have their accounting read at once, beside the next tick.
        self.accounting_wake.notify_one();
        self.adopted.notify_waiters();
        if let Some(o) = &self.observer {
            o(&self.cluster, started.elapsed(), ids.len());
        }
        ids.len()
    }

    pub(super) async fn refresh(&self, asked: &[JobId]) {
        let ids = asked;
        let states = match self.api.states_and_elements(ids).await {
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
        let mut ends = Ends::default();
        let mut requeued = Vec::new();
        let (arrays, ids): (Vec<JobId>, Vec<JobId>) = {
            let jobs = self.jobs.lock().unwrap();
            ids.iter()
                .copied()
                .partition(|id| jobs.get(id).is_some_and(super::array::is_array))
        };
        let elements = states.elements;
        let states = states.jobs;
        {
            let mut jobs = self.jobs.lock().unwrap();
            for id in &ids {
                let Some(e) = jobs.get_mut(id) else { continue };
                match states.get(id) {
                    Some(s) => {
                        // A job that just finished is published together with its record (exit
                        // code, reason), so no GetTask sees FAILED without saying why.
                        if Packed::pack(s).0.is_terminal() && !e.record_done {
                            ends.jobs.push((*id, s.clone()));
                        } else {
                            // Back in the queue after it ran: Slurm requeued it (node failure,
                            // preemption); its record says how often.
                            let back = s.base == BaseState::Pending
                                && e.known == Known::Seen
                                && e.state.base != Base::Pending;
                            if back || (s.has_flag("REQUEUED") && !e.state.has("REQUEUED")) {
                                requeued.push(*id);
                            }
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
        if !arrays.is_empty() {
            // jobs/state lists an array's elements as `<id>_<index>`, never as a plain `<id>`: a
            // tracked array's id answered as a plain job is another job's now.
            let given_away: Vec<JobId> = arrays
                .iter()
                .copied()
                .filter(|m| states.contains_key(m))
                .collect();
            if !given_away.is_empty() {
                self.arrays_given_away(&given_away, &elements).await;
            }
            let array_ends = self.refresh_arrays(&arrays, &elements).await;
            ends.elements = array_ends.ended;
            ends.started = array_ends.started;
        }
        if !missing.is_empty() {
            self.resolve_missing(&missing).await;
        }
        self.read_ends(ends).await;
        if !arrays.is_empty() {
            self.aggregate_arrays(&arrays);
        }
        if !requeued.is_empty() {
            self.fetch_requeued(&requeued).await;
        }
        self.fetch_pending_reasons(asked).await;
        self.health.lock().unwrap().rounds += 1;
    }

    /// Why jobs pending for `pending_detail_after` still wait: `jobs/state` has no reason, so a
    /// task stayed "Slurm job 23 is PENDING" for minutes while a restarted slurmctld held it
    /// (its node drained "Duplicate jobid"). ONE `GET jobs/` for all of them, at most once per
    /// `pending_detail_after`, and only while such a job exists: a queue that moves costs nothing
    /// more than its `jobs/state`. A failed listing is only logged: the state is known. The same
    /// listing tells which of them (arrays too) are still held for the duplicate check
    /// ([`Tracker::held_for_check`]).
    async fn fetch_pending_reasons(&self, ids: &[JobId]) {
        let after = self.cfg.pending_detail_after;
        // Jobs (arrays apart) pending long, and arrays pending long.
        let (stuck, arrays): (Vec<JobId>, Vec<JobId>) = {
            let jobs = self.jobs.lock().unwrap();
            ids.iter()
                .copied()
                .filter(|id| {
                    jobs.get(id).is_some_and(|e| {
                        e.known == Known::Seen
                            && e.state.base == Base::Pending
                            && self.age(e.since) >= after
                    })
                })
                .partition(|id| !jobs.get(id).is_some_and(super::array::is_array))
        };
        self.held_for_check
            .lock()
            .unwrap()
            .retain(|id| stuck.contains(id) || arrays.contains(id));
        // An array's reason is its elements', so it is listed only to tell whether it is held
        // for the check, which is rare: at most every HELD_ARRAYS_EVERY (a queue of arrays
        // waiting for room would otherwise cost a listing of every job each interval).
        let due = |at: &std::sync::Mutex<Option<Instant>>, every: Duration| {
            at.lock().unwrap().is_none_or(|t| t.elapsed() >= every)
        };
        let list = (!stuck.is_empty() && due(&self.detail_at, after))
            || (!arrays.is_empty() && due(&self.held_arrays_at, HELD_ARRAYS_EVERY));
        if !list {
            return;
        }
        // A listing answers both.
        let now = Some(Instant::now());
        *self.detail_at.lock().unwrap() = now;
        *self.held_arrays_at.lock().unwrap() = now;
        let stuck: Vec<JobId> = stuck.into_iter().chain(arrays).collect();
        let listed = match self.api.jobs().await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(cluster = %self.cluster, error = %e, "reasons of pending jobs not listed");
                return;
            }
        };
        let mut held = std::collections::HashSet::new();
        let mut jobs = self.jobs.lock().unwrap();
        for info in listed {
            // An array's records (its pending remainder, its elements) are the array's.
            let id = info.array.map_or(info.job_id, |a| a.array_job_id);
            if !stuck.contains(&id) {
                continue;
            }
            if crate::render::naming::held_by_connector(&info) {
                held.insert(id);
            }
            // An array's reason is its elements' own.
            if info.array.is_some() {
                continue;
            }
            if let Some(e) = jobs.get_mut(&info.job_id)
                && e.state.base == Base::Pending
            {
                e.extra.get_or_insert_with(Default::default).reason = info.reason.clone();
            }
        }
        drop(jobs);
        let mut h = self.held_for_check.lock().unwrap();
        for id in stuck {
            if held.contains(&id) {
                h.insert(id);
            } else {
                h.remove(&id);
            }
        }
    }

    pub(super) fn mark_unreachable(&self, error: &str) {
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
    pub(super) fn evict(&self) {
        let ttl = self.cfg.terminal_ttl;
        let now = self.now_secs();
        self.jobs.lock().unwrap().retain(|_, e| {
            let finished = e.known == Known::Lost || (e.state.is_terminal() && e.record_done);
            !(finished && Duration::from_secs(u64::from(now.saturating_sub(e.since))) >= ttl)
        });
    }

    /// Runs the poll loop, the adopter and the accounting reads until `shutdown` resolves.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        // A loop of its own, woken after each tick: a slow slurmdbd (seconds a request) must not
        // hold back the states of every job, nor wait for them (the wakes of the ticks it spans
        // make one). Stopped with this one.
        let _accounting = (!self.cfg.accounting_wait.is_zero()).then(|| {
            let me = self.clone();
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
                loop {
                    me.accounting_wake.notified().await;
                    me.read_accounting().await;
                }
            }))
        });
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
