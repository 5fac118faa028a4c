//! The once-only protocol, in one file: at most one job per execution on a cluster, across
//! retries, restarts and replicas (why it holds: `idempotency/`, whose index of the cluster's
//! jobs by key it reads).
//!
//! Every job the connector makes goes through the same steps, as kube-runtime's `finalizer.rs`
//! keeps a multi-step protocol in one place:
//! 1. **held submit** ([`held_submit`]): submitted with `hold` and the check's mark in its
//!    comment, noted in the index; an answer that may hide a created job marks its keys
//!    uncertain, so the next try looks for it before submitting;
//! 2. **check** ([`check`]): a check of the cluster's jobs begun after the submit returned;
//!    each key's lowest job wins;
//! 3. **settle**: each key the held job lost is cancelled in it (an element of an array, or the
//!    whole job), held, so it never started;
//! 4. **release** ([`release`]): the keys it won are released in the same update that removes
//!    the mark (a task's own `--hold` stays).
//!
//! What is submitted ([`Carries`]): one execution's **job**, or a coalesced **array** with a
//! key per element. Four modes run those steps:
//! - [`submit_once`]: a job, unless the index already has one for its key (then adopted, and
//!   released if its replica left it held);
//! - [`submit_array`]: a batch's array; each element settles against its own key;
//! - [`settle_orphan`]: a job or array its replica left held (it died between submit and
//!   release): steps 2-4 by whoever meets one of its keys next (a lookup, or a held job that
//!   lost a key to it);
//! - [`tombstone`]: a DeleteTask's mark that a key never runs: submitted held without the mark
//!   (no replica ever releases it) and cancelled; a lower job of the key found by the check is
//!   cancelled too.
//!
//! It works on [`Cluster`] (the `Submitter`'s index and executions, and a client that checks),
//! not on the service's runtime, so a unit test drives it against a mock slurmrestd.

use std::time::Instant;

use crate::render::naming::{awaiting_check, awaiting_comment, without_check_mark};
use crate::render::{key_of_record, record_keys};
use crate::slurmrestd::{Client, ClientError, JobDescription, JobId, JobRef};

use super::execution::{Placement, Submitted};
use super::idempotency::{Element, Winner};
use super::pacing::Permit;
use super::submitter::Submitter;

/// What the protocol reads and writes on one cluster.
#[derive(Clone, Copy)]
pub struct Cluster<'a> {
    pub name: &'a str,
    pub submitter: &'a Submitter,
    /// The client that lists and checks the cluster's jobs: the deployment's, with the
    /// submit's long timeout where the check runs in a submit's own task (its first listing
    /// reads a week of Flyte jobs from slurmdbd, which at a busy site, or on a loaded machine,
    /// outlasts the 8 s of RPC-bound calls).
    pub checks: &'a Client,
    /// Whose jobs the index lists (`None`: everyone's).
    pub user: Option<&'a str>,
    /// When the check must begin at the latest, for the CreateTasks waiting for this submit to
    /// be answered in time (`None`: none waits; the check waits at most its turn,
    /// `idempotency/turns.rs`).
    pub check_by: Option<Instant>,
    /// The pacer's slot the submit runs in (`None`: none), excused the check's wait for its
    /// turn.
    pub permit: Option<&'a Permit>,
    /// When the (latest) CreateTask this submit is for came: one that came after it is another
    /// submit that may share the check.
    pub arrived: Option<Instant>,
}

impl<'a> Cluster<'a> {
    /// The same, with CreateTasks waiting to be answered by `by` (see `check_by`), in the
    /// pacer's slot `permit`, for CreateTasks the latest of which came `arrived`.
    pub fn paced(self, by: Option<Instant>, permit: &'a Permit, arrived: Instant) -> Self {
        Cluster {
            check_by: by.map(|b| b.checked_sub(CHECK_AND_RELEASE).unwrap_or(b)),
            permit: Some(permit),
            arrived: Some(arrived),
            ..self
        }
    }
}

