//! Domain types of the slurmrestd facade: what the rest of the crate speaks. Independent of any
//! generated API version; `convert` turns generated types into these.

use std::fmt;
use std::str::FromStr;

/// A Slurm job id.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct JobId(pub u32);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for JobId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(JobId)
    }
}

/// What a cancel addresses: a job, or one element of a job array (`<array id>_<index>`, the
/// form slurmrestd's `DELETE job/{job_id}` takes; its updates refuse it, recorded on 24.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobRef {
    pub id: JobId,
    pub element: Option<u32>,
}

impl From<JobId> for JobRef {
    fn from(id: JobId) -> JobRef {
        JobRef { id, element: None }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.element {
            Some(i) => write!(f, "{}_{i}", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

/// The base state of a job, the first entry of slurmrestd's state array.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BaseState {
    Pending,
    Running,
    Suspended,
    Completed,
    Cancelled,
    Failed,
    Timeout,
    NodeFail,
    Preempted,
    BootFail,
    Deadline,
    OutOfMemory,
    /// A state this version does not know; kept verbatim so it can be reported, never guessed.
    Other(String),
}

impl BaseState {
    pub fn parse(s: &str) -> BaseState {
        match s {
            "PENDING" => BaseState::Pending,
            "RUNNING" => BaseState::Running,
            "SUSPENDED" => BaseState::Suspended,
            "COMPLETED" => BaseState::Completed,
            "CANCELLED" => BaseState::Cancelled,
            "FAILED" => BaseState::Failed,
            "TIMEOUT" => BaseState::Timeout,
            "NODE_FAIL" => BaseState::NodeFail,
            "PREEMPTED" => BaseState::Preempted,
            "BOOT_FAIL" => BaseState::BootFail,
            "DEADLINE" => BaseState::Deadline,
            "OUT_OF_MEMORY" => BaseState::OutOfMemory,
            other => BaseState::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            BaseState::Pending => "PENDING",
            BaseState::Running => "RUNNING",
            BaseState::Suspended => "SUSPENDED",
            BaseState::Completed => "COMPLETED",
            BaseState::Cancelled => "CANCELLED",
            BaseState::Failed => "FAILED",
            BaseState::Timeout => "TIMEOUT",
            BaseState::NodeFail => "NODE_FAIL",
            BaseState::Preempted => "PREEMPTED",
            BaseState::BootFail => "BOOT_FAIL",
            BaseState::Deadline => "DEADLINE",
            BaseState::OutOfMemory => "OUT_OF_MEMORY",
            BaseState::Other(s) => s,
        }
    }
}

/// A job's state as slurmrestd reports it: `["RUNNING", "COMPLETING"]` = base state + flags.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobState {
    pub base: BaseState,
    /// Flags such as COMPLETING, CONFIGURING, REQUEUED, STAGE_OUT, SIGNALING, RESIZING.
    pub flags: Vec<String>,
}

impl JobState {
    /// From slurmrestd's state array. Slurm lists the base state first; an empty array is not a
    /// state we can act on, so it is kept as `Other("")` (reported, never mistaken for RUNNING).
    pub fn from_strings<I, S>(items: I) -> JobState
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut iter = items.into_iter();
        let base = iter
            .next()
            .map(|s| BaseState::parse(s.as_ref()))
            .unwrap_or_else(|| BaseState::Other(String::new()));
        JobState {
            base,
            flags: iter.map(|s| s.as_ref().to_string()).collect(),
        }
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// Terminal in Slurm's sense: the job will not change state again (COMPLETING still will).
    pub fn is_finished(&self) -> bool {
        // EXPEDITING (v0.0.44+, `--requeue=expedite`): a failed job Slurm is about to requeue
        // at the top of the queue, like REQUEUED; it will run again.
        !matches!(
            self.base,
            BaseState::Pending | BaseState::Running | BaseState::Suspended
        ) && !self.has_flag("COMPLETING")
            && !self.has_flag("REQUEUED")
            && !self.has_flag("EXPEDITING")
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.base.as_str())?;
        for flag in &self.flags {
            write!(f, "+{flag}")?;
        }
        Ok(())
    }
}

/// How a job's batch script ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitCode {
    /// SUCCESS, ERROR, SIGNALED, CORE_DUMPED, PENDING, INVALID...
    pub status: Vec<String>,
    pub return_code: Option<u32>,
    pub signal: Option<u32>,
    pub signal_name: Option<String>,
}

impl fmt::Display for ExitCode {
    /// `x:y` like sacct: return code, then signal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}",
            self.return_code.unwrap_or(0),
            self.signal.unwrap_or(0)
        )
    }
}

