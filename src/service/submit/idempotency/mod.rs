//! At most one job per execution on a cluster, across retries, restarts and replicas, with Slurm
//! as the only shared state (no database).
//!
//! Each job carries its execution's key at the end of its name (a coalesced job array: every
//! element's, packed in its comment; see `render::naming`). A CreateTask:
//! 1. looks the key up in this process's index of the cluster's jobs (taken on the first call,
//!    again when a submit's outcome was uncertain): a job found is adopted;
//! 2. otherwise submits the job **held** (priority 0: slurmctld will not start it);
//! 3. checks the cluster's jobs again, with a check *begun after its submit returned*
//!    ([`Index::check_keys`], one check shared by every CreateTask waiting for one): the ids
//!    and states of all jobs (`jobs/state`, ~37 bytes a job), then the record of each job that
//!    appeared since the last check (`job/{id}`; a full `jobs` listing when more than
//!    [`FETCH_AT_MOST`] did) for its key;
//! 4. settles: of all jobs with the key, the **lowest id wins**. The winner's replica releases
//!    its job; every other replica cancels its own (never started) and answers with the winner.
//!
//! Why that gives exactly one job, whatever the interleaving: slurmctld hands out ids in
//! increasing order, so a job with a lower id than mine existed before my submit returned, and
//! a listing begun after that shows it (slurmctld's table, or slurmdbd's for a job that already
//! left it). So a replica whose job is not the lowest always sees the lower one and steps back,
//! and the lowest's replica keeps its own, whether or not it sees the others. Held jobs do not
//! run, so the loser is cancelled before it ever started.
//!
//! Cost per CreateTask that submits: the submit, one release (a job update), and a share of one
//! check (one `jobs/state`, plus one `job/{id}` for each job submitted on the cluster since the
//! previous check: with only the connector submitting, its own jobs, which it knows, so none).
//! The full listing of every job's record (~5 KB each, ~270 ms for 230 jobs) is taken once, on
//! the first CreateTask after start. A job array's elements are jobs of their own once they start
//! (`jobs/state` lists them under their own ids, with the array's comment), so each element that
//! started since the previous check is one more record to read; the array's own id, the lowest
//! with its key, is what a check settles on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::render::naming::awaiting_check;
use crate::render::record_keys;
use crate::slurmrestd::{BaseState, Client, ClientError, JobId, JobInfo, JobRef};

use accounting::Walk;
#[cfg(test)]
use accounting::{PAGE_MIN_SECS, next_span};
pub use entries::{ArrayIndices, Element, Placement, Seen, Winner};
use entries::{Jobs, Keys, job_key, job_keys, shared_key};
pub use turns::Turns;

/// How far back slurmdbd is searched for an execution's job when the index is first taken.
pub const ACCOUNTING_LOOKBACK_SECS: i64 = 7 * 24 * 3600;
/// A check fetches the records of at most this many new jobs one by one; more, and it lists
/// them all (one `jobs` request costs about as much as 40 `job/{id}`).
pub const FETCH_AT_MOST: usize = 32;
/// After the first, slurmdbd is asked at most this often. It only adds jobs that already left
/// slurmctld; a duplicate being raced is held, so pending, so in slurmctld's listing.
const ACCOUNTING_EVERY: Duration = Duration::from_secs(30);

/// A job still held for its duplicate check this long after this process first saw it is
/// abandoned: its replica died between submit and release (or its release kept failing) and the
/// backend, which counts a failed CreateTask as a failed attempt, went on under another key;
/// a deferred submit's takeover (5 min) would have released it long before. It is cancelled
/// once its record confirms it is still held and marked (a pending state alone does not: a
/// released job may wait in the queue as long).
pub const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

/// A keyed job that left slurmctld is forgotten this long after this process first saw it: the
/// look-back of a new replica's first listing of slurmdbd ([`ACCOUNTING_LOOKBACK_SECS`]), so a
/// long-running replica knows no less than a new one, and its index no longer grows for ever
/// (~1 KiB a job: without forgetting, 140 MiB a month at 20 000 jobs a day).
pub const FORGET_AFTER: Duration = Duration::from_secs(ACCOUNTING_LOOKBACK_SECS as u64);
/// How often the index is walked for jobs to forget.
const FORGET_EVERY: Duration = Duration::from_secs(60);

