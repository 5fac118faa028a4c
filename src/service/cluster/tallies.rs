//! What a cluster's tasks came to, counted here as totals since start: task outcomes by phase,
//! failure class and status code, and output uploads by result. The runtime cannot see the
//! Prometheus registry (`rpc/` is above it), so `rpc/serve.rs` adds their growth to the
//! counters each gauge tick, as it does for the coalescing totals.
//!
//! Imports nothing of `service`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::Phase;
use crate::tracker::FailureClass;

/// How many executions' keys are remembered as counted. GetTask is polled until Flyte has the
/// terminal answer and may be asked again after (a propeller restart, a retried call), so the
/// first terminal answer is counted and the key kept; but a replica runs for months, so the
/// set is bounded and forgets the oldest key first. Repeats come within minutes of the first
/// answer, while this many other executions ending in between takes far longer: an evicted key
/// is one nobody asks about any more. 50 000 keys of 16 bytes: a few MB at most.
pub const COUNTED_KEYS: usize = 50_000;

/// The status codes GetTask's message can start with (`[TIMEOUT] ...`), the `reason` label's
/// values besides `other` and `none`: a fixed list keeps the series bounded whatever a message
/// says. A unit test reads `src/` for the codes it writes, so a new one is not forgotten here.
pub const REASONS: &[&str] = &[
    "BOOT_FAIL",
    "DEADLINE",
    "FAILED",
    "LOST",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "REQUEUE_BUDGET",
    "REVOKED",
    "SLURM_JOB_LOST",
    "SPECIAL_EXIT",
    "SUBMIT_FAILED",
    "TIMEOUT",
    "UNKNOWN_STATE",
];

/// One outcome's labels, each from a fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Outcome {
    /// `succeeded`, `failed`, `retryable_failed`, `aborted`.
    pub phase: &'static str,
    /// `user`, `permanent`, `infrastructure`, or `none` (a success, an abort).
    pub class: &'static str,
    /// One of [`REASONS`], `other` (a bracketed code not listed), or `none` (no code).
    pub reason: &'static str,
}

impl Outcome {
    /// The labels of a terminal answer; `None` for a phase that is not terminal.
    pub fn of(phase: Phase, class: Option<FailureClass>, message: &str) -> Option<Outcome> {
        let phase = match phase {
            Phase::Succeeded => "succeeded",
            Phase::Failed => "failed",
            Phase::RetryableFailed => "retryable_failed",
            Phase::Aborted => "aborted",
            _ => return None,
        };
        Some(Outcome {
            phase,
            class: class.map_or("none", FailureClass::as_str),
            reason: reason_of(message),
        })
    }
}

/// The status code a message starts with, as a label value.
pub fn reason_of(message: &str) -> &'static str {
    let Some(code) = message
        .strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .map(|(code, _)| code)
    else {
        return "none";
    };
    REASONS
        .iter()
        .find(|r| **r == code)
        .copied()
        .unwrap_or("other")
}

/// Output uploads settled since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Uploads {
    pub ok: u64,
    pub failed: u64,
}

/// What tasks used, summed: Slurm's accounting of each task counted with its first terminal
/// answer (`report/accounting.rs` makes the figures), in the order of [`USAGE_FIGURES`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageTotals {
    /// Tasks whose accounting was counted.
    pub tasks: u64,
    pub figures: [f64; USAGE_FIGURES.len()],
}

/// The summed figures: metric name (whole, so the chart's validation finds it) and help.
pub const USAGE_FIGURES: [(&str, &str); 7] = [
    (
        "slurm_connector_task_elapsed_seconds",
        "Wall-clock seconds tasks' Slurm jobs ran (sacct ElapsedRaw), summed",
    ),
    (
        "slurm_connector_task_cpu_allocated_seconds",
        "CPU-seconds allocated to tasks' jobs (allocated CPUs x elapsed, sacct CPUTimeRAW), summed",
    ),
    (
        "slurm_connector_task_cpu_used_seconds",
        "CPU-seconds tasks' jobs used (user + system of all steps, sacct TotalCPU), summed; needs a JobAcctGatherType",
    ),
    (
        "slurm_connector_task_node_seconds",
        "Node-seconds allocated to tasks' jobs (nodes x elapsed), summed",
    ),
    (
        "slurm_connector_task_gpu_seconds",
        "GPU-seconds allocated to tasks' jobs (gres/gpu x elapsed), summed; needs AccountingStorageTRES=gres/gpu",
    ),
    (
        "slurm_connector_task_billing_seconds",
        "Billing units x elapsed seconds of tasks' jobs (what fair share charges: TRESBillingWeights), summed",
    ),
    (
        "slurm_connector_task_energy_joules",
        "Energy tasks' jobs consumed (sacct ConsumedEnergyRaw), summed; needs an AcctGatherEnergyType",
    ),
];

/// The labels of what tasks used: the Flyte project and domain (empty when not known).
pub type UsageKey = (String, String);

/// CPU efficiencies waiting for the metrics' next turn (drained there); bounded so a stalled
/// turn cannot grow it.
const EFFICIENCIES_KEPT: usize = 10_000;

#[derive(Default)]
struct Counted {
    keys: HashSet<String>,
    /// The keys in the order they were counted: the oldest is evicted first.
    order: VecDeque<String>,
    totals: BTreeMap<Outcome, u64>,
}

/// A cluster's totals (see the module's doc).
#[derive(Default)]
pub struct Tallies {
    outcomes: Mutex<Counted>,
    uploads_ok: AtomicU64,
    uploads_failed: AtomicU64,
    usage: Mutex<BTreeMap<UsageKey, UsageTotals>>,
    efficiencies: Mutex<Vec<(UsageKey, f64)>>,
}

