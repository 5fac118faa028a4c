//! At most one job per execution on a cluster, across retries, restarts and replicas, with Slurm
//! as the only shared state (no database).
//!
//! Each job carries its execution's key (in its comment and at the end of its name, see
//! `render::naming`). A CreateTask:
//! 1. looks the key up in this process's index of the cluster's jobs (taken on the first call,
//!    again when a submit's outcome was uncertain): a job found is adopted;
//! 2. otherwise submits the job **held** (priority 0: slurmctld will not start it);
//! 3. lists the cluster's jobs again, with a listing *begun after its submit returned*
//!    ([`Index::refresh_after`], one listing shared by every CreateTask waiting for one);
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
//! listing of slurmctld's jobs plus an incremental slurmdbd query (both shared by the
//! CreateTasks that wait together).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::render::{key_from_comment, key_from_job_name};
use crate::slurmrestd::{BaseState, Client, ClientError, JobId, JobInfo};

/// How far back slurmdbd is searched for an execution's job when the index is first taken.
pub const ACCOUNTING_LOOKBACK_SECS: i64 = 7 * 24 * 3600;
/// Each later slurmdbd query overlaps the previous one by this much: slurmdbd learns of jobs a
/// little after slurmctld, and hosts' clocks differ.
const ACCOUNTING_OVERLAP_SECS: i64 = 300;
/// After the first, slurmdbd is asked at most this often. It only adds jobs that already left
/// slurmctld; a duplicate being raced is held, so pending, so in slurmctld's listing.
const ACCOUNTING_EVERY: Duration = Duration::from_secs(30);

/// slurmctld's reason for a job its submitter held (`hold: true` at submit is always this, also
/// for a privileged submitter; an admin's hold or a job_submit plugin's is `JobHeldAdmin`).
const HELD_BY_USER: &str = "JobHeldUser";

/// Appended to the comment of a job submitted held for the check, and removed by the release (in
/// the same update): a held job is released only if it carries it, so neither a task's own
/// `--hold` nor someone's `scontrol hold` is ever undone by the connector.
pub const AWAITING_CHECK: &str = " [held by slurm-connector: duplicate check]";

/// One job carrying a key, as the last listing saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Still held for the duplicate check (its replica may be gone before releasing it).
    pub awaiting_release: bool,
}

/// The index of one cluster's Flyte jobs by key.
#[derive(Default)]
pub struct Index {
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the last listing began (`None`: never taken).
    listed_at: Option<Instant>,
    /// Unix time the last slurmdbd query began (the next asks from a little before it), and
    /// when.
    accounting_since: Option<(i64, Instant)>,
    /// slurmdbd answered "no such path": this cluster has no accounting.
    no_accounting: bool,
    /// key → the jobs carrying it. Never shrinks while the process runs: a job that left
    /// slurmctld still decides who wins.
    by_key: HashMap<String, BTreeMap<JobId, Seen>>,
}

/// What a settled key came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Winner {
    pub job_id: JobId,
    /// Still held for the duplicate check when last listed: whoever answers with it releases it.
    pub awaiting_release: bool,
}

impl Index {
    /// The lowest job with `key` in the current index; takes the index first if it never was
    /// (or `retake`: a submit's outcome is uncertain).
    #[allow(clippy::result_large_err)]
    pub async fn lookup(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        key: &str,
        retake: bool,
    ) -> Result<Option<Winner>, ClientError> {
        let mut st = self.state.lock().await;
        if st.listed_at.is_none() || retake {
            st.list(client, cluster, user).await?;
        }
        Ok(st.winner(key))
    }

    /// The lowest job with `key` according to a listing begun after `after` (ours if none was:
    /// CreateTasks waiting together share one listing).
    #[allow(clippy::result_large_err)]
    pub async fn refresh_after(
        &self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
        key: &str,
        after: Instant,
    ) -> Result<Option<Winner>, ClientError> {
        let mut st = self.state.lock().await;
        if st.listed_at.is_none_or(|t| t < after) {
            st.list(client, cluster, user).await?;
        }
        Ok(st.winner(key))
    }