/// How often a check waiting for its turn looks whether a submit waits for a slot.
const TURN_LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Waits for the cluster's turn of checks (`idempotency/turns.rs`), so that the held jobs
/// submitted meanwhile share one listing; at once when the last check is older. It waits only
/// while another submit could share the check: one in flight beside this one, CreateTasks in
/// an open batch, or one come after this submit's. For an array (several CreateTasks at once: a
/// map streaming in, whose next element may come a few milliseconds after the check would
/// begin) that is decided after a first look of [`TURN_LOOK_EVERY`]; for a job of its own at
/// once, so a caller that sends one CreateTask after the other, each after the last was
/// answered, waits for nothing. The wait ends early when a submit waits for a slot of the
/// pacer (held slots must not hold up other submits, whose CreateTasks would then be answered
/// deferred), and its time is excused from the slot's (a slot held
/// past `pacing::SLOW` reads as throttling).
async fn wait_turn(cl: Cluster<'_>, carries: Carries<'_>) {
    let Some(at) = cl.submitter.index.turns().next(cl.check_by) else {
        return;
    };
    let stream = carries.keys().len() > 1;
    let ours = usize::from(cl.permit.is_some());
    let began = Instant::now();
    loop {
        let now = Instant::now();
        let pace = cl.submitter.pacer.view();
        let others = pace.in_flight > ours
            || cl.submitter.batches.waiting() > 0
            || cl.arrived.is_some_and(|a| cl.submitter.arrived_after(a));
        let looked = !stream || now.duration_since(began) >= TURN_LOOK_EVERY;
        if now >= at || pace.waiting > 0 || (looked && !others) {
            break;
        }
        tokio::time::sleep((at - now).min(TURN_LOOK_EVERY)).await;
    }
    if let Some(p) = cl.permit {
        p.excuse(began.elapsed());
    }
}

/// What a check and a release take at most, as a CreateTask waits for them: its check begins
/// this long before the CreateTask is due (a slurmctld under load answers in ~100 ms).
const CHECK_AND_RELEASE: std::time::Duration = std::time::Duration::from_millis(700);

/// The keys a job carries: one execution's, or a coalesced array's (element `i`: `keys[i]`).
#[derive(Clone, Copy)]
pub enum Carries<'a> {
    Job(&'a str),
    Array(&'a [&'a str]),
}

impl<'a> Carries<'a> {
    fn keys(&self) -> &[&'a str] {
        match self {
            Carries::Job(k) => std::slice::from_ref(k),
            Carries::Array(keys) => keys,
        }
    }

    /// How a failure names the job.
    fn what(&self) -> &'static str {
        match self {
            Carries::Job(_) => "job",
            Carries::Array(_) => "job array",
        }
    }

    /// The job (or key's element) within `mine`.
    fn of(&self, mine: JobId, i: usize) -> JobRef {
        match self {
            Carries::Job(_) => mine.into(),
            Carries::Array(_) => JobRef {
                id: mine,
                element: Some(i as u32),
            },
        }
    }

    fn placement(&self, mine: JobId, i: usize) -> Placement {
        match self {
            Carries::Job(_) => Placement::job(mine),
            Carries::Array(keys) => Placement {
                job_id: mine,
                element: Some(Element::of(i as u32, keys.len() as u32)),
            },
        }
    }

    /// Notes `mine` in the index: its submit returned before any check that lists it.
    async fn note(&self, cl: Cluster<'_>, mine: JobId, awaiting_release: bool) {
        let index = &cl.submitter.index;
        match self {
            Carries::Job(k) => index.note(k, mine, awaiting_release).await,
            Carries::Array(keys) => index.note_array(keys, mine, awaiting_release).await,
        }
    }

    /// After an outcome that may have created a job: the next try looks for it first.
    fn uncertain(&self, cl: Cluster<'_>) {
        for k in self.keys() {
            cl.submitter.executions.mark_uncertain(k);
        }
    }
}

/// A step of the protocol that failed.
#[derive(Debug)]
pub struct SubmitFailure {
    /// What was being done, and what state it leaves.
    pub what: String,
    pub error: SubmitError,
}

/// Why a step of a submit failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Slurm(#[from] ClientError),
    /// The batch's job array could not be made (a bug: its members had one shape).
    #[error("{0}")]
    Coalesce(String),
    /// On a cluster without accounting, the exit-status marker that may name the execution's
    /// finished job could not be read: whether it already ran is unknown, so nothing is
    /// submitted until it can be read (retried like a hiccup of slurmrestd).
    #[error("cannot read the exit-status marker {path}: {source}")]
    Marker {
        path: String,
        #[source]
        source: crate::staging::StagingError,
    },
    /// The execution's claim could not be read or written, or another replica holds it: tried
    /// again (`FLYTE_SLURM_ONCE_ONLY=claims`, `claimed.rs`).
    #[error("{0}")]
    Claim(String),
}

impl SubmitError {
    /// Worth trying again: slurmrestd's hiccups, and any marker read (a stager or shared
    /// filesystem that is back decides it).
    pub fn is_transient(&self) -> bool {
        match self {
            SubmitError::Slurm(e) => e.is_transient(),
            SubmitError::Marker { .. } | SubmitError::Claim(_) => true,
            SubmitError::Coalesce(_) => false,
        }
    }
}

