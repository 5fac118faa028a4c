//! GetTask's answer as it is decided: a [`Verdict`] made from the tracker's snapshot, passed
//! through the stages of [`super::resource`] in order (each may change the phase, the failure
//! class, the message and the outputs, and says why in its own file), then turned into the
//! wire's `Resource` once.

use crate::proto::connector::Resource;
use crate::proto::core::task_execution::Phase;
use crate::proto::task::Outputs;
use crate::staging;
use crate::tracker::{FailureClass, JobSnapshot};

use crate::service::wire::meta::ResourceMeta;

use super::message::{failed_elements, message};

/// At most this many elements are listed in `custom_info` (the counts cover all).
const ELEMENTS_LISTED: usize = 200;

/// What GetTask will answer, so far.
#[derive(Debug)]
pub struct Verdict {
    pub phase: Phase,
    /// Whose failure it is (the user's code, the cluster's, or neither can be helped).
    pub class: Option<FailureClass>,
    /// The plugin's message format: the status line first, details on the lines after.
    pub message: String,
    /// The declared outputs, once uploaded.
    pub outputs: Option<Outputs>,
}

impl Verdict {
    /// The tracker's view of the job, said as the plugin says it.
    pub fn of(meta: &ResourceMeta, snap: &JobSnapshot) -> Verdict {
        Verdict {
            phase: snap.phase,
            class: snap.class,
            message: message(meta, snap),
            outputs: None,
        }
    }

    /// Failed or retryably failed: the stages that explain a failure apply.
    pub fn failed(&self) -> bool {
        matches!(self.phase, Phase::Failed | Phase::RetryableFailed)
    }

    /// The wire's answer: the verdict, the job's facts in `custom_info`, the log links.
    pub fn into_resource(
        self,
        meta: &ResourceMeta,
        snap: &JobSnapshot,
        log_templates: &[staging::logs::LogLinkTemplate],
    ) -> Resource {
        let v = self;
        let mut custom_info = serde_json::json!({
            "cluster": meta.cluster,
            "job_id": own_job_id(meta, snap).0,
            "job_name": meta.job_name,
            "state": snap.state,
            "reason": snap.reason,
            "exit_code": snap.exit_code.as_ref().map(|e| e.to_string()),
            "signal": snap.signal,
            "nodes": snap.nodes,
            "requeue_count": snap.restart_count.unwrap_or(0),
            "failure_class": v.class.map(|c| c.as_str()),
            "stdout": meta.stdout,
            "stderr": meta.stderr,
        });
        if let Some(index) = meta.element {
            // An element of an array the connector made of several tasks' jobs: `job_id` is its
            // own (the array's until it starts: Slurm splits a pending element off only then).
            custom_info["array_job_id"] = serde_json::json!(meta.job_id.0);
            custom_info["array_task_id"] = serde_json::json!(index);
        }
        if !snap.elements.is_empty() {
            let mut counts = serde_json::Map::new();
            for e in &snap.elements {
                let state = e
                    .snapshot
                    .state
                    .as_deref()
                    .map(|t| t.split('+').next().unwrap_or(t))
                    .unwrap_or("UNKNOWN");
                let n = counts.get(state).and_then(|v| v.as_u64()).unwrap_or(0);
                counts.insert(state.to_string(), serde_json::json!(n + 1));
            }
            custom_info["array"] = serde_json::json!({
                "indices": meta.array,
                "total": snap.elements.len(),
                "counts": counts,
                // Bounded: custom_info travels in every task event.
                "elements": snap.elements.iter().take(ELEMENTS_LISTED).map(|e| serde_json::json!({
                    "index": e.index,
                    "job_id": e.snapshot.job_id.0,
                    "state": e.snapshot.state,
                    "exit_code": e.snapshot.exit_code.as_ref().map(|c| c.to_string()),
                })).collect::<Vec<_>>(),
                "failed": failed_elements(snap).iter().map(|e| e.index).collect::<Vec<_>>(),
            });
        }
        Resource {
            outputs: v.outputs,
            message: v.message,
            log_links: log_links(log_templates, meta, snap),
            phase: v.phase as i32,
            custom_info: Some(crate::proto::json_to_struct(&custom_info)),
        }
    }
}

/// The Slurm job that is this task: an element of a coalesced array is the task, and its job id
/// is its own once Slurm gave it one; every other task's is the meta's.
fn own_job_id(meta: &ResourceMeta, snap: &JobSnapshot) -> crate::slurmrestd::JobId {
    match meta.element {
        Some(_) if snap.job_id.0 != 0 => snap.job_id,
        _ => meta.job_id,
    }
}

/// The deployment's log-link templates filled in for this job (percent-encoded values).
fn log_links(
    templates: &[staging::logs::LogLinkTemplate],
    meta: &ResourceMeta,
    snap: &JobSnapshot,
) -> Vec<crate::proto::core::TaskLog> {
    let job_id = own_job_id(meta, snap).to_string();
    let vars = staging::logs::LogVars {
        job_id: &job_id,
        stdout: &meta.stdout,
        stderr: &meta.stderr,
        cluster: &meta.cluster,
    };
    staging::logs::render_links(templates, &vars)
        .into_iter()
        .map(|(name, uri)| crate::proto::core::TaskLog {
            uri,
            name,
            show_while_pending: true,
            ready: true,
            ..Default::default()
        })
        .collect()
}