    /// Records a job this process submitted (a listing begun before the submit lacks it).
    pub async fn note(&self, key: &str, job_id: JobId, awaiting_release: bool) {
        let mut st = self.state.lock().await;
        st.by_key
            .entry(key.to_string())
            .or_default()
            .insert(job_id, Seen { awaiting_release });
    }
}

impl State {
    fn winner(&self, key: &str) -> Option<Winner> {
        self.by_key
            .get(key)
            .and_then(|m| m.iter().next())
            .map(|(id, s)| Winner {
                job_id: *id,
                awaiting_release: s.awaiting_release,
            })
    }

    #[allow(clippy::result_large_err)]
    async fn list(
        &mut self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
    ) -> Result<(), ClientError> {
        let began = Instant::now();
        let began_unix = chrono::Utc::now().timestamp();
        let live = client.jobs().await?;
        // Jobs that already left slurmctld (past MinJobAge) are only in slurmdbd: a backend
        // retrying a CreateTask after its job ended must not get a second job. The first query
        // looks back a week and must succeed (slurmdbd down: nothing is decided); later ones are
        // incremental, every ACCOUNTING_EVERY, and best effort: what they add is not what a race
        // between replicas is decided on, and slurmdbd being down must not stop submits.
        let mut gone = Vec::new();
        let due = self
            .accounting_since
            .is_none_or(|(_, at)| at.elapsed() >= ACCOUNTING_EVERY);
        if !self.no_accounting && due {
            let since = self
                .accounting_since
                .map_or(began_unix - ACCOUNTING_LOOKBACK_SECS, |(s, _)| {
                    s - ACCOUNTING_OVERLAP_SECS
                });
            match client.accounting_jobs_since(since, user).await {
                Ok(acct) => {
                    gone = acct;
                    self.accounting_since = Some((began_unix, began));
                }
                Err(e) if e.is_transient() && self.accounting_since.is_none() => return Err(e),
                Err(e) if e.is_transient() => tracing::warn!(
                    cluster, error = %e,
                    "slurmdbd did not answer the incremental query of recent jobs; asked again at \
                     the next CreateTask"
                ),
                // No accounting on this cluster (no /slurmdb paths): slurmctld is all there is.
                Err(e) => {
                    tracing::warn!(
                        cluster, error = %e,
                        "cannot list slurmdbd's recent jobs; a CreateTask retried after its job \
                         left slurmctld cannot be recognised on this cluster"
                    );
                    self.no_accounting = true;
                }
            }
        }
        let mut n = 0;
        // slurmctld's record is the live one (held or not now); slurmdbd's only adds jobs.
        for (j, live) in live
            .iter()
            .map(|j| (j, true))
            .chain(gone.iter().map(|j| (j, false)))
        {
            let Some(key) = job_key(j) else { continue };
            n += 1;
            let seen = Seen {
                awaiting_release: awaiting_release(j),
            };
            let jobs = self.by_key.entry(key.to_string()).or_default();
            if live {
                jobs.insert(j.job_id, seen);
            } else {
                jobs.entry(j.job_id).or_insert(seen);
            }
        }
        tracing::debug!(
            cluster,
            jobs = n,
            "listed the cluster's Flyte jobs for idempotent CreateTask"
        );
        self.listed_at = Some(began);
        Ok(())
    }
}

/// The key a job carries: in its comment, or (slurmdbd keeps comments only with
/// AccountingStoreFlags=job_comment) at the end of its name.
fn job_key(j: &JobInfo) -> Option<&str> {
    j.comment
        .as_deref()
        .and_then(key_from_comment)
        .or_else(|| key_from_job_name(&j.name))
}

fn awaiting_release(j: &JobInfo) -> bool {
    j.state.base == BaseState::Pending
        && j.reason.as_deref() == Some(HELD_BY_USER)
        && j.comment
            .as_deref()
            .is_some_and(|c| c.ends_with(AWAITING_CHECK))
}

/// The comment a job is submitted with for the check: its own, marked.
pub fn awaiting_comment(comment: Option<&str>) -> String {
    format!("{}{AWAITING_CHECK}", comment.unwrap_or_default())
}