/// What the check made of one key of a held job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The held job is the key's lowest: it runs (once released).
    Won,
    /// The key has a lower job: the held one (or its element) steps back.
    Lost(Winner),
}

/// Step 1: `held` (with `hold` and the check's mark) submitted and noted as awaiting its
/// release; when its submit returned, for the check.
pub async fn held_submit(
    cl: Cluster<'_>,
    client: &Client,
    held: &JobDescription,
    carries: Carries<'_>,
) -> Result<(JobId, Instant), SubmitFailure> {
    let mine = match client.submit(held).await {
        Ok(id) => id,
        Err(error) => {
            // Not sent, or refused for want of room (MaxJobCount): surely not created.
            if !error.never_sent() && !error.is_cluster_full() {
                carries.uncertain(cl);
            }
            return Err(SubmitFailure {
                what: format!("submitting the {}", carries.what()),
                error: error.into(),
            });
        }
    };
    let after = Instant::now();
    carries.note(cl, mine, true).await;
    Ok((mine, after))
}

/// Step 2: a check begun after `after` (when `mine`'s submit returned) that knows every job
/// below `mine`, and each key's verdict.
pub async fn check(
    cl: Cluster<'_>,
    mine: JobId,
    carries: Carries<'_>,
    after: Instant,
) -> Result<Vec<Verdict>, ClientError> {
    wait_turn(cl, carries).await;
    let winners = cl
        .submitter
        .index
        .check_keys(cl.checks, cl.name, cl.user, after, mine, carries.keys())
        .await?;
    Ok(winners
        .into_iter()
        .map(|w| match w {
            Some(w) if w.job_id != mine => Verdict::Lost(w),
            // Ours (noted before the check, so always there).
            _ => Verdict::Won,
        })
        .collect())
}

/// Steps 2 and 3 for a held job of ours: the check, and each lost key's job (or element)
/// cancelled. A failed check leaves it held and its keys uncertain.
async fn check_and_settle(
    cl: Cluster<'_>,
    client: &Client,
    mine: JobId,
    carries: Carries<'_>,
    after: Instant,
) -> Result<Vec<Verdict>, SubmitFailure> {
    let verdicts = check(cl, mine, carries, after).await.map_err(|error| {
        carries.uncertain(cl);
        SubmitFailure {
            what: format!(
                "{} {mine} was submitted held, but the check that no other replica submitted \
                 its tasks failed; it stays held until a retried CreateTask checks again",
                carries.what()
            ),
            error: error.into(),
        }
    })?;
    for (i, (k, v)) in carries.keys().iter().zip(&verdicts).enumerate() {
        let Verdict::Lost(w) = v else { continue };
        // Another replica's job for this execution is older: ours steps back before it ran.
        let ours = carries.of(mine, i);
        tracing::info!(cluster = cl.name, key = k, job = %ours, winner = %w.placement(), "another replica submitted this execution first; cancelling our held duplicate");
        if let Err(e) = client.cancel(ours, None).await {
            // Held, so it never starts; it only lingers in the queue.
            tracing::error!(cluster = cl.name, key = k, job = %ours, error = %e, "cannot cancel our held duplicate; it never starts (held) but stays queued: `scancel {ours}`");
        }
    }
    Ok(verdicts)
}

/// Step 4: `id` released with `comment` (its own, the mark removed in the same update; always
/// given: an update without one leaves the mark), then noted as released. A failure leaves it
/// held and its keys uncertain: a retried CreateTask releases it.
pub async fn release(
    cl: Cluster<'_>,
    client: &Client,
    id: JobId,
    carries: Carries<'_>,
    comment: &str,
    keep_held: bool,
) -> Result<(), SubmitFailure> {
    if let Err(error) = client.release(id, Some(comment), keep_held).await {
        carries.uncertain(cl);
        return Err(SubmitFailure {
            what: format!(
                "{} {id} is on the cluster, held for the duplicate check, and releasing it \
                 failed; a retried CreateTask releases it",
                carries.what()
            ),
            error: error.into(),
        });
    }
    carries.note(cl, id, false).await;
    Ok(())
}

