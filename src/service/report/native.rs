//! The native result's stage: a native (`slurm`) task's outcome is what its Flyte entrypoint
//! wrote at the output prefix (`native_result.rs`), not the job's exit code.

use crate::proto::core::task_execution::Phase;
use crate::tracker::{FailureClass, JobSnapshot};

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;

use super::native_result::{self, Probes};
use super::verdict::Verdict;

/// Decides a completed native job (or a multi-rank one whose rank 0 raised) from its result;
/// RUNNING while the result is being read.
pub async fn apply(
    v: &mut Verdict,
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: &JobSnapshot,
    probes: &Probes,
) {
    // A native task's entrypoint says how the task went (outputs.pb / error.pb), not the exit code.
    // Also a multi-rank job whose rank 0 raised: a clustered `a0` writes error.pb and exits
    // non-zero (so srun ends the other ranks), and the job ends FAILED; the task's own account
    // (message, and whether it is recoverable) is then the answer, as for a single rank, and
    // srun's "rank N failed first" with the rank's tail follows below. A rank other than 0 writes
    // no error.pb, and neither does a job a node failure ended (kept as the cluster's failure).
    let completed = v.phase == Phase::Succeeded;
    let ranks_failed = matches!(v.phase, Phase::Failed | Phase::RetryableFailed)
        && meta.ranks
        && snap.class != Some(FailureClass::Infrastructure);
    if (completed || ranks_failed)
        && let Some(prefix) = &meta.native_prefix
    {
        let source = native_result::Source::for_prefix(prefix, rt.staging.as_ref());
        match probes
            .decision(&meta.cluster, meta.target(), prefix, source)
            .await
        {
            Some(d) if completed || d.from_error_doc => {
                v.phase = d.phase;
                v.class = match d.phase {
                    Phase::Failed => Some(FailureClass::Permanent),
                    Phase::RetryableFailed => Some(FailureClass::User),
                    _ => None,
                };
                let who = if completed { "" } else { "rank 0: " };
                v.message.push_str(&format!("\n{who}{}", d.message));
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
                v.phase = Phase::Running;
                v.message = format!(
                    "Slurm job {} {ended}; reading the task's result at {prefix}",
                    meta.job_id
                );
            }
        }
    }
}
