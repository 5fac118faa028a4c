//! The index's reads of slurmdbd: the jobs that may have left slurmctld, walked in pages of
//! time (newest first, each recorded and dropped before the next), the first a week back, the
//! later ones incremental.

use std::time::Instant;

use crate::slurmrestd::{Client, ClientError, JobInfo};

use super::{ACCOUNTING_EVERY, ACCOUNTING_LOOKBACK_SECS, State};

/// The first listing's week is asked for in pages of time, newest first, each recorded and
/// dropped before the next: slurmdbd cannot page a listing otherwise, and a busy site's week in
/// one answer is hundreds of MB of JSON held at once (benches/soak.rs: RSS grew with every job
/// slurmdbd kept). A page aims at this many jobs at the rate the previous page's were submitted...
const PAGE_JOBS: f64 = 1000.0;
/// ...starting with the last minute (later walks: the span the newest page of the last called
/// for), never under PAGE_MIN_SECS (see `next_span`). An empty page calls for the rest of the walk
/// at once: a quiet site's first listing is two pages and each later query one, as a slow
/// slurmdbd is paid per page (tests/it/fault_drills/slurmdbd.rs); 20 000 jobs a day is about 140
/// pages once, then one a query. The queries every ACCOUNTING_EVERY are paged too: during a
/// burst their overlap alone is thousands of jobs.
const PAGE_FIRST_SECS: i64 = 60;
pub(super) const PAGE_MIN_SECS: i64 = 10;
/// Pages overlap by this much: each is relative to slurmdbd's clock when it is asked.
const PAGE_OVERLAP_SECS: i64 = 2;
/// Each later slurmdbd query overlaps the previous one by this much: slurmdbd learns of jobs a
/// little after slurmctld, and hosts' clocks differ.
const ACCOUNTING_OVERLAP_SECS: i64 = 300;
/// Where the first listing's walk through slurmdbd's week stands. Kept across attempts: a
/// CreateTask that gives up (Flyte's 10 s deadline) leaves the pages it read recorded, and the
/// next goes on from there, so a busy site's week is read once however many attempts it takes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Walk {
    /// The oldest time to reach, and the walk's own start (the incremental queries go on from it).
    pub(super) from: i64,
    pub(super) began: i64,
    /// The next page ends here and spans this many seconds back.
    pub(super) end: i64,
    pub(super) span: i64,
}

impl State {
    /// Records slurmdbd's jobs that may have left slurmctld: a backend retrying a CreateTask
    /// after its job ended (past MinJobAge) must not get a second job. The first query looks back
    /// a week, in pages, and must succeed (slurmdbd down: nothing is decided); later ones are
    /// incremental, every ACCOUNTING_EVERY, and best effort: what they add is not what a race
    /// between replicas is decided on, and slurmdbd being down must not stop submits. The number
    /// of keyed records it added.
    #[allow(clippy::result_large_err)]
    pub(super) async fn accounting(
        &mut self,
        client: &Client,
        cluster: &str,
        user: Option<&str>,
    ) -> Result<usize, ClientError> {
        let due = self
            .accounting_since
            .is_none_or(|(_, at)| at.elapsed() >= ACCOUNTING_EVERY);
        if self.no_accounting || !due {
            return Ok(0);
        }
        let (began, began_unix) = (Instant::now(), chrono::Utc::now().timestamp());
        // A walk left unfinished by an earlier try goes on; a new one starts from now, back to
        // a week ago or to a little before the last one began.
        let span = self.page_span.unwrap_or(PAGE_FIRST_SECS);
        let since = self.accounting_since;
        let walk = *self.walk.get_or_insert(Walk {
            from: since.map_or(began_unix - ACCOUNTING_LOOKBACK_SECS, |(s, _)| {
                s - ACCOUNTING_OVERLAP_SECS
            }),
            began: began_unix,
            end: began_unix,
            span,
        });
        let listed = self
            .accounting_pages(client, user)
            .await
            .map(|n| (n, walk.began));
        match listed {
            Ok((n, as_of)) => {
                self.accounting_since = Some((as_of, began));
                Ok(n)
            }
            Err(e) if e.is_transient() && self.accounting_since.is_none() => Err(e),
            Err(e) if e.is_transient() => {
                tracing::warn!(
                    cluster, error = %e,
                    "slurmdbd did not answer the incremental query of recent jobs; asked again at \
                     the next CreateTask"
                );
                Ok(0)
            }
            // No accounting on this cluster (no /slurmdb paths): slurmctld is all there is.
            Err(e) => {
                tracing::warn!(
                    cluster, error = %e,
                    "cannot list slurmdbd's recent jobs; a CreateTask retried after its job left \
                     slurmctld cannot be recognised on this cluster"
                );
                self.no_accounting = true;
                Ok(0)
            }
        }
    }