impl Tallies {
    /// Counts execution `key`'s terminal answer, unless it was counted already. `true` when
    /// counted now.
    pub fn outcome(&self, key: &str, outcome: Outcome) -> bool {
        let mut c = self.outcomes.lock().unwrap();
        if c.keys.contains(key) {
            return false;
        }
        if c.order.len() >= COUNTED_KEYS
            && let Some(oldest) = c.order.pop_front()
        {
            c.keys.remove(&oldest);
        }
        c.keys.insert(key.to_string());
        c.order.push_back(key.to_string());
        *c.totals.entry(outcome).or_default() += 1;
        true
    }

    /// Outcomes counted since start, by labels.
    pub fn outcomes(&self) -> BTreeMap<Outcome, u64> {
        self.outcomes.lock().unwrap().totals.clone()
    }

    /// Adds a task's accounting (counted once: call it when [`Tallies::outcome`] counted the
    /// task's terminal answer).
    pub fn usage(
        &self,
        key: UsageKey,
        figures: [f64; USAGE_FIGURES.len()],
        cpu_efficiency: Option<f64>,
    ) {
        if let Some(e) = cpu_efficiency {
            let mut q = self.efficiencies.lock().unwrap();
            if q.len() < EFFICIENCIES_KEPT {
                q.push((key.clone(), e));
            }
        }
        let mut u = self.usage.lock().unwrap();
        let t = u.entry(key).or_default();
        t.tasks += 1;
        for (sum, f) in t.figures.iter_mut().zip(figures) {
            *sum += f;
        }
    }

    /// What tasks used since start, by project and domain.
    pub fn usage_totals(&self) -> BTreeMap<UsageKey, UsageTotals> {
        self.usage.lock().unwrap().clone()
    }

    /// The CPU efficiencies counted since the last call.
    pub fn take_efficiencies(&self) -> Vec<(UsageKey, f64)> {
        std::mem::take(&mut *self.efficiencies.lock().unwrap())
    }

    /// One upload attempt settled: its declared outputs are in object storage, or not.
    pub fn upload(&self, ok: bool) {
        let n = if ok {
            &self.uploads_ok
        } else {
            &self.uploads_failed
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    pub fn uploads(&self) -> Uploads {
        Uploads {
            ok: self.uploads_ok.load(Ordering::Relaxed),
            failed: self.uploads_failed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(reason: &'static str) -> Outcome {
        Outcome {
            phase: "retryable_failed",
            class: "infrastructure",
            reason,
        }
    }

    #[test]
    fn an_execution_is_counted_once() {
        let t = Tallies::default();
        assert!(t.outcome("k1", failed("NODE_FAIL")));
        assert!(!t.outcome("k1", failed("NODE_FAIL")));
        assert!(t.outcome("k2", failed("NODE_FAIL")));
        assert_eq!(t.outcomes().get(&failed("NODE_FAIL")), Some(&2));
    }

    #[test]
    fn the_oldest_key_is_forgotten_first() {
        let t = Tallies::default();
        for i in 0..=COUNTED_KEYS {
            t.outcome(&format!("k{i}"), failed("LOST"));
        }
        let c = t.outcomes.lock().unwrap();
        assert_eq!(c.keys.len(), COUNTED_KEYS);
        assert!(!c.keys.contains("k0") && c.keys.contains("k1"));
        drop(c);
        // Forgotten: counted again; the newest are still known.
        assert!(t.outcome("k0", failed("LOST")));
        assert!(!t.outcome(&format!("k{COUNTED_KEYS}"), failed("LOST")));
    }

    #[test]
    fn labels_come_from_fixed_sets() {
        use FailureClass::*;
        let o = Outcome::of(
            Phase::RetryableFailed,
            Some(Infrastructure),
            "[NODE_FAIL] n3",
        );
        assert_eq!(o, Some(failed("NODE_FAIL")));
        let o = Outcome::of(Phase::Succeeded, None, "Slurm job 3 is COMPLETED").unwrap();
        assert_eq!((o.phase, o.class, o.reason), ("succeeded", "none", "none"));
        let o = Outcome::of(Phase::Failed, Some(Permanent), "[SOMETHING_NEW] x").unwrap();
        assert_eq!(
            (o.phase, o.class, o.reason),
            ("failed", "permanent", "other")
        );
        assert_eq!(reason_of("[TIMEOUT after"), "none");
        assert_eq!(Outcome::of(Phase::Running, None, "[FAILED] x"), None);
    }

    /// The status codes GetTask messages start with in `src/` (string literals opening with
    /// `[CODE]`, this file's own tests aside) are [`REASONS`]: a new code missing from it would
    /// count as `other`, a listed one no message writes is a label nobody sees.
    #[test]
    fn the_reasons_are_the_codes_messages_start_with() {
        let src = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut dirs = vec![src];
        let mut written = std::collections::BTreeSet::new();
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                    continue;
                }
                if p.ends_with("cluster/tallies.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, _) in text.match_indices("\"[") {
                    let rest = &text[i + 2..];
                    let code = &rest[..rest.find(']').unwrap_or(0)];
                    if code.len() > 2 && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
                        written.insert(code.to_string());
                    }
                }
            }
        }
        let listed: std::collections::BTreeSet<String> =
            REASONS.iter().map(|r| r.to_string()).collect();
        assert_eq!(written, listed);
    }
}
