//! Job logs: the stderr tail for failure messages, GetTaskLogs' pages (each stream followed from
//! a byte offset the reader carries), and log-link templates (a site's Open OnDemand or Grafana URL) for `TaskLog` links.

use super::backend::{Chunk, ReadFrom, Staging};
use super::error::Result;
// Log-link templates are parsed with the configuration (`FLYTE_SLURM_LOG_LINKS`); filled here.
pub use crate::config::units::{LogLinkTemplate, LogVars};

/// Lines of stderr a failed task's message ends with.
pub const FAILURE_TAIL_LINES: usize = 30;
/// The last 30 lines of stderr, or `None` when there is no stderr (missing or empty).
pub async fn failure_tail(staging: &dyn Staging, stderr_path: &str) -> Result<Option<String>> {
    Ok(staging
        .tail(stderr_path, FAILURE_TAIL_LINES)
        .await?
        .filter(|s| !s.trim().is_empty()))
}

/// `(name, uri)` pairs for `TaskLog` links.
pub fn render_links(templates: &[LogLinkTemplate], vars: &LogVars<'_>) -> Vec<(String, String)> {
    templates
        .iter()
        .map(|t| (t.render_name(vars), t.render(vars)))
        .collect()
}

/// Bytes one GetTaskLogs page reads at most, over all its streams: a huge log is paged, never
/// read whole into memory.
pub const PAGE_BYTES: u64 = 1024 * 1024;
/// Bytes read back from each stream's end on the first call (no token): the tail a reader sees
/// before following, as the Python plugin's 500 lines, but without re-reading it later.
pub const FIRST_TAIL_BYTES: u64 = 256 * 1024;
/// Streams one page reads at most (a 1000-element array has 2000): the rest on the next pages.
pub const STREAMS_PER_PAGE: usize = 64;

/// One log file of a task, and the name its lines carry (`stdout`, `element 3 stderr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStream {
    pub name: String,
    pub path: String,
}

/// Where a task's log reader is: a byte offset per stream (in the order the task lists them) and
/// the stream the next page starts at. It travels to Flyte as the page token and comes back,
/// so any replica continues where another stopped; `scope` (the job) keeps a token from being
/// used for another task's logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub scope: String,
    pub next: usize,
    pub offsets: Vec<u64>,
}

const TOKEN_PREFIX: &str = "slurm-logs-v1";

/// The token of a page asked before the task's job existed: the next page starts at the log's
/// tail, as an empty token does. Not empty, because an empty token tells the reader the logs are
/// complete, and it would stop before the job ever ran.
pub const NOT_STARTED_TOKEN: &str = "slurm-logs-v1:not-started";

impl Cursor {
    /// `slurm-logs-v1:<scope>:<next>:<offset>,<offset>,…`
    pub fn token(&self) -> String {
        let offsets: Vec<String> = self.offsets.iter().map(u64::to_string).collect();
        format!(
            "{TOKEN_PREFIX}:{}:{}:{}",
            self.scope,
            self.next,
            offsets.join(",")
        )
    }

    /// A token this connector wrote for `scope` with `streams` streams; anything else is refused
    /// with what is wrong (the token is the client's echo of ours, so a mismatch is its mistake).
    pub fn parse(token: &str, scope: &str, streams: usize) -> std::result::Result<Cursor, String> {
        let bad = |why: &str| {
            format!(
                "GetTaskLogs `token` {token:?}: {why}; send the token the previous page returned, \
                 or an empty token to start from the log's tail"
            )
        };
        let mut parts = token.splitn(4, ':');
        if parts.next() != Some(TOKEN_PREFIX) {
            return Err(bad("not a token this connector wrote"));
        }
        let (Some(s), Some(next), Some(offsets)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("incomplete"));
        };
        if s != scope {
            return Err(bad(&format!("it is for Slurm job {s}, not {scope}")));
        }
        let next: usize = next
            .parse()
            .map_err(|_| bad("its stream index is not a number"))?;
        let offsets = offsets
            .split(',')
            .filter(|o| !o.is_empty())
            .map(str::parse)
            .collect::<std::result::Result<Vec<u64>, _>>()
            .map_err(|_| bad("an offset is not a number"))?;
        if offsets.len() != streams || (streams > 0 && next >= streams) {
            return Err(bad(&format!(
                "it has {} offsets (next {next}) for a task with {streams} log streams",
                offsets.len()
            )));
        }
        Ok(Cursor {
            scope: scope.to_string(),
            next,
            offsets,
        })
    }
}

/// One line of a page: the stream it came from (with the rank, for a multi-rank task whose
/// lines srun labelled `N: `) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageLine {
    pub stream: String,
    pub text: String,
    /// The connector's own line (a stream not written yet, unreadable, restarted), not the task's.
    pub system: bool,
}

impl PageLine {
    /// The line as one string, for readers that have no field for its stream (Flyte 1's
    /// `LogLine`, the deprecated `results`).
    pub fn plain(&self) -> String {
        format!("[{}] {}", self.stream, self.text)
    }
}

/// A page of a task's logs and the cursor after it. `drained`: every stream read to its end
/// (with `ended`, the reader has everything and the token can be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub lines: Vec<PageLine>,
    pub cursor: Cursor,
    pub drained: bool,
    /// Bytes read from staging for this page (what a test counts: nothing is read twice).
    pub bytes_read: u64,
}

/// What to read: the task's streams, where the reader is (`None`: the first call, which shows
/// each stream's last `max_lines` lines), the most lines per stream, and whether the job ended
/// (then a last line without its newline is shown; while it runs, it waits for its newline).
pub struct PageRequest<'a> {
    pub scope: &'a str,
    pub streams: &'a [LogStream],
    pub cursor: Option<Cursor>,
    pub max_lines: usize,
    pub ranks: bool,
    pub ended: bool,
}

