//! Background transfers with a handle: progress, outcome, cancel.
//!
//! Uploading outputs can take longer than GetTask's 10 s deadline, so it runs as a tokio task the
//! service keeps a [`Transfer`] for. The outcome is *data* — `Failed(message)` for anything from a
//! missing output to an unreachable store — so the service can turn it into a terminal FAILED
//! state instead of returning an RPC error on every poll (the Python plugin's failure mode).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use super::error::{Result, StagingError};

#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
}

impl Progress {
    pub fn add_done(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
    pub fn set_total(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }
    /// `(bytes done, bytes total)`; total is 0 until the transfer knows it.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }
}

/// What a running transfer gets: where to report progress and how to learn it was cancelled.
#[derive(Debug, Clone)]
pub struct TransferCtl {
    pub progress: Arc<Progress>,
    cancel: watch::Receiver<bool>,
}

impl TransferCtl {
    /// A pair of controller and the sender that cancels it.
    pub fn new() -> (Self, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        (
            TransferCtl {
                progress: Arc::new(Progress::default()),
                cancel: rx,
            },
            tx,
        )
    }

    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves once cancelled; never resolves if the canceller is gone without cancelling.
    pub async fn cancelled(&self) {
        let mut rx = self.cancel.clone();
        if rx.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Err(Cancelled) if cancelled: a cheap check between steps.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(StagingError::Cancelled)
        } else {
            Ok(())
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransferOutcome<T> {
    Succeeded(T),
    /// A message for the task's FAILED state (names the output and the fix where it can).
    Failed(String),
    Cancelled,
}

/// The handle the service keeps for one background transfer. Dropping it does not stop the
/// transfer: call [`Transfer::cancel`] (DeleteTask does).
#[derive(Debug)]
pub struct Transfer<T> {
    progress: Arc<Progress>,
    cancel: watch::Sender<bool>,
    outcome: watch::Receiver<Option<TransferOutcome<T>>>,
}

impl<T: Clone + Send + Sync + 'static> Transfer<T> {
    /// Run `work` on the tokio runtime. A panic inside it becomes `Failed`, not a lost task.
    pub fn spawn<F, Fut>(work: F) -> Self
    where
        F: FnOnce(TransferCtl) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let (ctl, cancel) = TransferCtl::new();
        let progress = ctl.progress.clone();
        let cancelled = ctl.clone();
        let (tx, outcome) = watch::channel(None);
        let inner = tokio::spawn(work(ctl));
        tokio::spawn(async move {
            let result = match inner.await {
                Ok(Ok(v)) => TransferOutcome::Succeeded(v),
                Ok(Err(StagingError::Cancelled)) => TransferOutcome::Cancelled,
                Ok(Err(_)) if cancelled.is_cancelled() => TransferOutcome::Cancelled,
                Ok(Err(e)) => TransferOutcome::Failed(e.to_string()),
                Err(join) => {
                    tracing::error!(error = %join, "staging transfer task died");
                    TransferOutcome::Failed(format!(
                        "internal error in the connector's output transfer: {join}"
                    ))
                }
            };
            let _ = tx.send(Some(result));
        });
        Transfer {
            progress,
            cancel,
            outcome,
        }
    }

    /// `(bytes done, bytes total)`.
    pub fn progress(&self) -> (u64, u64) {
        self.progress.snapshot()
    }

    /// The outcome if finished; never blocks (GetTask calls this).
    pub fn outcome(&self) -> Option<TransferOutcome<T>> {
        self.outcome.borrow().clone()
    }

    pub async fn wait(&self) -> TransferOutcome<T> {
        let mut rx = self.outcome.clone();
        match rx.wait_for(|o| o.is_some()).await {
            Ok(v) => v.clone().expect("checked is_some"),
            // The sender lives in the spawned task, which always sends before ending; the
            // runtime shutting down is the only way here.
            Err(_) => TransferOutcome::Failed("the connector is shutting down".into()),
        }
    }

    /// Ask the transfer to stop; an upload in flight is aborted. Idempotent.
    pub fn cancel(&self) {
        let _ = self.cancel.send(true);
    }
}
