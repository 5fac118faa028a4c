//! A Flyte 1 `slurm` task (flytekitplugins-slurm's `SlurmTask`) names a batch script already on
//! the cluster (`batch_script_path`). slurmrestd takes a script body, not a path, so CreateTask
//! reads the file through staging and submits its text, as `sbatch PATH ARGS` reads the file (and
//! its `#SBATCH` lines) when it submits; the arguments reach it through `set --`
//! (`render::script`). A path that is wrong is a CreateTask error naming it, not a failed job.

use futures::TryStreamExt;

use crate::render::TaskSpec;
use crate::service::error::ServiceError;
use crate::staging::{Staging, StagingError};

/// The largest script read: slurmctld's default `max_script_size` (4 MB); a bigger one it would
/// refuse anyway, after the connector had read it all.
pub const MAX_SCRIPT_BYTES: u64 = 4 * 1024 * 1024;

/// The text of the script at `path` on `cluster`'s shared filesystem.
pub async fn read(
    cluster: &str,
    staging: Option<&dyn Staging>,
    path: &str,
) -> Result<String, ServiceError> {
    let field = "batch_script_path";
    let Some(staging) = staging else {
        return Err(ServiceError::Invalid(format!(
            "{field} `{path}`: cluster `{cluster}` has no staging (its shared filesystem mounted in the \
             connector, or the stager sidecar), and the connector reads a Flyte 1 slurm task's script \
             through it (slurmrestd takes a script body, not a path); configure staging for the \
             cluster (`FLYTE_SLURM_SHARED_MOUNTS` or `FLYTE_SLURM_STAGER_URL`, docs/configuration.md)"
        )));
    };
    let refused = |reason: String| {
        ServiceError::Invalid(format!(
            "{field} `{path}` on cluster `{cluster}`: {reason}; put the script under a folder the \
             connector may read (its staging roots), or add the script's folder to them"
        ))
    };
    let missing = || {
        ServiceError::Invalid(format!(
            "{field} `{path}` does not exist on cluster `{cluster}`'s shared filesystem; fix the \
             task's batch_script_path (SlurmTask(batch_script_path=...)) or copy the script there"
        ))
    };
    let transient = |e: StagingError| {
        ServiceError::Unavailable(format!(
            "reading {field} `{path}` on cluster `{cluster}` (try again): {e}"
        ))
    };
    let stat = match staging.stat(path).await {
        Ok(Some(s)) => s,
        Ok(None) | Err(StagingError::NotFound { .. }) => return Err(missing()),
        Err(StagingError::Refused { reason, .. }) => return Err(refused(reason)),
        Err(e) => return Err(transient(e)),
    };
    if stat.size > MAX_SCRIPT_BYTES {
        return Err(ServiceError::Invalid(format!(
            "{field} `{path}` on cluster `{cluster}` is {} bytes; Slurm takes batch scripts up to \
             {MAX_SCRIPT_BYTES} bytes (max_script_size)",
            stat.size
        )));
    }
    let stream = match staging.read(path).await {
        Ok(s) => s,
        Err(StagingError::NotFound { .. }) => return Err(missing()),
        Err(StagingError::Refused { reason, .. }) => return Err(refused(reason)),
        Err(e) => return Err(transient(e)),
    };
    let mut bytes = Vec::with_capacity(stat.size as usize);
    let mut stream = stream;
    while let Some(chunk) = stream.try_next().await.map_err(|e| {
        ServiceError::Unavailable(format!(
            "reading {field} `{path}` on cluster `{cluster}` (try again): {e}"
        ))
    })? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > MAX_SCRIPT_BYTES {
            return Err(ServiceError::Invalid(format!(
                "{field} `{path}` on cluster `{cluster}` grew past {MAX_SCRIPT_BYTES} bytes while \
                 it was read; Slurm takes batch scripts up to that size (max_script_size)"
            )));
        }
    }
    String::from_utf8(bytes).map_err(|_| {
        ServiceError::Invalid(format!(
            "{field} `{path}` on cluster `{cluster}` is not UTF-8 text; slurmrestd takes a batch \
             script as a JSON string"
        ))
    })
}

/// The script read becomes the task's script: from here on it renders as a `slurm_script` task
/// (its `#SBATCH` lines, then the task's `sbatch_config` over them, as on sbatch's command line).
pub fn set_script(spec: &mut TaskSpec, script: String) {
    if let crate::render::TaskConfig::Slurm(c) = &mut spec.custom {
        c.script = Some(script);
    }
}
