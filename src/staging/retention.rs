//! Job files don't pile up: a finished job's script, logs and local outputs are removed a
//! configurable time after the task ended (default 7 days), through the staging interface. The
//! service keeps the list of finished jobs and calls [`sweep`] periodically.

use std::time::{Duration, SystemTime};

use super::backend::Staging;

/// A finished job's files (cluster paths: script, `.out`, `.err`, `.exit`, `.outputs/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedJob {
    pub job_id: String,
    pub ended_at: SystemTime,
    pub paths: Vec<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Jobs whose every path is gone now: the service can forget them.
    pub removed_jobs: Vec<String>,
    /// Jobs not due yet.
    pub kept: usize,
    /// `(path, error)` for removals that failed; the job stays for the next sweep.
    pub failures: Vec<(String, String)>,
}

/// Remove the files of every job that ended more than `keep` before `now`.
pub async fn sweep(
    staging: &dyn Staging,
    jobs: &[FinishedJob],
    keep: Duration,
    now: SystemTime,
) -> SweepReport {
    let mut report = SweepReport::default();
    for job in jobs {
        let due = now
            .duration_since(job.ended_at)
            .map(|age| age >= keep)
            .unwrap_or(false);
        if !due {
            report.kept += 1;
            continue;
        }
        let mut ok = true;
        for path in &job.paths {
            match staging.remove(path).await {
                Ok(removed) => {
                    tracing::debug!(job = %job.job_id, %path, removed, "retention");
                }
                Err(e) => {
                    ok = false;
                    tracing::warn!(job = %job.job_id, %path, error = %e, "retention: remove failed");
                    report.failures.push((path.clone(), e.to_string()));
                }
            }
        }
        if ok {
            report.removed_jobs.push(job.job_id.clone());
        }
    }
    report
}
