//! Our own job description: what rendering produces and `submit` sends. Independent of the
//! generated types of every API version; the conversion lives at one seam
//! (`convert/each_version/encode.rs`, which refuses what a version cannot carry).
//!
//! Field names follow slurmrestd's `job_desc_msg` so the conversion stays a field-by-field
//! copy; units are stated on each field. Small enums stand in for the API's string enums so a typo
//! cannot reach slurmrestd (which answers a bad enum with a warning and *no job*).

/// A 32-bit count that slurmrestd can also take as "infinite" (`uint32_no_val_struct`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Limit {
    Finite(u32),
    Infinite,
}

/// How the job may share nodes (`--exclusive[=...]`, `--oversubscribe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Shared {
    /// `--exclusive`: no sharing.
    None,
    /// `--oversubscribe`.
    Oversubscribe,
    /// `--exclusive=user`.
    User,
    /// `--exclusive=mcs`.
    Mcs,
    /// `--exclusive=topo`.
    Topo,
}

impl Shared {
    pub fn as_api_str(self) -> &'static str {
        match self {
            Shared::None => "none",
            Shared::Oversubscribe => "oversubscribe",
            Shared::User => "user",
            Shared::Mcs => "mcs",
            Shared::Topo => "topo",
        }
    }
}

/// Memory request: sbatch's `--mem` and `--mem-per-cpu` are mutually exclusive, so one enum.
/// (`--mem-per-gpu` is a TRES request: `memory_per_tres`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Memory {
    /// `--mem`, in MiB (0 = all memory of each node).
    PerNode(u64),
    /// `--mem-per-cpu`, in MiB.
    PerCpu(u64),
}

/// `--mail-type` values as slurmrestd spells them (`job_mail_flags`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum MailType {
    Begin,
    End,
    Fail,
    Requeue,
    Time100,
    Time90,
    Time80,
    Time50,
    StageOut,
    ArrayTasks,
    InvalidDependency,
}

impl MailType {
    pub fn as_api_str(self) -> &'static str {
        match self {
            MailType::Begin => "BEGIN",
            MailType::End => "END",
            MailType::Fail => "FAIL",
            MailType::Requeue => "REQUEUE",
            MailType::Time100 => "TIME=100%",
            MailType::Time90 => "TIME=90%",
            MailType::Time80 => "TIME=80%",
            MailType::Time50 => "TIME=50%",
            MailType::StageOut => "STAGE_OUT",
            MailType::ArrayTasks => "ARRAY_TASKS",
            MailType::InvalidDependency => "INVALID_DEPENDENCY",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OpenMode {
    Append,
    Truncate,
}

impl OpenMode {
    pub fn as_api_str(self) -> &'static str {
        match self {
            OpenMode::Append => "APPEND",
            OpenMode::Truncate => "TRUNCATE",
        }
    }
}

/// The subset of `job_flags` a submitter may set.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum JobFlag {
    KillInvalidDependency,
    NoKillInvalidDependency,
    SpreadJob,
    PreferMinimumNodeCount,
    GresBindingEnforced,
    GresBindingDisabled,
    StepmgrEnabled,
    /// sbatch sets it whenever `--cpus-per-task` is given (JOB_CPUS_SET).
    ExactCpuCountRequested,
}

impl JobFlag {
    pub fn as_api_str(self) -> &'static str {
        match self {
            JobFlag::KillInvalidDependency => "KILL_INVALID_DEPENDENCY",
            JobFlag::NoKillInvalidDependency => "NO_KILL_INVALID_DEPENDENCY",
            JobFlag::SpreadJob => "SPREAD_JOB",
            JobFlag::PreferMinimumNodeCount => "PREFER_MINIMUM_NODE_COUNT",
            JobFlag::GresBindingEnforced => "GRES_BINDING_ENFORCED",
            JobFlag::GresBindingDisabled => "GRES_BINDING_DISABLED",
            JobFlag::StepmgrEnabled => "STEPMGR_ENABLED",
            JobFlag::ExactCpuCountRequested => "EXACT_CPU_COUNT_REQUESTED",
        }
    }
}

/// `--signal=[{R|B}:]...` scope flags (`warn_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WarnFlag {
    /// `B:` signal only the batch shell.
    BatchJob,
    /// `R:` signal when the reservation ends.
    ReservationJob,
}

impl WarnFlag {
    pub fn as_api_str(self) -> &'static str {
        match self {
            WarnFlag::BatchJob => "BATCH_JOB",
            WarnFlag::ReservationJob => "RESERVATION_JOB",
        }
    }
}

/// `--signal`: which signal, how long before the end, and to whom.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KillWarning {
    /// Signal name without `SIG` (e.g. `USR1`) or number, as sbatch accepts it.
    pub signal: String,
    /// Seconds before the time limit.
    pub delay_seconds: u16,
    pub flags: Vec<WarnFlag>,
}

/// `--mem-bind` types (`memory_binding_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemBindType {
    None,
    Rank,
    Map,
    Mask,
    Local,
    Verbose,
    Sort,
    Prefer,
}

impl MemBindType {
    pub fn as_api_str(self) -> &'static str {
        match self {
            MemBindType::None => "NONE",
            MemBindType::Rank => "RANK",
            MemBindType::Map => "MAP",
            MemBindType::Mask => "MASK",
            MemBindType::Local => "LOCAL",
            MemBindType::Verbose => "VERBOSE",
            MemBindType::Sort => "SORT",
            MemBindType::Prefer => "PREFER",
        }
    }
}

