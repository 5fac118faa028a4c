//! What a finished task cost, from Slurm's own accounting (slurmdbd): in GetTask's
//! `custom_info.accounting` and a line of its message, at the terminal answer.
//!
//! The tracker reads every finished job's record in one request per tick
//! (`tracker/accounting.rs`); while it is awaited, GetTask answers RUNNING with a note and holds
//! the terminal phase back (decided in `service/phase.rs`), because Flyte's backend stops asking
//! at the first terminal answer and a figure that came later would never reach it.
//!
//! The figures are sacct's: `elapsed_seconds` (ElapsedRaw), `cpu_seconds_allocated`
//! (CPUTimeRAW: allocated CPUs × elapsed), `cpu_seconds_used` (TotalCPU, the steps' user +
//! system), `max_rss_bytes` (MaxRSS of any task), `energy_joules` (ConsumedEnergyRaw), the
//! allocation (AllocTRES: cpu, mem, node, gres/gpu, billing). Derived: `cpu_efficiency` (used /
//! allocated, as seff), `memory_efficiency` (peak RSS / memory of a one-node job), node-hours,
//! GPU-hours and billing-seconds (billing × elapsed, what fair share charges). A job array sums
//! its elements (the peak is the largest) and gives allocations only when every element had the
//! same. A requeued job's figures are its last run's, as sacct shows it by default.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::slurmrestd::JobUsage;
use crate::tracker::{Accounting, JobSnapshot};

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;

/// A task's accounting, summed over its jobs (one, or each element of its array).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    pub jobs: usize,
    pub elapsed_seconds: i64,
    /// The allocation of each job (`None`: not recorded, or elements differ).
    pub cpus: Option<u64>,
    pub nodes: Option<u64>,
    pub gpus: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub billing: Option<u64>,
    pub cpu_seconds_allocated: f64,
    pub cpu_seconds_used: Option<f64>,
    pub max_rss_bytes: Option<u64>,
    pub node_seconds: f64,
    pub gpu_seconds: f64,
    pub billing_seconds: f64,
    pub energy_joules: Option<u64>,
}

/// `Some(v)` when every job has the same `v`.
fn uniform(usages: &[Arc<JobUsage>], f: impl Fn(&JobUsage) -> Option<u64>) -> Option<u64> {
    let first = f(usages.first()?)?;
    usages.iter().all(|u| f(u) == Some(first)).then_some(first)
}

/// The sum of `f` over the jobs that have it; `None` when none has.
fn sum<T: std::iter::Sum<T>>(
    usages: &[Arc<JobUsage>],
    f: impl Fn(&JobUsage) -> Option<T>,
) -> Option<T> {
    let some: Vec<T> = usages.iter().filter_map(|u| f(u)).collect();
    (!some.is_empty()).then(|| some.into_iter().sum())
}

impl Summary {
    pub fn of(usages: &[Arc<JobUsage>]) -> Summary {
        let elapsed = |u: &JobUsage| u.elapsed_secs.unwrap_or(0).max(0) as f64;
        let times = |kind: &'static str, name: &'static str| {
            move |u: &JobUsage| u.allocated(kind, name).map(|n| n as f64 * elapsed(u))
        };
        Summary {
            jobs: usages.len(),
            elapsed_seconds: usages
                .iter()
                .map(|u| u.elapsed_secs.unwrap_or(0).max(0))
                .sum(),
            cpus: uniform(usages, |u| u.allocated("cpu", "")),
            nodes: uniform(usages, |u| u.allocated("node", "")),
            gpus: uniform(usages, |u| u.allocated("gres", "gpu")),
            // TRES memory is in MiB.
            memory_bytes: uniform(usages, |u| u.allocated("mem", "")).map(|m| m << 20),
            billing: uniform(usages, |u| u.allocated("billing", "")),
            cpu_seconds_allocated: sum(usages, times("cpu", "")).unwrap_or(0.0),
            cpu_seconds_used: sum(usages, |u| u.cpu_total_secs),
            max_rss_bytes: usages.iter().filter_map(|u| u.max_rss_bytes).max(),
            node_seconds: sum(usages, times("node", "")).unwrap_or(0.0),
            gpu_seconds: sum(usages, times("gres", "gpu")).unwrap_or(0.0),
            billing_seconds: sum(usages, times("billing", "")).unwrap_or(0.0),
            energy_joules: sum(usages, |u| u.energy_joules),
        }
    }

    /// CPU time used over CPU time allocated (seff's "CPU Efficiency").
    pub fn cpu_efficiency(&self) -> Option<f64> {
        let used = self.cpu_seconds_used?;
        (self.cpu_seconds_allocated > 0.0).then(|| used / self.cpu_seconds_allocated)
    }

    /// Peak RSS over the memory of a one-node job (seff's "Memory Efficiency"); `None` for
    /// several nodes, where the peak of one task says little of the whole.
    pub fn memory_efficiency(&self) -> Option<f64> {
        let (rss, mem) = (self.max_rss_bytes?, self.memory_bytes?);
        (self.nodes == Some(1) && mem > 0).then(|| rss as f64 / mem as f64)
    }

