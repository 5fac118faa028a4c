//! GetTask's answer of a decided task ([`phase::Decided`]): the message in the plugin's format
//! (the status line first, details on the lines after: the requeues, a native result's words,
//! the outputs' upload, the stderr tail of a failure, the accounting of a terminal answer) and
//! the [`TaskStatus`] with the job, its facts for `custom_info` and the log links. Writes; decides
//! nothing.

use serde_json::json;

use crate::domain::Phase;
use crate::staging::{self, OutputBlob, Staging};
use crate::tracker::{FailureClass, JobSnapshot};

use crate::service::phase::{Decided, Decision, Reason};
use crate::service::wire::meta::ResourceMeta;
use crate::service::wire::status::{ArrayElement, LogLink, SlurmJob, TaskStatus};

use super::message::{failed_elements, message};
use super::native_result;
use super::outputs::Upload;
use super::{accounting, tails};

/// At most this many elements are listed in `custom_info` (the counts cover all).
const ELEMENTS_LISTED: usize = 200;

/// What the reads of [`phase::decide_reading`](crate::service::phase::decide_reading) said:
/// a native result's, the outputs' upload's.
pub type Said = Decided<Option<native_result::Decision>, Option<Upload>>;

/// The answer of the task's own job, decided (`decided`): `staging` reads a failure's stderr.
pub async fn answer(
    meta: &ResourceMeta,
    snap: &JobSnapshot,
    decided: Said,
    staging: Option<&dyn Staging>,
    log_templates: &[staging::logs::LogLinkTemplate],
) -> TaskStatus {
    let d = decided.decision;
    let mut message = message(meta, snap);
    if d.reason == Reason::AwaitingAccounting {
        return status(
            meta,
            snap,
            d,
            awaiting_accounting(meta, snap, message),
            None,
            log_templates,
        );
    }
    requeues(&mut message, meta, snap, &decided);
    if meta.ranks
        && decided.by_slurm.phase == Phase::Queued
        && let Some(r) = snap
            .reason
            .as_deref()
            .filter(|r| !r.is_empty() && *r != "None")
    {
        // Why a pending multi-node job waits (nodes busy, more nodes than the partition has:
        // PartitionNodeLimit), said as a gang's: the reason is the tracker's, from its one
        // listing of jobs pending long, never a read on GetTask's path.
        message.push_str(&format!("\nwaiting for all its nodes, reason: {r}"));
    }
    native_words(&mut message, meta, snap, &decided);
    let outputs = match decided.outputs.flatten() {
        Some(Upload::NoStaging(why) | Upload::Failed(why)) => {
            message.push_str(&format!("\n{why}"));
            None
        }
        Some(Upload::Going(progress)) => {
            message = progress;
            None
        }
        Some(Upload::Uploaded(blobs)) => Some(blobs),
        Some(Upload::Cancelled) => {
            message.push_str("\noutput upload cancelled");
            None
        }
        None => None,
    };
    if d.failed()
        && let Some(st) = staging
        && !meta.stderr.is_empty()
    {
        tails::append(&mut message, st, meta, snap).await;
    }
    if d.phase.is_terminal()
        && let Some(line) = accounting::message_line(snap)
    {
        message.push('\n');
        message.push_str(&line);
    }
    TaskStatus {
        accounting: accounting::custom_info(snap),
        ..status(meta, snap, d, message, outputs, log_templates)
    }
}

/// The answer of a task whose job id names another execution's job (`lost`: why): nothing of
/// that job (state, logs, outputs) is this task's.
pub fn lost(meta: &ResourceMeta, d: Decision, lost: String) -> TaskStatus {
    TaskStatus {
        class: d.class,
        job: Some(SlurmJob {
            cluster: meta.cluster.clone(),
            job_id: meta.job_id,
            job_name: meta.job_name.clone(),
            element: None,
        }),
        ..TaskStatus::without_job(d.phase, lost)
    }
}

/// The message while a finished job's accounting is awaited (RUNNING): the terminal phase comes
/// with the record. The job's own status lines stay (an array's progress among them), under the
/// reason for the phase.
pub(super) fn awaiting_accounting(
    meta: &ResourceMeta,
    snap: &JobSnapshot,
    message: String,
) -> String {
    format!(
        "Slurm job {} ended ({}); reading what it used from slurmdbd before reporting it\n{message}",
        meta.job_id,
        snap.state.as_deref().unwrap_or("finished"),
    )
}

/// The requeues: a spent budget heads the message (the job was cancelled for it); a requeue
/// within it, or a node failure Slurm did not requeue, is said after the status lines.
pub(super) fn requeues(
    message: &mut String,
    meta: &ResourceMeta,
    snap: &JobSnapshot,
    decided: &Said,
) {
    let budget = decided.facts.requeue_budget;
    if let Some((restarts, budget)) = decided
        .over_budget
        .filter(|_| decided.by_slurm.reason == Reason::RequeueBudget)
    {
        *message = format!(
            "[REQUEUE_BUDGET] Slurm requeued job {} {restarts} time{} after node failures or \
             preemptions, more than the task's budget of {budget}; the job was cancelled\n{message}",
            meta.job_id,
            if restarts == 1 { "" } else { "s" },
        );
    } else if let Some(n) = snap.restart_count.filter(|n| *n > 0)
        && !decided.by_slurm.failed()
    {
        message.push_str(&format!(
            "\nrequeued by Slurm after {} ({n} of {budget})",
            causes(snap.requeues)
        ));
    } else if snap.class == Some(FailureClass::Infrastructure) && snap.restart_count.is_some() {
        // Slurm requeues a requeueable batch job itself after a node failure; this one ended
        // instead, so it was not requeueable here.
        message.push_str(
            "\nSlurm did not put the job back in the queue (it does so only for a requeueable \
             job: no --no-requeue, JobRequeue=1, and for preemption PreemptMode=REQUEUE); the \
             failure is the cluster's, so Flyte's retry applies",
        );
    }
}