/// Submits `job` for `key` unless the cluster already has a job for it (then adopted), so that
/// each key has exactly one job. `ran`: the job an exit-status marker names, asked only when
/// the index has none (a cluster without accounting forgets a job that left slurmctld). An
/// error says which step failed; after a failed check or release the job is held, and a retried
/// CreateTask finds and releases it.
pub async fn submit_once<F>(
    cl: Cluster<'_>,
    client: &Client,
    key: &str,
    job: &JobDescription,
    ran: F,
) -> Result<Submitted, SubmitFailure>
where
    F: std::future::Future<Output = Result<Option<JobId>, SubmitError>>,
{
    let carries = Carries::Job(key);
    let retake = cl.submitter.executions.is_uncertain(key);
    let existing = cl
        .submitter
        .index
        .lookup(cl.checks, cl.name, cl.user, key, retake)
        .await
        .map_err(|error| SubmitFailure {
            what: "cannot check whether this execution already has a job on the cluster, so \
                   nothing was submitted (a second job must never run)"
                .into(),
            error: error.into(),
        })?;
    if let Some(w) = existing {
        finish(cl, client, key, &w, job).await?;
        return Ok(Submitted::Adopted(w.placement()));
    }
    let ran = ran.await.map_err(|error| SubmitFailure {
        what: "cannot check whether this execution's job already ran, so nothing was \
               submitted (a second job must never run)"
            .into(),
        error,
    })?;
    if let Some(id) = ran {
        tracing::info!(cluster = cl.name, key, job_id = %id, "this execution's job already ran and left slurmctld (its exit-status marker names it): answering with it");
        cl.submitter.index.note(key, id, false).await;
        return Ok(Submitted::Adopted(Placement::job(id)));
    }
    let mut held = job.clone();
    held.hold = Some(true);
    held.comment = Some(awaiting_comment(job.comment.as_deref()));
    let (mine, after) = held_submit(cl, client, &held, carries).await?;
    match &check_and_settle(cl, client, mine, carries, after).await?[0] {
        Verdict::Won => {
            let ours = Winner {
                job_id: mine,
                element: None,
                awaiting_release: true,
            };
            finish(cl, client, key, &ours, job).await?;
            Ok(Submitted::Fresh(Placement::job(mine)))
        }
        Verdict::Lost(w) => {
            finish(cl, client, key, w, job).await?;
            Ok(Submitted::LostRace {
                winner: w.placement(),
                cancelled: mine.into(),
            })
        }
    }
}

/// The key's winner released if it still waits for its check (its replica may have died
/// between submit and release), with the task's own comment and `--hold`; an array's, settled
/// as a whole first.
async fn finish(
    cl: Cluster<'_>,
    client: &Client,
    key: &str,
    w: &Winner,
    job: &JobDescription,
) -> Result<(), SubmitFailure> {
    if !w.awaiting_release {
        return Ok(());
    }
    if w.element.is_some() {
        return settle_orphan(cl, client, w.job_id).await.map_err(|error| {
            cl.submitter.executions.mark_uncertain(key);
            SubmitFailure {
                what: format!(
                    "job array {} is on the cluster, held for its duplicate check, and \
                     settling it failed; a retried CreateTask settles it",
                    w.job_id
                ),
                error,
            }
        });
    }
    // The task's own `--hold` stays: the connector removes only its mark.
    let keep_held = job.hold == Some(true);
    let comment = job.comment.as_deref().unwrap_or("");
    release(cl, client, w.job_id, Carries::Job(key), comment, keep_held).await
}

/// A batch's job array: `array` (unheld, its keys in its comment or name, `comment` its own)
/// submitted held and marked, each element settled against its key's jobs, the elements it
/// won released. Element `i` is `keys[i]`'s.
pub async fn submit_array(
    cl: Cluster<'_>,
    client: &Client,
    array: &JobDescription,
    keys: &[&str],
) -> Result<Vec<Submitted>, SubmitFailure> {
    let carries = Carries::Array(keys);
    let comment = array.comment.clone().unwrap_or_default();
    let mut held = array.clone();
    held.hold = Some(true);
    held.comment = Some(awaiting_comment(Some(&comment)));
    let (mine, after) = held_submit(cl, client, &held, carries).await?;
    let verdicts = check_and_settle(cl, client, mine, carries, after).await?;
    if verdicts.contains(&Verdict::Won) {
        release(cl, client, mine, carries, &comment, false).await?;
    } else {
        carries.note(cl, mine, false).await;
    }
    settle_winners(cl, client, keys, &verdicts).await?;
    Ok(verdicts
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Verdict::Won => Submitted::Fresh(carries.placement(mine, i)),
            Verdict::Lost(w) => Submitted::LostRace {
                winner: w.placement(),
                cancelled: carries.of(mine, i),
            },
        })
        .collect())
}

