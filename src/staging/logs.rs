//! Job logs: the stderr tail for failure messages, labelled stdout/stderr for GetTaskLogs, and
//! log-link templates (a site's Open OnDemand or Grafana URL) for `TaskLog` links.

use super::backend::Staging;
use super::error::{Result, StagingError};

/// Lines of stderr a failed task's message ends with.
pub const FAILURE_TAIL_LINES: usize = 30;
/// Lines per stream GetTaskLogs returns by default.
pub const DEFAULT_LOG_LINES: usize = 500;
pub const LOG_LINKS_VAR: &str = "FLYTE_SLURM_LOG_LINKS";

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

/// One `name=template` log link; placeholders `{job_id}`, `{stdout}`, `{stderr}`, `{cluster}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLinkTemplate {
    pub name: String,
    pub template: String,
}

/// The values a template is filled with.
#[derive(Debug, Clone)]
pub struct LogVars<'a> {
    pub job_id: &'a str,
    pub stdout: &'a str,
    pub stderr: &'a str,
    pub cluster: &'a str,
}

const PLACEHOLDERS: [&str; 4] = ["job_id", "stdout", "stderr", "cluster"];

impl LogLinkTemplate {
    pub fn new(name: &str, template: &str) -> Result<Self> {
        let bad = |message: String| StagingError::Config {
            var: LOG_LINKS_VAR,
            message,
        };
        if name.trim().is_empty() {
            return Err(bad(format!(
                "link {template:?} has no name; write name=template"
            )));
        }
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| bad(format!("link {name:?}: unclosed {{ in {template:?}")))?;
            let key = &rest[open + 1..open + close];
            if !PLACEHOLDERS.contains(&key) {
                return Err(bad(format!(
                    "link {name:?}: unknown placeholder {{{key}}}; use {{job_id}}, {{stdout}}, {{stderr}} or {{cluster}}"
                )));
            }
            rest = &rest[open + close + 1..];
        }
        Ok(LogLinkTemplate {
            name: name.trim().to_string(),
            template: template.trim().to_string(),
        })
    }

    /// Fill the placeholders. Values are percent-encoded (keeping `/`), so a job's path cannot
    /// add query parameters or change the link's host.
    pub fn render(&self, vars: &LogVars<'_>) -> String {
        let mut s = self.template.clone();
        for (key, value) in [
            ("job_id", vars.job_id),
            ("stdout", vars.stdout),
            ("stderr", vars.stderr),
            ("cluster", vars.cluster),
        ] {
            s = s.replace(&format!("{{{key}}}"), &encode(value));
        }
        s
    }
}

/// Parse `name=template;name=template` (the first `=` splits; a `;` inside a URL must be
/// written `%3B`).
pub fn parse_log_links(spec: &str) -> Result<Vec<LogLinkTemplate>> {
    spec.split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let (name, template) = entry.split_once('=').ok_or_else(|| StagingError::Config {
                var: LOG_LINKS_VAR,
                message: format!("entry {entry:?} is not name=template"),
            })?;
            LogLinkTemplate::new(name, template)
        })
        .collect()
}

/// `(name, uri)` pairs for `TaskLog` links.
pub fn render_links(templates: &[LogLinkTemplate], vars: &LogVars<'_>) -> Vec<(String, String)> {
    templates
        .iter()
        .map(|t| (t.name.clone(), t.render(vars)))
        .collect()
}

fn encode(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links() {
        let t = parse_log_links(
            "Open OnDemand=https://ood.example/pun/sys/files/fs{stdout} ; Grafana=https://g.example/d/x?var-job={job_id}&var-cluster={cluster}",
        )
        .unwrap();
        let vars = LogVars {
            job_id: "95",
            stdout: "/scratch/jobs/a b.out",
            stderr: "/scratch/jobs/a.err",
            cluster: "c1&x=1",
        };
        assert_eq!(
            render_links(&t, &vars),
            vec![
                (
                    "Open OnDemand".into(),
                    "https://ood.example/pun/sys/files/fs/scratch/jobs/a%20b.out".into()
                ),
                (
                    "Grafana".into(),
                    "https://g.example/d/x?var-job=95&var-cluster=c1%26x%3D1".into()
                ),
            ]
        );
        for bad in [
            "x",
            "=https://a/{job_id}",
            "a=https://a/{jobid}",
            "a=https://a/{job_id",
        ] {
            let e = parse_log_links(bad).unwrap_err().to_string();
            assert!(e.starts_with(LOG_LINKS_VAR), "{bad}: {e}");
        }
    }
}
