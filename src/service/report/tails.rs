//! The failure's own words: the last lines of the job's stderr (an array's first failed
//! elements, each from its own file; the rank that failed first for several ranks; an
//! out-of-memory kill named as such), read within a budget of GetTask's 10 s.

use std::time::Duration;

use crate::staging::{self, Staging};
use crate::tracker::JobSnapshot;

use crate::service::wire::meta::ResourceMeta;

use super::message::{bytes_text, failed_elements, over_memory_line};
use super::rank_failure;

/// Bound on staging reads inside GetTask (the backend's deadline is 10 s).
const STAGING_BUDGET: Duration = Duration::from_secs(3);

/// At most this many failed elements of an array have their stderr read.
const TAILS_READ: usize = 3;

/// Appends the stderr tail that explains a failure to its message.
pub async fn append(
    message: &mut String,
    st: &dyn Staging,
    meta: &ResourceMeta,
    snap: &JobSnapshot,
) {
    if !snap.elements.is_empty() {
        elements(message, st, meta, snap).await
    } else if meta.ranks {
        ranks(message, st, meta).await
    } else {
        job(message, st, meta, snap).await
    }
}

const SLOW: &str = "\n(stderr not read: the staging backend is slow)";

/// A job array: the tails of the first failed elements, each from its own file, all within the
/// one staging budget.
async fn elements(message: &mut String, st: &dyn Staging, meta: &ResourceMeta, snap: &JobSnapshot) {
    let deadline = tokio::time::Instant::now() + STAGING_BUDGET;
    for e in failed_elements(snap).into_iter().take(TAILS_READ) {
        let path = staging::element_path(&meta.stderr, meta.job_id.0, e.index);
        match tokio::time::timeout_at(deadline, staging::logs::failure_tail(st, &path)).await {
            Ok(Ok(Some(tail))) => message.push_str(&format!(
                "\n--- last lines of stderr of element {} ({path}) ---\n{tail}",
                e.index
            )),
            Ok(Ok(None)) => {}
            Ok(Err(err)) => message.push_str(&format!(
                "\n(stderr of element {} not readable: {err})",
                e.index
            )),
            Err(_) => {
                message.push_str(SLOW);
                break;
            }
        }
    }
}

/// Several ranks: srun names the one that failed first; its own labelled lines are the tail
/// worth showing (the others were only terminated).
async fn ranks(message: &mut String, st: &dyn Staging, meta: &ResourceMeta) {
    match tokio::time::timeout(
        STAGING_BUDGET,
        st.tail(&meta.stderr, rank_failure::READ_LINES),
    )
    .await
    {
        Ok(Ok(Some(text))) => match rank_failure::find(&text) {
            Some(f) => message.push_str(&format!("\n{}", f.message())),
            None => {
                let tail: Vec<&str> = text.lines().collect();
                let from = tail.len().saturating_sub(staging::logs::FAILURE_TAIL_LINES);
                message.push_str(&format!(
                    "\n--- last lines of stderr ---\n{}",
                    tail[from..].join("\n")
                ));
            }
        },
        Ok(Ok(None)) => {}
        Ok(Err(e)) => message.push_str(&format!("\n(stderr not readable: {e})")),
        Err(_) => message.push_str(SLOW),
    }
}

/// One job: its tail, and an out-of-memory kill named as such.
async fn job(message: &mut String, st: &dyn Staging, meta: &ResourceMeta, snap: &JobSnapshot) {
    match tokio::time::timeout(
        STAGING_BUDGET,
        staging::logs::failure_tail(st, &meta.stderr),
    )
    .await
    {
        Ok(Ok(Some(tail))) => {
            // jobacct_gather's OverMemoryKill ends the job FAILED by SIGKILL; only the line
            // slurmstepd writes to the job's stderr says it was the memory limit.
            if snap
                .state
                .as_deref()
                .is_some_and(|t| t.starts_with("FAILED"))
                && let Some((used, limit)) = over_memory_line(&tail)
            {
                let first = message.find('\n').unwrap_or(message.len());
                message.replace_range(
                    ..first,
                    &format!(
                        "[OUT_OF_MEMORY] job {} used more than its {} (MaxRSS {})",
                        meta.job_id,
                        bytes_text(limit),
                        bytes_text(used)
                    ),
                );
            }
            message.push_str(&format!("\n--- last lines of stderr ---\n{tail}"))
        }
        Ok(Ok(None)) => {}
        Ok(Err(e)) => message.push_str(&format!("\n(stderr not readable: {e})")),
        Err(_) => message.push_str(SLOW),
    }
}
