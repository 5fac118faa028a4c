//! The CreateTaskRequest of a native `slurm` task as the Flyte SDK makes it (flyte 2.12.1's `a0`
//! container args, the `custom` container/sbatch settings, the execution ids), for
//! tests/real_apptainer.rs, real_pyxis.rs and real_multinode.rs (through `support`).

use slurm_connector::proto::connector::{CreateTaskRequest, TaskExecutionMetadata};
use slurm_connector::proto::core::{
    self, Container, Identifier, NodeExecutionIdentifier, TaskExecutionIdentifier, TaskTemplate,
    WorkflowExecutionIdentifier,
};
use slurm_connector::proto::task::{Inputs, NamedLiteral};

use super::{Cluster, Work, int_literal};

/// What the Flyte SDK puts in a native task's template (flyte 2.12.1's container args), with
/// `{{.input}}`-style templates already rendered as the backend does before CreateTask.
pub fn request(c: &Cluster, w: &Work, task: &str, run: &str, x: i64) -> CreateTaskRequest {
    let prefix = format!("file://{}/out", w.cluster);
    let (inputs, raw, ckpt) = (
        format!("file://{}/io/inputs.pb", w.cluster),
        format!("file://{}/raw", w.cluster),
        format!("file://{}/ckpt", w.cluster),
    );
    request_with(c, w, task, run, x, [&inputs, &prefix, &raw, &ckpt, ""])
}

/// `paths`: what `--inputs`, `--outputs-path`, `--raw-data-path`, `--checkpoint-path`,
/// `--prev-checkpoint` say (rendered values, or the SDK's `{{.input}}`-style templates).
pub fn request_with(
    c: &Cluster,
    w: &Work,
    task: &str,
    run: &str,
    x: i64,
    paths: [&str; 5],
) -> CreateTaskRequest {
    let prefix = format!("file://{}/out", w.cluster);
    let args: Vec<String> = [
        "a0",
        "--inputs",
        paths[0],
        "--outputs-path",
        paths[1],
        "--version",
        "v1",
        "--raw-data-path",
        paths[2],
        "--checkpoint-path",
        paths[3],
        "--prev-checkpoint",
        paths[4],
        "--run-name",
        "{{.runName}}",
        "--name",
        "{{.actionName}}",
        "--resolver",
        "flyte._internal.resolvers.default.DefaultTaskResolver",
        "mod",
        "native_tasks",
        "instance",
        task,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let custom = serde_json::json!({
        "container": {
            "runtime": c.runtime,
            "mounts": [w.cluster],
            // a0 imports the task module from its working directory.
            "workdir": format!("{}/code", w.cluster),
        },
        "sbatch": {"time_limit": "00:10:00"},
    });
    CreateTaskRequest {
        inputs: Some(Inputs {
            literals: vec![NamedLiteral {
                name: "x".into(),
                value: Some(int_literal(x)),
            }],
            ..Default::default()
        }),
        template: Some(TaskTemplate {
            id: Some(Identifier {
                project: "flytesnacks".into(),
                domain: "development".into(),
                name: format!("native_demo.{task}"),
                version: "v1".into(),
                ..Default::default()
            }),
            r#type: "slurm".into(),
            custom: Some(slurm_connector::proto::json_to_struct(&custom)),
            target: Some(core::task_template::Target::Container(Container {
                image: c.image.clone(),
                args,
                ..Default::default()
            })),
            ..Default::default()
        }),
        output_prefix: prefix,
        task_execution_metadata: Some(TaskExecutionMetadata {
            task_execution_id: Some(TaskExecutionIdentifier {
                node_execution_id: Some(NodeExecutionIdentifier {
                    node_id: "a0".into(),
                    execution_id: Some(WorkflowExecutionIdentifier {
                        project: "flytesnacks".into(),
                        domain: "development".into(),
                        name: run.into(),
                        org: "local".into(),
                    }),
                }),
                ..Default::default()
            }),
            namespace: "flytesnacks-development".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}
