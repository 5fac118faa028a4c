//! The open batches of one cluster: CreateTasks waiting, for at most the coalescing window, to
//! be submitted with others of their array shape as one job array (`coalesce.rs` runs them).
//! State `cluster` keeps, so it imports no `cluster`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::{Client, JobDescription};

use super::execution::Progress;

/// One CreateTask in a batch: what its own submit would have had.
pub struct Member {
    pub key: String,
    /// When its CreateTask put it in the batch.
    pub since: std::time::Instant,
    pub job: JobDescription,
    pub client: Client,
    pub template: ResourceMeta,
    /// The execution, for the log line once its job exists (`paced::settle`).
    pub flyte: Option<String>,
    /// When its CreateTask must be answered (`None`: answered already, or nobody waits): the
    /// submit's check begins in time for it (`protocol::Cluster::answering_by`).
    pub answer_by: Option<Instant>,
    pub tx: watch::Sender<Progress>,
}

impl Member {
    /// `key`'s submit, its CreateTask come `since`, its progress sent on `tx`.
    pub fn new(
        (key, since): (&str, Instant),
        job: &JobDescription,
        client: Client,
        template: ResourceMeta,
        flyte: Option<String>,
        answer_by: Option<Instant>,
        tx: watch::Sender<Progress>,
    ) -> Member {
        Member {
            key: key.to_string(),
            since,
            job: job.clone(),
            client,
            template,
            flyte,
            answer_by,
            tx,
        }
    }
}

/// What adding a member did.
pub enum Added {
    /// It opened a batch: the caller starts its window.
    Opened,
    /// It joined an open batch.
    Joined,
    /// It filled the batch, taken out here: the caller submits it now. `true`: the member did
    /// not fit and opened the next batch (whose window the caller starts too).
    Full(Vec<Member>, bool),
}

struct Batch {
    members: Vec<Member>,
    script_bytes: usize,
    /// When its first and its latest member came.
    opened: Instant,
    latest: Instant,
    /// The gap between its shape's CreateTasks when they come as a paced stream ([`Pace`]).
    follow: Option<Duration>,
}

impl Default for Batch {
    fn default() -> Batch {
        let now = Instant::now();
        Batch {
            members: Vec::new(),
            script_bytes: 0,
            opened: now,
            latest: now,
            follow: None,
        }
    }
}

/// Flyte's backend paces CreateTask (its write limiter: 10 a second, bursts of 100), so a map's
/// elements after the first hundred come ~100 ms apart: a window of 100 ms, closed when none
/// came for a tenth of it, would submit each alone (three slurmctld RPCs an element again). So
/// the pace of each shape's arrivals is kept across its batches, and while they come as a
/// stream a batch stays open as long as the stream goes on: until no CreateTask came for
/// two and a half of its gaps ([`FOLLOW_QUIET_HALF_GAPS`]), or for [`FOLLOW_WINDOW`] at most. Each CreateTask still
/// answers within `submit_wait` (deferred if its batch is still open, found by GetTask after).
struct Pace {
    last: Instant,
    /// The longest recent gap between arrivals, shrinking by an eighth with each shorter one
    /// (a decaying maximum, not a mean: a stream's CreateTasks can come bunched, two at once
    /// then a double gap, and a mean pulled down by the pair would close the batch before the
    /// next); `None` after a single arrival or a pause longer than [`FOLLOW_GAP_MAX`].
    gap: Option<Duration>,
}

/// Arrivals further apart than this are no stream (2 a second and slower): not followed.
pub const FOLLOW_GAP_MAX: Duration = Duration::from_millis(500);
/// How many of a stream's gaps without an arrival end it: the backend's pacing is a token
/// bucket, so gaps vary; two and a half of them tolerate a late one.
const FOLLOW_QUIET_HALF_GAPS: u32 = 5;
/// The longest a followed batch stays open: at Flyte's 10 a second that is ~20 elements an
/// array (three RPCs for twenty), and with the submit after it within Flyte 1's 3 s CreateTask
/// deadline.
pub const FOLLOW_WINDOW: Duration = Duration::from_secs(2);
/// The longest quiet gap of a followed stream.
const FOLLOW_QUIET_MAX: Duration = Duration::from_secs(1);
/// Shapes whose last CreateTask is older than this are forgotten (the map stays bounded).
const PACE_KEPT: Duration = Duration::from_secs(60);

impl Pace {
    /// An arrival at `now`: the gap it makes with the last, or none when it follows a pause.
    fn arrive(&mut self, now: Instant) -> Option<Duration> {
        let gap = now.saturating_duration_since(self.last);
        self.last = now;
        self.gap = if gap > FOLLOW_GAP_MAX {
            None
        } else {
            Some(self.gap.map_or(gap, |g| gap.max(g - g / 8)))
        };
        self.gap
    }
}

