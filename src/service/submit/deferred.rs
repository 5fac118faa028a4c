//! Submits that outlive their CreateTask.
//!
//! Flyte's backend gives CreateTask 10 s, and turns a CreateTask *error* into a failed attempt
//! (`launch` in flyteplugins' webapi: `PhaseInfoRetryableFailure`): the task's retries are spent
//! and a new attempt is started under a new key, while the first attempt's submit may still be
//! inside slurmrestd. So neither "slurmctld is throttling submits" nor "slurmrestd hiccupped"
//! may become a CreateTask error. Instead every submit runs in its own task, paced
//! ([`super::pacing`]) and retried while its errors are transient (`submit_once` is safe to
//! repeat: it looks for the key's job before submitting, and settles races by the lowest id):
//! - done within the deployment's `submit_wait`: CreateTask answers with the job, as before;
//! - failed for good (a refused job, rejected credentials): CreateTask answers that error;
//! - still going: CreateTask answers a **deferred** meta (`job_id` 0, plus the key and the job
//!   description), and the submit goes on. GetTask finds the job by its key: in this process's
//!   submits, else through the index of the cluster's jobs (another replica accepted it); it
//!   reports QUEUED with what the submit is waiting for until then.
//!
//! A replica that accepted a deferred submit can die before making it. Any replica that sees the
//! meta [`TAKE_OVER_AFTER`] later with no job on the cluster submits it itself: its GetTask
//! queues the takeover, the cluster's background task makes it (`takeover.rs`; the once-only
//! protocol, `protocol.rs`, keeps that to one job even if the first replica was only slow). A
//! DeleteTask for a deferred meta whose job nobody has made yet leaves a **tombstone**
//! (`protocol::tombstone`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::slurmrestd::{Client, ClientError, JobDescription};

use crate::proto::connector::Resource;
use crate::proto::core::task_execution::Phase;
use crate::service::ServiceError;
use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::{self, ResourceMeta};

use super::batches::Member;
use super::execution::{Placement, Progress, Stall, Submitted};
use super::pacing::Pace;
use super::protocol::{self, SubmitError, SubmitFailure};
use super::takeover::TakeOver;

/// A deferred submit no replica has made after this long is made by whichever replica sees it
/// next. Long enough that a live replica, however throttled, has had its turn; short next to a
/// task's life.
pub const TAKE_OVER_AFTER: Duration = Duration::from_secs(300);
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
        let (tx, rx) = watch::channel(waiting());
        let since = rt.submitter.arrived();
        let m = Member::new((key, since), job, client, template, flyte, answer_by, tx);
        tokio::spawn(run_single(rt.clone(), m));
        rx
    })
}

