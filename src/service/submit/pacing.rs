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
    /// slurmctld refused the submit for want of room (`MaxJobCount` reached): until a submit
    /// gets through again, one probe per [`FULL_PROBE_EVERY`] goes out and the other submits
    /// wait ([`Pacer::acquire`]), so a full cluster costs slurmctld one refused RPC every few
    /// seconds, not one per waiting task per retry.
    Full,
}

/// While the cluster is full, how often one submit tries whether there is room again: jobs
/// leave slurmctld `MinJobAge` (default 300 s) after they end, so a few seconds late is nothing.
pub const FULL_PROBE_EVERY: Duration = Duration::from_secs(5);

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
    /// Submits since start that slurmctld refused for want of room (`MaxJobCount`).
    pub full_refusals: u64,
    /// The last submit was refused for want of room, and none got through since.
    pub full: bool,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    waiting: usize,
    last_cut: Option<Instant>,
    throttled: u64,
    outages: u64,
    full_refusals: u64,
    /// While the cluster is full: when the next probe may go out.
    full_until: Option<Instant>,
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
    /// Time spent meanwhile on no call to slurmctld ([`Permit::excuse`]), in nanoseconds.
    excused: std::sync::atomic::AtomicU64,
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
                full_refusals: 0,
                full_until: None,
            }),
            freed: Notify::new(),
        })
    }

    /// Waits for a slot under the current limit (first come, first served by `Notify`'s order);
    /// while the cluster is full, for the next probe's turn ([`Pace::Full`]).
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        self.state.lock().unwrap().waiting += 1;
        let mut waiter = Waiting(Some(self));
        loop {
            let freed = self.freed.notified();
            let mut probe_at = None;
            {
                let mut st = self.state.lock().unwrap();
                let now = Instant::now();
                match st.full_until {
                    Some(at) if at > now => probe_at = Some(at),
                    // This one probes; the next waits its turn (or for the probe's success).
                    Some(_) => st.full_until = Some(now + FULL_PROBE_EVERY),
                    None => {}
                }
                if probe_at.is_none() && st.in_flight < st.limit.floor().max(1.0) as usize {
                    st.in_flight += 1;
                    st.waiting -= 1;
                    waiter.0 = None;
                    return Permit {
                        pacer: self.clone(),
                        started: Instant::now(),
                        excused: Default::default(),
                        outcome: None,
                    };
                }
            }
            match probe_at {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at.into(), freed).await;
                }
                None => freed.await,
            }
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
            full_refusals: st.full_refusals,
            full: st.full_until.is_some(),
        }
    }

    fn finish(&self, took: Duration, outcome: Pace, learned: bool) {
        let mut st = self.state.lock().unwrap();
        st.in_flight -= 1;
        let outcome = if took >= SLOW && !matches!(outcome, Pace::Outage | Pace::Full) {
            Pace::Throttled
        } else {
            outcome
        };
        // Only an answer that got through says there is room again: not an outage, nor a
        // permit given back unused (a withdrawn task's probe).
        if outcome == Pace::Prompt && learned && st.full_until.take().is_some() {
            tracing::info!("slurmctld accepts submits again (MaxJobCount no longer reached)");
        }
        match outcome {
            Pace::Outage => st.outages += 1,
            Pace::Full => {
                st.full_refusals += 1;
                // Room comes back a job at a time (each leaves slurmctld `MinJobAge` after it
                // ended): once a probe gets through, the waiters go one at a time, growing
                // back as they get through, rather than all at once into a few free places
                // (where nearly all of them would be refused again).
                st.limit = 1.0;
                if st.full_until.is_none() {
                    tracing::warn!(
                        probe_every_s = FULL_PROBE_EVERY.as_secs(),
                        "slurmctld refuses submits: its MaxJobCount is reached; submits wait, \
                         one probe at a time, until jobs leave it"
                    );
                    st.full_until = Some(Instant::now() + FULL_PROBE_EVERY);
                }
            }
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

    /// `d` of the permit's time went on no call to slurmctld (a duplicate check waiting for
    /// its turn): not counted in how long the call took, which would read as throttling.
    pub fn excuse(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.excused
            .fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let outcome = self.outcome.take();
        let excused = Duration::from_nanos(*self.excused.get_mut());
        self.pacer.finish(
            self.started.elapsed().saturating_sub(excused),
            outcome.unwrap_or(Pace::Prompt),
            outcome.is_some(),
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
    async fn time_a_permit_was_excused_does_not_read_as_throttling() {
        let p = Pacer::new(8);
        // Held 3 s, 2.5 of them waiting for a duplicate check's turn: a prompt answer.
        let mut permit = p.acquire().await;
        permit.started = Instant::now() - 3 * SLOW / 2;
        permit.excuse(5 * SLOW / 4);
        permit.done(Pace::Prompt);
        assert_eq!((p.view().limit, p.view().throttled), (8, 0));
        // Not excused: late.
        let mut permit = p.acquire().await;
        permit.started = Instant::now() - 3 * SLOW / 2;
        permit.done(Pace::Prompt);
        assert_eq!((p.view().limit, p.view().throttled), (4, 1));
    }

    /// A full cluster (MaxJobCount) lets one probe out per [`FULL_PROBE_EVERY`]; the first
    /// submit that gets through opens the gate, one submit at a time at first; a permit given
    /// back unused (its task withdrawn) says nothing about room.
    #[tokio::test]
    async fn a_full_cluster_lets_one_probe_out_at_a_time_until_a_submit_gets_through() {
        let p = Pacer::new(4);
        p.acquire().await.done(Pace::Full);
        let v = p.view();
        assert!(v.full && v.full_refusals == 1 && v.limit == 1, "{v:?}");
        let closed = tokio::time::timeout(Duration::from_millis(50), p.acquire()).await;
        assert!(
            closed.is_err(),
            "no submit goes out before the next probe's time"
        );
        // The probe's time comes: one goes out, the next waits for the one after.
        p.state.lock().unwrap().full_until = Some(Instant::now());
        let probe = p.acquire().await;
        let p2 = p.clone();
        let next = tokio::spawn(async move { p2.acquire().await.done(Pace::Prompt) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!next.is_finished(), "a second probe waits its turn");
        assert_eq!(p.view().waiting, 1);
        // Still full: the gate stays closed, counted again.
        probe.done(Pace::Full);
        assert_eq!(p.view().full_refusals, 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!next.is_finished());
        // Unused permits do not open it.
        p.state.lock().unwrap().full_until = Some(Instant::now());
        drop(p.acquire().await);
        assert!(
            p.view().full,
            "a permit given back unused says nothing about room"
        );
        // A submit that gets through opens it for every waiter at once.
        p.state.lock().unwrap().full_until = Some(Instant::now());
        p.acquire().await.done(Pace::Prompt);
        tokio::time::timeout(Duration::from_secs(1), next)
            .await
            .expect("the waiter goes once a submit got through")
            .unwrap();
        let v = p.view();
        // One at a time after a full spell, growing back as submits get through.
        assert!(!v.full && v.limit == 2 && v.throttled == 0, "{v:?}");
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
