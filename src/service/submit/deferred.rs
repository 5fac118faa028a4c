//! Submits that outlive their CreateTask.
//!
//! A submit (`paced.rs`) still going after the deployment's `submit_wait` (or the caller's
//! deadline) does not become a CreateTask error, which Flyte's backend would count as a failed
//! attempt: CreateTask answers a **deferred** meta (`job_id` 0, plus the key and the job
//! description), and the submit goes on. GetTask finds the job by its key: in this process's
//! submits, else through the index of the cluster's jobs (another replica accepted it); it
//! reports QUEUED with what the submit is waiting for until then. A submit done in time is
//! answered with its job; one failed for good (a refused job, rejected credentials) with that
//! error.
//!
//! A replica that accepted a deferred submit can die before making it. Any replica that sees the
//! meta [`TAKE_OVER_AFTER`] later with no job on the cluster submits it itself: its GetTask
//! queues the takeover, the cluster's background task makes it (`takeover.rs`; the once-only
//! protocol, `protocol.rs`, keeps that to one job even if the first replica was only slow). A
//! DeleteTask for a deferred meta whose job nobody has made yet leaves a **tombstone**
//! (`protocol::tombstone`).
//!
//! **Graceful shutdown** ([`hand_off`]): what SIGTERM (or Ctrl-C) changes while the process
//! drains. The order, in `serve`: health turns NOT_SERVING for every service (readiness probes
//! and load balancers stop sending work); a new CreateTask submits nothing here and is handed to
//! another replica as a deferred meta already past the takeover age (not an error, which would
//! cost the task an attempt); the CreateTasks already in flight run to their end (submit held,
//! duplicate check, release: a half-done submit would leave a held job for a retry to release);
//! then the gRPC server stops accepting, sends GOAWAY and lets the remaining calls finish. Submits
//! that outlive their CreateTask (`paced.rs`) are waited for the same way while in their held
//! submit / check / release, and none begins after the signal (a deferred one is then made by
//! another replica: the takeover). All of it within the drain deadline
//! (`FLYTE_SLURM_SHUTDOWN_GRACE`); past it the process exits anyway, and what it left is what a
//! SIGKILL leaves (the once-only protocol covers that: a held job is released by the retried
//! CreateTask or the takeover).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::slurmrestd::{ClientError, JobDescription};

use crate::service::ServiceError;
use crate::service::cluster::ClusterRuntime;
use crate::service::phase::{self, Facts, Submit};
use crate::service::wire::meta::{self, ResourceMeta};
use crate::service::wire::status::TaskStatus;

use super::claimed;
use super::execution::{Placement, Progress, Stall};
use super::paced;
use super::protocol;
use super::takeover::{Queued, Settle, TakeOver};

/// A deferred submit no replica has made after this long is made by whichever replica sees it
/// next. Long enough that a live replica, however throttled, has had its turn; short next to a
/// task's life.
pub const TAKE_OVER_AFTER: Duration = Duration::from_secs(300);

/// The cluster's `takeovers[<cluster>]` task: does what GetTask queued (`takeover.rs`), as the
/// identity its meta names, until `stop`: starts the paced submit of each deferred task taken
/// over, and settles each held job left held. What is still queued at stop is left: the next
/// GetTask, on any replica, queues it again.
pub async fn run_takeovers(rt: Arc<ClusterRuntime>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let queued = tokio::select! {
            _ = &mut stop => return,
            q = rt.submitter.takeovers.next() => q,
        };
        for w in queued {
            match w {
                Queued::Submit(t) => {
                    let t = *t;
                    tracing::info!(cluster = %rt.cfg.name, key = %t.key, "starting the submit of a deferred task taken over");
                    let client = rt.submit_client_as(t.template.slurm_user.as_deref());
                    let _ =
                        paced::submit_paced(&rt, &t.key, &t.job, client, t.template, None, None);
                }
                Queued::Settle(s) => {
                    tokio::spawn(settle_left_held(rt.clone(), s));
                }
            }
        }
    }
}

