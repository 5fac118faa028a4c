//! GetTask's answer: a tracker snapshot (plus declared outputs and the stderr tail) turned into a
//! `Resource` with the plugin's message format.

pub(crate) mod logs;
mod message;
pub(crate) mod native_result;
pub mod rank_failure;
pub(crate) mod task_metrics;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::proto::connector::Resource;
use crate::proto::core::task_execution::Phase;
use crate::proto::core::{self, Blob, BlobMetadata, BlobType, Literal, Scalar};
use crate::proto::task::{NamedLiteral, Outputs};
use crate::staging::{
    self, DeclaredOutput, Dimensionality, OutputBlob, TransferOutcome, UploadMode,
};
use crate::tracker::{FailureClass, JobSnapshot};

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;

use message::{bytes_text, failed_elements, message, over_memory_line};

/// The confinement root used when outputs are all uploaded by the job itself and no staging is
/// configured: no file is ever read through it.
const NO_STAGING_ROOT: &str = "/nonexistent/slurm-connector-no-staging";

/// Bound on staging reads inside GetTask (the backend's deadline is 10 s).
const STAGING_BUDGET: Duration = Duration::from_secs(3);

pub fn declared(meta: &ResourceMeta) -> Vec<DeclaredOutput> {
    meta.outputs.values().cloned().collect()
}

fn blob_literal(b: &OutputBlob) -> NamedLiteral {
    let dim = match b.dimensionality {
        Dimensionality::Single => core::blob_type::BlobDimensionality::Single,
        Dimensionality::Multipart => core::blob_type::BlobDimensionality::Multipart,
    };
    NamedLiteral {
        name: b.name.clone(),
        value: Some(Literal {
            value: Some(core::literal::Value::Scalar(Box::new(Scalar {
                value: Some(core::scalar::Value::Blob(Blob {
                    metadata: Some(BlobMetadata {
                        r#type: Some(BlobType {
                            format: String::new(),
                            dimensionality: dim as i32,
                        }),
                    }),
                    uri: b.uri.clone(),
                })),
            }))),
            ..Default::default()
        }),
    }
}

/// The deployment's log-link templates filled in for this job (percent-encoded values).
fn log_links(
    templates: &[staging::logs::LogLinkTemplate],
    meta: &ResourceMeta,
) -> Vec<crate::proto::core::TaskLog> {
    let job_id = meta.job_id.to_string();
    let vars = staging::logs::LogVars {
        job_id: &job_id,
        stdout: &meta.stdout,
        stderr: &meta.stderr,
        cluster: &meta.cluster,
    };
    staging::logs::render_links(templates, &vars)
        .into_iter()
        .map(|(name, uri)| crate::proto::core::TaskLog {
            uri,
            name,
            show_while_pending: true,
            ready: true,
            ..Default::default()
        })
        .collect()
}

/// How long GetTask waits for a pending multi-node job's record (its pending reason).
const PENDING_REASON_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// At most this many failed elements of an array have their stderr read, and this many elements
/// are listed in `custom_info` (the counts cover all).
const TAILS_READ: usize = 3;
const ELEMENTS_LISTED: usize = 200;

/// What [`resource`] reads besides the job: the deployment's settings and the native results.
pub struct Context<'a> {
    pub ceiling: &'a Result<staging::Ceiling, String>,
    pub log_templates: &'a [staging::logs::LogLinkTemplate],
    pub native: &'a native_result::Probes,
    /// The deployment's requeue budget, for metas that do not carry their own.
    pub requeue_budget: u32,
}

/// Slurm requeued the job (node failure, preemption) more often than the task's budget allows:
/// `Some((restarts, budget))`. The service then cancels the job and the task fails retryably.
pub fn over_budget(meta: &ResourceMeta, s: &JobSnapshot, deployment: u32) -> Option<(u32, u32)> {
    let budget = meta.requeue_budget.unwrap_or(deployment);
    let restarts = s.restart_count.unwrap_or(0);
    // A job that ended on its own (succeeded, or the task's code failed in its last run) says
    // so itself; the budget speaks only for a job the cluster keeps putting back.
    let own_end = s.phase == Phase::Succeeded || s.class == Some(FailureClass::User);
    (restarts > budget && !own_end).then_some((restarts, budget))
}

