//! Submits paced to what the cluster accepts, instead of timed out.
//!
//! slurmctld can rate-limit each user's RPCs (`SlurmctldParameters=rl_enable`: a token bucket,
//! 30 tokens refilled at 2 per second by default). Over the limit it answers BACKOFF, and
//! slurmrestd sleeps and retries on its own: the HTTP answer comes late, or as a 502, while the
//! job may still be created afterwards. Firing every CreateTask's submit at once therefore makes
//! most of them time out on the connector's side while slurmrestd goes on creating them.
//!
//! So each cluster's submits (the whole held-submit / check / release of `submit_once`) go
//! through a [`Pacer`]: an AIMD limit on how many run at once, as TCP paces a congested link.
//! An answer slower than [`SLOW`], a timeout or a 5xx halves the limit (at most once per
//! [`SLOW`], so one burst of late answers sent under the old limit counts once); each prompt
//! answer adds `1/limit`. On a cluster without rate limiting the limit sits at its ceiling and
//! costs nothing; on a throttled one it settles where answers come back promptly.
//! Hand-written: no crate paces by answer latency (tower's `ConcurrencyLimit` is a fixed limit,
//! governor a fixed rate, neither knows slurmctld's bucket).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// An answer slower than this means slurmctld is pushing back (its own RPCs take milliseconds;
/// slurmrestd's BACKOFF sleeps are seconds).
pub const SLOW: Duration = Duration::from_secs(2);

/// How one paced call went, for the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Answered promptly (success, or an error that says nothing about load).
    Prompt,
    /// Late, timed out, or a 5xx: the cluster is over its rate.
    Throttled,
    /// slurmctld (or slurmrestd) cannot be reached: an outage, not a rate. Leaves the limit as
    /// it is, however late the answer came (slurmrestd answers 1800 only after a 10 s connect
    /// timeout): halving it would make submits creep back for minutes after the controller
    /// returned, as seen once ("slurmctld is throttling submits; fewer at once limit=1.0").
    Outage,
}

/// A view for metrics and messages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaceView {
    pub limit: usize,
    pub in_flight: usize,
    pub waiting: usize,
    /// Throttling signals seen since start.
    pub throttled: u64,
    /// Answers since start that said slurmctld or slurmrestd was unreachable.
    pub outages: u64,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    waiting: usize,
    last_cut: Option<Instant>,
    throttled: u64,
    outages: u64,
}

#[derive(Debug)]
pub struct Pacer {
    max: std::sync::atomic::AtomicUsize,
    state: Mutex<State>,
    freed: Notify,
}

/// A slot to run one paced call in; give it back with [`Permit::done`] (dropping it counts as
/// prompt, so a cancelled call never shrinks the limit).
pub struct Permit {
    pacer: Arc<Pacer>,
    started: Instant,
    outcome: Option<Pace>,
}

impl Pacer {
    pub fn new(max: usize) -> Arc<Pacer> {
        let max = max.max(1);
        Arc::new(Pacer {
            max: max.into(),
            state: Mutex::new(State {
                limit: max as f64,
                in_flight: 0,
                waiting: 0,
                last_cut: None,
                throttled: 0,
                outages: 0,
            }),
            freed: Notify::new(),
        })
    }

