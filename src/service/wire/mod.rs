//! What crosses the wire besides the RPCs themselves: each protocol's request turned into the one
//! [`TaskRequest`] the service decides and renders from (`convert` for Flyte 2's connector
//! protocol, `flyte1` for Flyte 1's agent protocol), and the `resource_meta` the backend keeps for
//! each task and sends back with every call (`meta`, also the Python connector's, for a drop-in).
//!
//! GetTask's answer crosses back the same way: the read path makes one [`status::TaskStatus`],
//! and each protocol's seam turns it into its own `Resource` (`convert::resource`,
//! `flyte1::resource`).
//!
//! A leaf of `service`: imports `proto`, `config`, `render`, `slurmrestd`, `staging` and
//! `tracker` types, nothing of `service`.

pub mod convert;
pub mod flyte1;
pub mod meta;
pub mod status;

use std::collections::{BTreeMap, HashMap};

use crate::config::identity::Requester;
use crate::render::{ExecutionIdentity, TaskSpec};

/// One CreateTask, whichever protocol brought it: all that CreateTask decides with (the
/// identity rules, the cluster, the credentials, the requeue budget) besides the renderer's
/// spec. Made only by the protocol seams (`convert::request`, `flyte1::request`), so nothing
/// after them reads a wire message and both protocols share every decision.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    pub spec: TaskSpec,
    /// `connection.secrets` (Flyte 2; Flyte 1's request has no connection).
    pub secrets: HashMap<String, String>,
    /// The service account the task runs under: `identity.k8s_service_account`, else
    /// `task_execution_metadata.k8s_service_account`.
    pub service_account: String,
    /// `task_execution_metadata.identity.execution_identity`.
    pub execution_identity: String,
    /// An interruptible task's `interruptible_failure_threshold` (when above zero): how many
    /// interruptions it accepts instead of the deployment's requeue budget.
    pub interruptions_allowed: Option<u32>,
    /// A Flyte 1 `slurm` task's script already on the cluster (`batch_script_path`): the service
    /// reads it through staging into `spec.custom.script` before rendering, as `sbatch PATH`
    /// reads the file (and its `#SBATCH` lines) at submit time.
    pub script_file: Option<String>,
}

impl TaskRequest {
    /// The request's matchers for the identity rules: project and domain from the execution id
    /// (what the platform vouches for), the rest from the task's security context.
    pub fn requester(&self) -> Requester {
        Requester {
            project: self.spec.exec.project.clone(),
            domain: self.spec.exec.domain.clone(),
            service_account: self.service_account.clone(),
            execution_identity: self.execution_identity.clone(),
        }
    }
}

/// What CreateTask reads from a `TaskExecutionMetadata`. Flyte 2's message descends from Flyte 1's
/// and keeps its fields, but the two are distinct Rust types: one body, implemented for both by
/// [`read_metadata!`], so the protocols cannot drift apart in how they are read.
pub(super) trait Metadata {
    /// Run, action and attempt (`None` without `task_execution_id`).
    fn execution(&self) -> Option<ExecutionIdentity>;
    /// `identity.k8s_service_account`, else `k8s_service_account`.
    fn service_account(&self) -> String;
    fn execution_identity(&self) -> String;
    /// `interruptible_failure_threshold` of an interruptible task, when above zero.
    fn interruptions_allowed(&self) -> Option<u32>;
    /// `interruptible` (Flyte 1's propeller fills it from the node; Flyte 2's backend never does,
    /// so the template's metadata is read too, `template_interruptible`).
    fn interruptible(&self) -> bool;
    fn environment(&self) -> BTreeMap<String, String>;
}

/// `TaskTemplate.metadata.interruptible`, where flyte-sdk (`@env.task(interruptible=True)`) and
/// flytekit (`@task(interruptible=True)`) write it. Flyte 1 and 2 have distinct types with the
/// same shape, hence a macro.
macro_rules! template_interruptible {
    ($template:expr, $oneof:path) => {
        $template
            .metadata
            .as_ref()
            .and_then(|m| m.interruptible_value.as_ref())
            .is_some_and(|v| matches!(v, $oneof(true)))
    };
}
pub(super) use template_interruptible;

macro_rules! read_metadata {
    ($t:ty) => {
        impl $crate::service::wire::Metadata for $t {
            fn execution(&self) -> Option<$crate::render::ExecutionIdentity> {
                let tid = self.task_execution_id.as_ref()?;
                let node = tid.node_execution_id.as_ref();
                let wf = node.and_then(|n| n.execution_id.as_ref());
                Some($crate::render::ExecutionIdentity {
                    org: wf.map(|w| w.org.clone()).unwrap_or_default(),
                    project: wf.map(|w| w.project.clone()).unwrap_or_default(),
                    domain: wf.map(|w| w.domain.clone()).unwrap_or_default(),
                    run_name: wf.map(|w| w.name.clone()).unwrap_or_default(),
                    action_name: node.map(|n| n.node_id.clone()).unwrap_or_default(),
                    attempt: tid.retry_attempt,
                })
            }
            fn service_account(&self) -> String {
                self.identity
                    .as_ref()
                    .map(|i| i.k8s_service_account.clone())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| self.k8s_service_account.clone())
            }
            fn execution_identity(&self) -> String {
                self.identity
                    .as_ref()
                    .map(|i| i.execution_identity.clone())
                    .unwrap_or_default()
            }
            fn interruptions_allowed(&self) -> Option<u32> {
                (self.interruptible && self.interruptible_failure_threshold > 0)
                    .then_some(self.interruptible_failure_threshold as u32)
            }
            fn interruptible(&self) -> bool {
                self.interruptible
            }
            fn environment(&self) -> std::collections::BTreeMap<String, String> {
                self.environment_variables
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
        }
    };
}

read_metadata!(crate::proto::connector::TaskExecutionMetadata);
read_metadata!(crate::proto::flyte1::admin::TaskExecutionMetadata);

impl TaskRequest {
    /// The request around `spec`, with what its metadata says (none: the defaults).
    pub(super) fn with_metadata(
        spec: TaskSpec,
        secrets: HashMap<String, String>,
        tem: Option<&dyn Metadata>,
        script_file: Option<String>,
    ) -> TaskRequest {
        TaskRequest {
            spec,
            secrets,
            service_account: tem.map(|t| t.service_account()).unwrap_or_default(),
            execution_identity: tem.map(|t| t.execution_identity()).unwrap_or_default(),
            interruptions_allowed: tem.and_then(|t| t.interruptions_allowed()),
            script_file,
        }
    }
}