/// Cancels a job Slurm requeued past its task's budget: the task is reported failed from now on
/// (the restart count stays in Slurm's record), so its job must not run on. Cancelling twice is
/// harmless; a failed cancel is retried at the next GetTask.
pub async fn enforce_requeue_budget(
    rt: &ClusterRuntime,
    m: &ResourceMeta,
    snap: &JobSnapshot,
    deployment: u32,
) {
    let Some((restarts, budget)) = over_budget(m, snap, deployment) else {
        return;
    };
    if snap.phase.is_terminal() {
        return;
    }
    tracing::warn!(cluster = %rt.cfg.name, job_id = %m.job_id, restarts, budget, "requeue budget spent; cancelling the job");
    if let Err(e) = rt
        .client_as(m.slurm_user.as_deref())
        .cancel(m.job_id, None)
        .await
    {
        tracing::warn!(cluster = %rt.cfg.name, job_id = %m.job_id, error = %e, "cancelling a job past its requeue budget failed; retried at the next GetTask");
    }
}

/// The whole GetTask resource. Never fails: staging problems become part of the message (or,
/// for declared outputs, the task's failure), never an RPC error.
/// The task's job id now names another execution's job: slurmctld, SIGKILLed after it gave the
/// id to this task's submit and before its next state save, restarted without the job and gave
/// the same id to the next submit (measured on 26.05: `dev-cluster daemon kill slurmctld`,
/// tests/real_controller_drill.rs; its log says "Purged files for defunct batch JobId=46", then
/// submits JobId=46 again). That job's end is not this task's: reporting it would be a wrong
/// terminal phase. The task's own job was lost with the crash, which is the cluster's failure.
pub fn reused_id(meta: &ResourceMeta, snap: &JobSnapshot) -> Option<String> {
    let theirs = snap.key.as_deref()?;
    let ours = crate::render::key_from_job_name(&meta.job_name)?;
    (theirs != ours).then(|| {
        format!(
            "[SLURM_JOB_LOST] Slurm job {} now belongs to another execution (its record names key \
             {theirs}, this task's is {ours}): slurmctld restarted from a state saved before this \
             task's job was submitted, lost the job and gave its id to a later submit; the \
             failure is the cluster's, so Flyte's retry submits the task again",
            meta.job_id
        )
    })
}

/// The exit-status marker the task's own script left (`<working_dir>/<job>.exit`, beside its
/// stdout), if the staging backend can read it.
async fn own_marker(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
) -> Option<crate::staging::exit_marker::ExitMarker> {
    let staging = rt.staging.as_ref()?;
    let dir = meta.stdout.rsplit_once('/')?.0;
    crate::staging::exit_marker::read_exit_marker(staging.as_ref(), dir, &meta.job_name)
        .await
        .ok()
        .flatten()
}

/// The task's outcome from its own marker, when Slurm's record under its id is another
/// execution's: the job ran (the marker names this id) before slurmctld lost it.
fn from_own_marker(
    mut snap: JobSnapshot,
    m: &crate::staging::exit_marker::ExitMarker,
) -> JobSnapshot {
    let state = crate::tracker::marker_state(m);
    let packed =
        crate::tracker::Packed::pack(&crate::slurmrestd::JobState::from_strings([state])).0;
    snap.phase = packed.phase().unwrap_or(Phase::Failed);
    snap.class = packed.class();
    snap.state = Some(state.to_string());
    snap.exit_code = Some(crate::slurmrestd::ExitCode {
        status: vec![if m.code == 0 { "SUCCESS" } else { "ERROR" }.into()],
        return_code: u32::try_from(m.code).ok(),
        signal: None,
        signal_name: m.signal.clone(),
    });
    snap.reason = None;
    snap.signal = m.signal.clone();
    snap.note = Some(format!(
        "read from the exit-status marker the job left: slurmctld restarted from a state saved \
         before it, and job {} is another execution's since",
        snap.job_id
    ));
    snap.key = None;
    snap
}

