//! When a duplicate check may begin: the turns of checks of one cluster
//! (`FLYTE_SLURM_CHECK_EVERY`), and how many checks were made (a counter of the metrics). The
//! protocol waits for a turn (`protocol::wait_turn`); the index notes each listing it begins.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A submit's check begins at most this long after the cluster's previous check (at once when
/// that one is older; the deployment's `FLYTE_SLURM_CHECK_EVERY`, this by default): while
/// submits stream in (a map's arrays under the backend's pacing, 2-5 a second at 50-100
/// CreateTasks a second), the held jobs submitted meanwhile share the next check, one
/// `jobs/state` for all of them, instead of one listing each. Each wait is also bounded by the
/// answer its CreateTasks owe ([`Turns::next`]'s `by`), so it never turns an answer deferred.
pub const CHECK_EVERY: Duration = crate::config::DEFAULT_CHECK_EVERY;

#[derive(Default)]
pub struct Turns {
    /// When the last listing or check began.
    began: Mutex<Option<Instant>>,
    /// The turn ([`CHECK_EVERY`] unless the deployment set one).
    every: Mutex<Option<Duration>>,
    /// Checks made since start (one `jobs/state` listing each, however many shared it).
    checks: AtomicU64,
}

impl Turns {
    /// The deployment's turn (zero: each check at once).
    pub fn set_every(&self, every: Duration) {
        *self.every.lock().unwrap() = Some(every);
    }

    /// A listing begins now; `check`: a check's (counted), not the index's first listing.
    pub(super) fn began(&self, check: bool) {
        *self.began.lock().unwrap() = Some(Instant::now());
        if check {
            self.checks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Checks made since start: one `jobs/state` listing each, shared by every submit (and
    /// GetTask lookup) waiting for it.
    pub fn checks(&self) -> u64 {
        self.checks.load(Ordering::Relaxed)
    }

    /// When a check that waits for its turn may begin: the turn after the last began (`None`:
    /// at once); never after `by`.
    pub fn next(&self, by: Option<Instant>) -> Option<Instant> {
        let every = self.every.lock().unwrap().unwrap_or(CHECK_EVERY);
        let next = (*self.began.lock().unwrap())? + every;
        let at = by.map_or(next, |b| next.min(b));
        (at > Instant::now()).then_some(at)
    }
}
