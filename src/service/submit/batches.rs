//! The open batches of one cluster: CreateTasks waiting, for at most the coalescing window, to
//! be submitted with others of their array shape as one job array (`coalesce.rs` runs them).
//! State `cluster` keeps, so it imports no `cluster`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::{Client, JobDescription};

use super::execution::{OnDone, Progress};

/// One CreateTask in a batch: what its own submit would have had.
pub struct Member {
    pub key: String,
    /// When its CreateTask put it in the batch.
    pub since: std::time::Instant,
    pub job: JobDescription,
    pub client: Client,
    pub template: ResourceMeta,
    pub on_done: OnDone,
    pub tx: watch::Sender<Progress>,
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
}

impl Default for Batch {
    fn default() -> Batch {
        let now = Instant::now();
        Batch {
            members: Vec::new(),
            script_bytes: 0,
            opened: now,
            latest: now,
        }
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
        let mut open = self.open.lock().unwrap();
        let len = m.job.script.len();
        let batch = open.entry(shape.to_string()).or_default();
        batch.latest = Instant::now();
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

    /// The batch of `shape` if its time has come: `window` after its first member, or `quiet`
    /// after its latest (the CreateTasks of a burst arrive together: once none came for a
    /// moment, waiting out the window only delays them all).
    pub fn due(&self, shape: &str, window: Duration, quiet: Duration) -> Due {
        let mut open = self.open.lock().unwrap();
        let Some(b) = open.get(shape) else {
            return Due::Gone;
        };
        let (to_window, to_quiet) = (
            window.saturating_sub(b.opened.elapsed()),
            quiet.saturating_sub(b.latest.elapsed()),
        );
        if to_window.is_zero() || to_quiet.is_zero() {
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
