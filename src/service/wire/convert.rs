//! `CreateTaskRequest` (protobuf) → the renderer's [`TaskSpec`]. Only shape, no policy: what a
//! task may or may not do is the renderer's and the config's business.

use crate::proto::connector::{CreateTaskRequest, Resource};
use crate::proto::core;
use crate::proto::task::{NamedLiteral, Outputs};
use crate::proto::{json_to_struct, struct_to_json};
use crate::render::{ContainerSpec, InputValue, TaskConfig, TaskSpec, TaskType};

use super::status::TaskStatus;
use super::{Metadata, TaskRequest};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConvertError {
    #[error("CreateTaskRequest has no `template`")]
    NoTemplate,
    #[error(
        "task type `{0}` is not served by this connector; it serves `slurm`, `slurm_script` and (when the deployment enables it) `clustered-task`"
    )]
    TaskType(String),
    #[error(
        "CreateTaskRequest has no `task_execution_metadata.task_execution_id`: cannot tell which run/action/attempt this is"
    )]
    NoExecutionId,
    /// `TaskTemplate.custom`, read here once: its error names the field and the fix.
    #[error(transparent)]
    Custom(#[from] crate::render::RenderError),
}

/// A Flyte 2 CreateTaskRequest as the service's [`TaskRequest`].
pub fn request(req: &CreateTaskRequest) -> Result<TaskRequest, ConvertError> {
    Ok(TaskRequest::with_metadata(
        task_spec(req)?,
        req.connection
            .as_ref()
            .map(|c| c.secrets.clone())
            .unwrap_or_default(),
        req.task_execution_metadata
            .as_ref()
            .map(|t| t as &dyn Metadata),
        None,
    ))
}