/// What the requeues were, as far as slurmdbd's records of the earlier runs say.
fn causes(r: Option<crate::tracker::Requeues>) -> String {
    let count = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    match r {
        Some(r) if r.preempted > 0 && r.node_failures > 0 => format!(
            "{} and {}",
            count(r.preempted, "preemption"),
            count(r.node_failures, "node failure")
        ),
        Some(r) if r.preempted > 0 => count(r.preempted, "preemption"),
        Some(r) if r.node_failures > 0 => count(r.node_failures, "node failure"),
        _ => "a node failure or preemption".into(),
    }
}

/// A native task's result, when it decided the task: its words after the status lines (a
/// multi-rank job's are rank 0's, which wrote error.pb: srun's "rank N failed first" with that
/// rank's tail follows). While it is read, the message says only that.
fn native_words(message: &mut String, meta: &ResourceMeta, snap: &JobSnapshot, decided: &Said) {
    let Some(prefix) = &meta.native_prefix else {
        return;
    };
    let completed = decided.by_slurm.phase == Phase::Succeeded;
    match (
        decided.by_native.reason,
        decided.native.as_ref().and_then(Option::as_ref),
    ) {
        (Reason::NativeResult, Some(d)) => {
            let who = if completed { "" } else { "rank 0: " };
            message.push_str(&format!("\n{who}{}", d.message));
        }
        (Reason::ReadingNativeResult, _) => {
            let ended = if completed {
                "COMPLETED"
            } else {
                snap.state.as_deref().unwrap_or("FAILED")
            };
            *message = format!(
                "Slurm job {} {ended}; reading the task's result at {prefix}",
                meta.job_id
            );
        }
        // Ranks failed without an error.pb (another rank failed first), or it could not be
        // read: srun's account below.
        _ => {}
    }
}

/// The answer: the decision, the message, the job's facts for `custom_info`, the log links (the
/// accounting is the caller's to add).
pub(super) fn status(
    meta: &ResourceMeta,
    snap: &JobSnapshot,
    d: Decision,
    message: String,
    outputs: Option<Vec<OutputBlob>>,
    log_templates: &[staging::logs::LogLinkTemplate],
) -> TaskStatus {
    let mut facts = json!({
        "state": snap.state,
        "reason": snap.reason,
        "exit_code": snap.exit_code.as_ref().map(|e| e.to_string()),
        "signal": snap.signal,
        "nodes": snap.nodes,
        "requeue_count": snap.restart_count.unwrap_or(0),
        "stdout": meta.stdout,
        "stderr": meta.stderr,
    });
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
            counts.insert(state.to_string(), json!(n + 1));
        }
        facts["array"] = json!({
            "indices": meta.array,
            "total": snap.elements.len(),
            "counts": counts,
            // Bounded: custom_info travels in every task event.
            "elements": snap.elements.iter().take(ELEMENTS_LISTED).map(|e| json!({
                "index": e.index,
                "job_id": e.snapshot.job_id.0,
                "state": e.snapshot.state,
                "exit_code": e.snapshot.exit_code.as_ref().map(|c| c.to_string()),
            })).collect::<Vec<_>>(),
            "failed": failed_elements(snap).iter().map(|e| e.index).collect::<Vec<_>>(),
        });
    }
    let serde_json::Value::Object(facts) = facts else {
        unreachable!("made as an object above")
    };
    TaskStatus {
        phase: d.phase,
        class: d.class,
        message,
        job: Some(own_job(meta, snap)),
        outputs,
        log_links: log_links(log_templates, meta, snap),
        facts,
        accounting: None,
    }
}

/// The task's own job: an element of an array the connector made of several tasks' jobs has its
/// own id (the array's until it starts: Slurm splits a pending element off only then), and
/// names its array and index.
fn own_job(meta: &ResourceMeta, snap: &JobSnapshot) -> SlurmJob {
    SlurmJob {
        cluster: meta.cluster.clone(),
        job_id: own_job_id(meta, snap),
        job_name: meta.job_name.clone(),
        element: meta.element.map(|index| ArrayElement {
            array_job_id: meta.job_id,
            index,
        }),
    }
}

/// The Slurm job that is this task: an element of a coalesced array is the task, and its job id
/// is its own once Slurm gave it one; every other task's is the meta's.
fn own_job_id(meta: &ResourceMeta, snap: &JobSnapshot) -> crate::slurmrestd::JobId {
    match meta.element {
        Some(_) if snap.job_id.0 != 0 => snap.job_id,
        _ => meta.job_id,
    }
}

/// The deployment's log-link templates filled in for this job (percent-encoded values).
fn log_links(
    templates: &[staging::logs::LogLinkTemplate],
    meta: &ResourceMeta,
    snap: &JobSnapshot,
) -> Vec<LogLink> {
    let job_id = own_job_id(meta, snap).to_string();
    let vars = staging::logs::LogVars {
        job_id: &job_id,
        stdout: &meta.stdout,
        stderr: &meta.stderr,
        cluster: &meta.cluster,
    };
    staging::logs::render_links(templates, &vars)
        .into_iter()
        .map(|(name, uri)| LogLink { name, uri })
        .collect()
}
