//! Rendering inputs: the pieces of a `CreateTaskRequest` the renderer needs (built by the gRPC
//! layer from protobufs, so this module does not depend on prost), and the deployment config.

use crate::slurmrestd::ApiVersion;

use super::RenderError;
use super::clustered::ClusteredSpec;
use super::custom::SlurmCustom;
use std::collections::BTreeMap;

/// `TaskTemplate.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskType {
    /// Native task: the template's container runs the Flyte entrypoint under Pyxis or Apptainer.
    Slurm,
    /// A user-supplied batch script (`custom.script`).
    SlurmScript,
    /// Flyte's `clustered-task` (`flyte.clustered.ClusteredTaskEnvironment`): a native task over
    /// `replicas` nodes × `nproc_per_node` ranks (`super::clustered`).
    Clustered,
    /// Flyte 1's `slurm_fn` (flytekitplugins-slurm's `SlurmFunctionTask`): the template's
    /// entrypoint (`pyflyte-execute ...`) run by the batch script in the cluster's own Python
    /// environment, no container, where the task's `script` says `{task.fn}`. Only the Flyte 1
    /// service makes it (`service/wire/flyte1.rs`): the Flyte 2 protocol has no such type.
    Function,
}

impl TaskType {
    /// Maps `TaskTemplate.type`; `None` for a task type this connector does not serve.
    pub fn from_template_type(t: &str) -> Option<TaskType> {
        match t {
            "slurm" => Some(TaskType::Slurm),
            "slurm_script" => Some(TaskType::SlurmScript),
            CLUSTERED_TASK_TYPE => Some(TaskType::Clustered),
            _ => None,
        }
    }

    /// The task runs Flyte's entrypoint, which writes outputs.pb / error.pb at its prefix.
    pub fn is_native(self) -> bool {
        matches!(
            self,
            TaskType::Slurm | TaskType::Clustered | TaskType::Function
        )
    }

    /// The entrypoint runs in the template's container (Pyxis or Apptainer).
    pub fn in_container(self) -> bool {
        matches!(self, TaskType::Slurm | TaskType::Clustered)
    }
}

/// `TaskTemplate.type` of Flyte's clustered tasks (task_type_version 1).
pub const CLUSTERED_TASK_TYPE: &str = "clustered-task";

/// `TaskTemplate.container` (already template-rendered by the Flyte backend).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSpec {
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// `Container.env`, in order.
    pub env: Vec<(String, String)>,
    /// `Container.resources`' GPU count (limits, else requests): per node for a clustered task.
    pub gpus: Option<u32>,
}

impl ContainerSpec {
    /// From a template's container, whichever Flyte's protos it came in (each front end lists
    /// its `env` pairs).
    pub fn of<'a>(
        image: &str,
        command: &[String],
        args: &[String],
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> ContainerSpec {
        ContainerSpec {
            image: image.to_string(),
            command: command.to_vec(),
            args: args.to_vec(),
            env: env
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            gpus: None,
        }
    }
}

/// One input literal, reduced to what a script task can receive.
#[derive(Debug, Clone, PartialEq)]
pub enum InputValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A File (`multipart == false`) or Dir (`true`) input: passed as its URI.
    Blob {
        uri: String,
        multipart: bool,
    },
    /// Anything else (collections, maps, structs, ...): refused for script tasks.
    Unsupported {
        type_name: String,
    },
}

/// The kind of an output in the task's typed interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterfaceKind {
    /// Blob, SINGLE.
    File,
    /// Blob, MULTIPART.
    Dir,
    /// Anything else (e.g. `simple: FLOAT`).
    Other(String),
}

/// Who the Flyte run/action/attempt is; derived from `TaskExecutionMetadata.task_execution_id`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionIdentity {
    pub org: String,
    pub project: String,
    pub domain: String,
    /// `WorkflowExecutionIdentifier.name`.
    pub run_name: String,
    /// `NodeExecutionIdentifier.node_id`.
    pub action_name: String,
    /// `TaskExecutionIdentifier.retry_attempt`.
    pub attempt: u32,
}