/// A job (or array) a task was answered with, found still held for its duplicate check long
/// after: checked, then released (or cancelled where it lost), as its user. A failure is only
/// logged: the next GetTask queues it again.
async fn settle_left_held(rt: Arc<ClusterRuntime>, s: Settle) {
    tracing::warn!(cluster = %rt.cfg.name, job_id = %s.job_id, "a task's job is still held for the duplicate check its replica never finished; settling it");
    let client = rt.submit_client_as(s.slurm_user.as_deref());
    if let Some(uri) = &s.claim {
        if let Err(e) = claimed::release_left_held(&rt, uri, s.job_id, &client).await {
            tracing::warn!(cluster = %rt.cfg.name, job_id = %s.job_id, error = %e, "releasing a job its claim records, left held, failed; the next GetTask tries again");
        }
        return;
    }
    if let Err(e) = protocol::settle_orphan(rt.once(), &client, s.job_id).await {
        tracing::warn!(cluster = %rt.cfg.name, job_id = %s.job_id, error = %e, "settling a job left held failed; the next GetTask tries again");
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

/// What GetTask says of a task whose job is not known yet: where its submit stands, and why.
#[derive(Debug, Clone)]
pub struct Pending {
    pub submit: Submit,
    pub message: String,
}

impl Pending {
    /// GetTask's answer, its phase decided by `phase::decide`.
    pub fn status(self) -> TaskStatus {
        let d = phase::decide(&Facts {
            submit: Some(self.submit),
            ..Facts::default()
        });
        TaskStatus::without_job(d.phase, self.message)
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
    let pending = |submit: Submit, message: String| Pending { submit, message };
    match rt.submitter.executions.progress(&d.key) {
        Some(Progress::Waiting {
            tries,
            last_error,
            stall,
        }) => {
            return Err(pending(
                Submit::Going,
                waiting_message(rt, tries, last_error, stall),
            ));
        }
        Some(Progress::Failed { message, .. }) => {
            return Err(pending(
                Submit::Failed,
                format!("[SUBMIT_FAILED] the job could not be submitted: {message}"),
            ));
        }
        Some(Progress::Withdrawn) => {
            return Err(pending(
                Submit::Withdrawn,
                "Deleted before its job was submitted".into(),
            ));
        }
        Some(Progress::Done) | None => {}
    }
    let resolved = |mut m: ResourceMeta, p: Placement| {
        m.place(
            p.job_id,
            p.element.as_ref().map(|e| (e.index, e.array.as_str())),
        );
        m.deferred = None;
        rt.track(&m);
        rt.submitter.executions.set_job(&d.key, m.clone());
        m
    };
    if let Some(uri) = m.claim.clone() {
        // Made through its claim: the claim knows, whoever made it.
        let age = now_unix().saturating_sub(d.at);
        return match claimed::resolve(rt, &uri).await {
            Ok(claimed::Found::Job(p)) => Ok(resolved(m, p)),
            Ok(claimed::Found::Deleted) => Err(pending(
                Submit::Withdrawn,
                "Deleted before its job was submitted".into(),
            )),
            Ok(claimed::Found::Unrecorded { by, lapsed }) => {
                // Nobody holds it past the takeover age (its replica died before its turn),
                // or its holder's lease ran out: make it here. The claim keeps that to one
                // job, whoever else is still at it.
                let due = match &by {
                    None => age >= TAKE_OVER_AFTER.as_secs() as i64,
                    Some(_) => lapsed,
                };
                if due && !d.own_credentials {
                    tracing::warn!(cluster = %rt.cfg.name, key = %d.key, age, holder = ?by, "a deferred submit's claim records no job; taking it over");
                    take_over(rt, &m, d);
                }
                Err(pending(
                    Submit::Going,
                    match by {
                        Some(by) => {
                            format!("Not submitted yet: connector replica {by} is submitting it")
                        }
                        None => format!(
                            "Not submitted yet: another connector replica accepted this task \
                             {age} s ago and is submitting it"
                        ),
                    },
                ))
            }
            Err(e) => Err(pending(
                Submit::Going,
                format!("Not submitted yet, as far as can be seen: cannot read its claim ({e})"),
            )),
        };
    }
    // Another replica accepted it (or this process restarted): the cluster knows.
    match find(rt, &d.key, FIND_FRESH).await {
        Ok(Some((p, false))) => Ok(resolved(m, p)),
        Ok(found) => {
            // Without accounting, a job that already ran and left slurmctld is in no
            // listing: its exit-status marker names it. Without this, such a meta would say
            // "not submitted yet" for ever, and be submitted again once past the takeover age.
            if found.is_none() {
                match paced::job_by_marker(rt, &d.job).await {
                    Ok(Some(job_id)) => {
                        tracing::info!(cluster = %rt.cfg.name, key = %d.key, job_id = %job_id, "a deferred submit's job already ran and left slurmctld: found by its exit-status marker");
                        rt.submitter.index.note(&d.key, job_id, false).await;
                        return Ok(resolved(m, Placement::job(job_id)));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(pending(
                            Submit::Going,
                            format!("Not submitted yet, as far as can be seen: {e}"),
                        ));
                    }
                }
            }
            let age = now_unix().saturating_sub(d.at);
            if age >= TAKE_OVER_AFTER.as_secs() as i64 && !d.own_credentials {
                // Its replica is gone, or stuck: make (or release) the job here.
                tracing::warn!(cluster = %rt.cfg.name, key = %d.key, age, held = ?found, "a deferred submit still has no released job; taking it over");
                take_over(rt, &m, d);
            }
            Err(pending(
                Submit::Going,
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
            Submit::Going,
            format!("Not submitted yet, as far as can be seen: cannot look the job up ({e})"),
        )),
    }
}

/// Queues the submit of the deferred meta `m` for the cluster's takeover task (GetTask only
/// reads): its template is the meta without the deferred part.
fn take_over(rt: &ClusterRuntime, m: &ResourceMeta, d: &meta::DeferredSubmit) {
    let mut template = m.clone();
    template.deferred = None;
    rt.submitter.take_over(TakeOver {
        key: d.key.clone(),
        job: d.job.clone(),
        template,
    });
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

/// Unix seconds now.
pub fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

/// CreateTask while shutting down: nothing is submitted here (a submit begun now could be cut
/// half done), and the answer is not an error either (Flyte's backend spends one of the task's
/// retries on a CreateTask error: `paced.rs`). It is a deferred meta already past the takeover
/// age, so the first replica that sees it in a GetTask, once the backend's connection has moved
/// off this one, submits it (the duplicate check keeps that to one job). A task with its own
/// slurmrestd token can only be submitted by a replica holding the token: that one is refused
/// with UNAVAILABLE (nothing submitted), which the backend retries.
pub fn hand_off(
    cluster: &str,
    key: &str,
    job: &JobDescription,
    template: ResourceMeta,
    own_credentials: bool,
) -> Result<Vec<u8>, ServiceError> {
    if own_credentials {
        return Err(ServiceError::Unavailable(
            "this connector replica is shutting down; nothing was submitted: retry CreateTask \
             (another replica answers it)"
                .into(),
        ));
    }
    tracing::info!(
        cluster,
        key,
        "shutting down: CreateTask answered with a deferred meta that another replica submits"
    );
    Ok(deferred_meta(template, key, job, false, true).encode())
}
