//! One job per execution: the held submit, the duplicate check and the release.
//!
//! [`submit_once`] submits an execution's job unless the cluster already has one for its key,
//! so that each key has exactly one job across retries, restarts and replicas: it submits
//! held, with a mark in the comment, checks the cluster's jobs of the key (the lowest id wins:
//! the protocol is in `idempotency/`), and releases the winner, restoring the task's comment.
//! Safe to repeat after any failure: a held job left behind is found and released by the next.

use crate::render::record_keys;
use crate::service::cluster::ClusterRuntime;
use crate::service::submit::execution::{Placement, Submitted};
use crate::service::submit::idempotency::{
    AWAITING_CHECK, Winner, awaiting_comment, awaiting_release,
};
use crate::slurmrestd::{Client, ClientError, JobDescription, JobId, JobRef};
use std::time::Instant;

/// A step of [`submit_once`] that failed.
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
}

impl SubmitError {
    /// Worth trying again: slurmrestd's hiccups, and any marker read (a stager or shared
    /// filesystem that is back decides it).
    pub fn is_transient(&self) -> bool {
        match self {
            SubmitError::Slurm(e) => e.is_transient(),
            SubmitError::Marker { .. } => true,
            SubmitError::Coalesce(_) => false,
        }
    }
}

/// Submits `job` for `key` unless the cluster already has a job for it, so that each key has
/// exactly one job across retries, restarts and replicas (the protocol is in
/// `idempotency/`). `client` submits (the deployment's, or the task's own credentials).
/// An error says which step failed; after a failed check or release the job is held, and a
/// retried CreateTask finds and releases it.
pub async fn submit_once(
    rt: &ClusterRuntime,
    key: &str,
    job: &JobDescription,
    client: &Client,
) -> Result<Submitted, SubmitFailure> {
    let user = rt.index_user();
    let cluster = rt.cfg.name.as_str();
    // The task's own `--hold` stays: the connector removes only its mark.
    let keep_held = job.hold == Some(true);
    let retake = rt.submitter.executions.is_uncertain(key);
    // The check through the submit's client (its long timeout): it runs in the submit's own
    // task, and its first listing reads a week of Flyte jobs from slurmdbd, which at a busy
    // site (or on a loaded machine: 6034 jobs, seen in a CI dry run) outlasts the 8 s of
    // RPC-bound calls. With the short timeout it failed every try, and nothing was submitted.
    let existing = rt
        .submitter
        .index
        .lookup(rt.submit_client(), cluster, user, key, retake)
        .await
        .map_err(|error| SubmitFailure {
            what: "cannot check whether this execution already has a job on the cluster, so \
                   nothing was submitted (a second job must never run)"
                .into(),
            error: error.into(),
        })?;
    if let Some(w) = existing {
        finish_check(rt, key, w, job, client, keep_held).await?;
        return Ok(Submitted::Adopted(w.placement()));
    }
    // Without accounting, a job that ran and left slurmctld is in no listing: its marker
    // names it (a CreateTask retried after its job ended, a deferred submit taken over).
    let ran = job_by_marker(rt, job)
        .await
        .map_err(|error| SubmitFailure {
            what: "cannot check whether this execution's job already ran, so nothing was \
               submitted (a second job must never run)"
                .into(),
            error,
        })?;
    if let Some(id) = ran {
        tracing::info!(cluster, key, job_id = %id, "this execution's job already ran and left slurmctld (its exit-status marker names it): answering with it");
        rt.submitter.index.note(key, id, false).await;
        return Ok(Submitted::Adopted(Placement::job(id)));
    }

    let mut held = job.clone();
    held.hold = Some(true);
    held.comment = Some(awaiting_comment(job.comment.as_deref()));
    let mine = match client.submit(&held).await {
        Ok(id) => id,
        Err(error) => {
            // A refusal for want of room (MaxJobCount) created nothing either.
            if !error.never_sent() && !error.is_cluster_full() {
                // It may have been created: look again before any new submit.
                rt.submitter.executions.mark_uncertain(key);
            }
            return Err(SubmitFailure {
                what: "submitting the job".into(),
                error: error.into(),
            });
        }
    };
    let after = Instant::now();
    rt.submitter.index.note(key, mine, true).await;
    let winner = rt
        .submitter
        .index
        .refresh_after(rt.submit_client(), cluster, user, key, after, mine)
        .await
        .map_err(|error| {
            rt.submitter.executions.mark_uncertain(key);
            SubmitFailure {
                what: format!(
                    "job {mine} was submitted held, but the check that no other replica \
                     submitted this execution failed; it stays held until a retried \
                     CreateTask checks again"
                ),
                error: error.into(),
            }
        })?
        .expect("noted above");
    if winner.job_id == mine {
        // Ours, and held by us whatever the listing showed of it.
        let ours = Winner {
            job_id: mine,
            element: None,
            awaiting_release: true,
        };
        finish_check(rt, key, ours, job, client, keep_held).await?;
        return Ok(Submitted::Fresh(Placement::job(mine)));
    }
    // Another replica's job for this execution is older: ours steps back before it ran.
    tracing::info!(cluster, key, job_id = %mine, winner = %winner.job_id, "another replica submitted this execution first; cancelling our held duplicate");
    if let Err(e) = client.cancel(mine, None).await {
        // Held, so it never starts; it only lingers in the queue.
        tracing::error!(cluster, key, job_id = %mine, error = %e, "cannot cancel our held duplicate job; it never starts (held) but stays queued: `scancel {mine}`");
    }
    finish_check(rt, key, winner, job, client, keep_held).await?;
    Ok(Submitted::LostRace {
        winner: winner.placement(),
        cancelled: mine.into(),
    })
}

