//! The paced submit of one execution as a job of its own, and what any submit's outcome makes
//! of the execution.
//!
//! Flyte's backend gives CreateTask 10 s, and turns a CreateTask *error* into a failed attempt
//! (`launch` in flyteplugins' webapi: `PhaseInfoRetryableFailure`): the task's retries are spent
//! and a new attempt is started under a new key, while the first attempt's submit may still be
//! inside slurmrestd. So neither "slurmctld is throttling submits" nor "slurmrestd hiccupped"
//! may become a CreateTask error. Instead every submit runs in its own task, paced
//! ([`super::pacing`]) and retried while its errors are transient (`submit_once` is safe to
//! repeat: it looks for the key's job before submitting, and settles races by the lowest id),
//! and its CreateTask waits for it at most the deployment's `submit_wait` (`deferred.rs`: what
//! it answers otherwise). A coalesced batch (`coalesce.rs`) is submitted by its own task, and
//! settles its elements here too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::{Client, ClientError, JobDescription};

use super::batches::Member;
use super::claimed;
use super::execution::{Progress, Stall, Submitted};
use super::pacing::Pace;
use super::protocol::{self, SubmitError, SubmitFailure};

/// A submit still failing transiently after this long is given up: the task fails retryably
/// (Flyte's next attempt starts afresh).
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(900);

/// Starts (or joins) the paced submit of `key`; `template` is the task's meta without its
/// job id, completed and remembered when the job exists; `flyte`: the execution
/// (`project/domain/run/action#attempt`) when the request is at hand, for the log.
/// `answer_by`: when its CreateTask must be answered (`None`: nobody waits).
pub fn submit_paced(
    rt: &Arc<ClusterRuntime>,
    key: &str,
    job: &JobDescription,
    client: Client,
    template: ResourceMeta,
    flyte: Option<String>,
    answer_by: Option<Instant>,
) -> watch::Receiver<Progress> {
    rt.submitter.executions.submit_or_join(key, || {
        let (tx, rx) = watch::channel(Progress::start());
        let since = rt.submitter.arrived();
        let m = Member::new((key, since), job, client, template, flyte, answer_by, tx);
        tokio::spawn(run_single(rt.clone(), m));
        rx
    })
}

/// The paced submit of one execution as a job of its own, to its end (sent on its `tx`).
pub async fn run_single(rt: Arc<ClusterRuntime>, m: Member) {
    let outcome = paced_loop(&rt, &m).await;
    let progress = settle(
        &rt,
        &m.key,
        &m.client,
        m.template,
        m.flyte.as_deref(),
        outcome,
    )
    .await;
    let _ = m.tx.send(progress);
}

/// Paced tries of `submit_once` until one settles; `Err(None)`: withdrawn before a submit.
async fn paced_loop(rt: &ClusterRuntime, m: &Member) -> Result<Submitted, Option<SubmitFailure>> {
    let (key, job, client, tx) = (m.key.as_str(), &m.job, &m.client, &m.tx);
    let began = Instant::now();
    let mut tries = 0u32;
    loop {
        let permit = rt.submitter.pacer.acquire().await;
        if rt.submitter.executions.is_withdrawn(key) {
            return Err(None);
        }
        let Some(_submitting) = rt.submitter.gate.enter() else {
            // Shutting down: a submit begun now could be cut half done. This one stays
            // unmade here; its CreateTask (or the deferred meta it answered) is made by
            // another replica.
            drop(permit);
            tracing::info!(cluster = %rt.cfg.name, key, "shutting down: not beginning this submit");
            return std::future::pending().await;
        };
        // Its CreateTask waits for the first try only (a later one answers deferred).
        let cl = rt
            .once()
            .paced(m.answer_by.filter(|_| tries == 0), &permit, m.since);
        let r = match m.template.claim.as_deref() {
            // Made once through its claim (`FLYTE_SLURM_ONCE_ONLY=claims`).
            Some(uri) => match claimed::submit(rt, m, uri).await {
                Ok(Some(s)) => Ok(s),
                Ok(None) => {
                    permit.done(Pace::Prompt);
                    tracing::info!(cluster = %rt.cfg.name, key, "the task's claim holds its tombstone (DeleteTask came first): not submitting");
                    return Err(None);
                }
                Err(f) => Err(f),
            },
            None => protocol::submit_once(cl, client, key, job, job_by_marker(rt, job)).await,
        };
        let pace = pace_of(&r);
        permit.done(pace);
        match r {
            Ok(s) => return Ok(s),
            // No room in slurmctld (`MaxJobCount`): waits, without giving up, for jobs to
            // leave it; the pacer lets one probe out every few seconds meanwhile.
            Err(f) if pace == Pace::Full => {
                tries += 1;
                tracing::debug!(cluster = %rt.cfg.name, key, tries, error = %f.error, "slurmctld has no room for this job yet (MaxJobCount)");
                let _ = tx.send(Progress::Waiting {
                    tries,
                    last_error: Some(f.error.to_string()),
                    stall: Stall::Full,
                });
            }
            Err(f) if f.error.is_transient() && began.elapsed() < GIVE_UP_AFTER => {
                tries += 1;
                tracing::info!(cluster = %rt.cfg.name, key, tries, what = %f.what, error = %f.error, "submit not settled; trying again");
                let _ = tx.send(Progress::Waiting {
                    tries,
                    last_error: Some(format!("{}: {}", f.what, f.error)),
                    stall: if pace == Pace::Outage {
                        Stall::Outage
                    } else {
                        Stall::Hiccup
                    },
                });
                // 1, 2, 4 ... 30 s: slurmrestd restarts take seconds, slurmdbd's minutes.
                let pause = Duration::from_secs(1u64 << tries.min(5)).min(Duration::from_secs(30));
                tokio::time::sleep(pause).await;
            }
            Err(f) => return Err(Some(f)),
        }
    }
}

