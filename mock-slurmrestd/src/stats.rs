//! Request counters per operation and HTTP status, so tests and benchmarks can assert how many
//! requests a client made (e.g. "one jobs/state call per tick", "submit never retried").

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// Status recorded for a connection the mock dropped on purpose (no HTTP answer at all).
pub const DROPPED: u16 = 0;

#[derive(Default)]
pub struct Stats {
    inner: Mutex<StatsSnapshot>,
}

impl Stats {
    /// Count one request; `api_version` is the `v0.0.NN` of its path, if it has one.
    pub fn record(&self, operation: &str, api_version: Option<&str>, status: u16) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *s.operations
            .entry(operation.to_string())
            .or_default()
            .entry(status)
            .or_default() += 1;
        if let Some(v) = api_version {
            *s.api_versions.entry(v.to_string()).or_default() += 1;
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn reset(&self) {
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = StatsSnapshot::default();
    }
}

/// A copy of the counters: `operations[op][status] = count` (status 0 = dropped connection).
/// Operations: submit, job_get, job_delete, jobs_state, jobs, ping, diag, slurmdb_job,
/// slurmdb_jobs, other.
/// `api_versions[v] = count`: requests per API version in the path (`v0.0.46`), served or not,
/// so a test can see which version a client negotiated and that it stuck to it.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct StatsSnapshot {
    pub operations: BTreeMap<String, BTreeMap<u16, u64>>,
    #[serde(default)]
    pub api_versions: BTreeMap<String, u64>,
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

    /// Requests whose path named API version `version` (`"v0.0.46"`), whatever their answer.
    pub fn count_version(&self, version: &str) -> u64 {
        self.api_versions.get(version).copied().unwrap_or(0)
    }

    /// All requests counted.
    pub fn total(&self) -> u64 {
        self.operations.values().flat_map(|m| m.values()).sum()
    }
}
