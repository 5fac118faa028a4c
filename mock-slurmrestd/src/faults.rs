//! Faults on demand: latency, injected 5xx answers, dropped connections, token rejection,
//! "controller down" and a slow or unreachable slurmdbd. Set at start (CLI / `MockConfig`),
//! through [`Faults`] (the handle) or `POST /mock/faults`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

/// What to break. `Default` breaks nothing. Every field is optional in the `/mock/faults` JSON.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Added to every Slurm request (not `/mock/...`).
    pub latency_ms: u64,
    /// Fraction (0..=1) of requests answered with one of `error_statuses` instead of the real answer.
    pub error_rate: f64,
    /// The next N requests get an injected error status (counts down; tried before `error_rate`).
    pub fail_next: u32,
    /// Statuses for injected errors, picked at random. Empty: 500, 502, 503.
    pub error_statuses: Vec<u16>,
    /// Fraction (0..=1) of requests whose connection is closed without any answer.
    pub drop_rate: f64,
    /// The next N requests get their connection dropped (counts down).
    pub drop_next: u32,
    /// Every token is rejected like an expired one (511 / 1007, 502 / 7000 on slurmdb paths).
    pub reject_tokens: bool,
    /// The next N authenticated requests get their token rejected (counts down): lets a test check
    /// that a client re-mints once.
    pub reject_next_tokens: u32,
    /// slurmctld is unreachable for this many seconds from the moment the faults are set.
    pub controller_down_secs: u64,
    /// Extra latency on slurmdb paths only (a slow slurmdbd).
    pub slurmdbd_latency_ms: u64,
    /// slurmdbd unreachable: slurmdb paths answer 502 / 7000.
    pub slurmdbd_down: bool,
    /// Only these operations are affected by error/drop/latency faults (empty: all). Operation names
    /// as in the stats: submit, job_get, job_delete, jobs_state, jobs, ping, diag, slurmdb_job,
    /// slurmdb_jobs.
    pub operations: Vec<String>,
}

impl FaultConfig {
    fn applies_to(&self, operation: &str) -> bool {
        self.operations.is_empty() || self.operations.iter().any(|o| o == operation)
    }
}

#[derive(Default)]
struct State {
    cfg: FaultConfig,
    controller_down_until: Option<Instant>,
}

/// The live fault settings shared by the server and whoever holds the handle.
#[derive(Default)]
pub struct Faults {
    state: Mutex<State>,
}

/// What the front door should do with one request, decided once per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Injected {
    None,
    Drop,
    Status(u16),
}

impl Faults {
    pub fn new(cfg: FaultConfig) -> Self {
        let f = Faults::default();
        f.set(cfg);
        f
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replace all faults. `controller_down_secs` starts counting now.
    pub fn set(&self, cfg: FaultConfig) {
        let mut st = self.lock();
        st.controller_down_until = (cfg.controller_down_secs > 0)
            .then(|| Instant::now() + Duration::from_secs(cfg.controller_down_secs));
        st.cfg = cfg;
    }

    /// Remove every fault.
    pub fn clear(&self) {
        self.set(FaultConfig::default());
    }

    /// The current settings (counters such as `fail_next` show what is left).
    pub fn get(&self) -> FaultConfig {
        self.lock().cfg.clone()
    }

    /// Make slurmctld unreachable for `d` from now, keeping the other faults.
    pub fn controller_down_for(&self, d: Duration) {
        let mut st = self.lock();
        st.controller_down_until = Some(Instant::now() + d);
        st.cfg.controller_down_secs = d.as_secs().max(1);
    }

    pub fn controller_down(&self) -> bool {
        let mut st = self.lock();
        match st.controller_down_until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                st.controller_down_until = None;
                st.cfg.controller_down_secs = 0;
                false
            }
            None => false,
        }
    }

    /// Delay to add before answering `operation`.
    pub fn latency(&self, operation: &str, slurmdb: bool) -> Duration {
        let st = self.lock();
        let mut ms = if st.cfg.applies_to(operation) {
            st.cfg.latency_ms
        } else {
            0
        };
        if slurmdb {
            ms += st.cfg.slurmdbd_latency_ms;
        }
        Duration::from_millis(ms)
    }

    /// Decide whether this request is dropped or answered with an injected status.
    pub fn inject(&self, operation: &str) -> Injected {
        let mut st = self.lock();
        if !st.cfg.applies_to(operation) {
            return Injected::None;
        }
        if st.cfg.drop_next > 0 {
            st.cfg.drop_next -= 1;
            return Injected::Drop;
        }
        let mut rng = rand::rng();
        if st.cfg.drop_rate > 0.0 && rng.random::<f64>() < st.cfg.drop_rate {
            return Injected::Drop;
        }
        let pick = |rng: &mut rand::rngs::ThreadRng, statuses: &[u16]| -> u16 {
            const DEFAULT: [u16; 3] = [500, 502, 503];
            let list = if statuses.is_empty() {
                &DEFAULT[..]
            } else {
                statuses
            };
            list[rng.random_range(0..list.len())]
        };
        if st.cfg.fail_next > 0 {
            st.cfg.fail_next -= 1;
            return Injected::Status(pick(&mut rng, &st.cfg.error_statuses));
        }
        if st.cfg.error_rate > 0.0 && rng.random::<f64>() < st.cfg.error_rate {
            return Injected::Status(pick(&mut rng, &st.cfg.error_statuses));
        }
        Injected::None
    }

    /// True when this (otherwise valid) token must be rejected.
    pub fn reject_token(&self) -> bool {
        let mut st = self.lock();
        if st.cfg.reject_tokens {
            return true;
        }
        if st.cfg.reject_next_tokens > 0 {
            st.cfg.reject_next_tokens -= 1;
            return true;
        }
        false
    }

    pub fn slurmdbd_down(&self) -> bool {
        self.lock().cfg.slurmdbd_down
    }
}