/// The index of one cluster's Flyte jobs by key.
#[derive(Default)]
pub struct Index {
    state: tokio::sync::Mutex<State>,
    /// When checks may begin (`turns.rs`), readable while one runs; and how many were made.
    turns: Turns,
    /// `State::no_accounting` as the last listing or check left it, readable while one runs
    /// (CreateTask asks it before choosing its submit path, and must not wait for a week's walk
    /// through slurmdbd to end).
    no_accounting: std::sync::atomic::AtomicBool,
    /// `State::log_paths` as the last listing left it, readable while one runs.
    log_paths: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    /// When the last listing or check began (`None`: the index was never taken).
    listed_at: Option<Instant>,
    /// Every job slurmctld had at the last listing or check with a lower id than this is known:
    /// in `keyed` if it carries a key. Ids grow, so a check only reads the jobs above.
    resolved_below: u32,
    /// The keyed jobs: id → key, or keys for a coalesced array (a check looks a job up by id,
    /// not through every key). The keys' text is shared with `by_key`.
    keyed: HashMap<JobId, Keys>,
    /// Unix time the last slurmdbd query began (the next asks from a little before it), and
    /// when.
    accounting_since: Option<(i64, Instant)>,
    /// slurmdbd answered "no such path": this cluster has no accounting.
    no_accounting: bool,
    /// Whether slurmdbd's records show the jobs' stdio paths (`accounting::log_paths_kept`):
    /// `None` until a record told.
    log_paths: Option<bool>,
    /// The way through slurmdbd's jobs (the first listing's week, or since the last query), while
    /// it is not done.
    walk: Option<Walk>,
    /// The span of time the newest page of the last walk would have found PAGE_JOBS jobs in:
    /// where the next walk starts.
    page_span: Option<i64>,
    /// [`ABANDONED_AFTER`] unless a test says otherwise.
    abandoned_after: Option<Duration>,
    /// key → the jobs carrying it. A job that left slurmctld still decides who wins, so it stays
    /// for [`FORGET_AFTER`] after this process first saw it ([`State::forget`]): what a replica
    /// started now would read from slurmdbd, and no longer. What bounds the map: the jobs of a
    /// week, plus those still in slurmctld.
    by_key: HashMap<Arc<str>, Jobs>,
    /// [`FORGET_AFTER`] unless a test says otherwise.
    forget_after: Option<Duration>,
    /// When [`State::forget`] last walked the index: at most once a [`FORGET_EVERY`], not at
    /// every check (a check runs per CreateTask, the index holds a week of jobs).
    forgot_at: Option<Instant>,
}

impl Index {
    #[cfg(test)]
    fn forgetting_after(d: Duration) -> Index {
        let index = Index::default();
        index.state.try_lock().expect("new").forget_after = Some(d);
        index
    }

    /// How many jobs it holds, and under how many keys; `None` while a listing or check holds
    /// it (the metrics' tick does not wait for a week's walk through slurmdbd).
    pub fn size(&self) -> Option<(usize, usize)> {
        let st = self.state.try_lock().ok()?;
        Some((st.keyed.len(), st.by_key.len()))
    }

    #[cfg(test)]
    fn abandoning_after(d: Duration) -> Index {
        let index = Index::default();
        index.state.try_lock().expect("new").abandoned_after = Some(d);
        index
    }

