//! What crosses the wire besides the RPCs themselves: each protocol's request turned into the one
//! [`TaskRequest`] the service decides and renders from (`convert` for Flyte 2's connector
//! protocol, `flyte1` for Flyte 1's agent protocol), and the `resource_meta` the backend keeps for
//! each task and sends back with every call (`meta`, also the Python connector's, for a drop-in).
//!
//! A leaf of `service`: imports `proto`, `config`, `render` and `slurmrestd` types, nothing of
//! `service`.

pub mod convert;
pub mod flyte1;
pub mod meta;

use std::collections::HashMap;

use crate::config::identity::Requester;
use crate::render::TaskSpec;

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
