//! Each execution's submit state in this process, in one place.
//!
//! An execution (run, action, attempt: its key) goes through CreateTask, maybe a deferred
//! submit, maybe a DeleteTask before its job exists, and GetTasks that resolve a deferred meta.
//! Everything this process knows of it is one [`Execution`] in one map under one lock: whether a
//! CreateTask of it is running (its lock), its paced submit's progress, the job it got, whether
//! DeleteTask withdrew it, and whether a submit may have created a job nobody saw.
//!
//! What bounds the map: an entry is dropped the deployment's `terminal_ttl` (an hour by default)
//! after its last change, unless its submit still runs or a CreateTask holds its lock, checked
//! whenever a new key is added. A CreateTask retried after that, or a GetTask of a deferred
//! meta, finds the job through the cluster's index instead (which keeps it a week), and the
//! entry comes back. One kind stays longer: an execution whose submit may have made a job
//! nobody saw ([`KEEP_UNCERTAIN`]), whose next CreateTask must look at the cluster first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::slurmrestd::JobRef;

pub use super::idempotency::Placement;

use crate::service::wire::meta::ResourceMeta;

/// How CreateTask's submit came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// This call submitted the execution's job (or the coalesced array it is an element of).
    Fresh(Placement),
    /// The cluster already had it (a retried CreateTask, a restart, another replica).
    Adopted(Placement),
    /// Another replica submitted the same execution at the same time and its job is older:
    /// ours was cancelled before it ran.
    LostRace {
        winner: Placement,
        cancelled: JobRef,
    },
}

impl Submitted {
    /// The execution's one job, or its element of a coalesced array.
    pub fn placement(&self) -> Placement {
        match self {
            Submitted::Fresh(p) | Submitted::Adopted(p) => p.clone(),
            Submitted::LostRace { winner, .. } => winner.clone(),
        }
    }
}

/// Where one execution's submit is.
#[derive(Debug, Clone)]
pub enum Progress {
    /// Waiting for a slot behind other submits, or retrying after `last_error`.
    Waiting {
        tries: u32,
        last_error: Option<String>,
        /// What the last try met (when there is a `last_error`).
        stall: Stall,
    },
    /// The execution has its job (the meta with its id is remembered on the runtime).
    Done,
    /// Failed for good; what CreateTask or GetTask report.
    Failed { message: String, transient: bool },
    /// A DeleteTask came first: nothing was (or stays) submitted.
    Withdrawn,
}

impl Progress {
    /// Where a submit begins.
    pub fn start() -> Progress {
        Progress::Waiting {
            tries: 0,
            last_error: None,
            stall: Stall::Hiccup,
        }
    }
}

/// Why a submit is being retried: said differently to whoever asks (GetTask's message), so
/// that nobody reads the cluster's state as the task's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// slurmrestd or slurmctld hiccupped (a transient error).
    Hiccup,
    /// slurmctld or slurmrestd cannot be reached.
    Outage,
    /// slurmctld has no room for another job (`MaxJobCount`): the submit waits for jobs to
    /// leave it, without a time limit (the cluster works as configured).
    Full,
}

/// How long an execution whose submit may have made an unseen job is remembered after its last
/// change: far past any backend retry of a CreateTask (minutes) and a submit's give-up (15 min).
pub const KEEP_UNCERTAIN: Duration = Duration::from_secs(24 * 3600);

/// One execution's state (see the module's doc).
struct Execution {
    /// Serializes CreateTasks of this execution (a backend retry can overlap the first call).
    lock: Arc<tokio::sync::Mutex<()>>,
    /// This process's paced submit, running or settled.
    submit: Option<watch::Receiver<Progress>>,
    /// The execution's job, as CreateTask answers it, once known.
    job: Option<ResourceMeta>,
    /// DeleteTask came before the job existed: no submit of this process makes it.
    withdrawn: bool,
    /// A submit may or may not have created a job (a timeout after sending): the next must look
    /// at the cluster again first.
    uncertain: bool,
    changed: Instant,
}

impl Execution {
    fn new() -> Execution {
        Execution {
            lock: Arc::default(),
            submit: None,
            job: None,
            withdrawn: false,
            uncertain: false,
            changed: Instant::now(),
        }
    }

    /// Past its time: not busy, and unchanged for `keep` (`keep_uncertain` when uncertain).
    fn expired(&self, keep: Duration, keep_uncertain: Duration) -> bool {
        let keep = if self.uncertain { keep_uncertain } else { keep };
        !self.busy() && self.changed.elapsed() >= keep
    }

    /// Still in use: its submit runs, or a CreateTask holds (or waits for) its lock.
    fn busy(&self) -> bool {
        Arc::strong_count(&self.lock) > 1
            || self
                .submit
                .as_ref()
                .is_some_and(|rx| matches!(&*rx.borrow(), Progress::Waiting { .. }))
    }
}

/// The executions of one cluster by key.
pub struct Executions {
    map: Mutex<HashMap<String, Execution>>,
    /// The deployment's `terminal_ttl`.
    keep: Duration,
    /// [`KEEP_UNCERTAIN`] (tests shorten both).
    keep_uncertain: Duration,
    /// When the map was last swept for expired entries: at most every quarter of `keep` (a
    /// minute at most), not at every new execution.
    swept: Mutex<Instant>,
}