    /// The figures [`crate::service::cluster::tallies::USAGE_FIGURES`] names, in its order.
    pub fn figures(&self) -> [f64; crate::service::cluster::tallies::USAGE_FIGURES.len()] {
        [
            self.elapsed_seconds as f64,
            self.cpu_seconds_allocated,
            self.cpu_seconds_used.unwrap_or(0.0),
            self.node_seconds,
            self.gpu_seconds,
            self.billing_seconds,
            self.energy_joules.unwrap_or(0) as f64,
        ]
    }

    /// `custom_info.accounting`: the figures Slurm has, absent ones left out.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_string(), v);
            }
        };
        let round = |x: f64, places: i32| {
            let p = 10f64.powi(places);
            (x * p).round() / p
        };
        put("source", Some(json!("slurmdbd")));
        put("jobs", Some(json!(self.jobs)));
        put("elapsed_seconds", Some(json!(self.elapsed_seconds)));
        put("cpus", self.cpus.map(|v| json!(v)));
        put("nodes", self.nodes.map(|v| json!(v)));
        put("gpus", self.gpus.map(|v| json!(v)));
        put("memory_bytes", self.memory_bytes.map(|v| json!(v)));
        put("billing", self.billing.map(|v| json!(v)));
        put(
            "cpu_seconds_allocated",
            Some(json!(round(self.cpu_seconds_allocated, 3))),
        );
        put(
            "cpu_seconds_used",
            self.cpu_seconds_used.map(|v| json!(round(v, 3))),
        );
        put(
            "cpu_efficiency",
            self.cpu_efficiency().map(|v| json!(round(v, 4))),
        );
        put("max_rss_bytes", self.max_rss_bytes.map(|v| json!(v)));
        put(
            "memory_efficiency",
            self.memory_efficiency().map(|v| json!(round(v, 4))),
        );
        put(
            "node_hours",
            Some(json!(round(self.node_seconds / 3600.0, 6))),
        );
        put(
            "gpu_hours",
            (self.gpu_seconds > 0.0).then(|| json!(round(self.gpu_seconds / 3600.0, 6))),
        );
        put(
            "billing_seconds",
            (self.billing_seconds > 0.0).then(|| json!(round(self.billing_seconds, 3))),
        );
        put("energy_joules", self.energy_joules.map(|v| json!(v)));
        Value::Object(m)
    }

    /// The message's line: what an engineer reads first in Flyte's UI.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        let jobs = if self.jobs > 1 {
            format!(" ({} jobs, summed)", self.jobs)
        } else {
            String::new()
        };
        let mut alloc = format!("{} s elapsed", self.elapsed_seconds);
        if let (Some(n), Some(c)) = (self.nodes, self.cpus) {
            alloc.push_str(&format!(" on {n} node{} × {c} CPU{}", plural(n), plural(c)));
        }
        if let Some(g) = self.gpus {
            alloc.push_str(&format!(", {g} GPU{}", plural(g)));
        }
        parts.push(alloc);
        match (self.cpu_seconds_used, self.cpu_efficiency()) {
            (Some(used), Some(eff)) => parts.push(format!(
                "CPU time {used:.1} s of {:.0} s allocated ({:.0} % efficiency)",
                self.cpu_seconds_allocated,
                eff * 100.0
            )),
            _ => parts.push(format!(
                "{:.0} CPU-seconds allocated",
                self.cpu_seconds_allocated
            )),
        }
        if let Some(rss) = self.max_rss_bytes {
            let mut s = format!("max RSS {}", mib(rss));
            if let (Some(mem), Some(eff)) = (self.memory_bytes, self.memory_efficiency()) {
                s.push_str(&format!(" of {} ({:.0} %)", mib(mem), eff * 100.0));
            }
            parts.push(s);
        }
        if self.gpu_seconds > 0.0 {
            parts.push(format!("{:.3} GPU-hours", self.gpu_seconds / 3600.0));
        }
        if self.billing_seconds > 0.0 {
            parts.push(format!("billing {:.0} × s", self.billing_seconds));
        }
        if let Some(j) = self.energy_joules {
            parts.push(format!("{j} J"));
        }
        format!("Slurm accounting{jobs}: {}", parts.join("; "))
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// The line a terminal answer's message ends with: the summary, or why there is none (once,
/// on the last line); `None` while nothing is known.
pub fn message_line(snap: &JobSnapshot) -> Option<String> {
    match &snap.accounting {
        Accounting::Read(u) => Some(Summary::of(u).line()),
        Accounting::Unavailable(why) => Some(format!("no Slurm accounting: {why}")),
        Accounting::None | Accounting::Awaited => None,
    }
}

/// Counts a task's accounting in its cluster's tallies (with its first terminal answer).
pub fn count(rt: &ClusterRuntime, meta: &ResourceMeta, snap: &JobSnapshot) {
    if let Accounting::Read(u) = &snap.accounting {
        let s = Summary::of(u);
        let key = (
            meta.project.clone().unwrap_or_default(),
            meta.domain.clone().unwrap_or_default(),
        );
        rt.tallies.usage(key, s.figures(), s.cpu_efficiency());
    }
}

/// `custom_info.accounting` of a snapshot, when there is something to say.
pub fn custom_info(snap: &JobSnapshot) -> Option<Value> {
    match &snap.accounting {
        Accounting::Read(u) => Some(Summary::of(u).to_json()),
        Accounting::Unavailable(why) => Some(json!({"unavailable": why})),
        Accounting::None | Accounting::Awaited => None,
    }
}