/// Releases the winner if it still waits for its check (its replica may have died between
/// its submit and its release), restoring the task's comment.
async fn finish_check(
    rt: &ClusterRuntime,
    key: &str,
    w: Winner,
    job: &JobDescription,
    client: &Client,
    keep_held: bool,
) -> Result<(), SubmitFailure> {
    if !w.awaiting_release {
        return Ok(());
    }
    if w.element.is_some() {
        // A coalesced array whose replica died before settling it: settled as a whole (each
        // element against its own key's jobs), then released.
        return settle_orphan(rt, w.job_id, client).await.map_err(|error| {
            rt.submitter.executions.mark_uncertain(key);
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
    match client
        // Always a comment: without one of its own, the release must still remove the mark
        // (an update without `comment` leaves it).
        .release(
            w.job_id,
            Some(job.comment.as_deref().unwrap_or("")),
            keep_held,
        )
        .await
    {
        Ok(_) => {
            rt.submitter.index.note(key, w.job_id, false).await;
            Ok(())
        }
        Err(error) => {
            rt.submitter.executions.mark_uncertain(key);
            Err(SubmitFailure {
                what: format!(
                    "job {} is on the cluster, held for the duplicate check, and releasing it \
                     failed; a retried CreateTask releases it",
                    w.job_id
                ),
                error: error.into(),
            })
        }
    }
}

/// On a cluster without accounting, the job of `job` (by its name) that already ran and
/// left slurmctld, as the exit-status marker its script left names it: without slurmdbd
/// nothing else remembers such a job, and a retried CreateTask or a deferred submit taken
/// over would run the execution a second time. `None` with accounting (the index lists
/// slurmdbd's records then), for a job array (one marker per element), without staging,
/// and when there is no marker or one of an older connector (without the job's id).
pub(crate) async fn job_by_marker(
    rt: &ClusterRuntime,
    job: &JobDescription,
) -> Result<Option<JobId>, SubmitError> {
    if job.array.is_some() || !rt.submitter.index.without_accounting() {
        return Ok(None);
    }
    let Some(staging) = &rt.staging else {
        return Ok(None);
    };
    let files = crate::staging::JobFiles::new(&job.current_working_directory, &job.name);
    match crate::staging::exit_marker::read_exit_marker_at(staging.as_ref(), &files.marker()).await
    {
        Ok(m) => Ok(m.and_then(|m| m.job_id).map(JobId)),
        Err(source) => Err(SubmitError::Marker {
            path: files.marker(),
            source,
        }),
    }
}

/// Settles a coalesced array its replica left held (it died between submit and release): each
/// element against its key's jobs (the lower job wins; ours is cancelled), then the release.
/// Any replica may do it, as often as it likes: every step is idempotent.
pub async fn settle_orphan(
    rt: &ClusterRuntime,
    array: JobId,
    client: &Client,
) -> Result<(), SubmitError> {
    let cluster = rt.cfg.name.as_str();
    let Some(record) = rt.submit_client().job(array).await? else {
        return Ok(());
    };
    let Some(keys) = record_keys(record.comment.as_deref(), &record.name) else {
        return Ok(());
    };
    if !awaiting_release(&record) {
        return Ok(());
    }
    rt.submitter
        .index
        .check_after(
            rt.submit_client(),
            cluster,
            rt.index_user(),
            Instant::now(),
            array,
        )
        .await?;
    for (i, k) in keys.iter().enumerate() {
        let lost = rt
            .submitter
            .index
            .winner_now(k)
            .await
            .is_some_and(|w| w.job_id != array);
        if lost {
            let ours = JobRef {
                id: array,
                element: Some(i as u32),
            };
            tracing::info!(cluster, key = %k, job = %ours, "settling a held job array another replica left: this element's execution has an older job; cancelling the element");
            client.cancel(ours, None).await?;
        }
    }
    let comment = record
        .comment
        .as_deref()
        .map(|c| c.strip_suffix(AWAITING_CHECK).unwrap_or(c));
    tracing::info!(cluster, job_id = %array, "settled a held job array another replica left; releasing it");
    client.release(array, comment, false).await?;
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    rt.submitter.index.note_array(&refs, array, false).await;
    Ok(())
}