/// What the connector needs of one job's record (slurmctld's or slurmdbd's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub job_id: JobId,
    pub name: String,
    pub state: JobState,
    pub exit_code: Option<ExitCode>,
    /// Why the job is pending or failed (`None` when Slurm says "None").
    pub reason: Option<String>,
    pub comment: Option<String>,
    pub user: Option<String>,
    pub standard_output: Option<String>,
    pub standard_error: Option<String>,
    pub current_working_directory: Option<String>,
    pub partition: Option<String>,
    pub submit_time: Option<i64>,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    /// The nodes the job ran on (`node[1-3]`), `None` before it started.
    pub nodes: Option<String>,
    /// How many times Slurm put the job back in the queue itself (node failure, preemption).
    pub restart_count: Option<u32>,
    /// The time limit, in minutes (`None`: unlimited or unknown).
    pub time_limit_minutes: Option<u32>,
    /// Memory per node the job asked for, in MiB (`--mem`; `None` when given otherwise).
    pub memory_per_node_mib: Option<u64>,
    /// The job array this record belongs to (`None`: not an array job).
    pub array: Option<ArrayMembership>,
}

impl JobInfo {
    /// A record with only its id, name and state (tests, and records built from less than a
    /// full answer).
    pub fn new(job_id: JobId, name: impl Into<String>, state: JobState) -> JobInfo {
        JobInfo {
            job_id,
            name: name.into(),
            state,
            exit_code: None,
            reason: None,
            comment: None,
            user: None,
            standard_output: None,
            standard_error: None,
            current_working_directory: None,
            partition: None,
            submit_time: None,
            start_time: None,
            end_time: None,
            nodes: None,
            restart_count: None,
            time_limit_minutes: None,
            memory_per_node_mib: None,
            array: None,
        }
    }
}

/// Where a record sits in a job array. Every element gets its own job id when it starts; the
/// array's id is the one it was submitted as, which the pending remainder and, in the end, the
/// last element to start keep (recorded on 24.11:
/// `tests/fixtures/slurmrestd/24.11_v0.0.42_arrays-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayMembership {
    pub array_job_id: JobId,
    /// `None` for the array's own record while it stands for the pending remainder
    /// (`array_task_string` `2-5%2`).
    pub task_id: Option<u32>,
}

/// One element of a job array in `jobs/state`: slurmrestd lists each as `<own id>_<index>`
/// (the pending remainder under the array's id), never the array itself; v0.0.40 lists every
/// element under the array's id (`<array id>_<index>`), its own id only in its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementState {
    /// The element's own job id (the array's id while it is pending, and always on v0.0.40).
    pub id: JobId,
    pub index: u32,
    pub state: JobState,
}

/// One `jobs/state` answer: plain jobs by id, and array elements (which carry no array id: an
/// element that started has its own, so the tracker attributes it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct States {
    pub jobs: std::collections::HashMap<JobId, JobState>,
    pub elements: Vec<ElementState>,
}

/// The result of cancelling a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The signal was delivered.
    Cancelled,
    /// Slurm error 2021: the job had already completed (or is completing).
    AlreadyFinished,
    /// Slurm error 2017: slurmctld does not know the job (never existed, or aged out).
    Unknown,
}

/// One controller's answer to `ping`. Not responding also with a rejected token: never use ping
/// as an auth check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    pub hostname: String,
    /// v0.0.40-44 say `pinged: "UP"|"DOWN"`, v0.0.45+ `responding: bool`.
    pub responding: bool,
    pub latency_us: Option<i64>,
    /// `primary`/`backup` (v0.0.40-44 only).
    pub mode: Option<String>,
    pub primary: Option<bool>,
    /// Why it is not responding, where the version says (v0.0.45+: "Protocol authentication
    /// error" for a rejected token).
    pub status: Option<String>,
}

/// Identity of the Slurm that answered (from any response's `meta`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerInfo {
    pub release: Option<String>,
    pub cluster: Option<String>,
    pub data_parser: Option<String>,
    pub client_user: Option<String>,
}

/// slurmctld's scheduler statistics (the subset the connector reports); `rpcs_by_message`
/// lists (message type, count) pairs such as `REQUEST_JOB_STATE` — the honest measure of load.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diag {
    pub server: ServerInfo,
    pub jobs_submitted: Option<i64>,
    pub jobs_running: Option<i64>,
    pub jobs_pending: Option<i64>,
    pub server_thread_count: Option<i64>,
    pub rpcs_by_message: Vec<(String, i64)>,
}

/// What the connector reads of slurm.conf (`GET conf`, v0.0.45+; recorded:
/// `tests/fixtures/slurmrestd/26.05_v0.0.45_coalesce-conf-get*`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterConf {
    /// `MaxArraySize`: array indices run from 0 to one below it.
    pub max_array_size: Option<u32>,
    /// `AccountingStoreFlags` (`job_comment`, `job_script`, ...).
    pub accounting_store_flags: Vec<String>,
    /// `AccountingStorageType` (`accounting_storage/slurmdbd`, or `.../none`).
    pub accounting_storage_type: Option<String>,
    /// `SchedulerParameters`, one `name[=value]` each (`max_script_size=1048576`).
    pub scheduler_parameters: Vec<String>,
}

