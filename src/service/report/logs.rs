//! GetTaskLogs: a task's stdout and stderr (each element's for a job array, each rank's for a
//! multi-rank task) paged from byte offsets carried in the token, or a line saying why the
//! connector cannot read them.
//!
//! The first call (no token) shows each stream's tail; every later call returns only what was
//! written since, so a reader that polls follows the log live and nothing is read twice. The
//! cursor lives in the token, not here: any replica continues where another stopped.

use crate::service::ServiceError;
use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;
use crate::staging;
use crate::staging::logs::{Cursor, LogStream, PageLine, PageRequest};

/// Lines per stream a page returns when the request says 0.
const DEFAULT_LOG_LINES: u64 = 500;
/// Lines per stream a page returns at most, whatever the request says.
const MAX_LOG_LINES: u64 = 10_000;

/// One page of a task's logs and the token for the next (empty once the job ended and every
/// stream was read to its end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPage {
    pub lines: Vec<PageLine>,
    pub token: String,
}

/// The page of job `m`'s logs after `token` (empty: the first page, each stream's tail).
pub async fn of_job(
    rt: &ClusterRuntime,
    m: &ResourceMeta,
    lines: u64,
    token: &str,
) -> Result<LogPage, ServiceError> {
    let max_lines = if lines == 0 {
        DEFAULT_LOG_LINES
    } else {
        lines.min(MAX_LOG_LINES)
    } as usize;
    let Some(st) = &rt.staging else {
        return Ok(LogPage {
            lines: vec![PageLine {
                stream: "connector".into(),
                system: true,
                text: format!(
                    "Logs of Slurm job {} are on cluster {}'s filesystem ({} and {}); this \
                     connector cannot read them because no staging is configured: set \
                     FLYTE_SLURM_SHARED_MOUNTS (the filesystem is mounted here) or \
                     FLYTE_SLURM_STAGER_URL (a stager sidecar has it)",
                    m.job_id, rt.cfg.name, m.stdout, m.stderr
                ),
            }],
            token: String::new(),
        });
    };
    let streams = streams_of(m)?;
    let scope = match m.element {
        Some(i) => format!("{}_{i}", m.job_id),
        None => m.job_id.to_string(),
    };
    let cursor = if token.is_empty() || token == crate::staging::logs::NOT_STARTED_TOKEN {
        None
    } else {
        Some(Cursor::parse(token, &scope, streams.len()).map_err(ServiceError::Invalid)?)
    };
    // Whether the job ended, from the tracker's cache (no slurmrestd call for a log page).
    let ended = rt.tracker.cached(m.job_id).is_some_and(|s| s.is_over());
    let page = staging::logs::page(
        st.as_ref(),
        PageRequest {
            scope: &scope,
            streams: &streams,
            cursor,
            max_lines,
            ranks: m.ranks,
            ended,
        },
    )
    .await;
    let token = if ended && page.drained {
        String::new()
    } else {
        page.cursor.token()
    };
    Ok(LogPage {
        lines: page.lines,
        token,
    })
}

/// The task's log files in a fixed order (the token's offsets follow it): stdout then stderr
/// (once when they are the same file), per element for a job array.
fn streams_of(m: &ResourceMeta) -> Result<Vec<LogStream>, ServiceError> {
    let pair = |prefix: &str, stdout: String, stderr: String| {
        let mut v = vec![LogStream {
            name: format!("{prefix}stdout"),
            path: stdout.clone(),
        }];
        if stderr != stdout {
            v.push(LogStream {
                name: format!("{prefix}stderr"),
                path: stderr,
            });
        }
        v
    };
    let indices = m
        .array_indices()
        .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    Ok(match indices {
        None => pair("", m.stdout.clone(), m.stderr.clone()),
        Some(indices) => indices
            .into_iter()
            .flat_map(|i| {
                pair(
                    &format!("element {i} "),
                    staging::element_path(&m.stdout, m.job_id.0, i),
                    staging::element_path(&m.stderr, m.job_id.0, i),
                )
            })
            .collect(),
    })
}
