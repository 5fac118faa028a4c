//! GetTaskLogs: a job's stdout and stderr through staging (each element's for a job array), or
//! a line saying why the connector cannot read them.

use crate::service::ServiceError;
use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;
use crate::staging;

/// Lines per stream GetTaskLogs returns when the request says 0.
const DEFAULT_LOG_LINES: u64 = 500;
/// Lines per stream it returns at most, whatever the request says.
const MAX_LOG_LINES: u64 = 10_000;

/// The last `lines` lines of each of job `m`'s streams.
pub async fn of_job(
    rt: &ClusterRuntime,
    m: &ResourceMeta,
    lines: u64,
) -> Result<Vec<String>, ServiceError> {
    let lines = if lines == 0 {
        DEFAULT_LOG_LINES
    } else {
        lines.min(MAX_LOG_LINES)
    } as usize;
    let indices = m
        .array_indices()
        .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    let Some(st) = &rt.staging else {
        return Ok(vec![format!(
            "Logs of Slurm job {} are on cluster {}'s filesystem ({} and {}); this connector cannot \
             read them because no staging is configured: set FLYTE_SLURM_SHARED_MOUNTS (the \
             filesystem is mounted here) or FLYTE_SLURM_STAGER_URL (a stager sidecar has it)",
            m.job_id, rt.cfg.name, m.stdout, m.stderr
        )]);
    };
    let Some(indices) = indices else {
        return Ok(staging::logs::task_logs(
            st.as_ref(),
            &m.job_id.to_string(),
            &m.stdout,
            &m.stderr,
            lines,
        )
        .await);
    };
    // A job array: each element's own logs, one after the other.
    let mut out = Vec::new();
    for i in indices {
        let (stdout, stderr) = (
            staging::element_path(&m.stdout, m.job_id.0, i),
            staging::element_path(&m.stderr, m.job_id.0, i),
        );
        out.push(format!("=== element {i} of job array {} ===", m.job_id));
        out.extend(
            staging::logs::task_logs(
                st.as_ref(),
                &format!("{}_{i}", m.job_id),
                &stdout,
                &stderr,
                lines,
            )
            .await,
        );
    }
    Ok(out)
}