    /// The rest of the walk through slurmdbd's jobs, newest page first (see PAGE_JOBS), each
    /// page recorded before the next is asked for; the number of keyed records.
    #[allow(clippy::result_large_err)]
    async fn accounting_pages(
        &mut self,
        client: &Client,
        user: Option<&str>,
    ) -> Result<usize, ClientError> {
        let (mut n, mut pages) = (0, 0);
        while let Some(w) = self.walk {
            let start = (w.end - w.span).max(w.from);
            let page = client
                .accounting_jobs_between(start, Some(w.end), user)
                .await?;
            pages += 1;
            if let Some(kept) = log_paths_kept(&page) {
                // Once a record shows them dropped, they stay taken for dropped.
                self.log_paths = Some(kept && self.log_paths != Some(false));
            }
            n += self.record(&[], &page);
            let span = next_span(&page, start, w.end, w.span);
            // The newest page's rate starts the next walk: a later page's says how sparse older
            // jobs were (the last one of a week's walk often calls for a day or more).
            if w.end == w.began {
                self.page_span = Some(span);
            }
            self.walk = (start > w.from).then_some(Walk {
                end: start + PAGE_OVERLAP_SECS,
                span,
                ..w
            });
        }
        tracing::debug!(pages, keyed = n, "listed slurmdbd's recent jobs");
        Ok(n)
    }
}

/// Whether slurmdbd keeps jobs' stdio paths, from a page of its records: not if one of the
/// connector's coalesced arrays (it always names its logs) shows none (`no_stdio`, or a
/// slurmrestd before v0.0.41, which does not return them), else yes if any record shows one,
/// else unknown (a page of `salloc` jobs, or none).
pub(super) fn log_paths_kept(page: &[JobInfo]) -> Option<bool> {
    if page.iter().any(|j| {
        j.name
            .starts_with(crate::render::naming::COMMENT_KEYS_PREFIX)
            && j.standard_output.is_none()
    }) {
        return Some(false);
    }
    page.iter()
        .any(|j| j.standard_output.is_some())
        .then_some(true)
}

/// The span of time the next page should cover to hold about PAGE_JOBS jobs, from this page's:
/// the jobs submitted in it at the rate they were submitted, measured from their own submit
/// times (a page reaching back into a quiet time after a burst is not taken for an even rate;
/// the jobs submitted before it but still active are not counted). An empty page: the rest, at
/// once (a quiet site's week is two pages).
pub(super) fn next_span(page: &[JobInfo], start: i64, end: i64, span: i64) -> i64 {
    let submitted: Vec<i64> = page
        .iter()
        .filter_map(|j| j.submit_time)
        .filter(|t| (start..=end).contains(t))
        .collect();
    let next = match submitted.iter().min() {
        None => span as f64 * PAGE_JOBS,
        Some(oldest) => PAGE_JOBS * (end - oldest).max(1) as f64 / submitted.len() as f64,
    };
    (next as i64).clamp(PAGE_MIN_SECS, ACCOUNTING_LOOKBACK_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurmrestd::{JobId, JobState};

    #[test]
    fn slurmdbds_records_tell_whether_it_keeps_stdio_paths() {
        let rec = |name: &str, out: Option<&str>| {
            let mut j = JobInfo::new(JobId(1), name, JobState::from_strings(["COMPLETED"]));
            j.standard_output = out.map(str::to_string);
            j
        };
        assert_eq!(log_paths_kept(&[]), None);
        assert_eq!(log_paths_kept(&[rec("interactive", None)]), None, "salloc");
        assert_eq!(
            log_paths_kept(&[rec("interactive", None), rec("b", Some("/w/slurm-7.out"))]),
            Some(true)
        );
        // `no_stdio`: the connector's array, which always names its logs, shows none.
        let array = crate::render::keys_name(&["0123456789abcdef"]);
        assert_eq!(
            log_paths_kept(&[rec(&array, None), rec("b", Some("/w/slurm-7.out"))]),
            Some(false)
        );
    }
}
