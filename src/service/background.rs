//! Background work per key: started once, joined by every later caller, awaited with a budget,
//! and forgotten a while after it settled.
//!
//! GetTask has 10 s; reading a native task's result from an object store, or uploading a job's
//! outputs, can take longer. Both run as tokio tasks kept here by job, so each GetTask joins the
//! same work instead of starting it again, waits at most its budget, and answers "still going"
//! otherwise. What bounds the map: an entry is dropped once it has settled and no caller has
//! read it for `keep` (the deployment's `terminal_ttl`, after which the tracker forgets the job
//! too), checked whenever new work is started. A caller that comes back later starts the work
//! afresh: both kinds are idempotent, only slower.
//!
//! Hand-written rather than a cache crate (moka, mini-moka): what decides eviction is the
//! work's own state (running work is never dropped, however old), and callers need the entry
//! replaced in place when its work failed and may be retried; a TTL cache has neither.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A handle to one piece of background work.
pub trait Work: Clone {
    type Outcome: Clone;
    /// The outcome once settled; never blocks.
    fn outcome(&self) -> Option<Self::Outcome>;
    /// Resolves when the work settles (at once if it has).
    fn settled(&self) -> impl Future<Output = ()> + Send;
}

/// Work by key (see the module's doc).
pub struct Background<K, W> {
    entries: Mutex<HashMap<K, Kept<W>>>,
    keep: Duration,
    /// When settled entries were last swept: at most every quarter of `keep` (a minute at
    /// most), not at every new key (one per finished job).
    swept: Mutex<Instant>,
}

struct Kept<W> {
    work: W,
    read_at: Instant,
}

impl<K, W> std::fmt::Debug for Background<K, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, W: Work> Background<K, W> {
    /// Settled work unread for `keep` is dropped.
    pub fn new(keep: Duration) -> Self {
        Background {
            entries: Mutex::new(HashMap::new()),
            keep,
            swept: Mutex::new(Instant::now()),
        }
    }

    /// The key's work, read now. `start` is called with the key's current work (if any) and
    /// returns new work to put in its place (`None`: keep what is there). It must return work
    /// when there is none.
    pub fn start_or_join(&self, key: K, start: impl FnOnce(Option<&W>) -> Option<W>) -> W {
        let mut entries = self.entries.lock().unwrap();
        let now = Instant::now();
        let fresh = match entries.get(&key) {
            Some(k) => start(Some(&k.work)),
            None => {
                // Only when something is added can the map grow: evict then.
                let keep = self.keep;
                let mut swept = self.swept.lock().unwrap();
                if swept.elapsed() >= (keep / 4).min(Duration::from_secs(60)) {
                    entries.retain(|_, k| k.work.outcome().is_none() || k.read_at.elapsed() < keep);
                    *swept = Instant::now();
                }
                Some(start(None).expect("start_or_join: no work for a new key"))
            }
        };
        if let Some(work) = fresh {
            entries.insert(key.clone(), Kept { work, read_at: now });
        }
        let kept = entries.get_mut(&key).expect("inserted above");
        kept.read_at = now;
        kept.work.clone()
    }

    /// The key's work if there is any (not counted as a read).
    pub fn get(&self, key: &K) -> Option<W> {
        self.entries
            .lock()
            .unwrap()
            .get(key)
            .map(|k| k.work.clone())
    }

    /// How many are kept (a gauge of the service's metrics).
    #[allow(clippy::len_without_is_empty)] // a gauge's count, never asked whether empty
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

/// Waits up to `budget` for `work` to settle; its outcome if it did.
pub async fn wait<W: Work>(work: &W, budget: Duration) -> Option<W::Outcome> {
    if let Some(o) = work.outcome() {
        return Some(o);
    }
    let _ = tokio::time::timeout(budget, work.settled()).await;
    work.outcome()
}

/// Work whose outcome arrives on a watch channel (`None` until settled).
impl<T: Clone + Send + Sync> Work for tokio::sync::watch::Receiver<Option<T>> {
    type Outcome = T;

    fn outcome(&self) -> Option<T> {
        self.borrow().clone()
    }

    fn settled(&self) -> impl Future<Output = ()> + Send {
        let mut rx = self.clone();
        async move {
            // Err: the sender is gone without a word (the runtime shutting down).
            let _ = rx.wait_for(Option::is_some).await;
        }
    }
}

/// An output transfer (staging's handle: progress, outcome, cancel).
impl<T: Clone + Send + Sync + 'static> Work for std::sync::Arc<crate::staging::Transfer<T>> {
    type Outcome = crate::staging::TransferOutcome<T>;

    fn outcome(&self) -> Option<Self::Outcome> {
        crate::staging::Transfer::outcome(self)
    }

    fn settled(&self) -> impl Future<Output = ()> + Send {
        let t = self.clone();
        async move {
            t.wait().await;
        }
    }
}

/// Spawns `work` on the runtime; the receiver is its handle.
pub fn spawn<T, F>(work: F) -> tokio::sync::watch::Receiver<Option<T>>
where
    T: Clone + Send + Sync + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let (tx, rx) = tokio::sync::watch::channel(None);
    tokio::spawn(async move {
        let _ = tx.send(Some(work.await));
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn joins_running_work_and_forgets_settled_work_nobody_reads() {
        let bg: Background<u32, tokio::sync::watch::Receiver<Option<u32>>> =
            Background::new(Duration::from_millis(50));
        let (tx, rx) = tokio::sync::watch::channel(None);
        let first = bg.start_or_join(1, |_| Some(rx));
        // A second caller joins: its `start` gets the running work and starts nothing.
        let joined = bg.start_or_join(1, |w| {
            assert!(w.is_some());
            None
        });
        assert_eq!(wait(&joined, Duration::from_millis(10)).await, None);
        tx.send(Some(7)).unwrap();
        assert_eq!(wait(&first, Duration::from_secs(1)).await, Some(7));
        // Running work is never evicted, however old; settled work after `keep` unread.
        let (_running_tx, running) = tokio::sync::watch::channel(None);
        bg.start_or_join(2, |_| Some(running));
        tokio::time::sleep(Duration::from_millis(80)).await; // past keep, and past a quarter of it
        bg.start_or_join(3, |_| Some(spawn(async { 3 })));
        assert!(bg.get(&1).is_none(), "settled and unread past keep");
        assert!(bg.get(&2).is_some(), "still running");
        assert_eq!(bg.len(), 2);
    }

    #[tokio::test]
    async fn failed_work_is_replaced_in_place() {
        let bg = Background::new(Duration::from_secs(60));
        let first = bg.start_or_join("k", |_| Some(spawn(async { Err::<u8, _>("blip") })));
        assert_eq!(
            wait(&first, Duration::from_secs(1)).await,
            Some(Err("blip"))
        );
        let again = bg.start_or_join("k", |w| match w.and_then(|w| w.outcome()) {
            Some(Err(_)) => Some(spawn(async { Ok(1) })),
            _ => None,
        });
        assert_eq!(wait(&again, Duration::from_secs(1)).await, Some(Ok(1)));
        assert_eq!(bg.len(), 1);
    }
}
