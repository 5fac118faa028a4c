//! Exit-status markers for clusters without slurmdbd: a job that aged out of slurmctld between
//! polls is resolved from `<working_dir>/<job>.exit`, left by the rendered script.
//!
//! Format (agreed with `render`): the file holds a single line, the decimal exit code of the
//! user's script, then `\n` (e.g. `0\n`, `137\n`). The script writes `<job>.exit.tmp` and renames
//! it, so a reader sees either no marker or a complete one; `<job>` is the same stem as the
//! job's `.out`/`.err` files.

use futures::StreamExt;

use super::backend::Staging;
use super::error::{Result, StagingError};

/// The exit code if the marker exists; an error if it exists but is not one line with a number.
pub async fn read_exit_marker(
    staging: &dyn Staging,
    working_dir: &str,
    job: &str,
) -> Result<Option<i32>> {
    let path = super::JobFiles::new(working_dir, job).marker();
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
        message: format!("exit-status marker {path} is malformed ({why}); expected one line with the exit code"),
    })
}

/// Parse the marker's content: `<exit_code>` with an optional trailing newline.
pub fn parse_marker(content: &[u8]) -> std::result::Result<i32, String> {
    let text = std::str::from_utf8(content).map_err(|_| "not UTF-8".to_string())?;
    let line = text.strip_suffix('\n').unwrap_or(text);
    if line.is_empty() {
        return Err("empty".into());
    }
    if line.contains('\n') {
        return Err("more than one line".into());
    }
    line.trim_end_matches('\r')
        .parse::<i32>()
        .map_err(|_| format!("{line:?} is not an integer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        assert_eq!(parse_marker(b"0\n"), Ok(0));
        assert_eq!(parse_marker(b"137"), Ok(137));
        for bad in [&b""[..], b"\n", b"x\n", b"1\n2\n", b"0 \n"] {
            assert!(parse_marker(bad).is_err(), "{bad:?}");
        }
    }
}
