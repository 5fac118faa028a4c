//! Graceful shutdown: what SIGTERM (or Ctrl-C) changes while the process drains.
//!
//! The order, in `serve`: health turns NOT_SERVING for every service (readiness probes and load
//! balancers stop sending work); a new CreateTask submits nothing here and is handed to another
//! replica ([`hand_off`]: not an error, which would cost the task an attempt); the CreateTasks
//! already in flight run to their end (submit held, duplicate check, release: a half-done submit
//! would leave a held job for a retry to release); then the gRPC server stops accepting, sends
//! GOAWAY and lets the remaining calls finish. Submits that outlive their CreateTask (paced,
//! `deferred.rs`) are waited for the same way while in their held submit / check / release, and
//! none begins after the signal (a deferred one is then made by another replica: the takeover of
//! `deferred.rs`). All of it within the drain deadline (`FLYTE_SLURM_SHUTDOWN_GRACE`); past it
//! the process exits anyway, and what it left is what a SIGKILL leaves (the duplicate-job
//! protocol covers that: a held job is released by the retried CreateTask or the takeover).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tonic::Status;

use crate::slurmrestd::JobDescription;

use super::cluster::ClusterRuntime;
use super::deferred::{TAKE_OVER_AFTER, now_unix};
use super::meta::{DeferredSubmit, ResourceMeta};

/// Admission to work a shutdown must let finish (CreateTasks; on each cluster, the submits'
/// held-submit / check / release), and the count of it in flight. Closed at the signal: nothing
/// new enters, what is in is waited for.
#[derive(Default)]
pub struct Gate {
    closed: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
}

/// Held from admission to the end of the work (answered, failed, or its caller gone).
pub struct InFlight<'a>(&'a Gate);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Gate {
    /// In, or `None` once closed.
    pub fn enter(&self) -> Option<InFlight<'_>> {
        // Counted first, then checked: `close` sets the flag and then reads the count, so work
        // is either refused here or seen (and waited for) there.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(self);
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        Some(guard)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// From now on nothing enters. Returns how much is in flight.
    pub fn close(&self) -> usize {
        self.closed.store(true, Ordering::SeqCst);
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Resolves once nothing admitted is in flight.
    pub async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read: a last guard dropped in between still wakes us.
            idle.as_mut().enable();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// CreateTask while shutting down: nothing is submitted here (a submit begun now could be cut
/// half done), and the answer is not an error either (Flyte's backend spends one of the task's
/// retries on a CreateTask error: `deferred.rs`). It is a deferred meta already past the takeover
/// age, so the first replica that sees it in a GetTask, once the backend's connection has moved
/// off this one, submits it (the duplicate check keeps that to one job). A task with its own
/// slurmrestd token can only be submitted by a replica holding the token: that one is refused
/// with UNAVAILABLE (nothing submitted), which the backend retries.
pub fn hand_off(
    rt: &ClusterRuntime,
    key: &str,
    job: &JobDescription,
    template: ResourceMeta,
    own_credentials: bool,
) -> Result<Vec<u8>, Status> {
    if own_credentials {
        return Err(Status::unavailable(
            "this connector replica is shutting down; nothing was submitted: retry CreateTask \
             (another replica answers it)",
        ));
    }
    tracing::info!(cluster = %rt.cfg.name, key, "shutting down: CreateTask answered with a deferred meta that another replica submits");
    let mut m = template;
    m.deferred = Some(Box::new(DeferredSubmit {
        key: key.to_string(),
        at: now_unix() - TAKE_OVER_AFTER.as_secs() as i64,
        job: job.clone(),
        own_credentials: false,
    }));
    Ok(m.encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn refuses_after_begin_and_waits_for_those_admitted() {
        let d = Arc::new(Gate::default());
        let first = d.enter().expect("admitted before the signal");
        assert_eq!(d.close(), 1);
        assert!(d.enter().is_none(), "nothing enters once closed");
        // A refusal does not count as in flight.
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.idle().await }
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
        let d = Gate::default();
        assert_eq!(d.close(), 0);
        assert!(d.enter().is_none(), "closed");
        tokio::time::timeout(Duration::from_millis(100), d.idle())
            .await
            .expect("no wait");
    }
}