pub async fn resource(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: JobSnapshot,
    ctx: &Context<'_>,
) -> Resource {
    let (ceiling, log_templates) = (ctx.ceiling, ctx.log_templates);
    let mut snap = snap;
    if let Some(lost) = reused_id(meta, &snap) {
        match own_marker(rt, meta).await {
            // Its own job ran under this id before the crash and left its outcome.
            Some(m) if m.job_id == Some(meta.job_id.0) => snap = from_own_marker(snap, &m),
            _ => {
                tracing::warn!(cluster = %meta.cluster, job_id = %meta.job_id, "{lost}");
                // Nothing of the other execution's job (state, logs, outputs) is this task's.
                let info = serde_json::json!({
                    "cluster": meta.cluster,
                    "job_id": meta.job_id.0,
                    "job_name": meta.job_name,
                    "failure_class": FailureClass::Infrastructure.as_str(),
                });
                return Resource {
                    phase: FailureClass::Infrastructure.phase() as i32,
                    message: lost,
                    custom_info: Some(crate::proto::json_to_struct(&info)),
                    ..Resource::default()
                };
            }
        }
    }
    let mut phase = snap.phase;
    let mut failure_class = snap.class;
    let mut msg = message(meta, &snap);
    let budget = meta.requeue_budget.unwrap_or(ctx.requeue_budget);
    if let Some((restarts, budget)) = over_budget(meta, &snap, ctx.requeue_budget) {
        // The cluster's failures, not the task's: only a spent budget reaches Flyte, and as a
        // retryable failure (Flyte's own retries then start a new attempt).
        phase = Phase::RetryableFailed;
        failure_class = Some(FailureClass::Infrastructure);
        msg = format!(
            "[REQUEUE_BUDGET] Slurm requeued job {} {restarts} time{} after node failures or \
             preemptions, more than the task's budget of {budget}; the job was cancelled\n{msg}",
            meta.job_id,
            if restarts == 1 { "" } else { "s" }
        );
    } else if let Some(n) = snap.restart_count.filter(|n| *n > 0)
        && !matches!(phase, Phase::Failed | Phase::RetryableFailed)
    {
        msg.push_str(&format!(
            "\nrequeued by Slurm after a node failure or preemption ({n} of {budget})"
        ));
    } else if snap.class == Some(FailureClass::Infrastructure) && snap.restart_count.is_some() {
        // Slurm requeues a requeueable batch job itself after a node failure; this one ended
        // instead, so it was not requeueable here.
        msg.push_str(
            "\nSlurm did not put the job back in the queue (it does so only for a requeueable \
             job: no --no-requeue, JobRequeue=1, and for preemption PreemptMode=REQUEUE); the \
             failure is the cluster's, so Flyte's retry applies",
        );
    }
    let mut outputs = None;

    // A pending multi-node job: the tracker keeps states only, and why a gang waits (nodes busy,
    // more nodes than the partition has: PartitionNodeLimit, a switch count) is what its author
    // needs to know, so its record is read (bounded, best effort).
    if meta.ranks
        && phase == Phase::Queued
        && snap.reason.is_none()
        && let Ok(Ok(Some(info))) =
            tokio::time::timeout(PENDING_REASON_BUDGET, rt.client.job(meta.job_id)).await
        && let Some(r) = info.reason.filter(|r| !r.is_empty() && r != "None")
    {
        msg.push_str(&format!("\nwaiting for all its nodes, reason: {r}"));
    }

    // A native task's entrypoint says how the task went (outputs.pb / error.pb), not the exit code.
    // Also a multi-rank job whose rank 0 raised: a clustered `a0` writes error.pb and exits
    // non-zero (so srun ends the other ranks), and the job ends FAILED; the task's own account
    // (message, and whether it is recoverable) is then the answer, as for a single rank, and
    // srun's "rank N failed first" with the rank's tail follows below. A rank other than 0 writes
    // no error.pb, and neither does a job a node failure ended (kept as the cluster's failure).
    let completed = phase == Phase::Succeeded;
    let ranks_failed = matches!(phase, Phase::Failed | Phase::RetryableFailed)
        && meta.ranks
        && snap.class != Some(FailureClass::Infrastructure);
    if (completed || ranks_failed)
        && let Some(prefix) = &meta.native_prefix
    {
        let source = native_result::Source::for_prefix(prefix, rt.staging.as_ref());
        match ctx
            .native
            .decision(&meta.cluster, meta.job_id, prefix, source)
            .await
        {
            Some(d) if completed || d.from_error_doc => {
                phase = d.phase;
                failure_class = match d.phase {
                    Phase::Failed => Some(FailureClass::Permanent),
                    Phase::RetryableFailed => Some(FailureClass::User),
                    _ => None,
                };
                let who = if completed { "" } else { "rank 0: " };
                msg.push_str(&format!("\n{who}{}", d.message));
            }
            // Ranks failed without an error.pb (another rank failed first), or it could not be
            // read: srun's account below.
            Some(_) => {}
            None => {
                let ended = if completed {
                    "COMPLETED"
                } else {
                    snap.state.as_deref().unwrap_or("FAILED")
                };
                phase = Phase::Running;
                msg = format!(
                    "Slurm job {} {ended}; reading the task's result at {prefix}",
                    meta.job_id
                );
            }
        }
    }

    if phase == Phase::Succeeded && !meta.outputs.is_empty() {
        let decl = declared(meta);
        let needs_staging = decl.iter().any(|d| d.upload == UploadMode::Connector);
        match (&rt.staging, needs_staging) {
            (None, true) => {
                phase = Phase::Failed;
                failure_class = Some(FailureClass::Permanent);
                msg.push_str(&format!(
                    "\n{}; or declare the outputs with output_upload=\"job\" so the job uploads them itself",
                    staging::settings::not_configured()
                ));
            }
            (staging_backend, _) => {
                let transfer = rt.transfers.start_or_join(meta.job_id, |running| {
                    if running.is_some() {
                        return None;
                    }
                    let backend: std::sync::Arc<dyn staging::Staging> = match staging_backend {
                        Some(s) => s.clone(),
                        // Job uploads only: nothing is read from the cluster's filesystem,
                        // so a backend confined to a root that holds nothing is enough.
                        None => std::sync::Arc::new(staging::LocalStaging::new(
                            staging::Roots::parse(NO_STAGING_ROOT).expect("a fixed absolute path"),
                        )),
                    };
                    let c = ceiling
                        .clone()
                        .map_err(|message| staging::StagingError::Config {
                            var: "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES",
                            message,
                        });
                    Some(std::sync::Arc::new(staging::outputs::start(
                        backend,
                        meta.job_id.to_string(),
                        decl.clone(),
                        c,
                    )))
                });
                let (outcome, progress) = (transfer.outcome(), transfer.progress());
                match outcome {
                    None => {
                        phase = Phase::Running;
                        msg = staging::outputs::pending_message(
                            &meta.job_id.to_string(),
                            &decl,
                            progress,
                        );
                    }
                    Some(TransferOutcome::Succeeded(blobs)) => {
                        outputs = Some(Outputs {
                            literals: blobs.iter().map(blob_literal).collect(),
                        });
                    }
                    Some(TransferOutcome::Failed(why)) => {
                        // The job finished: an output that is missing now never appears.
                        phase = Phase::Failed;
                        failure_class = Some(FailureClass::Permanent);
                        msg.push_str(&format!("\n{why}"));
                    }
                    Some(TransferOutcome::Cancelled) => {
                        phase = Phase::Aborted;
                        msg.push_str("\noutput upload cancelled");
                    }
                }
            }
        }
    }

    if matches!(phase, Phase::Failed | Phase::RetryableFailed)
        && let Some(st) = &rt.staging
        && !meta.stderr.is_empty()
        && !snap.elements.is_empty()
    {
        // A job array: the tails of the first failed elements, each from its own file, all
        // within the one staging budget.
        let deadline = tokio::time::Instant::now() + STAGING_BUDGET;
        for e in failed_elements(&snap).into_iter().take(TAILS_READ) {
            let path = staging::element_path(&meta.stderr, meta.job_id.0, e.index);
            match tokio::time::timeout_at(deadline, staging::logs::failure_tail(st.as_ref(), &path))
                .await
            {
                Ok(Ok(Some(tail))) => msg.push_str(&format!(
                    "\n--- last lines of stderr of element {} ({path}) ---\n{tail}",
                    e.index
                )),
                Ok(Ok(None)) => {}
                Ok(Err(err)) => msg.push_str(&format!(
                    "\n(stderr of element {} not readable: {err})",
                    e.index
                )),
                Err(_) => {
                    msg.push_str("\n(stderr not read: the staging backend is slow)");
                    break;
                }
            }
        }
    } else if matches!(phase, Phase::Failed | Phase::RetryableFailed)
        && meta.ranks
        && let Some(st) = &rt.staging
        && !meta.stderr.is_empty()
    {
        // Several ranks: srun names the one that failed first; its own labelled lines are the
        // tail worth showing (the others were only terminated).
        match tokio::time::timeout(
            STAGING_BUDGET,
            st.tail(&meta.stderr, rank_failure::READ_LINES),
        )
        .await
        {
            Ok(Ok(Some(text))) => match rank_failure::find(&text) {
                Some(f) => msg.push_str(&format!("\n{}", f.message())),
                None => {
                    let tail: Vec<&str> = text.lines().collect();
                    let from = tail.len().saturating_sub(staging::logs::FAILURE_TAIL_LINES);
                    msg.push_str(&format!(
                        "\n--- last lines of stderr ---\n{}",
                        tail[from..].join("\n")
                    ));
                }
            },
            Ok(Ok(None)) => {}
            Ok(Err(e)) => msg.push_str(&format!("\n(stderr not readable: {e})")),
            Err(_) => msg.push_str("\n(stderr not read: the staging backend is slow)"),
        }
    } else if matches!(phase, Phase::Failed | Phase::RetryableFailed)
        && let Some(st) = &rt.staging
        && !meta.stderr.is_empty()
    {
        match tokio::time::timeout(
            STAGING_BUDGET,
            staging::logs::failure_tail(st.as_ref(), &meta.stderr),
        )
        .await
        {
            Ok(Ok(Some(tail))) => {
                // jobacct_gather's OverMemoryKill ends the job FAILED by SIGKILL; only the line
                // slurmstepd writes to the job's stderr says it was the memory limit.
                if snap
                    .state
                    .as_deref()
                    .is_some_and(|t| t.starts_with("FAILED"))
                    && let Some((used, limit)) = over_memory_line(&tail)
                {
                    let first = msg.find('\n').unwrap_or(msg.len());
                    msg.replace_range(
                        ..first,
                        &format!(
                            "[OUT_OF_MEMORY] job {} used more than its {} (MaxRSS {})",
                            meta.job_id,
                            bytes_text(limit),
                            bytes_text(used)
                        ),
                    );
                }
                msg.push_str(&format!("\n--- last lines of stderr ---\n{tail}"))
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => msg.push_str(&format!("\n(stderr not readable: {e})")),
            Err(_) => msg.push_str("\n(stderr not read: the staging backend is slow)"),
        }
    }

    let custom_info = serde_json::json!({
        "cluster": meta.cluster,
        "job_id": meta.job_id.0,
        "job_name": meta.job_name,
        "state": snap.state,
        "reason": snap.reason,
        "exit_code": snap.exit_code.as_ref().map(|e| e.to_string()),
        "signal": snap.signal,
        "nodes": snap.nodes,
        "requeue_count": snap.restart_count.unwrap_or(0),
        "failure_class": failure_class.map(|c| c.as_str()),
        "stdout": meta.stdout,
        "stderr": meta.stderr,
    });
    let mut custom_info = custom_info;
    if !snap.elements.is_empty() {
        let mut counts = serde_json::Map::new();
        for e in &snap.elements {
            let state = e
                .snapshot
                .state
                .as_deref()
                .map(|t| t.split('+').next().unwrap_or(t))
                .unwrap_or("UNKNOWN");
            let n = counts.get(state).and_then(|v| v.as_u64()).unwrap_or(0);
            counts.insert(state.to_string(), serde_json::json!(n + 1));
        }
        custom_info["array"] = serde_json::json!({
            "indices": meta.array,
            "total": snap.elements.len(),
            "counts": counts,
            // Bounded: custom_info travels in every task event.
            "elements": snap.elements.iter().take(ELEMENTS_LISTED).map(|e| serde_json::json!({
                "index": e.index,
                "job_id": e.snapshot.job_id.0,
                "state": e.snapshot.state,
                "exit_code": e.snapshot.exit_code.as_ref().map(|c| c.to_string()),
            })).collect::<Vec<_>>(),
            "failed": failed_elements(&snap).iter().map(|e| e.index).collect::<Vec<_>>(),
        });
    }
    Resource {
        outputs,
        message: msg,
        log_links: log_links(log_templates, meta),
        phase: phase as i32,
        custom_info: Some(crate::proto::json_to_struct(&custom_info)),
    }
}