impl ExecutionIdentity {
    /// SHA-256 over org, project, domain, run, action and attempt, each length-prefixed so no
    /// two identities share an encoding. A cryptographic hash, so a run name cannot be crafted
    /// to share another run's job key or claim.
    pub fn digest(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [
            &self.org,
            &self.project,
            &self.domain,
            &self.run_name,
            &self.action_name,
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.update(self.attempt.to_be_bytes());
        h.finalize().into()
    }
}

/// `project/domain/run/action#attempt`: how the log names an execution, what an operator greps
/// for to find a Flyte run's Slurm jobs.
impl std::fmt::Display for ExecutionIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}#{}",
            self.project, self.domain, self.run_name, self.action_name, self.attempt
        )
    }
}

/// Everything about one task execution that rendering reads.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub task_type: TaskType,
    /// `TaskTemplate.id.name`, e.g. `pipeline.preprocess`.
    pub task_name: String,
    /// `TaskTemplate.custom`, parsed once by the front end that received it.
    pub custom: TaskConfig,
    /// `TaskTemplate.container`, if the template has one.
    pub container: Option<ContainerSpec>,
    /// `CreateTaskRequest.inputs`, by name.
    pub inputs: Vec<(String, InputValue)>,
    /// `TaskTemplate.interface.outputs`, by name.
    pub outputs: Vec<(String, InterfaceKind)>,
    /// `CreateTaskRequest.output_prefix`.
    pub output_prefix: String,
    pub exec: ExecutionIdentity,
    /// `TaskExecutionMetadata.environment_variables` (carries `RUN_NAME`, `ACTION_NAME`, ...).
    pub env_vars: BTreeMap<String, String>,
    /// Arguments the script is run with (`$1`, `$2`, ...): a Flyte 1 `slurm` task's
    /// `batch_script_args`, as `sbatch script ARGS` passes them. Empty for every Flyte 2 task.
    pub script_args: Vec<String>,
    /// A Flyte 1 `SlurmShellTask`: its `script` is a template the connector fills in
    /// (render/template.rs). `None` for every other task.
    pub shell_template: Option<ShellTemplate>,
    /// The task may be preempted (`interruptible=True`: `TaskTemplate.metadata.interruptible`,
    /// where flyte-sdk and flytekit write it, or `TaskExecutionMetadata.interruptible`): it goes
    /// where the site sends such tasks, is requeued by Slurm and warned before a kill.
    pub interruptible: bool,
}

/// Flyte 1's `SlurmShellTask` (flytekitplugins-slurm): the task's `script` is a Python format
/// string whose `{inputs.x}` and `{outputs.y}` are filled in before it is submitted, as the
/// plugin's agent did, and each output is read from a path on the cluster the task chose.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShellTemplate {
    /// `output_locs`: each output's path on the cluster, itself a template over the inputs
    /// (`/scratch/{inputs.name}.csv`), in the order the task lists them.
    pub output_locations: Vec<(String, String)>,
}

/// A task's `TaskTemplate.custom`, parsed once where its request is received (each front end),
/// so no layer after it reads or edits JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskConfig {
    /// The Slurm plugin's config: every task type but `clustered-task`.
    Slurm(Box<SlurmCustom>),
    /// A `clustered-task`'s `ClusteredTaskSpec`: made a Slurm config on the site's terms when
    /// it is rendered (`clustered.rs`).
    Clustered(ClusteredSpec),
}

impl TaskConfig {
    /// `custom` (a protobuf Struct as JSON: numbers are floats) as a task of `task_type` reads
    /// it; an error names the field and the fix.
    pub fn parse(task_type: TaskType, custom: &serde_json::Value) -> Result<Self, RenderError> {
        Ok(match task_type {
            TaskType::Clustered => TaskConfig::Clustered(super::clustered::parse(custom)?),
            _ => TaskConfig::Slurm(Box::new(super::custom::parse(custom)?)),
        })
    }

