//! The read path: GetTask's answer from the tracker's snapshot, GetTaskLogs, GetTaskMetrics.
//!
//! [`status`] reads GetTask in one direction: it gathers the facts of the tracker's snapshot
//! (the element of a coalesced array, the task's own job: `own_job`, the requeues against the
//! task's budget, the accounting awaited), has `service/phase.rs` decide the phase once
//! ([`phase::decide_reading`], which awaits the two facts that cost a read only when a rule
//! needs them: `native_result::read`, `outputs::upload`), then writes the answer of the decision
//! (`answer`: the message with `message`'s status lines, `tails`' stderr of a failure and
//! `accounting`'s line). On the way out it counts the first terminal answer of each execution
//! (`cluster/tallies.rs`) and cancels a job Slurm requeued past its budget.
//! `logs` and `task_metrics` are the other two reads. Never an RPC error because the cluster or
//! staging hiccupped: that is part of the message.
//!
//! Imports `cluster`, `wire`, `phase`, `background` and `error`; never `submit` or `rpc`.

pub(crate) mod accounting;
mod answer;
pub(crate) mod logs;
mod message;
pub(crate) mod native_result;
mod outputs;
mod own_job;
pub mod rank_failure;
mod tails;
pub(crate) mod task_metrics;
#[cfg(test)]
mod tests;

use crate::domain::Phase;
use crate::staging;
use crate::tracker::{Accounting, JobSnapshot};

use crate::service::cluster::ClusterRuntime;
use crate::service::cluster::tallies::Outcome;
use crate::service::phase::{self, Facts};
use crate::service::wire::meta::ResourceMeta;
use crate::service::wire::status::TaskStatus;

use crate::tracker::FailureClass;
#[cfg(test)]
use own_job::reused_id;

/// What [`status`] reads besides the job: the deployment's settings and the native results.
pub struct Context<'a> {
    pub ceiling: &'a Result<staging::Ceiling, String>,
    pub log_templates: &'a [staging::logs::LogLinkTemplate],
    pub native: &'a native_result::Probes,
    /// The deployment's requeue budget, for metas that do not carry their own.
    pub requeue_budget: u32,
}

/// The whole GetTask answer of task `meta`, from its job's snapshot (`snap`, the array's for an
/// element of a coalesced array); `held`: its job is held for the connector's duplicate check,
/// which the replica that submitted it did not finish. Never fails: staging problems become
/// part of the message (or, for declared outputs, the task's failure), never an RPC error.
pub async fn status(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: JobSnapshot,
    held: bool,
    ctx: &Context<'_>,
) -> TaskStatus {
    let (meta, mut snap) = match meta.element {
        // An element of a coalesced array is the task: its own state, read as a job's.
        Some(i) => (meta.as_task(), element_of(snap, i)),
        None => (meta.clone(), snap),
    };
    if held && snap.note.is_none() {
        snap.note = Some(
            "Held for the connector's duplicate check, which the replica that submitted it \
             did not finish; the connector is releasing it"
                .into(),
        );
    }
    let snap = match own_job::own_job(rt, &meta, snap).await {
        Ok(snap) => snap,
        Err(lost) => {
            let job_lost = Facts {
                job_lost: true,
                ..Facts::default()
            };
            let decided = phase::decide_reading(job_lost, unread(), unread()).await;
            let d = decided.decision;
            let _ = count_outcome(rt, &meta, d.phase, d.class, &lost);
            return answer::lost(&meta, d, lost);
        }
    };
    let decided = phase::decide_reading(
        facts_of(&meta, &snap, ctx.requeue_budget),
        native_result::read(rt, &meta, ctx.native),
        outputs::upload(rt, &meta, ctx.ceiling),
    )
    .await;
    let over_budget = decided.over_budget;
    let status = answer::answer(
        &meta,
        &snap,
        decided,
        rt.staging.as_deref(),
        ctx.log_templates,
    )
    .await;
    if count_outcome(rt, &meta, status.phase, status.class, &status.message) {
        accounting::count(rt, &meta, &snap);
    }
    if let Some((restarts, budget)) = over_budget
        && !snap.is_over()
    {
        cancel_past_budget(rt, &meta, restarts, budget).await;
    }
    status
}

/// A read [`phase::decide_reading`] never needs: a lost job has no result of its own to read.
async fn unread<F>() -> (Option<F>, ()) {
    (None, ())
}

/// The facts of the tracker's snapshot of the task's own job; `requeue_budget` is the
/// deployment's, for a meta that carries none.
fn facts_of(meta: &ResourceMeta, snap: &JobSnapshot, requeue_budget: u32) -> Facts {
    Facts {
        slurm: Some((snap.slurm, snap.class)),
        accounting_awaited: matches!(snap.accounting, Accounting::Awaited),
        requeues: snap.restart_count.unwrap_or(0),
        requeue_budget: meta.requeue_budget.unwrap_or(requeue_budget),
        ranks: meta.ranks,
        ..Facts::default()
    }
}

/// Cancels a job Slurm requeued past its task's budget: the task is reported failed from now on
/// (the restart count stays in Slurm's record), so its job must not run on. Cancelling twice is
/// harmless; a failed cancel is retried at the next GetTask.
async fn cancel_past_budget(rt: &ClusterRuntime, m: &ResourceMeta, restarts: u32, budget: u32) {
    tracing::warn!(cluster = %rt.cfg.name, job_id = %m.job_id, restarts, budget, "requeue budget spent; cancelling the job");
    if let Err(e) = rt
        .client_as(m.slurm_user.as_deref())
        .cancel(m.target(), None)
        .await
    {
        tracing::warn!(cluster = %rt.cfg.name, job_id = %m.job_id, error = %e, "cancelling a job past its requeue budget failed; retried at the next GetTask");
    }
}

/// Counts a terminal answer in the cluster's tallies, once per execution: GetTask is polled and
/// answers the same terminal phase as often as it is asked (`cluster/tallies.rs` keeps the keys
/// it counted). The execution's key is in its job name (an element's name is its own); a meta
/// of the Python plugin has none, and its job id stands for it. `true` when counted now.
fn count_outcome(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    phase: Phase,
    class: Option<FailureClass>,
    message: &str,
) -> bool {
    let Some(outcome) = Outcome::of(phase, class, message) else {
        return false;
    };
    let key = match crate::render::key_from_job_name(&meta.job_name) {
        Some(k) => k.to_string(),
        None => format!("job {} element {:?}", meta.job_id, meta.element),
    };
    let counted = rt.tallies.outcome(&key, outcome);
    if counted {
        tracing::info!(cluster = %meta.cluster, job_id = %meta.job_id, element = ?meta.element, key, phase = outcome.phase, class = outcome.class, reason = outcome.reason, "task outcome");
    }
    counted
}

/// Element `index`'s own snapshot of a coalesced array's (`snap`): the element is the task.
/// Before the tracker knows the array's elements, the array's (pending) state without them.
fn element_of(mut snap: JobSnapshot, index: u32) -> JobSnapshot {
    let elements = std::mem::take(&mut snap.elements);
    match elements.into_iter().find(|e| e.index == index) {
        Some(e) => {
            let mut own = e.snapshot;
            // The cluster's health is the array's, whichever element it is.
            own.unreachable = own.unreachable.or(snap.unreachable);
            own
        }
        None => snap,
    }
}
