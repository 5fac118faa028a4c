//! Request counters per operation and HTTP status, so tests and benchmarks can assert how many
//! requests a client made (e.g. "one jobs/state call per tick", "submit never retried").

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// Status recorded for a connection the mock dropped on purpose (no HTTP answer at all).
pub const DROPPED: u16 = 0;

#[derive(Default)]
pub struct Stats {
    inner: Mutex<BTreeMap<String, BTreeMap<u16, u64>>>,
}

impl Stats {
    pub fn record(&self, operation: &str, status: u16) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(operation.to_string())
            .or_default()
            .entry(status)
            .or_default() += 1;
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        StatsSnapshot {
            operations: map.clone(),
        }
    }

    pub fn reset(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// A copy of the counters: `operations[op][status] = count` (status 0 = dropped connection).
/// Operations: submit, job_get, job_delete, jobs_state, jobs, ping, diag, slurmdb_job,
/// slurmdb_jobs, other.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct StatsSnapshot {
    pub operations: BTreeMap<String, BTreeMap<u16, u64>>,
}

impl StatsSnapshot {
    /// All requests of one operation, whatever their status.
    pub fn count(&self, operation: &str) -> u64 {
        self.operations
            .get(operation)
            .map(|m| m.values().sum())
            .unwrap_or(0)
    }

    /// Requests of one operation answered with `status` (0 = dropped).
    pub fn count_status(&self, operation: &str, status: u16) -> u64 {
        self.operations
            .get(operation)
            .and_then(|m| m.get(&status))
            .copied()
            .unwrap_or(0)
    }

    /// All requests counted.
    pub fn total(&self) -> u64 {
        self.operations.values().flat_map(|m| m.values()).sum()
    }
}