    /// slurmdbd was found absent: the index sees slurmctld's jobs only, so a job that left it
    /// is known by what it left behind (its exit-status marker).
    pub fn without_accounting(&self) -> bool {
        self.no_accounting
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether slurmdbd was seen keeping jobs' stdio paths, so a coalesced array may carry keys
    /// in its logs' file names (`render::naming::KeysIn::NameAndLogs`) where slurm.conf cannot
    /// be read (24.11's v0.0.42).
    pub fn log_paths_kept(&self) -> bool {
        self.log_paths.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The index, taken first if it never was, else checked again if its last check began
    /// before `after` or does not know every job below `mine` (only those are read: a job
    /// above `mine` cannot win against it).
    #[allow(clippy::result_large_err)]
    async fn fresh(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        after: Option<Instant>,
        mine: Option<JobId>,
    ) -> Result<tokio::sync::MutexGuard<'_, State>, ClientError> {
        let mut st = self.state.lock().await;
        match st.listed_at {
            None => {
                self.turns.began(false);
                st.list(client, cluster, user).await?
            }
            Some(t)
                if after.is_some_and(|a| t < a)
                    || mine.is_some_and(|m| st.resolved_below <= m.0) =>
            {
                self.turns.began(true);
                st.check(client, cluster, user, mine).await?
            }
            _ => {}
        }
        self.no_accounting
            .store(st.no_accounting, std::sync::atomic::Ordering::Relaxed);
        self.log_paths.store(
            st.log_paths == Some(true),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(st)
    }

    /// When checks may begin, and how many were made (`turns.rs`).
    pub(in crate::service::submit) fn turns(&self) -> &Turns {
        &self.turns
    }

    /// The lowest job with `key` in the current index; takes the index first if it never was
    /// (or checks again, `retake`: a submit's outcome is uncertain).
    #[allow(clippy::result_large_err)]
    pub async fn lookup(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        key: &str,
        retake: bool,
    ) -> Result<Option<Winner>, ClientError> {
        let after = retake.then(Instant::now);
        self.winner_after(client, cluster, user, key, after).await
    }

    /// The lowest job with `key` by a check at most `fresh` old (GetTask of a deferred submit:
    /// many such calls share one check).
    #[allow(clippy::result_large_err)]
    pub async fn lookup_fresh(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        key: &str,
        fresh: Duration,
    ) -> Result<Option<Winner>, ClientError> {
        let after = Instant::now().checked_sub(fresh);
        self.winner_after(client, cluster, user, key, after.or(Some(Instant::now())))
            .await
    }

    /// Each key's lowest job according to a check begun after `after` (ours if none was:
    /// CreateTasks waiting together share one check) that knows every job below `mine`, the job
    /// just submitted. Jobs above it cannot win against it, so their records are not fetched:
    /// with several submits in flight those are mostly the others', which note themselves when
    /// their submit returns (fetching them cost 2 slurmctld RPCs each: BENCHMARKS.md, fan-out).
    /// The protocol waits for the check's turn before ([`Index::turn`]).
    #[allow(clippy::result_large_err)]
    pub async fn check_keys(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        after: Instant,
        mine: JobId,
        keys: &[&str],
    ) -> Result<Vec<Option<Winner>>, ClientError> {
        let st = self
            .fresh(client, cluster, user, Some(after), Some(mine))
            .await?;
        Ok(keys.iter().map(|k| st.winner(k)).collect())
    }

    #[allow(clippy::result_large_err)]
    async fn winner_after(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        key: &str,
        after: Option<Instant>,
    ) -> Result<Option<Winner>, ClientError> {
        let st = self.fresh(client, cluster, user, after, None).await?;
        Ok(st.winner(key))
    }

    /// Records a job this process submitted (a listing begun before the submit lacks it).
    pub async fn note(&self, key: &str, job_id: JobId, awaiting_release: bool) {
        let mut st = self.state.lock().await;
        let key = shared_key(&st.by_key, key);
        st.keyed.insert(job_id, Keys::One(key.clone()));
        let seen = Seen {
            awaiting_release,
            since: Instant::now(),
            element: None,
        };
        st.by_key.entry(key).or_default().put(job_id, seen, true);
    }

    /// Records a coalesced array this process submitted: `keys[i]` is element `i`'s.
    pub async fn note_array(&self, keys: &[&str], job_id: JobId, awaiting_release: bool) {
        let mut st = self.state.lock().await;
        st.put_array(keys, job_id, awaiting_release, true);
    }

    /// Looks up many keys against one index (taken first if it never was): each key's lowest job.
    #[allow(clippy::result_large_err)]
    pub async fn lookup_many(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        keys: &[&str],
        retake: bool,
    ) -> Result<Vec<Option<Winner>>, ClientError> {
        let after = retake.then(Instant::now);
        let st = self.fresh(client, cluster, user, after, None).await?;
        Ok(keys.iter().map(|k| st.winner(k)).collect())
    }
}

impl State {
    fn winner(&self, key: &str) -> Option<Winner> {
        self.by_key
            .get(key)
            .and_then(Jobs::lowest)
            .map(|(id, s)| Winner {
                job_id: *id,
                element: s.element.clone(),
                awaiting_release: s.awaiting_release,
            })
    }

    /// Records array `job_id`'s keys, `keys[i]` element `i`'s (`replace`: a record of
    /// slurmctld's, the current truth; slurmdbd's only adds).
    fn put_array<K: AsRef<str>>(
        &mut self,
        keys: &[K],
        job_id: JobId,
        awaiting_release: bool,
        replace: bool,
    ) {
        let of = keys.len() as u32;
        let shared: Vec<Arc<str>> = keys
            .iter()
            .map(|k| shared_key(&self.by_key, k.as_ref()))
            .collect();
        for (i, key) in shared.iter().enumerate() {
            let jobs = self.by_key.entry(key.clone()).or_default();
            let since = jobs.get(&job_id).map_or_else(Instant::now, |s| s.since);
            let seen = Seen {
                awaiting_release,
                since,
                element: Some(Element::of(i as u32, of)),
            };
            jobs.put(job_id, seen, replace);
        }
        self.keyed.insert(job_id, Keys::Elements(shared.into()));
    }

    /// The full listing: every job's record from slurmctld, and slurmdbd's of the last week.
    #[allow(clippy::result_large_err)]
    async fn list(
        &mut self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
    ) -> Result<(), ClientError> {
        let began = Instant::now();
        let live = client.jobs().await?;
        let below = live.iter().map(|j| j.job_id).max();
        let n = self.record(&live, &[]) + self.accounting(client, cluster, user).await?;
        tracing::info!(
            cluster,
            jobs = n,
            "indexed the cluster's Flyte jobs for idempotent CreateTask"
        );
        self.done(began, below);
        Ok(())
    }

    /// The light check: the ids and states of all jobs, and the records of the jobs that
    /// appeared since the last listing or check (below `below` only, when given: the rest stay
    /// for a later check).
    #[allow(clippy::result_large_err)]
    async fn check(
        &mut self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        below: Option<JobId>,
    ) -> Result<(), ClientError> {
        let began = Instant::now();
        let states = client.all_states().await?;
        self.forget(|id| states.contains_key(id));
        let unknown: Vec<JobId> = states
            .keys()
            .filter(|id| id.0 >= self.resolved_below && !self.keyed.contains_key(id))
            .copied()
            .collect();
        let (fresh, later): (Vec<JobId>, Vec<JobId>) = unknown
            .into_iter()
            .partition(|id| below.is_none_or(|b| id.0 < b.0));
        let live = if fresh.len() > FETCH_AT_MOST {
            client.jobs().await?
        } else {
            let mut records = Vec::with_capacity(fresh.len());
            for id in fresh {
                // Gone since the state listing (cancelled and purged): nothing to decide on.
                records.extend(client.job(id).await?);
            }
            records
        };
        // A keyed job that is not pending now no longer waits for its release; one held for its
        // check for longer than ABANDONED_AFTER never will be released (see there).
        let mut abandoned = Vec::new();
        let abandon_after = self.abandoned_after.unwrap_or(ABANDONED_AFTER);
        for (id, state) in &states {
            let Some(keys) = self.keyed.get(id) else {
                continue;
            };
            let pending = state.base == BaseState::Pending;
            let mut gave_up = None;
            for key in keys.iter() {
                let Some(seen) = self.by_key.get_mut(key).and_then(|jobs| jobs.get_mut(id)) else {
                    continue;
                };
                if !pending {
                    seen.awaiting_release = false;
                } else if seen.awaiting_release && seen.since.elapsed() >= abandon_after {
                    seen.awaiting_release = false;
                    gave_up.get_or_insert_with(|| key.clone());
                }
            }
            if let Some(key) = gave_up {
                abandoned.push((*id, key));
            }
        }
        for (id, key) in abandoned {
            // Its state alone cannot tell: a job its replica released that still waits in a
            // long queue is pending too, and so is a job array's id while its pending remainder
            // waits for the elements that run (`%N`). Its record says whether it still waits
            // for its check.
            match client.job(id).await {
                Ok(Some(j)) if awaiting_check(&j) => {}
                Ok(_) => continue,
                Err(e) => {
                    tracing::debug!(cluster, key = &*key, job_id = %id, error = %e, "record of a job held past the abandon age not read; asked again at the next check");
                    for key in self.keyed.get(&id).into_iter().flat_map(Keys::iter) {
                        if let Some(seen) =
                            self.by_key.get_mut(key).and_then(|jobs| jobs.get_mut(&id))
                        {
                            seen.awaiting_release = true;
                        }
                    }
                    continue;
                }
            }
            tracing::warn!(cluster, key = &*key, job_id = %id, "a job held for its duplicate check for over an hour: its CreateTask was given up (a failed attempt, retried under another key); cancelling it");
            if let Err(e) = client.cancel(id, None).await {
                tracing::error!(cluster, key = &*key, job_id = %id, error = %e, "cannot cancel an abandoned held job; it never starts (held) but stays queued: `scancel {id}`");
            }
        }
        let n = self.record(&live, &[]) + self.accounting(client, cluster, user).await?;
        tracing::debug!(
            cluster,
            new_jobs = live.len(),
            keyed = n,
            "checked the cluster's new jobs for idempotent CreateTask"
        );
        self.cancel_strays(client, cluster, &live).await;
        // Known below the first job left unread (all of them when none was).
        let known_below = match later.iter().min() {
            Some(first) => Some(JobId(first.0.saturating_sub(1))),
            None => states.keys().max().copied(),
        };
        self.done(began, known_below);
        Ok(())
    }

    /// New jobs still held for their check while a lower job of their key was already released:
    /// losers whose replica never came back to cancel them (it died, or its submit timed out
    /// while slurmrestd went on and created the job later). Their replica would cancel them
    /// itself; any replica does it here, so no held duplicate lingers in the queue. Best effort:
    /// a failed cancel is tried again at the next check that reads the job (none would: it is
    /// known now), so it is logged with the command.
    async fn cancel_strays(&mut self, client: &Client, cluster: &str, live: &[JobInfo]) {
        for j in live.iter().filter(|j| awaiting_check(j)) {
            for (key, element) in job_keys(j) {
                let beaten = self.by_key.get(key.as_str()).is_some_and(|jobs| {
                    jobs.iter()
                        .any(|(id, seen)| *id < j.job_id && !seen.awaiting_release)
                });
                if !beaten {
                    continue;
                }
                // Of a coalesced array, only that element: the others may be their keys' jobs.
                let target = JobRef {
                    id: j.job_id,
                    element,
                };
                tracing::warn!(cluster, key, job = %target, "a held duplicate whose replica never settled it: cancelling it (a lower job of its execution runs)");
                if let Err(e) = client.cancel(target, None).await {
                    tracing::error!(cluster, key, job = %target, error = %e, "cannot cancel a held duplicate; it never starts (held) but stays queued: `scancel {target}`");
                }
            }
        }
    }

    /// Drops the keyed jobs that are no longer in slurmctld (`in_slurmctld` says, from the
    /// check's listing of every job), no longer wait for a release, and were first seen over
    /// [`FORGET_AFTER`] ago.
    fn forget(&mut self, in_slurmctld: impl Fn(&JobId) -> bool) {
        let horizon = self.forget_after.unwrap_or(FORGET_AFTER);
        let every = FORGET_EVERY.min(horizon);
        if self.forgot_at.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.forgot_at = Some(Instant::now());
        let State { keyed, by_key, .. } = self;
        by_key.retain(|_, jobs| {
            jobs.retain(|id, seen| {
                let keep =
                    in_slurmctld(id) || seen.awaiting_release || seen.since.elapsed() < horizon;
                if !keep {
                    keyed.remove(id);
                }
                keep
            });
            !jobs.is_empty()
        });
    }

    fn done(&mut self, began: Instant, max_known: Option<JobId>) {
        if let Some(max) = max_known {
            self.resolved_below = self.resolved_below.max(max.0.saturating_add(1));
        }
        self.listed_at = Some(began);
    }

    /// Adds the keyed jobs of slurmctld's records (`live`, the current truth: held or not now)
    /// and slurmdbd's (`gone`, which only add jobs); the number of keyed records.
    fn record(&mut self, live: &[JobInfo], gone: &[JobInfo]) -> usize {
        let mut n = 0;
        for (j, live) in live
            .iter()
            .map(|j| (j, true))
            .chain(gone.iter().map(|j| (j, false)))
        {
            if let Some(keys) = record_keys(j) {
                // A coalesced array: every key is the array's (by its id), whichever element
                // this record is (its pending remainder, or an element that started under an
                // id of its own).
                n += 1;
                let array = j.array.as_ref().map_or(j.job_id, |a| a.array_job_id);
                let element_started = j.array.as_ref().is_some_and(|a| a.task_id.is_some());
                if element_started {
                    // Only its own element's state is in this record; the array's keys are
                    // known from the array's (or are added now, not yet awaiting anything).
                    if !self.keyed.contains_key(&array) {
                        self.put_array(&keys, array, false, false);
                    }
                    let index = j.array.as_ref().and_then(|a| a.task_id).unwrap_or(0);
                    if let Some(seen) = keys
                        .get(index as usize)
                        .and_then(|k| self.by_key.get_mut(k.as_str()))
                        .and_then(|jobs| jobs.get_mut(&array))
                        && live
                    {
                        seen.awaiting_release = false;
                    }
                } else {
                    self.put_array(&keys, array, awaiting_check(j), live);
                }
                continue;
            }
            let Some(key) = job_key(j) else { continue };
            n += 1;
            let mut seen = Seen {
                awaiting_release: awaiting_check(j),
                since: Instant::now(),
                element: None,
            };
            let key = shared_key(&self.by_key, &key);
            self.keyed.insert(j.job_id, Keys::One(key.clone()));
            let jobs = self.by_key.entry(key).or_default();
            if live && let Some(before) = jobs.get(&j.job_id) {
                seen.since = before.since;
            }
            // slurmctld's record is the current truth; slurmdbd's only adds jobs.
            jobs.put(j.job_id, seen, live);
        }
        n
    }
}

mod accounting;
mod entries;
#[cfg(test)]
pub(super) mod tests;
mod turns;
