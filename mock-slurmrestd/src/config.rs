//! Configuration of one mock cluster: its size, its token key, which Slurm it imitates.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::faults::FaultConfig;

/// Which real slurmrestd the mock imitates where 24.11.5 and 26.05.5 differ (both serve v0.0.42).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SlurmVersion {
    /// Slurm 24.11.5: a rejected submit is HTTP 500; no environment -> error 2019; comma lists -> 400.
    #[default]
    V24_11,
    /// Slurm 26.05.5: a rejected submit is HTTP 422; no environment -> error 2127; comma lists -> 500/404.
    V26_05,
}

impl SlurmVersion {
    /// (major, minor, micro, release) as slurmrestd reports them in `meta.slurm`.
    pub fn parts(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            SlurmVersion::V24_11 => ("24", "11", "5", "24.11.5"),
            SlurmVersion::V26_05 => ("26", "05", "5", "26.05.5"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown Slurm version {0:?}: use 24.11 or 26.05")]
pub struct UnknownVersion(String);

impl FromStr for SlurmVersion {
    type Err = UnknownVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "24.11" | "24.11.5" => Ok(SlurmVersion::V24_11),
            "26.05" | "26.05.5" => Ok(SlurmVersion::V26_05),
            other => Err(UnknownVersion(other.to_string())),
        }
    }
}

/// Everything a [`crate::MockServer`] needs. `Default` is a one-node, 8-CPU cluster like the
/// recorded one, with an EMPTY jwt key: set `jwt_key` (an empty key rejects every token).
#[derive(Clone)]
pub struct MockConfig {
    /// CPUs per node.
    pub cpus: u32,
    /// Number of nodes (named node1..nodeN).
    pub nodes: u32,
    /// Raw bytes of the HS256 key (the same file slurmctld's `AuthAltParameters=jwt_key=` names).
    pub jwt_key: Vec<u8>,
    /// Slurm's SlurmUser: a token for this user (or root) may act for any user via X-SLURM-USER-NAME.
    pub slurm_user: String,
    /// MinJobAge: how long a finished job stays visible to slurmctld endpoints before it ages out
    /// into the accounting (slurmdb) view only.
    pub min_job_age: Duration,
    /// How long one minute of a job's `time_limit` lasts. 60 s like the real one; tests shrink it.
    pub minute: Duration,
    /// KillWait: time between SIGTERM and SIGKILL when a job is cancelled or times out.
    pub kill_wait: Duration,
    pub cluster_name: String,
    /// The only partition (the default one).
    pub partition: String,
    /// Where job scripts are written (one folder per job). `None`: a fresh temp folder.
    pub state_dir: Option<PathBuf>,
    pub slurm_version: SlurmVersion,
    /// The first job id handed out.
    pub first_job_id: u32,
    /// Faults active from the start (change them later through the handle or `/mock/faults`).
    pub faults: FaultConfig,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            cpus: 8,
            nodes: 1,
            jwt_key: Vec::new(),
            slurm_user: "slurm".to_string(),
            min_job_age: Duration::from_secs(300),
            minute: Duration::from_secs(60),
            kill_wait: Duration::from_secs(5),
            cluster_name: "mock".to_string(),
            partition: "debug".to_string(),
            state_dir: None,
            slurm_version: SlurmVersion::V24_11,
            first_job_id: 1,
            faults: FaultConfig::default(),
        }
    }
}

// The key must never reach logs: Debug shows only its length.
impl fmt::Debug for MockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockConfig")
            .field("cpus", &self.cpus)
            .field("nodes", &self.nodes)
            .field(
                "jwt_key",
                &format_args!("<{} bytes redacted>", self.jwt_key.len()),
            )
            .field("slurm_user", &self.slurm_user)
            .field("min_job_age", &self.min_job_age)
            .field("minute", &self.minute)
            .field("kill_wait", &self.kill_wait)
            .field("cluster_name", &self.cluster_name)
            .field("partition", &self.partition)
            .field("state_dir", &self.state_dir)
            .field("slurm_version", &self.slurm_version)
            .field("first_job_id", &self.first_job_id)
            .field("faults", &self.faults)
            .finish()
    }
}

impl MockConfig {
    /// Node names as the job records show them.
    pub fn node_name(&self, index: usize) -> String {
        format!("node{}", index + 1)
    }
}
