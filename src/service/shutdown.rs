//! Graceful shutdown: what SIGTERM (or Ctrl-C) changes while the process drains.
//!
//! The order, in `serve`: health turns NOT_SERVING for every service (readiness probes and load
//! balancers stop sending work), CreateTask is refused with UNAVAILABLE (the backend retries it,
//! and a new connection reaches another replica), the CreateTasks already in flight run to their
//! end (submit held, duplicate check, release: a half-done submit would leave a held job for a
//! retry to release), then the gRPC server stops accepting, sends GOAWAY and lets the remaining
//! calls finish. All of it within the drain deadline (`FLYTE_SLURM_SHUTDOWN_GRACE`); past it the
//! process exits anyway, and what it left is what a SIGKILL leaves (the duplicate-job protocol
//! covers that: a held job is released by the retried CreateTask).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tonic::Status;

/// Admission of CreateTasks, and the count of those in flight.
#[derive(Default)]
pub struct Drain {
    draining: AtomicBool,
    creates: AtomicUsize,
    idle: Notify,
}

/// Held by one CreateTask from admission to its end (answered, failed, or its caller gone).
pub struct CreateInFlight<'a>(&'a Drain);

impl Drop for CreateInFlight<'_> {
    fn drop(&mut self) {
        if self.0.creates.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drain {
    /// Admits a CreateTask, or refuses it once the process is draining (before anything was
    /// looked up or submitted, so the retry elsewhere is the only attempt).
    pub fn admit_create(&self) -> Result<CreateInFlight<'_>, Status> {
        // Counted first, then checked: `begin` sets the flag and then reads the count, so a call
        // is either refused here or seen (and waited for) there.
        self.creates.fetch_add(1, Ordering::SeqCst);
        let guard = CreateInFlight(self);
        if self.draining.load(Ordering::SeqCst) {
            return Err(Status::unavailable(
                "this connector replica is shutting down; nothing was submitted: retry \
                 CreateTask (another replica answers it)",
            ));
        }
        Ok(guard)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// From now on CreateTask is refused. Returns how many are in flight.
    pub fn begin(&self) -> usize {
        self.draining.store(true, Ordering::SeqCst);
        self.creates.load(Ordering::SeqCst)
    }

    /// Resolves once no admitted CreateTask is in flight.
    pub async fn creates_done(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read: a last guard dropped in between still wakes us.
            idle.as_mut().enable();
            if self.creates.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn refuses_after_begin_and_waits_for_those_admitted() {
        let d = Arc::new(Drain::default());
        let first = d.admit_create().expect("admitted before the signal");
        assert_eq!(d.begin(), 1);
        let refused = d.admit_create().err().expect("refused while draining");
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert!(refused.message().contains("nothing was submitted"));
        // A refusal does not count as in flight.
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.creates_done().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "one CreateTask is still in flight");
        drop(first);
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("done once the last one ended")
            .unwrap();
    }

    #[tokio::test]
    async fn nothing_in_flight_is_done_at_once() {
        let d = Drain::default();
        assert_eq!(d.begin(), 0);
        tokio::time::timeout(Duration::from_millis(100), d.creates_done())
            .await
            .expect("no wait");
    }
}