    /// The Slurm config, but for a clustered task (made from its spec when rendered).
    pub fn slurm(&self) -> Option<&SlurmCustom> {
        match self {
            TaskConfig::Slurm(c) => Some(c.as_ref()),
            TaskConfig::Clustered(_) => None,
        }
    }
}

impl TaskSpec {
    /// The cluster the task names (`custom.connection.cluster`, as the Python plugin writes
    /// it); `None`: the deployment's default.
    pub fn requested_cluster(&self) -> Option<&str> {
        self.custom.slurm()?.connection.cluster.as_deref()
    }

    /// The SSH login host the task names (`custom.connection.host`: the published plugin writes
    /// it), which selects the cluster listing it in `ssh_hosts` when no cluster is named.
    pub fn requested_host(&self) -> Option<&str> {
        self.custom.slurm()?.connection.host.as_deref()
    }
}

/// Deployment settings that shape every job (connector environment / config file).
#[derive(Debug, Clone, PartialEq)]
pub struct RenderConfig {
    /// Absolute directory on the cluster's shared filesystem for job files
    /// (`FLYTE_SLURM_WORKING_DIR`). Wins over a task's `working_dir`. With neither, rendering
    /// refuses: a REST job has no home directory to default to.
    pub working_dir: Option<String>,
    /// Partition used when neither the task nor its script names one (`None`: Slurm's default).
    pub default_partition: Option<String>,
    /// The job's base environment, lowest precedence (PATH at least; see `env.rs`).
    pub base_env: Vec<(String, String)>,
    /// Seconds east of UTC of the cluster's clock, for `--begin`/`--deadline` wall-clock times
    /// (sbatch reads them in the submit host's local time).
    pub cluster_utc_offset_seconds: i32,
    /// Module init scripts tried in order when a task asks for `modules` (the first readable one
    /// is sourced; a REST job has no `module` function from a login shell).
    pub module_init_scripts: Vec<String>,
    /// The slurmrestd data_parser version the job description is for (the cluster's negotiated
    /// one): which sbatch options can be expressed depends on it.
    pub api_version: ApiVersion,
    /// The deployment's settings for `clustered-task` (`FLYTE_SLURM_CLUSTERED_*`).
    pub clustered: super::clustered::ClusteredSite,
    /// The deployment's settings for interruptible tasks (`FLYTE_SLURM_INTERRUPTIBLE_*`).
    pub interruptible: crate::domain::site::InterruptibleSite,
    /// The cluster's image mapping (`[[clusters.NAME.images]]`): task images → pre-staged files.
    pub images: crate::config::images::ImageMap,
}

/// `PATH` of a job when the deployment does not say otherwise (Debian's login default plus the
/// usual local prefixes; enough to find `srun`, `apptainer`, `bash`, coreutils).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where environment-modules and Lmod put their bash init scripts on common distributions.
pub const DEFAULT_MODULE_INIT_SCRIPTS: &[&str] = &[
    "/etc/profile.d/modules.sh",
    "/usr/share/modules/init/bash",
    "/etc/profile.d/lmod.sh",
    "/usr/share/lmod/lmod/init/bash",
];

impl Default for RenderConfig {
    fn default() -> Self {
        RenderConfig {
            working_dir: None,
            default_partition: None,
            base_env: vec![
                ("PATH".to_string(), DEFAULT_PATH.to_string()),
                ("LANG".to_string(), "C.UTF-8".to_string()),
            ],
            cluster_utc_offset_seconds: 0,
            module_init_scripts: DEFAULT_MODULE_INIT_SCRIPTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            api_version: ApiVersion::V0042,
            clustered: Default::default(),
            interruptible: Default::default(),
            images: Default::default(),
        }
    }
}
