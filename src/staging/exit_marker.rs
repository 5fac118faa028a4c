//! Exit-status markers for clusters without slurmdbd: a job that aged out of slurmctld between
//! polls is resolved from `<working_dir>/<job>.exit`, left by the rendered script.
//!
//! Format (agreed with `render::marker`): one line, `<code> <signal> <cause> <job>\n`: the decimal
//! exit code of the user's script; the terminating signal the job received (`TERM`, `INT`, `HUP`,
//! `QUIT`, `ALRM`) or `-`; `time_limit`, `oom` or `-`; the job's id (an array element's: the
//! array's) or `-` outside Slurm (e.g. `0 - - 4711`, `143 TERM time_limit 4712`). Markers of
//! older connectors hold `<code> <signal> <cause>` or the code alone (`137\n`) and are still
//! read. (A connector before the job id was added reads this format as malformed: see
//! docs/operations.md on upgrading a cluster without accounting.) The script writes `<job>.exit.tmp` and renames it, so a reader sees either no marker or
//! a complete one; `<job>` is the same stem as the job's `.out`/`.err` files.

use futures::StreamExt;

use super::backend::Staging;
use super::error::{Result, StagingError};

/// Why the job ended, as far as the job itself could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerCause {
    /// The terminating signal came at or after the job's end time.
    TimeLimit,
    /// The job's cgroup recorded an OOM kill.
    OutOfMemory,
}

/// What an exit-status marker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitMarker {
    pub code: i32,
    /// The terminating signal the job received (`TERM`), if any.
    pub signal: Option<String>,
    pub cause: Option<MarkerCause>,
    /// The job that wrote it (`SLURM_JOB_ID`; an array element's `SLURM_ARRAY_JOB_ID`): what
    /// names the job of an execution known only by its name once it has left slurmctld.
    pub job_id: Option<u32>,
}

impl ExitMarker {
    /// A marker holding only the code (the format before signals were recorded).
    pub fn code(code: i32) -> ExitMarker {
        ExitMarker {
            code,
            signal: None,
            cause: None,
            job_id: None,
        }
    }
}

/// The marker if it exists; an error if it exists but is not one line in the format above.
pub async fn read_exit_marker(
    staging: &dyn Staging,
    working_dir: &str,
    job: &str,
) -> Result<Option<ExitMarker>> {
    read_exit_marker_at(staging, &super::JobFiles::new(working_dir, job).marker()).await
}

/// The marker at `path` (a job array's element's: `JobFiles::element_marker` filled in).
pub async fn read_exit_marker_at(staging: &dyn Staging, path: &str) -> Result<Option<ExitMarker>> {
    let path = path.to_string();
    let mut stream = match staging.read(&path).await {
        Ok(s) => s,
        Err(StagingError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    // A marker is a few bytes; refuse to buffer more than a small cap.
    const CAP: usize = 64;
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| StagingError::io("read", &path, e))?;
        buf.extend_from_slice(&chunk);
        if buf.len() > CAP {
            break;
        }
    }
    parse_marker(&buf).map(Some).map_err(|why| StagingError::Output {
        message: format!(
            "exit-status marker {path} is malformed ({why}); expected one line `<exit code> <signal> <cause>`"
        ),
    })
}

/// Parse the marker's content: `<code> <signal> <cause>` or the older `<code>`, with an optional
/// trailing newline.
pub fn parse_marker(content: &[u8]) -> std::result::Result<ExitMarker, String> {
    let text = std::str::from_utf8(content).map_err(|_| "not UTF-8".to_string())?;
    let line = text.strip_suffix('\n').unwrap_or(text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() {
        return Err("empty".into());
    }
    if line.contains('\n') {
        return Err("more than one line".into());
    }
    let fields: Vec<&str> = line.split(' ').collect();
    let code = fields[0]
        .parse::<i32>()
        .map_err(|_| format!("{:?} is not an integer", fields[0]))?;
    match fields[..] {
        [_] => Ok(ExitMarker::code(code)),
        [_, signal, cause] | [_, signal, cause, _] => {
            let signal = match signal {
                "-" => None,
                "HUP" | "INT" | "QUIT" | "TERM" | "ALRM" => Some(signal.to_string()),
                other => return Err(format!("signal {other:?} is not one the marker records")),
            };
            let cause = match cause {
                "-" => None,
                "time_limit" => Some(MarkerCause::TimeLimit),
                "oom" => Some(MarkerCause::OutOfMemory),
                other => return Err(format!("cause {other:?} is not time_limit, oom or -")),
            };
            let job_id = match fields.get(3) {
                None | Some(&"-") => None,
                Some(id) => Some(
                    id.parse::<u32>()
                        .ok()
                        .filter(|id| *id != 0)
                        .ok_or_else(|| format!("job id {id:?} is not a positive integer"))?,
                ),
            };
            Ok(ExitMarker {
                code,
                signal,
                cause,
                job_id,
            })
        }
        _ => Err(format!("{} fields, expected 1, 3 or 4", fields.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        // Markers left before the signal was recorded.
        assert_eq!(parse_marker(b"0\n"), Ok(ExitMarker::code(0)));
        assert_eq!(parse_marker(b"137"), Ok(ExitMarker::code(137)));
        assert_eq!(parse_marker(b"3 - -\n"), Ok(ExitMarker::code(3)));
        assert_eq!(
            parse_marker(b"143 TERM time_limit\n"),
            Ok(ExitMarker {
                code: 143,
                signal: Some("TERM".into()),
                cause: Some(MarkerCause::TimeLimit),
                job_id: None,
            })
        );
        // Markers as this connector's jobs write them: the job's id last.
        assert_eq!(
            parse_marker(b"143 TERM time_limit 4711\n"),
            Ok(ExitMarker {
                code: 143,
                signal: Some("TERM".into()),
                cause: Some(MarkerCause::TimeLimit),
                job_id: Some(4711),
            })
        );
        assert_eq!(parse_marker(b"0 - - -\n"), Ok(ExitMarker::code(0)));
        assert_eq!(
            parse_marker(b"137 - oom\n").unwrap().cause,
            Some(MarkerCause::OutOfMemory)
        );
        assert_eq!(
            parse_marker(b"143 TERM -").unwrap().signal.as_deref(),
            Some("TERM")
        );
        for bad in [
            &b""[..],
            b"\n",
            b"x\n",
            b"1\n2\n",
            b"0 \n",
            b"0 - \n",
            b"0 KILL -\n",
            b"0 - slow\n",
            b"0 - - x\n",
            b"0 - - 0\n",
            b"0 - - -1\n",
            b"0 - - 12 \n",
            b"0 - - 12 13\n",
        ] {
            assert!(parse_marker(bad).is_err(), "{bad:?}");
        }
    }
}