impl ClusterConf {
    /// slurmctld's default `max_script_size` (4 MiB), when `SchedulerParameters` sets none.
    pub const DEFAULT_MAX_SCRIPT_SIZE: u64 = 4 * 1024 * 1024;

    /// The most elements one array may have (`MaxArraySize` - 1 indices from 0).
    pub fn max_array_elements(&self) -> Option<usize> {
        self.max_array_size
            .map(|n| usize::try_from(n.saturating_sub(1)).unwrap_or(usize::MAX))
    }

    /// The largest batch script slurmctld accepts: `max_script_size=` of `SchedulerParameters`
    /// (slurm.conf has no key of its own for it), else the 4 MiB default.
    pub fn max_script_size(&self) -> u64 {
        self.scheduler_parameters
            .iter()
            .find_map(|p| p.strip_prefix("max_script_size=")?.trim().parse().ok())
            .unwrap_or(Self::DEFAULT_MAX_SCRIPT_SIZE)
    }

    /// Whether slurmdbd keeps job comments (`AccountingStoreFlags=job_comment`) and there is a
    /// slurmdbd: what finds a coalesced element by its key once it left slurmctld.
    pub fn keeps_job_comments(&self) -> bool {
        self.accounting_storage_type
            .as_deref()
            .is_some_and(|t| t.ends_with("/slurmdbd"))
            && self
                .accounting_store_flags
                .iter()
                .any(|f| f == "job_comment")
    }

    /// Whether slurmdbd keeps jobs' stdio paths (there is one, and `AccountingStoreFlags` lacks
    /// `no_stdio`, which Slurm 23.02 added).
    pub fn keeps_stdio_paths(&self) -> bool {
        self.accounting_storage_type
            .as_deref()
            .is_some_and(|t| t.ends_with("/slurmdbd"))
            && !self
                .accounting_store_flags
                .iter()
                .any(|f| f.eq_ignore_ascii_case("no_stdio"))
    }
}

/// A partition's name and state, for preflight checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub state: Vec<String>,
}

/// An error entry of a slurmrestd response (`errors[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmError {
    pub number: i32,
    pub error: String,
    pub description: String,
    pub source: String,
}

impl fmt::Display for SlurmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error {} \"{}\"", self.number, self.error)?;
        if !self.description.is_empty() {
            write!(f, " ({})", self.description)?;
        }
        Ok(())
    }
}

/// One trackable resource (TRES) of a job: `cpu`, `mem` (MiB), `node`, `gres` (`name` = `gpu`)...
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tres {
    pub kind: String,
    pub name: String,
    pub count: i64,
}

/// What a job used, as GetTaskMetrics reports it. Usage figures (CPU time, peak memory) exist
/// only in slurmdbd's record and only for finished steps, and only where the cluster gathers
/// them (`JobAcctGatherType`); allocations and times exist as soon as the job starts.
#[derive(Debug, Clone, PartialEq)]
pub struct JobUsage {
    pub job_id: JobId,
    pub state: JobState,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    /// Wall-clock seconds the job has run (slurmdbd's `elapsed`, or now − start while running).
    pub elapsed_secs: Option<i64>,
    /// CPU time of all steps, user + system, in seconds (slurmdbd only).
    pub cpu_total_secs: Option<f64>,
    pub cpu_user_secs: Option<f64>,
    pub cpu_system_secs: Option<f64>,
    /// The largest resident set of any task of any step, in bytes (slurmdbd's TRESUsageInMax
    /// `mem`; absent without a gather plugin).
    pub max_rss_bytes: Option<u64>,
    /// Energy its steps consumed, in joules (slurmdbd, and only where the site gathers energy:
    /// `AcctGatherEnergyType`; `None` otherwise).
    pub energy_joules: Option<u64>,
    pub allocated: Vec<Tres>,
    /// Where the figures come from: `slurmdbd` or `slurmctld`.
    pub source: &'static str,
    /// The job array this record is an element of.
    pub array: Option<ArrayMembership>,
}

impl JobUsage {
    /// How many of TRES `kind`/`name` the job was allocated (`("cpu", "")`, `("gres", "gpu")`;
    /// memory in MiB), if recorded.
    pub fn allocated(&self, kind: &str, name: &str) -> Option<u64> {
        self.allocated
            .iter()
            .find(|t| t.kind == kind && t.name == name)
            .and_then(|t| u64::try_from(t.count).ok())
    }
}