/// What a submit's outcome makes of the execution: its job remembered (and cancelled if the
/// task was deleted meanwhile), the service's bookkeeping done; the progress to send.
pub async fn settle(
    rt: &ClusterRuntime,
    key: &str,
    client: &Client,
    template: ResourceMeta,
    flyte: Option<&str>,
    outcome: Result<Submitted, Option<SubmitFailure>>,
) -> Progress {
    match outcome {
        Ok(s) => {
            let mut m = template;
            let p = s.placement();
            m.place(
                p.job_id,
                p.element.as_ref().map(|e| (e.index, e.array.as_str())),
            );
            rt.submitter.executions.set_job(key, m.clone());
            if rt.submitter.executions.is_withdrawn(key) {
                // DeleteTask came while the submit was in flight: the job (element) goes.
                let target = m.target();
                tracing::info!(cluster = %rt.cfg.name, key, job = %target, "task deleted while its submit was in flight; cancelling the job");
                if let Err(e) = client.cancel(target, None).await {
                    tracing::error!(cluster = %rt.cfg.name, key, job = %target, error = %e, "cannot cancel the job of a deleted task: `scancel {target}`");
                }
            }
            noted(rt, &m, s, flyte);
            Progress::Done
        }
        Err(None) => Progress::Withdrawn,
        Err(Some(f)) => {
            tracing::warn!(cluster = %rt.cfg.name, key, what = %f.what, error = %f.error, "submit failed");
            Progress::Failed {
                message: format!("{}: {}", f.what, f.error),
                transient: f.error.is_transient(),
            }
        }
    }
}

/// The bookkeeping once an execution has its job, by whichever path: its files noted for
/// retention, the job tracked, the submit counted (the gauge tick adds the counts to the
/// metrics: `rpc/` is above this layer), and the log line an operator finds a run's jobs by
/// (`flyte=project/domain/run/action#attempt`, when the request was at hand: a takeover by
/// GetTask has only the meta).
fn noted(rt: &ClusterRuntime, m: &ResourceMeta, s: Submitted, flyte: Option<&str>) {
    if let Some(j) = &rt.job_files {
        j.note(m);
    }
    rt.track(m);
    rt.submitter.count(&s);
    if matches!(s, Submitted::Fresh(_)) {
        tracing::info!(cluster = %rt.cfg.name, api_version = ?rt.client().api_version(), job_id = %m.job_id, job_name = %m.job_name, flyte = flyte.unwrap_or("-"), "submitted");
    } else {
        tracing::info!(cluster = %rt.cfg.name, job_id = %m.job_id, submitted = ?s, "CreateTask for an execution that already has a job on the cluster: answering with it");
    }
}

/// What one submit try says about the cluster's pace. An unreachable slurmctld (slurmrestd's 502
/// with error 1800) or slurmrestd is an outage, tested before `throttled`, which a 502 would
/// otherwise match.
pub(super) fn pace_of<T>(r: &Result<T, SubmitFailure>) -> Pace {
    match r {
        Err(SubmitFailure {
            error: SubmitError::Slurm(e),
            ..
        }) => pace_of_error(e),
        _ => Pace::Prompt,
    }
}

/// What one error of slurmrestd says about the cluster's pace ([`pace_of`]).
pub(super) fn pace_of_error(e: &ClientError) -> Pace {
    if e.is_cluster_full() {
        Pace::Full
    } else if e.is_outage() {
        Pace::Outage
    } else if throttled(e) {
        Pace::Throttled
    } else {
        Pace::Prompt
    }
}

/// A sign that slurmctld pushes back: no answer in time on a connection made (a connect that
/// timed out is slurmrestd unreachable, an outage: `Unreachable`, caught by `is_outage` above), or
/// slurmrestd's 502/503/504.
fn throttled(e: &ClientError) -> bool {
    match e {
        ClientError::Timeout { .. } => true,
        ClientError::Http { status, .. } | ClientError::Slurm { status, .. } => {
            matches!(status, 502..=504)
        }
        _ => false,
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
) -> Result<Option<crate::slurmrestd::JobId>, SubmitError> {
    if job.array.is_some() || !rt.submitter.index.without_accounting() {
        return Ok(None);
    }
    let Some(staging) = &rt.staging else {
        return Ok(None);
    };
    let files = crate::staging::JobFiles::new(&job.current_working_directory, &job.name);
    match crate::staging::exit_marker::read_exit_marker_at(staging.as_ref(), &files.marker()).await
    {
        Ok(m) => Ok(m.and_then(|m| m.job_id).map(crate::slurmrestd::JobId)),
        Err(source) => Err(SubmitError::Marker {
            path: files.marker(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