/// `--cpu-bind`-like flags that `--hint` implies (`cpu_binding_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CpuBindFlag {
    ToThreads,
    ToCores,
    OneThreadPerCore,
}

impl CpuBindFlag {
    pub fn as_api_str(self) -> &'static str {
        match self {
            CpuBindFlag::ToThreads => "CPU_BIND_TO_THREADS",
            CpuBindFlag::ToCores => "CPU_BIND_TO_CORES",
            CpuBindFlag::OneThreadPerCore => "CPU_BIND_ONE_THREAD_PER_CORE",
        }
    }
}

/// `--profile` types (`acct_gather_profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Profile {
    None,
    Energy,
    Lustre,
    Network,
    Task,
}

impl Profile {
    pub fn as_api_str(self) -> &'static str {
        match self {
            Profile::None => "NONE",
            Profile::Energy => "ENERGY",
            Profile::Lustre => "LUSTRE",
            Profile::Network => "NETWORK",
            Profile::Task => "TASK",
        }
    }
}

/// A batch job as the connector wants it submitted.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobDescription {
    /// Submit through this API version rather than the client's: the cluster serves it, and
    /// the client's cannot express the job (`--cores-per-socket` on 24.11's v0.0.42, which its
    /// v0.0.40 has). `None`: the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_version: Option<super::ApiVersion>,
    pub name: String,
    pub script: String,
    /// Absolute path on the cluster (slurmrestd requires it).
    pub current_working_directory: String,
    /// `NAME=value` entries; slurmrestd requires at least one.
    pub environment: Vec<(String, String)>,
    pub standard_output: Option<String>,
    pub standard_error: Option<String>,
    pub standard_input: Option<String>,
    pub partition: Option<String>,
    pub comment: Option<String>,
    /// Minutes.
    pub time_limit: Option<Limit>,
    /// Minutes.
    pub time_minimum: Option<Limit>,
    pub cpus_per_task: Option<u32>,

    pub account: Option<String>,
    pub account_gather_frequency: Option<String>,
    pub array: Option<String>,
    pub batch_features: Option<String>,
    /// Unix seconds.
    pub begin_time: Option<i64>,
    pub burst_buffer: Option<String>,
    pub cluster_constraint: Option<String>,
    pub constraints: Option<String>,
    pub container: Option<String>,
    pub container_id: Option<String>,
    pub contiguous: Option<bool>,
    pub core_specification: Option<u32>,
    /// `--cores-per-socket` (and the cores of `-B`, `--hint=memory_bound`). Only some versions
    /// have the field (v0.0.40, v0.0.45+); rendering refuses it for the others.
    pub cores_per_socket: Option<u32>,
    pub thread_specification: Option<u32>,
    pub cpu_binding_flags: Vec<CpuBindFlag>,
    pub cpu_frequency: Option<String>,
    pub cpus_per_tres: Option<String>,
    /// Unix seconds.
    pub deadline: Option<i64>,
    /// Seconds.
    pub delay_boot: Option<u32>,
    pub dependency: Option<String>,
    pub distribution: Option<String>,
    pub distribution_plane_size: Option<u16>,
    pub excluded_nodes: Vec<String>,
    pub extra: Option<String>,
    pub flags: Vec<JobFlag>,
    pub hold: Option<bool>,
    pub kill_on_node_fail: Option<bool>,
    pub kill_warning: Option<KillWarning>,
    pub licenses: Option<String>,
    pub mail_type: Vec<MailType>,
    pub mail_user: Option<String>,
    pub mcs_label: Option<String>,
    pub memory: Option<Memory>,
    pub memory_binding: Option<String>,
    pub memory_binding_type: Vec<MemBindType>,
    pub memory_per_tres: Option<String>,
    pub minimum_cpus_per_node: Option<u32>,
    pub network: Option<String>,
    pub nice: Option<i32>,
    /// Node count as sbatch's `-N` takes it: `N` or `N-M`.
    pub nodes: Option<String>,
    pub ntasks_per_tres: Option<u32>,
    pub oom_kill_step: Option<bool>,
    pub open_mode: Option<OpenMode>,
    pub overcommit: Option<bool>,
    pub prefer: Option<String>,
    pub priority: Option<Limit>,
    pub profile: Vec<Profile>,
    pub qos: Option<String>,
    pub reboot: Option<bool>,
    pub required_nodes: Vec<String>,
    pub required_switches: Option<u32>,
    pub requeue: Option<bool>,
    pub reservation: Option<String>,
    pub segment_size: Option<u16>,
    pub shared: Option<Shared>,
    pub sockets_per_node: Option<u32>,
    pub tasks: Option<u32>,
    pub tasks_per_core: Option<u32>,
    pub tasks_per_node: Option<u32>,
    pub tasks_per_socket: Option<u32>,
    /// MiB.
    pub temporary_disk_per_node: Option<u32>,
    pub threads_per_core: Option<u32>,
    pub tres_bind: Option<String>,
    pub tres_freq: Option<String>,
    pub tres_per_job: Option<String>,
    pub tres_per_node: Option<String>,
    pub tres_per_socket: Option<String>,
    pub tres_per_task: Option<String>,
    pub wait_all_nodes: Option<bool>,
    /// Seconds.
    pub wait_for_switch: Option<u32>,
    pub wckey: Option<String>,
}