    /// Waits for a slot under the current limit (first come, first served by `Notify`'s order).
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        self.state.lock().unwrap().waiting += 1;
        let mut waiter = Waiting(Some(self));
        loop {
            let freed = self.freed.notified();
            {
                let mut st = self.state.lock().unwrap();
                if st.in_flight < st.limit.floor().max(1.0) as usize {
                    st.in_flight += 1;
                    st.waiting -= 1;
                    waiter.0 = None;
                    return Permit {
                        pacer: self.clone(),
                        started: Instant::now(),
                        outcome: None,
                    };
                }
            }
            freed.await;
        }
    }

    /// The ceiling (the deployment's `submits_in_flight`); the limit starts there.
    pub fn set_max(&self, max: usize) {
        let max = max.max(1);
        self.max.store(max, std::sync::atomic::Ordering::Relaxed);
        self.state.lock().unwrap().limit = max as f64;
        self.freed.notify_waiters();
    }

    pub fn view(&self) -> PaceView {
        let st = self.state.lock().unwrap();
        PaceView {
            limit: st.limit.floor().max(1.0) as usize,
            in_flight: st.in_flight,
            waiting: st.waiting,
            throttled: st.throttled,
            outages: st.outages,
        }
    }

    fn finish(&self, took: Duration, outcome: Pace) {
        let mut st = self.state.lock().unwrap();
        st.in_flight -= 1;
        let outcome = if took >= SLOW && outcome != Pace::Outage {
            Pace::Throttled
        } else {
            outcome
        };
        match outcome {
            Pace::Outage => st.outages += 1,
            Pace::Throttled => {
                st.throttled += 1;
                if st.last_cut.is_none_or(|t| t.elapsed() >= SLOW) {
                    st.limit = (st.limit / 2.0).max(1.0);
                    st.last_cut = Some(Instant::now());
                    tracing::info!(
                        limit = st.limit.floor(),
                        "slurmctld is throttling submits; fewer at once"
                    );
                }
            }
            Pace::Prompt => {
                let max = self.max.load(std::sync::atomic::Ordering::Relaxed) as f64;
                st.limit = (st.limit + 1.0 / st.limit).min(max)
            }
        }
        drop(st);
        // Every waiter looks again: the limit may have grown by one or shrunk.
        self.freed.notify_waiters();
    }
}

/// Un-counts a waiter whose `acquire` was dropped before it got a slot.
struct Waiting<'a>(Option<&'a Arc<Pacer>>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            p.state.lock().unwrap().waiting -= 1;
        }
    }
}

impl Permit {
    pub fn done(mut self, outcome: Pace) {
        self.outcome = Some(outcome);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.pacer.finish(
            self.started.elapsed(),
            self.outcome.take().unwrap_or(Pace::Prompt),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn throttling_halves_the_limit_once_per_burst_and_prompt_answers_grow_it_back() {
        let p = Pacer::new(8);
        assert_eq!(p.view().limit, 8);
        let permits: Vec<Permit> = futures::future::join_all((0..8).map(|_| p.acquire())).await;
        assert_eq!(p.view().in_flight, 8);
        // A burst of late answers sent under the old limit halves it once, not to 1.
        for permit in permits {
            permit.done(Pace::Throttled);
        }
        assert_eq!(p.view().limit, 4);
        assert_eq!(p.view().throttled, 8);
        for _ in 0..40 {
            p.acquire().await.done(Pace::Prompt);
        }
        assert_eq!(p.view().limit, 8, "grows back to its ceiling, not past it");
    }

    #[tokio::test]
    async fn an_outage_neither_shrinks_nor_grows_the_limit_however_late_it_answered() {
        let p = Pacer::new(8);
        let permits: Vec<Permit> = futures::future::join_all((0..8).map(|_| p.acquire())).await;
        // slurmrestd answers 1800 after its 10 s connect timeout: late, but no throttling.
        for mut permit in permits {
            permit.started = Instant::now() - 5 * SLOW;
            permit.done(Pace::Outage);
        }
        let v = p.view();
        assert_eq!((v.limit, v.throttled, v.outages), (8, 0, 8));
        // The same lateness in a plain answer is throttling.
        let mut late = p.acquire().await;
        late.started = Instant::now() - SLOW;
        late.done(Pace::Prompt);
        assert_eq!(p.view().limit, 4);
    }

    #[tokio::test]
    async fn a_waiter_gets_a_slot_when_one_is_freed_and_a_dropped_waiter_is_uncounted() {
        let p = Pacer::new(1);
        let first = p.acquire().await;
        let p2 = p.clone();
        let second = tokio::spawn(async move { p2.acquire().await.done(Pace::Prompt) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(p.view().waiting, 1);
        drop(first);
        second.await.unwrap();
        assert_eq!(p.view().in_flight, 0);
        let held = p.acquire().await;
        let gave_up = tokio::time::timeout(Duration::from_millis(20), p.acquire()).await;
        assert!(gave_up.is_err());
        assert_eq!(p.view().waiting, 0, "a dropped acquire is not left counted");
        drop(held);
    }
}