/// The winners of the keys a held array lost, each settled unless already released: the keys'
/// tasks are answered with them, and a winner its replica left held (it died, or was rolled,
/// between its submit and its release) would otherwise stay held for good, its tasks queued
/// for ever (two replicas' arrays of the same two keys, the lower one's replica rolled inside
/// that window: `tests/real_replica_drill.rs`). A failure leaves those keys uncertain: the batch's
/// tasks are then submitted one by one, and each adopts and settles its winner.
async fn settle_winners(
    cl: Cluster<'_>,
    client: &Client,
    keys: &[&str],
    verdicts: &[Verdict],
) -> Result<(), SubmitFailure> {
    let mut settled = Vec::new();
    for (k, v) in keys.iter().zip(verdicts) {
        let Verdict::Lost(w) = v else { continue };
        if !w.awaiting_release || settled.contains(&w.job_id) {
            continue;
        }
        settled.push(w.job_id);
        if let Err(error) = settle_orphan(cl, client, w.job_id).await {
            cl.submitter.executions.mark_uncertain(k);
            return Err(SubmitFailure {
                what: format!(
                    "job {} is another replica's for this execution, held for its duplicate \
                     check, and settling it failed; a retried CreateTask settles it",
                    w.job_id
                ),
                error,
            });
        }
    }
    Ok(())
}

/// Settles a held job its replica left (it died between submit and release), a coalesced
/// array or a job of its own: each key against its jobs (the lower job wins; ours, or our
/// element, is cancelled), then the release of what won, with its own comment. Any replica may
/// do it, as often as it likes: every step is idempotent. A job of its own is released without
/// a `--hold` of the task's: only a task without one is an array's element, or meets one.
pub async fn settle_orphan(cl: Cluster<'_>, client: &Client, id: JobId) -> Result<(), SubmitError> {
    let Some(record) = cl.checks.job(id).await? else {
        return Ok(());
    };
    if !awaiting_check(&record) {
        return Ok(());
    }
    let comment = record.comment.as_deref();
    let (packed, own) = match record_keys(&record) {
        Some(keys) => (keys, None),
        None => match key_of_record(&record, None) {
            Some(key) => (Vec::new(), Some(key)),
            None => return Ok(()),
        },
    };
    let keys: Vec<&str> = packed.iter().map(String::as_str).collect();
    let carries = match &own {
        Some(key) => Carries::Job(key),
        None => Carries::Array(&keys),
    };
    let verdicts = check(cl, id, carries, Instant::now()).await?;
    for (i, v) in verdicts.iter().enumerate() {
        if let Verdict::Lost(_) = v {
            let ours = carries.of(id, i);
            tracing::info!(cluster = cl.name, key = carries.keys()[i], job = %ours, "settling a held job another replica left: its execution has an older job; cancelling it");
            client.cancel(ours, None).await?;
        }
    }
    if !verdicts.contains(&Verdict::Won) {
        carries.note(cl, id, false).await;
        return Ok(());
    }
    let comment = without_check_mark(comment.unwrap_or_default());
    tracing::info!(cluster = cl.name, job_id = %id, "settled a held job another replica left; releasing it");
    release(cl, client, id, carries, comment, false)
        .await
        .map_err(|f| f.error)
}

/// A DeleteTask's mark that `key` must never run: `job` submitted held, with the key but without
/// the check's mark (so no replica ever releases it), then cancelled. Being the key's lowest
/// id, it wins every later check, so a late submit of the same key steps back. A submit of the
/// key already inside slurmrestd may get the lower id; the check (begun after the tombstone's
/// submit) sees such a job, and it is cancelled too. `client` is the task's user's: its late
/// submit's job, which this cancels, is that user's.
pub async fn tombstone(
    cl: Cluster<'_>,
    submits: &Client,
    cancels: &Client,
    key: &str,
    job: &JobDescription,
) -> Result<(), ClientError> {
    let mut held = job.clone();
    held.hold = Some(true);
    let carries = Carries::Job(key);
    let id = submits.submit(&held).await?;
    let after = Instant::now();
    // Not awaiting a release: nobody may release it.
    carries.note(cl, id, false).await;
    cancels.cancel(id, None).await?;
    if let Verdict::Lost(w) = &check(cl, id, carries, after).await?[0] {
        tracing::info!(cluster = cl.name, key, job_id = %w.job_id, "a submit of the deleted task was already on its way; cancelling its job");
        cancels.cancel(w.placement().target(), None).await?;
    }
    tracing::info!(cluster = cl.name, key, job_id = %id, "deleted before its job existed: left a cancelled tombstone job so that no late submit runs");
    Ok(())
}

#[cfg(test)]
mod tests;
