//! The long-running tasks of `serve` — each cluster's poll loop and gauges, the job-file sweepers,
//! the certificate reloader — registered by name and stopped together by one cancellation token
//! (omicron's `app/background` is the model, much smaller). Start-up logs what runs; shutdown
//! waits for each by name and says which one it had to abort or which one panicked.

use std::future::Future;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub(super) struct Background {
    stop: CancellationToken,
    tasks: Vec<(String, JoinHandle<()>)>,
}

impl Background {
    /// Resolves once [`Background::stop`] has begun: what each task is given to know when to end
    /// (the metrics listener, outside the registry because its error matters, takes one too).
    pub(super) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        self.stop.clone().cancelled_owned()
    }

    /// Starts `task` under `name` (`tracker[hpc1]`): made from the stop signal it must obey.
    pub(super) fn spawn<F, T>(&mut self, name: impl Into<String>, task: T)
    where
        T: FnOnce(tokio_util::sync::WaitForCancellationFutureOwned) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = tokio::spawn(task(self.stop.clone().cancelled_owned()));
        self.tasks.push((name.into(), handle));
    }

    /// The names of the tasks registered, in start order.
    pub(super) fn names(&self) -> Vec<&str> {
        self.tasks.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Tells every task to stop, then waits for each until `deadline`; one still running then is
    /// aborted (a poll loop stuck in a slow slurmrestd request would only have refreshed a
    /// cache), one that panicked is logged. Both by name.
    pub(super) async fn stop(self, deadline: Instant) {
        self.stop.cancel();
        for (name, mut handle) in self.tasks {
            match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.is_panic() => {
                    tracing::error!(task = %name, "background task panicked before shutdown")
                }
                Ok(Err(_)) => {}
                Err(_) => {
                    tracing::warn!(task = %name, "background task still running at the stop deadline: aborted");
                    handle.abort();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn stop_ends_the_obedient_and_aborts_the_stuck_by_the_deadline() {
        let mut b = Background::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        b.spawn("obedient", |stop| async move {
            stop.await;
            let _ = tx.send(());
        });
        let stuck_dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct OnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let guard = OnDrop(stuck_dropped.clone());
        b.spawn("stuck", |_stop| async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        assert_eq!(b.names(), ["obedient", "stuck"]);
        let started = Instant::now();
        b.stop(Instant::now() + Duration::from_millis(200)).await;
        assert!(rx.await.is_ok(), "the obedient task saw the stop");
        assert!(started.elapsed() < Duration::from_secs(2));
        // An aborted task is dropped at its next poll; give the runtime that turn.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            stuck_dropped.load(std::sync::atomic::Ordering::SeqCst),
            "the stuck task was aborted"
        );
    }
}
