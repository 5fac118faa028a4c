//! Admission for a drain: the CreateTasks of the process, and on each cluster the submits' held
//! submit / check / release, counted in flight so that a shutdown (`submit/deferred.rs`, `hand_off`) refuses new
//! work and waits for what was admitted.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

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
