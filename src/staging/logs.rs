//! Job logs: the stderr tail for failure messages, labelled stdout/stderr for GetTaskLogs, and
//! log-link templates (a site's Open OnDemand or Grafana URL) for `TaskLog` links.

use super::backend::Staging;
use super::error::Result;
// Log-link templates are parsed with the configuration (`FLYTE_SLURM_LOG_LINKS`); filled here.
pub use crate::config::units::{LogLinkTemplate, LogVars};

/// Lines of stderr a failed task's message ends with.
pub const FAILURE_TAIL_LINES: usize = 30;
/// Lines per stream GetTaskLogs returns by default.
pub const DEFAULT_LOG_LINES: usize = 500;

/// The last 30 lines of stderr, or `None` when there is no stderr (missing or empty).
pub async fn failure_tail(staging: &dyn Staging, stderr_path: &str) -> Result<Option<String>> {
    Ok(staging
        .tail(stderr_path, FAILURE_TAIL_LINES)
        .await?
        .filter(|s| !s.trim().is_empty()))
}

/// Last `lines` lines of stdout then of stderr, each under a label line; one clear line when
/// neither has anything yet. A stream that cannot be read gets a line saying why, so one bad
/// path does not hide the other stream. (When stdout and stderr are the same file it is shown once.)
pub async fn task_logs(
    staging: &dyn Staging,
    job_id: &str,
    stdout_path: &str,
    stderr_path: &str,
    lines: usize,
) -> Vec<String> {
    let mut streams = vec![("stdout", stdout_path)];
    if stderr_path != stdout_path {
        streams.push(("stderr", stderr_path));
    }
    let mut out = Vec::new();
    let mut any = false;
    for (label, path) in streams {
        match staging.tail(path, lines).await {
            Ok(Some(text)) if !text.is_empty() => {
                any = true;
                out.push(format!("==> {label} ({path}, last {lines} lines) <=="));
                out.extend(text.lines().map(str::to_string));
            }
            Ok(_) => {}
            Err(e) => {
                any = true;
                out.push(format!("==> {label} ({path}) cannot be read: {e} <=="));
            }
        }
    }
    if !any {
        return vec![format!(
            "No output yet from Slurm job {job_id}: {stdout_path} and {stderr_path} are empty or not written yet."
        )];
    }
    out
}

/// `(name, uri)` pairs for `TaskLog` links.
pub fn render_links(templates: &[LogLinkTemplate], vars: &LogVars<'_>) -> Vec<(String, String)> {
    templates
        .iter()
        .map(|t| (t.name.clone(), t.render(vars)))
        .collect()
}