impl Executions {
    pub fn new(keep: Duration) -> Executions {
        Executions {
            map: Mutex::new(HashMap::new()),
            keep,
            keep_uncertain: KEEP_UNCERTAIN,
            swept: Mutex::new(Instant::now()),
        }
    }

    /// Runs `f` on the key's entry (made if missing), marking it changed when `f` says so.
    fn with<R>(&self, key: &str, f: impl FnOnce(&mut Execution) -> R) -> R {
        let mut map = self.map.lock().unwrap();
        if !map.contains_key(key) {
            let mut swept = self.swept.lock().unwrap();
            if swept.elapsed() >= (self.keep / 4).min(Duration::from_secs(60)) {
                map.retain(|_, e| !e.expired(self.keep, self.keep_uncertain));
                *swept = Instant::now();
            }
        }
        let e = map.entry(key.to_string()).or_insert_with(Execution::new);
        f(e)
    }

    fn read<R>(&self, key: &str, f: impl FnOnce(&Execution) -> R) -> Option<R> {
        self.map.lock().unwrap().get(key).map(f)
    }

    /// The lock that serializes CreateTasks of `key`.
    pub fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.with(key, |e| e.lock.clone())
    }

    /// The job this process knows `key` has.
    pub fn job(&self, key: &str) -> Option<ResourceMeta> {
        self.read(key, |e| e.job.clone()).flatten()
    }

    /// `key`'s job is known: what it was uncertain about is settled.
    pub fn set_job(&self, key: &str, meta: ResourceMeta) {
        self.with(key, |e| {
            e.job = Some(meta);
            e.uncertain = false;
            e.changed = Instant::now();
        })
    }

    pub fn mark_uncertain(&self, key: &str) {
        self.with(key, |e| {
            e.uncertain = true;
            e.changed = Instant::now();
        })
    }

    pub fn is_uncertain(&self, key: &str) -> bool {
        self.read(key, |e| e.uncertain).unwrap_or(false)
    }

    /// DeleteTask before the job exists.
    pub fn withdraw(&self, key: &str) {
        self.with(key, |e| {
            e.withdrawn = true;
            e.changed = Instant::now();
        })
    }

    pub fn is_withdrawn(&self, key: &str) -> bool {
        self.read(key, |e| e.withdrawn).unwrap_or(false)
    }

    /// Where this process's submit of `key` is, if it has one.
    pub fn progress(&self, key: &str) -> Option<Progress> {
        self.read(key, |e| e.submit.as_ref().map(|rx| rx.borrow().clone()))
            .flatten()
    }

    /// The key's submit: the running or done one, or a new one from `start` when there is none
    /// or the last failed (a takeover, or a CreateTask after a failure, tries again).
    pub fn submit_or_join(
        &self,
        key: &str,
        start: impl FnOnce() -> watch::Receiver<Progress>,
    ) -> watch::Receiver<Progress> {
        self.with(key, |e| {
            if let Some(rx) = &e.submit
                && !matches!(&*rx.borrow(), Progress::Failed { .. })
            {
                return rx.clone();
            }
            let rx = start();
            e.submit = Some(rx.clone());
            e.changed = Instant::now();
            rx
        })
    }

    /// How many are kept (a gauge of the service's metrics).
    pub fn count(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_holds_everything_of_an_execution_and_idle_ones_expire() {
        // Ages by sleeping, not by moving `changed` back: an Instant before the machine's boot
        // panics, and a fresh machine may have booted minutes ago.
        let keep = Duration::from_millis(40);
        let ex = Executions {
            keep_uncertain: keep * 4,
            ..Executions::new(keep)
        };
        let age = || std::thread::sleep(keep + Duration::from_millis(10));
        let lock = ex.lock("k1");
        ex.mark_uncertain("k1");
        ex.withdraw("k1");
        assert!(ex.is_uncertain("k1") && ex.is_withdrawn("k1"));
        assert_eq!(ex.count(), 1, "one entry per execution");
        ex.set_job(
            "k1",
            ResourceMeta::new("c", crate::slurmrestd::JobId(5), "j", "o", "e"),
        );
        assert!(!ex.is_uncertain("k1"), "a known job settles the doubt");
        assert_eq!(ex.job("k1").unwrap().job_id.0, 5);
        // Aged past keep: dropped when the next key comes, unless a CreateTask holds its lock.
        age();
        ex.lock("k2");
        assert!(ex.job("k1").is_some(), "its lock is held");
        drop(lock);
        std::thread::sleep(keep / 4 + Duration::from_millis(5)); // the next sweep is due
        ex.lock("k3");
        assert!(ex.job("k1").is_none());
        // A running submit keeps its entry too.
        let (_tx, rx) = watch::channel(Progress::Waiting {
            tries: 0,
            last_error: None,
            stall: Stall::Hiccup,
        });
        ex.submit_or_join("k4", || rx);
        // One whose submit may have made an unseen job stays keep_uncertain.
        ex.mark_uncertain("k6");
        age();
        ex.lock("k5");
        assert!(ex.progress("k4").is_some(), "its submit runs");
        assert!(
            ex.is_uncertain("k6"),
            "kept past keep: its next CreateTask must look again"
        );
        std::thread::sleep(keep * 4);
        ex.lock("k7");
        assert!(!ex.is_uncertain("k6"));
        assert!(ex.progress("k4").is_some());
    }
}
