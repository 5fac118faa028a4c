//! A Flyte 1 shell task (`SlurmShellTask`) names where on the cluster its script writes each
//! output (`output_locs`), and the connector uploads them from there once the job succeeds. A
//! location the connector may not read (outside its staging roots) or a cluster with no staging
//! would only show after the job ran, as a failed task; CreateTask refuses it instead, naming the
//! output and the fix.

use crate::render::DeclaredOutput;
use crate::service::error::ServiceError;
use crate::staging::{Staging, StagingError, UploadMode};

/// Checks each declared output the connector uploads can be read where the task writes it.
pub async fn check(
    cluster: &str,
    staging: Option<&dyn Staging>,
    outputs: &[DeclaredOutput],
) -> Result<(), ServiceError> {
    for o in outputs.iter().filter(|o| o.upload == UploadMode::Connector) {
        let field = format!("output_locs `{}` (`{}`)", o.name, o.written_to);
        let Some(staging) = staging else {
            return Err(ServiceError::Invalid(format!(
                "{field}: cluster `{cluster}` has no staging (its shared filesystem mounted in \
                 the connector, or the stager sidecar), and the connector uploads a shell task's \
                 outputs from there; configure staging for the cluster (`FLYTE_SLURM_SHARED_MOUNTS` \
                 or `FLYTE_SLURM_STAGER_URL`, docs/configuration.md)"
            )));
        };
        match staging.stat(&o.written_to).await {
            // Not written yet (or left by an earlier run, replaced by this one): readable there.
            Ok(_) | Err(StagingError::NotFound { .. }) => {}
            Err(StagingError::Refused { reason, .. }) => {
                return Err(ServiceError::Invalid(format!(
                    "{field} on cluster `{cluster}`: {reason}; write the output under a folder the \
                     connector may read (its staging roots), or add that folder to them"
                )));
            }
            Err(e) => {
                return Err(ServiceError::Unavailable(format!(
                    "checking {field} on cluster `{cluster}` (try again): {e}"
                )));
            }
        }
    }
    Ok(())
}