/// Whether a batch's time has come.
pub enum Due {
    /// Its window ended, or no member came for the quiet gap: taken out, to submit now.
    Now(Vec<Member>),
    /// Not yet: look again after this long.
    After(Duration),
    /// No open batch of this shape (submitted when it filled up).
    Gone,
}

/// Open batches by array shape, and what came of the batches so far (for the metrics).
#[derive(Default)]
pub struct Batches {
    open: Mutex<HashMap<String, Batch>>,
    paces: Mutex<HashMap<String, Pace>>,
    totals: Mutex<Totals>,
}

/// Since start: arrays submitted for batches, the tasks they carried, and the seconds those
/// tasks waited for their batch (from their CreateTask to the batch's submit).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Totals {
    pub arrays: u64,
    pub elements: u64,
    pub wait_seconds: f64,
}

impl Batches {
    /// Adds `m` to the batch of `shape`, which holds at most `cap` members and scripts of at
    /// most `max_script` bytes together (a member that would pass it goes into a new batch,
    /// and the full one is returned).
    pub fn add(&self, shape: &str, m: Member, cap: usize, max_script: usize) -> Added {
        let follow = self.arrival(shape);
        let mut open = self.open.lock().unwrap();
        let len = m.job.script.len();
        let batch = open.entry(shape.to_string()).or_default();
        batch.latest = Instant::now();
        batch.follow = follow;
        if !batch.members.is_empty() && batch.script_bytes + len > max_script {
            let full = std::mem::take(batch);
            batch.script_bytes = len;
            batch.members.push(m);
            return Added::Full(full.members, true);
        }
        batch.script_bytes += len;
        batch.members.push(m);
        if batch.members.len() >= cap {
            let full = open.remove(shape).expect("just added");
            return Added::Full(full.members, false);
        }
        if batch.members.len() == 1 {
            Added::Opened
        } else {
            Added::Joined
        }
    }

    /// Records a CreateTask of `shape` now: the gap of its stream, if it is one ([`Pace`]).
    fn arrival(&self, shape: &str) -> Option<Duration> {
        let now = Instant::now();
        let mut paces = self.paces.lock().unwrap();
        if let Some(p) = paces.get_mut(shape) {
            return p.arrive(now);
        }
        paces.retain(|_, p| now.saturating_duration_since(p.last) < PACE_KEPT);
        paces.insert(
            shape.to_string(),
            Pace {
                last: now,
                gap: None,
            },
        );
        None
    }

    /// The batch of `shape` if its time has come: `window` after its first member, or `quiet`
    /// after its latest (the CreateTasks of a burst arrive together: once none came for a
    /// moment, waiting out the window only delays them all). A batch of a paced stream
    /// ([`Pace`]) waits longer, as long as the stream goes on.
    pub fn due(&self, shape: &str, window: Duration, quiet: Duration) -> Due {
        let mut open = self.open.lock().unwrap();
        let Some(b) = open.get(shape) else {
            return Due::Gone;
        };
        let (window, quiet) = match b.follow {
            Some(gap) => (
                window.max(FOLLOW_WINDOW),
                (gap * FOLLOW_QUIET_HALF_GAPS / 2).clamp(quiet, FOLLOW_QUIET_MAX.max(quiet)),
            ),
            None => (window, quiet),
        };
        let (to_window, to_quiet) = (
            window.saturating_sub(b.opened.elapsed()),
            quiet.saturating_sub(b.latest.elapsed()),
        );
        if to_window.is_zero() || to_quiet.is_zero() {
            tracing::debug!(
                elements = b.members.len(),
                open_ms = b.opened.elapsed().as_millis() as u64,
                quiet_ms = b.latest.elapsed().as_millis() as u64,
                follow_gap_ms = b.follow.map(|g| g.as_millis() as u64),
                by = if to_window.is_zero() {
                    "window"
                } else {
                    "quiet"
                },
                "a batch's time has come"
            );
            Due::Now(open.remove(shape).expect("present").members)
        } else {
            Due::After(to_window.min(to_quiet))
        }
    }

    /// A batch of `members` went out as one array.
    pub fn submitted(&self, members: &[std::time::Instant]) {
        let mut t = self.totals.lock().unwrap();
        t.arrays += 1;
        t.elements += members.len() as u64;
        t.wait_seconds += members
            .iter()
            .map(|s| s.elapsed().as_secs_f64())
            .sum::<f64>();
    }

    pub fn totals(&self) -> Totals {
        *self.totals.lock().unwrap()
    }

    /// How many CreateTasks wait in open batches (a gauge).
    pub fn waiting(&self) -> usize {
        self.open
            .lock()
            .unwrap()
            .values()
            .map(|b| b.members.len())
            .sum()
    }
}
