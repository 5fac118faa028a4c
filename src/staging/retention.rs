//! Job files don't pile up: a finished job's script, logs and local outputs are removed a
//! configurable time after the task ended (default 7 days), through the staging interface. The
//! service keeps the list of finished jobs and calls [`sweep`] periodically.

use std::time::{Duration, SystemTime};

use super::backend::Staging;
use super::error::StagingError;

pub const RETENTION_VAR: &str = "FLYTE_SLURM_JOB_FILES_RETENTION";
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

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

/// `None` means keep forever (`off`, `never`, or `0` — as `0` means "no limit" for the upload
/// ceiling; removing logs the moment a task ends would leave nothing to debug it with).
/// Accepts `7d`, `12h`, `30m`, `45s`, plain seconds.
pub fn parse_retention(value: Option<&str>) -> Result<Option<Duration>, StagingError> {
    let Some(v) = value.map(str::trim) else {
        return Ok(Some(DEFAULT_RETENTION));
    };
    if matches!(v.to_ascii_lowercase().as_str(), "off" | "never") {
        return Ok(None);
    }
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = (&v[..split], v[split..].trim());
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => u64::MAX,
    };
    match num.parse::<u64>() {
        Ok(0) if mult != u64::MAX => Ok(None),
        Ok(n) if mult != u64::MAX => Ok(Some(Duration::from_secs(n.saturating_mul(mult)))),
        _ => Err(StagingError::Config {
            var: RETENTION_VAR,
            message: format!(
                "{v:?} is not a duration; use e.g. 7d, 12h, 30m, 3600 (seconds) or off"
            ),
        }),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_retention(None).unwrap(), Some(DEFAULT_RETENTION));
        assert_eq!(parse_retention(Some("off")).unwrap(), None);
        assert_eq!(parse_retention(Some("0")).unwrap(), None);
        assert_eq!(parse_retention(Some("0d")).unwrap(), None);
        assert_eq!(
            parse_retention(Some("2d")).unwrap(),
            Some(Duration::from_secs(172_800))
        );
        assert_eq!(
            parse_retention(Some("90")).unwrap(),
            Some(Duration::from_secs(90))
        );
        for bad in ["", "d", "7 days", "-1d", "1.5h"] {
            assert!(parse_retention(Some(bad)).is_err(), "{bad:?}");
        }
    }
}
