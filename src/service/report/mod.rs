//! The read path: GetTask's answer from the tracker's snapshot, GetTaskLogs, GetTaskMetrics.
//!
//! [`resource`] makes a [`Verdict`](verdict::Verdict) of the snapshot and passes it through named
//! stages, in this order, each in its own file: `own_job` (a job id slurmctld gave away after a
//! crash), `budget` (Slurm's own requeues), the gang's pending reason (below), `native` (a native
//! task's result at its output prefix), `outputs` (declared outputs uploaded), `tails` (the
//! stderr that explains a failure), `accounting` (what the job used, from slurmdbd: a finished
//! job's answer is held RUNNING until that is read); then `verdict` turns it into the wire's
//! `Resource`. The
//! first terminal answer of each execution is counted on the way out (`cluster/tallies.rs`).
//! `message` writes the plugin's message format; `logs` and `task_metrics` are the other two
//! reads. Never an RPC error because the cluster or staging hiccupped: that is part of the
//! message.
//!
//! Imports `cluster`, `wire`, `background` and `error`; never `submit` or `rpc`.

pub(crate) mod accounting;
pub(crate) mod budget;
pub(crate) mod logs;
mod message;
mod native;
pub(crate) mod native_result;
mod outputs;
mod own_job;
pub mod rank_failure;
mod tails;
pub(crate) mod task_metrics;
#[cfg(test)]
mod tests;
mod verdict;

use crate::proto::connector::Resource;
use crate::proto::core::task_execution::Phase;
use crate::staging;
use crate::tracker::JobSnapshot;

use crate::service::cluster::ClusterRuntime;
use crate::service::cluster::tallies::Outcome;
use crate::service::wire::meta::ResourceMeta;

use crate::tracker::FailureClass;
pub use budget::enforce_requeue_budget;
use verdict::Verdict;
#[cfg(test)]
use {budget::over_budget, own_job::reused_id};

/// How long GetTask waits for a pending multi-node job's record (its pending reason).
const PENDING_REASON_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// What [`resource`] reads besides the job: the deployment's settings and the native results.
pub struct Context<'a> {
    pub ceiling: &'a Result<staging::Ceiling, String>,
    pub log_templates: &'a [staging::logs::LogLinkTemplate],
    pub native: &'a native_result::Probes,
    /// The deployment's requeue budget, for metas that do not carry their own.
    pub requeue_budget: u32,
}

/// The whole GetTask resource. Never fails: staging problems become part of the message (or,
/// for declared outputs, the task's failure), never an RPC error.
pub async fn resource(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: JobSnapshot,
    ctx: &Context<'_>,
) -> Resource {
    let snap = match own_job::own_job(rt, meta, snap).await {
        Ok(snap) => snap,
        Err(lost) => {
            let class = Some(FailureClass::Infrastructure);
            let _ = count_outcome(rt, meta, Phase::of(lost.phase), class, &lost.message);
            return lost;
        }
    };
    if accounting::held(&snap) {
        return held_resource(meta, &snap, ctx.log_templates);
    }
    let mut v = Verdict::of(meta, &snap);
    budget::apply(&mut v, meta, &snap, ctx.requeue_budget);
    gang_reason(&mut v, rt, meta, &snap).await;
    native::apply(&mut v, rt, meta, &snap, ctx.native).await;
    outputs::apply(&mut v, rt, meta, ctx.ceiling);
    tails::apply(&mut v, rt, meta, &snap).await;
    accounting::apply(&mut v, &snap);
    if count_outcome(rt, meta, v.phase, v.class, &v.message) {
        accounting::count(rt, meta, &snap);
    }
    let mut r = v.into_resource(meta, &snap, ctx.log_templates);
    accounting::add_custom_info(&mut r, &snap);
    r
}

/// GetTask's answer while a finished job's accounting is awaited ([`accounting::held`]): RUNNING,
/// saying so; the terminal phase comes with the record.
pub fn held_resource(
    meta: &ResourceMeta,
    snap: &JobSnapshot,
    log_templates: &[staging::logs::LogLinkTemplate],
) -> Resource {
    let mut v = Verdict::of(meta, snap);
    // The job's own status lines stay (an array's progress among them), under the reason for
    // the phase.
    v.message = format!(
        "Slurm job {} ended ({}); reading what it used from slurmdbd before reporting it\n{}",
        meta.job_id,
        snap.state.as_deref().unwrap_or("finished"),
        v.message,
    );
    v.phase = Phase::Running;
    v.class = None;
    v.into_resource(meta, snap, log_templates)
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

/// Why a pending multi-node job waits.
async fn gang_reason(
    v: &mut Verdict,
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: &JobSnapshot,
) {
    // A pending multi-node job: the tracker keeps states only, and why a gang waits (nodes busy,
    // more nodes than the partition has: PartitionNodeLimit, a switch count) is what its author
    // needs to know, so its record is read (bounded, best effort).
    if meta.ranks
        && v.phase == Phase::Queued
        && snap.reason.is_none()
        && let Ok(Ok(Some(info))) =
            tokio::time::timeout(PENDING_REASON_BUDGET, rt.client().job(meta.job_id)).await
        && let Some(r) = info.reason.filter(|r| !r.is_empty() && r != "None")
    {
        v.message
            .push_str(&format!("\nwaiting for all its nodes, reason: {r}"));
    }
}

/// Element `index`'s own snapshot of a coalesced array's (`snap`): the element is the task.
/// Before the tracker knows the array's elements, the array's (pending) state without them.
pub fn element_of(mut snap: JobSnapshot, index: u32) -> JobSnapshot {
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