/// Where a submit begins.
pub fn waiting() -> Progress {
    Progress::Waiting {
        tries: 0,
        last_error: None,
        stall: Stall::Hiccup,
    }
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

/// The cluster's `takeovers[<cluster>]` task: starts the paced submit of each takeover GetTask
/// queued (`takeover.rs`), as the identity its meta names, until `stop`. One still queued at
/// stop is left: the next GetTask of its meta, on any replica, queues it again.
pub async fn run_takeovers(rt: Arc<ClusterRuntime>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let queued = tokio::select! {
            _ = &mut stop => return,
            q = rt.submitter.takeovers.next() => q,
        };
        for t in queued {
            tracing::info!(cluster = %rt.cfg.name, key = %t.key, "starting the submit of a deferred task taken over");
            let client = rt.submit_client_as(t.template.slurm_user.as_deref());
            let _ = submit_paced(&rt, &t.key, &t.job, client, t.template, None, None);
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
            m.place(p.job_id, p.element.map(|e| (e.index, e.of)));
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
        let r = protocol::submit_once(cl, client, key, job, job_by_marker(rt, job)).await;
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

/// The key's job on the cluster, by a check at most `fresh` old (GetTask of a deferred meta
/// another replica accepted): `(job or element, still held for its check)`.
#[allow(clippy::result_large_err)]
pub async fn find(
    rt: &ClusterRuntime,
    key: &str,
    fresh: Duration,
) -> Result<Option<(Placement, bool)>, ClientError> {
    // Bounded: GetTask has 10 s, and the index may be busy with a submit's check (whose
    // listing has the submit's long timeout), which this waits for.
    let look =
        rt.submitter
            .index
            .lookup_fresh(rt.client(), &rt.cfg.name, rt.index_user(), key, fresh);
    let w = tokio::time::timeout(FIND_WAIT, look)
        .await
        .map_err(|_| ClientError::Timeout {
            cluster: rt.cfg.name.clone(),
            operation: "the lookup of this deferred submit's job",
        })??;
    Ok(w.map(|w| (w.placement(), w.awaiting_release)))
}

/// How old a check of the cluster's jobs may be when GetTask looks a deferred submit's job up:
/// many GetTasks share one check.
const FIND_FRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// How long GetTask waits for a deferred submit's job to be looked up (its deadline is 10 s).
const FIND_WAIT: std::time::Duration = std::time::Duration::from_secs(8);

/// What GetTask says of a task whose job is not known yet.
#[derive(Debug, Clone)]
pub struct Pending {
    pub phase: Phase,
    pub message: String,
}

impl Pending {
    /// GetTask's answer.
    pub fn resource(self) -> Resource {
        Resource {
            phase: self.phase as i32,
            message: self.message,
            ..Resource::default()
        }
    }
}

/// Waits up to `wait` (the deployment's `submit_wait`) for a submit to settle; where it is then.
pub async fn settled_within(
    mut progress: watch::Receiver<Progress>,
    wait: Duration,
) -> Result<Progress, ServiceError> {
    let settled = tokio::time::timeout(
        wait,
        progress.wait_for(|p| !matches!(p, Progress::Waiting { .. })),
    )
    .await
    .map(|r| r.map(|p| p.clone()));
    match settled {
        Ok(Ok(p)) => Ok(p),
        // The submit's task ended without a word: cannot happen (it always sends).
        Ok(Err(_)) => Err(ServiceError::Internal(
            "the submit's task ended unexpectedly".into(),
        )),
        Err(_) => Ok(progress.borrow().clone()),
    }
}

/// CreateTask's answer for a submit that settled within its wait.
pub fn answer(rt: &ClusterRuntime, key: &str, settled: Progress) -> Result<Vec<u8>, ServiceError> {
    match settled {
        Progress::Done => Ok(rt
            .submitter
            .executions
            .job(key)
            .expect("a settled submit is remembered before it is announced")
            .encode()),
        Progress::Failed { message, transient } => Err(if transient {
            ServiceError::Unavailable(message)
        } else {
            ServiceError::Invalid(message)
        }),
        Progress::Withdrawn => Err(ServiceError::Aborted(
            "this execution was deleted (DeleteTask) before its job was submitted".into(),
        )),
        Progress::Waiting { .. } => unreachable!("answered with a deferred meta"),
    }
}

/// CreateTask's answer for a submit still going after its wait: the task's meta without a job,
/// with what any replica needs to find or make it (see the module's doc). `closing`: this
/// replica is shutting down and will not make it, so another may at once (the duplicate check
/// keeps it to one job either way).
pub fn deferred_meta(
    template: ResourceMeta,
    key: &str,
    job: &JobDescription,
    own_credentials: bool,
    closing: bool,
) -> ResourceMeta {
    tracing::info!(cluster = %template.cluster, key, "submit not done within the CreateTask wait; answering with a deferred resource_meta");
    let mut m = template;
    m.deferred = Some(Box::new(meta::DeferredSubmit {
        key: key.to_string(),
        at: if closing {
            now_unix() - TAKE_OVER_AFTER.as_secs() as i64
        } else {
            now_unix()
        },
        job: job.clone(),
        own_credentials,
    }));
    m
}

/// GetTask of a deferred meta: its job once known (this process's submit, or the cluster's
/// index), else what to report meanwhile; a submit left unmade past [`TAKE_OVER_AFTER`] is
/// queued for the cluster's takeover task (`takeover.rs`): this path only reads.
pub async fn resolve(
    rt: &Arc<ClusterRuntime>,
    m: ResourceMeta,
    d: &meta::DeferredSubmit,
) -> Result<ResourceMeta, Pending> {
    if let Some(known) = rt.submitter.executions.job(&d.key) {
        return Ok(known);
    }
    let pending = |phase: Phase, message: String| Pending { phase, message };
    match rt.submitter.executions.progress(&d.key) {
        Some(Progress::Waiting {
            tries,
            last_error,
            stall,
        }) => {
            return Err(pending(
                Phase::Queued,
                waiting_message(rt, tries, last_error, stall),
            ));
        }
        Some(Progress::Failed { message, .. }) => {
            return Err(pending(
                Phase::RetryableFailed,
                format!("[SUBMIT_FAILED] the job could not be submitted: {message}"),
            ));
        }
        Some(Progress::Withdrawn) => {
            return Err(pending(
                Phase::Aborted,
                "Deleted before its job was submitted".into(),
            ));
        }
        Some(Progress::Done) | None => {}
    }
    let resolved = |mut m: ResourceMeta, p: Placement| {
        m.place(p.job_id, p.element.map(|e| (e.index, e.of)));
        m.deferred = None;
        rt.track(&m);
        rt.submitter.executions.set_job(&d.key, m.clone());
        m
    };
    // Another replica accepted it (or this process restarted): the cluster knows.
    match find(rt, &d.key, FIND_FRESH).await {
        Ok(Some((p, false))) => Ok(resolved(m, p)),
        Ok(found) => {
            // Without accounting, a job that already ran and left slurmctld is in no
            // listing: its exit-status marker names it. Without this, such a meta would say
            // "not submitted yet" for ever, and be submitted again once past the takeover age.
            if found.is_none() {
                match job_by_marker(rt, &d.job).await {
                    Ok(Some(job_id)) => {
                        tracing::info!(cluster = %rt.cfg.name, key = %d.key, job_id = %job_id, "a deferred submit's job already ran and left slurmctld: found by its exit-status marker");
                        rt.submitter.index.note(&d.key, job_id, false).await;
                        return Ok(resolved(m, Placement::job(job_id)));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(pending(
                            Phase::Queued,
                            format!("Not submitted yet, as far as can be seen: {e}"),
                        ));
                    }
                }
            }
            let age = now_unix().saturating_sub(d.at);
            if age >= TAKE_OVER_AFTER.as_secs() as i64 && !d.own_credentials {
                // Its replica is gone, or stuck: make (or release) the job here.
                tracing::warn!(cluster = %rt.cfg.name, key = %d.key, age, held = ?found, "a deferred submit still has no released job; taking it over");
                let mut template = m.clone();
                template.deferred = None;
                rt.submitter.take_over(TakeOver {
                    key: d.key.clone(),
                    job: d.job.clone(),
                    template,
                });
            }
            Err(pending(
                Phase::Queued,
                match found {
                    Some((id, _)) => format!(
                        "Job {id} is held for the connector's duplicate check; it is released shortly"
                    ),
                    None => format!(
                        "Not submitted yet: another connector replica accepted this task {age} s ago and is submitting it"
                    ),
                },
            ))
        }
        Err(e) => Err(pending(
            Phase::Queued,
            format!("Not submitted yet, as far as can be seen: cannot look the job up ({e})"),
        )),
    }
}

/// What GetTask says of a submit of this process still waiting: for room, for a cluster that
/// is unreachable, after a transient failure, or behind throttling.
fn waiting_message(
    rt: &ClusterRuntime,
    tries: u32,
    last_error: Option<String>,
    stall: Stall,
) -> String {
    let v = rt.submitter.pacer.view();
    match last_error {
        // Its own try was refused, or it waits behind the probe of a full cluster.
        e if stall == Stall::Full || (e.is_none() && v.full) => format!(
            "Waiting for room on cluster {}: slurmctld holds as many jobs as its MaxJobCount \
             allows (each array element counts) and refuses submits ({}); it is submitted when \
             jobs leave slurmctld ({} tasks waiting, {} refused submits so far)",
            rt.cfg.name,
            e.as_deref().unwrap_or("another task's submit was refused"),
            v.waiting,
            v.full_refusals
        ),
        // Said as an outage of the cluster, so that nobody reads it as the task's fault or as
        // throttling: nothing is lost, it goes in when back.
        Some(e) if stall == Stall::Outage => format!(
            "Not submitted yet: cluster {} is unreachable (try {}: {e}); the job is submitted \
             once it answers again",
            rt.cfg.name,
            tries + 1
        ),
        Some(e) => format!(
            "Not submitted yet: try {} failed transiently ({e}); trying again",
            tries + 1
        ),
        None => format!(
            "Not submitted yet: cluster {} is throttling submits ({} waiting, {} at once now)",
            rt.cfg.name, v.waiting, v.limit
        ),
    }
}

/// DeleteTask of a deferred submit whose job is not known: this process's submit (if any)
/// is withdrawn, and a tombstone keeps any other replica's late submit from running.
pub async fn delete_unsubmitted(
    rt: &Arc<ClusterRuntime>,
    m: &ResourceMeta,
) -> Result<(), ClientError> {
    let d = m
        .deferred
        .as_ref()
        .expect("only deferred metas are unresolved");
    rt.submitter.executions.withdraw(&d.key);
    match rt.submitter.executions.progress(&d.key) {
        // Ours, not sent yet: the withdrawal stops it; sent: it cancels what it made.
        Some(Progress::Waiting { .. }) => {}
        // Nothing of ours will run.
        Some(Progress::Failed { .. } | Progress::Withdrawn) => {}
        Some(Progress::Done) | None => {
            if let Some(known) = rt.submitter.executions.job(&d.key) {
                rt.client_as(known.slurm_user.as_deref())
                    .cancel(known.target(), None)
                    .await?;
            } else {
                // A short check: DeleteTask has Flyte's deadline.
                let user = m.slurm_user.as_deref();
                let cl = protocol::Cluster {
                    checks: rt.client(),
                    ..rt.once()
                };
                let (submits, cancels) = (rt.submit_client_as(user), rt.client_as(user));
                protocol::tombstone(cl, &submits, &cancels, &d.key, &d.job).await?;
            }
        }
    }
    tracing::info!(cluster = %rt.cfg.name, key = %d.key, "DeleteTask before the job was submitted");
    Ok(())
}

/// What one submit try says about the cluster's pace. An unreachable slurmctld (slurmrestd's 502
/// with error 1800) or slurmrestd is an outage, tested before `throttled`, which a 502 would
/// otherwise match.
pub(super) fn pace_of<T>(r: &Result<T, SubmitFailure>) -> Pace {
    match r {
        Err(SubmitFailure {
            error: SubmitError::Slurm(e),
            ..
        }) if e.is_cluster_full() => Pace::Full,
        Err(SubmitFailure {
            error: SubmitError::Slurm(e),
            ..
        }) if e.is_outage() => Pace::Outage,
        Err(SubmitFailure {
            error: SubmitError::Slurm(e),
            ..
        }) if throttled(e) => Pace::Throttled,
        _ => Pace::Prompt,
    }
}

/// A sign that slurmctld pushes back: no answer in time, or slurmrestd's 502/503/504.
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

/// Unix seconds now.
pub fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

#[cfg(test)]
mod tests;