/// The renderer's part of a Flyte 2 CreateTaskRequest.
pub fn task_spec(req: &CreateTaskRequest) -> Result<TaskSpec, ConvertError> {
    let t = req.template.as_ref().ok_or(ConvertError::NoTemplate)?;
    let task_type = TaskType::from_template_type(&t.r#type)
        .ok_or_else(|| ConvertError::TaskType(t.r#type.clone()))?;
    let container = t
        .target
        .as_ref()
        .map(|core::task_template::Target::Container(c)| {
            let env = c.env.iter().map(|kv| (kv.key.as_str(), kv.value.as_str()));
            ContainerSpec {
                gpus: c.resources.as_ref().and_then(gpu_count),
                ..ContainerSpec::of(&c.image, &c.command, &c.args, env)
            }
        });
    // The backend builds inputs from a Go map: their order is random. Sorted, so the same
    // execution always renders the same job.
    let mut inputs: Vec<(String, InputValue)> = req
        .inputs
        .iter()
        .flat_map(|i| i.literals.iter())
        .map(|nl| (nl.name.clone(), input_value(nl.value.as_ref())))
        .collect();
    inputs.sort_by(|a, b| a.0.cmp(&b.0));
    let outputs = t
        .interface
        .as_ref()
        .and_then(|i| i.outputs.as_ref())
        .map(|o| {
            o.variables
                .iter()
                .map(|v| {
                    (
                        v.key.clone(),
                        interface_kind(v.value.as_ref().and_then(|v| v.r#type.as_ref())),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let tem = req.task_execution_metadata.as_ref();
    let exec = tem
        .and_then(|m| m.execution())
        .ok_or(ConvertError::NoExecutionId)?;
    let env_vars = tem.map(|m| m.environment()).unwrap_or_default();
    Ok(TaskSpec {
        task_type,
        task_name: t.id.as_ref().map(|i| i.name.clone()).unwrap_or_default(),
        custom: TaskConfig::parse(
            task_type,
            &t.custom
                .as_ref()
                .map(struct_to_json)
                .unwrap_or(serde_json::Value::Null),
        )?,
        container,
        inputs,
        outputs,
        output_prefix: req.output_prefix.clone(),
        exec,
        env_vars,
        script_args: Vec::new(),
        shell_template: None,
        interruptible: super::template_interruptible!(
            t,
            core::task_metadata::InterruptibleValue::Interruptible
        ) || tem.is_some_and(|m| m.interruptible()),
    })
}

super::status::literals!(core);

/// GetTask's answer as Flyte 2's `Resource`.
pub fn resource(s: TaskStatus) -> Resource {
    let custom_info = s.custom_info().map(|v| json_to_struct(&v));
    Resource {
        outputs: s.outputs.map(|blobs| Outputs {
            literals: blobs
                .iter()
                .map(|b| NamedLiteral {
                    name: b.name.clone(),
                    value: Some(blob_literal(b)),
                })
                .collect(),
        }),
        message: s.message,
        log_links: s
            .log_links
            .into_iter()
            .map(|l| core::TaskLog {
                ready: true,
                ..task_log(l)
            })
            .collect(),
        phase: wire_phase(s.phase),
        custom_info,
    }
}

/// The GPU count of `resources` (limits win over requests, as Kubernetes reads them); a value
/// that is not a whole number counts as none.
fn gpu_count(r: &core::Resources) -> Option<u32> {
    let find = |entries: &[core::resources::ResourceEntry]| {
        entries
            .iter()
            .find(|e| e.name == core::resources::ResourceName::Gpu as i32)
            .and_then(|e| e.value.trim().parse::<u32>().ok())
    };
    find(&r.limits).or_else(|| find(&r.requests))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::connector::TaskExecutionMetadata;
    use crate::proto::core::{NodeExecutionIdentifier, TaskExecutionIdentifier};

    /// The smallest Slurm config a `slurm_script` task carries.
    fn slurm_config() -> Option<prost_types::Struct> {
        Some(crate::proto::json_to_struct(
            &serde_json::json!({"script": "#!/bin/bash\ntrue\n"}),
        ))
    }

    /// `custom` is read once, here: a bad key is refused by name before anything else looks at
    /// the task, and a good one reaches the service typed.
    #[test]
    fn the_config_is_parsed_here_and_a_bad_key_is_named() {
        let with = |custom: serde_json::Value| {
            request(&CreateTaskRequest {
                template: Some(core::TaskTemplate {
                    r#type: "slurm_script".into(),
                    custom: Some(crate::proto::json_to_struct(&custom)),
                    ..Default::default()
                }),
                task_execution_metadata: Some(TaskExecutionMetadata {
                    task_execution_id: Some(TaskExecutionIdentifier {
                        node_execution_id: Some(NodeExecutionIdentifier::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let e = with(serde_json::json!({"script": "#!/bin/bash\n", "sbatch": {"nodes_wanted": 2}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sbatch.nodes_wanted"), "{e}");
        let r = with(serde_json::json!({
            "script": "#!/bin/bash\n",
            "connection": {"cluster": "hpc2", "host": "login.hpc2"}
        }))
        .unwrap();
        assert_eq!(r.spec.requested_cluster(), Some("hpc2"));
        assert_eq!(r.spec.requested_host(), Some("login.hpc2"));
    }

    #[test]
    fn interruptible_tasks_bring_their_own_requeue_budget() {
        let with = |interruptible: bool, threshold: i32| {
            let req = CreateTaskRequest {
                template: Some(core::TaskTemplate {
                    r#type: "slurm_script".into(),
                    custom: slurm_config(),
                    ..Default::default()
                }),
                task_execution_metadata: Some(TaskExecutionMetadata {
                    task_execution_id: Some(TaskExecutionIdentifier {
                        node_execution_id: Some(NodeExecutionIdentifier::default()),
                        ..Default::default()
                    }),
                    interruptible,
                    interruptible_failure_threshold: threshold,
                    ..Default::default()
                }),
                ..Default::default()
            };
            request(&req).unwrap().interruptions_allowed
        };
        assert_eq!(with(false, 7), None, "not interruptible");
        assert_eq!(with(true, 0), None, "no threshold given");
        assert_eq!(with(true, 7), Some(7));
    }

    /// flyte-sdk writes `interruptible=True` into the template's metadata, and Flyte 2's backend
    /// never fills `TaskExecutionMetadata.interruptible`: either makes the task interruptible.
    #[test]
    fn interruptible_is_read_from_the_template_or_the_execution() {
        let with = |template: Option<bool>, execution: bool| {
            let req = CreateTaskRequest {
                template: Some(core::TaskTemplate {
                    r#type: "slurm_script".into(),
                    custom: slurm_config(),
                    metadata: template.map(|i| core::TaskMetadata {
                        interruptible_value: Some(
                            core::task_metadata::InterruptibleValue::Interruptible(i),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                task_execution_metadata: Some(TaskExecutionMetadata {
                    task_execution_id: Some(TaskExecutionIdentifier {
                        node_execution_id: Some(NodeExecutionIdentifier::default()),
                        ..Default::default()
                    }),
                    interruptible: execution,
                    ..Default::default()
                }),
                ..Default::default()
            };
            request(&req).unwrap().spec.interruptible
        };
        assert!(with(Some(true), false));
        assert!(with(None, true));
        assert!(!with(Some(false), false));
        assert!(!with(None, false));
    }
}