/// One page of a task's logs: each stream from its offset, complete lines only, at most
/// [`PAGE_BYTES`] in all and [`STREAMS_PER_PAGE`] streams; a stream not written yet says so
/// once, on the first page; one that cannot be read says why and keeps its offset.
pub async fn page(staging: &dyn Staging, req: PageRequest<'_>) -> Page {
    let n = req.streams.len();
    let first = req.cursor.is_none();
    let mut cursor = req.cursor.unwrap_or_else(|| Cursor {
        scope: req.scope.to_string(),
        next: 0,
        offsets: vec![0; n],
    });
    let visit = n.min(STREAMS_PER_PAGE);
    let budget = (PAGE_BYTES / visit.max(1) as u64).max(4096);
    let mut out = Vec::new();
    let mut bytes_read = 0;
    let mut drained = true;
    for k in 0..visit {
        let i = (cursor.next + k) % n;
        let s = &req.streams[i];
        let from = if first {
            ReadFrom::End(FIRST_TAIL_BYTES.min(budget))
        } else {
            ReadFrom::Offset(cursor.offsets[i])
        };
        let chunk = match staging.read_at(&s.path, from, budget).await {
            Ok(Some(c)) => c,
            Ok(None) => {
                if first {
                    out.push(system(s, format!("{} has not been written yet", s.path)));
                }
                continue;
            }
            Err(e) => {
                out.push(system(s, format!("{} cannot be read: {e}", s.path)));
                drained = false;
                continue;
            }
        };
        bytes_read += chunk.bytes.len() as u64;
        if !first && chunk.size < cursor.offsets[i] {
            // Truncated or replaced (a requeued job's log starts again): from its start.
            out.push(system(
                s,
                format!(
                    "{} is shorter than what was already read ({} < {} bytes): the job \
                     restarted and its log starts again",
                    s.path, chunk.size, cursor.offsets[i]
                ),
            ));
            cursor.offsets[i] = 0;
            drained = false;
            continue;
        }
        let full = chunk.bytes.len() as u64 == budget;
        let cut = lines_of(&chunk, first, req.ended, req.max_lines, full);
        for text in cut.lines {
            out.push(labelled(s, text, req.ranks));
        }
        cursor.offsets[i] = cut.next_offset;
        if cut.next_offset < chunk.size {
            drained = false;
        }
    }
    if visit < n {
        drained = false;
    }
    cursor.next = if n == 0 { 0 } else { (cursor.next + visit) % n };
    Page {
        lines: out,
        cursor,
        drained,
        bytes_read,
    }
}

struct Cut {
    lines: Vec<String>,
    next_offset: u64,
}

/// The complete lines of `chunk` (after the first partial one when a first call's tail starts
/// mid-file), the last `max_lines` of them on a first call and the first `max_lines` after, and
/// the offset just past the last one taken. A chunk with no newline that filled its budget is
/// one (cut) line, so a huge line cannot stall the reader; once the job ended, a last line
/// without its newline is taken too. Bytes that are not UTF-8 are shown lossily.
fn lines_of(chunk: &Chunk, first: bool, ended: bool, max_lines: usize, full: bool) -> Cut {
    let bytes = &chunk.bytes[..];
    let mut begin = 0;
    if first && chunk.start > 0 {
        // The tail started mid-line: that line's start was not read.
        begin = bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |p| p + 1);
    }
    let whole = bytes.iter().rposition(|&b| b == b'\n').map(|p| p + 1);
    let at_eof = chunk.start + bytes.len() as u64 == chunk.size;
    let end = match whole {
        _ if ended && at_eof => bytes.len(),
        Some(e) if e > begin => e,
        _ if full => bytes.len(),
        _ => begin,
    };
    // (end offset within the chunk, line) for every line in begin..end.
    let mut lines: Vec<(usize, String)> = Vec::new();
    let mut pos = begin;
    for l in bytes[begin..end].split_inclusive(|&b| b == b'\n') {
        pos += l.len();
        let l = l.strip_suffix(b"\n").unwrap_or(l);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        lines.push((pos, String::from_utf8_lossy(l).into_owned()));
    }
    let max_lines = max_lines.max(1);
    let (taken, next) = if first {
        // Everything up to `end` counts as shown: the lines before the tail are not wanted.
        let skip = lines.len().saturating_sub(max_lines);
        (lines.split_off(skip), end)
    } else {
        lines.truncate(max_lines);
        let next = lines.last().map_or(begin, |&(p, _)| p);
        (lines, next)
    };
    Cut {
        lines: taken.into_iter().map(|(_, l)| l).collect(),
        next_offset: chunk.start + next as u64,
    }
}

/// A line the connector says about a stream (not the task's own output).
fn system(s: &LogStream, text: String) -> PageLine {
    PageLine {
        stream: s.name.clone(),
        text,
        system: true,
    }
}

/// A task's line, named by its stream and, for a multi-rank task, the rank srun labelled it with
/// (`srun --label` writes `  3: text`).
fn labelled(s: &LogStream, text: String, ranks: bool) -> PageLine {
    if ranks && let Some((rank, rest)) = rank_label(&text) {
        return PageLine {
            stream: format!("{} rank {rank}", s.name),
            text: rest.to_string(),
            system: false,
        };
    }
    PageLine {
        stream: s.name.clone(),
        text,
        system: false,
    }
}

fn rank_label(line: &str) -> Option<(u32, &str)> {
    let t = line.trim_start();
    let (n, rest) = t.split_once(": ")?;
    Some((n.parse().ok()?, rest))
}
