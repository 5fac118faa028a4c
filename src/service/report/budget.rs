//! The requeue budget: how often Slurm may put a task's job back in the queue itself (node
//! failures, preemption) before the task is failed and its job cancelled.

use crate::proto::core::task_execution::Phase;
use crate::tracker::{FailureClass, JobSnapshot};

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;

use super::verdict::Verdict;

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
        .cancel(m.target(), None)
        .await
    {
        tracing::warn!(cluster = %rt.cfg.name, job_id = %m.job_id, error = %e, "cancelling a job past its requeue budget failed; retried at the next GetTask");
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

/// The budget's stage: a spent budget fails the task retryably (the cluster's failure); a
/// requeue within it, or a node failure Slurm did not requeue, is said in the message.
pub fn apply(v: &mut Verdict, meta: &ResourceMeta, snap: &JobSnapshot, deployment: u32) {
    let budget = meta.requeue_budget.unwrap_or(deployment);
    if let Some((restarts, budget)) = over_budget(meta, snap, deployment) {
        // The cluster's failures, not the task's: only a spent budget reaches Flyte, and as a
        // retryable failure (Flyte's own retries then start a new attempt).
        v.phase = Phase::RetryableFailed;
        v.class = Some(FailureClass::Infrastructure);
        v.message = format!(
            "[REQUEUE_BUDGET] Slurm requeued job {} {restarts} time{} after node failures or \
             preemptions, more than the task's budget of {budget}; the job was cancelled\n{}",
            meta.job_id,
            if restarts == 1 { "" } else { "s" },
            v.message
        );
    } else if let Some(n) = snap.restart_count.filter(|n| *n > 0)
        && !matches!(v.phase, Phase::Failed | Phase::RetryableFailed)
    {
        v.message.push_str(&format!(
            "\nrequeued by Slurm after {} ({n} of {budget})",
            causes(snap.requeues)
        ));
    } else if snap.class == Some(FailureClass::Infrastructure) && snap.restart_count.is_some() {
        // Slurm requeues a requeueable batch job itself after a node failure; this one ended
        // instead, so it was not requeueable here.
        v.message.push_str(
            "\nSlurm did not put the job back in the queue (it does so only for a requeueable \
             job: no --no-requeue, JobRequeue=1, and for preemption PreemptMode=REQUEUE); the \
             failure is the cluster's, so Flyte's retry applies",
        );
    }
}
