//! Flyte 1's agent protocol (`flyteidl.admin`, flyteidl 1.16) at its one seam: a CreateTaskRequest
//! made by flytekit and flytekitplugins-slurm becomes the same [`TaskRequest`] a Flyte 2 request
//! does, and the service's answers go back as Flyte 1's messages. Only shape, no policy: the
//! identity rules, the cluster, rendering, once-only submission and tracking are the same code
//! for both protocols.
//!
//! The plugin's two task types, their `custom` unchanged:
//! - `slurm_fn` (`SlurmFunctionTask`) → [`TaskType::Function`]: the template's
//!   `pyflyte-execute ...` run by the batch script where `script` says `{task.fn}`.
//! - `slurm` (`SlurmTask`) → a `slurm_script` task whose script is the file at
//!   `batch_script_path` (read through staging by the service), run with `batch_script_args`.
//!
//! `sbatch_config` is sbatch's command line in the plugin, so it becomes `sbatch_options` (checked
//! option by option like every task's); the options the connector owns (`job-name`, `output`,
//! `error`, `chdir`: it names the job and reads its logs) are overridden with a log note, as in a
//! script's `#SBATCH` lines. `ssh_config` is SSH's: only its `host` is read, to pick the cluster
//! that lists it in `ssh_hosts`, as the Flyte 2 plugin's `connection.host` is.

use std::collections::BTreeMap;

use prost::Message;
use serde_json::{Map, Value};

use crate::proto::flyte1::{admin, core as core1};
use crate::proto::{connector, core as core2, struct_to_json, task as task2};
use crate::render::{ContainerSpec, TaskSpec, TaskType};

use super::{Metadata, TaskRequest};

/// Flyte 1's `slurm_fn`: flytekitplugins-slurm's `SlurmFunctionTask`.
pub const FUNCTION_TASK_TYPE: &str = "slurm_fn";
/// Flyte 1's `slurm`: flytekitplugins-slurm's `SlurmTask` (a batch script on the cluster).
pub const SCRIPT_TASK_TYPE: &str = "slurm";
/// The task types the Flyte 1 service serves.
pub const TASK_TYPES: &[&str] = &[FUNCTION_TASK_TYPE, SCRIPT_TASK_TYPE];

/// The `custom` keys the published plugin writes (1.16.31).
const FUNCTION_KEYS: &[&str] = &["ssh_config", "sbatch_config", "script"];
const SCRIPT_KEYS: &[&str] = &[
    "ssh_config",
    "sbatch_config",
    "batch_script_path",
    "batch_script_args",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Flyte1Error {
    #[error("CreateTaskRequest has no `template`")]
    NoTemplate,
    #[error(
        "task type `{0}` is not served by this agent; it serves `slurm_fn` and `slurm` \
         (flytekitplugins-slurm's SlurmFunctionTask and SlurmTask)"
    )]
    TaskType(String),
    #[error(
        "CreateTaskRequest has no `task_execution_metadata.task_execution_id`: cannot tell which \
         execution/node/attempt this is"
    )]
    NoExecutionId,
    #[error("task config `{field}`: {problem}")]
    Custom { field: String, problem: String },
}

fn custom_err(field: &str, problem: impl Into<String>) -> Flyte1Error {
    Flyte1Error::Custom {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// A Flyte 1 CreateTaskRequest as the service's [`TaskRequest`].
pub fn request(req: &admin::CreateTaskRequest) -> Result<TaskRequest, Flyte1Error> {
    let t = req.template.as_ref().ok_or(Flyte1Error::NoTemplate)?;
    let custom = t.custom.as_ref().map(struct_to_json).unwrap_or(Value::Null);
    let custom = match custom {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        _ => return Err(custom_err("custom", "must be a JSON object")),
    };
    let (task_type, keys) = match t.r#type.as_str() {
        FUNCTION_TASK_TYPE => (TaskType::Function, FUNCTION_KEYS),
        SCRIPT_TASK_TYPE => (TaskType::SlurmScript, SCRIPT_KEYS),
        other => return Err(Flyte1Error::TaskType(other.to_string())),
    };
    if let Some(k) = custom.keys().find(|k| !keys.contains(&k.as_str())) {
        let shell_task = t.r#type == SCRIPT_TASK_TYPE
            && ["script", "python_input_types", "output_locs"].contains(&k.as_str());
        return Err(custom_err(
            k,
            if shell_task {
                "a SlurmShellTask's inline script is not served (its config holds Python types, which \
                 flytekit cannot register); put the script in a file on the cluster and use \
                 SlurmTask(batch_script_path=...), or a Flyte 2 slurm_script task"
                    .to_string()
            } else {
                format!(
                    "not a key flytekitplugins-slurm writes for a `{}` task (it writes {}); remove it",
                    t.r#type,
                    keys.join(", ")
                )
            },
        ));
    }

    let mut v2 = Map::new();
    if let Some(ssh) = custom.get("ssh_config").filter(|v| !v.is_null()) {
        let host = ssh.get("host").and_then(Value::as_str);
        tracing::info!(
            host,
            "task config `ssh_config` ignored: the connector reaches the cluster through slurmrestd \
             (its `host` only selects the cluster that lists it in `ssh_hosts`)"
        );
        if let Some(h) = host {
            v2.insert("connection".into(), serde_json::json!({ "host": h }));
        }
    }
    v2.insert("sbatch_options".into(), sbatch_options(&custom)?);
    let mut script_file = None;
    let mut script_args = Vec::new();
    match task_type {
        TaskType::Function => {
            if let Some(s) = custom.get("script").filter(|v| !v.is_null()) {
                let s = s
                    .as_str()
                    .ok_or_else(|| custom_err("script", "must be a string"))?;
                v2.insert("script".into(), Value::String(s.to_string()));
            }
        }
        _ => {
            let path = custom
                .get("batch_script_path")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| {
                    custom_err(
                        "batch_script_path",
                        "a slurm task names its batch script on the cluster (SlurmTask(batch_script_path=...))",
                    )
                })?;
            if !path.starts_with('/') || path.chars().any(char::is_control) {
                return Err(custom_err(
                    "batch_script_path",
                    format!(
                        "`{}` must be an absolute path on the cluster's shared filesystem",
                        path.escape_default()
                    ),
                ));
            }
            script_file = Some(path.to_string());
            script_args = match custom.get("batch_script_args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        scalar_text(v).ok_or_else(|| {
                            custom_err("batch_script_args", "must be a list of strings")
                        })
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => {
                    return Err(custom_err("batch_script_args", "must be a list of strings"));
                }
            };
        }
    }

    let tem = req.task_execution_metadata.as_ref();
    // Flyte 1's retry is a new attempt: a new key, a new job (never the previous attempt's).
    let exec = tem
        .and_then(|m| m.execution())
        .ok_or(Flyte1Error::NoExecutionId)?;
    let container = t.target.as_ref().and_then(|target| match target {
        core1::task_template::Target::Container(c) => Some(ContainerSpec {
            image: c.image.clone(),
            command: c.command.clone(),
            args: c.args.clone(),
            env: c
                .env
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect(),
            gpus: None,
        }),
        _ => None,
    });
    let spec = TaskSpec {
        task_type,
        task_name: t.id.as_ref().map(|i| i.name.clone()).unwrap_or_default(),
        custom: Value::Object(v2),
        // pyflyte-execute reads its inputs itself, and a script on the cluster takes its
        // arguments, not the task's inputs: the plugin passes neither to the job.
        container,
        inputs: Vec::new(),
        outputs: Vec::new(),
        output_prefix: req.output_prefix.clone(),
        exec,
        env_vars: tem.map(|m| m.environment()).unwrap_or_default(),
        script_args,
    };
    // Flyte 1's request has no connection (no per-task secrets).
    Ok(TaskRequest::with_metadata(
        spec,
        Default::default(),
        tem.map(|t| t as &dyn Metadata),
        script_file,
    ))
}

/// `sbatch_config` (`{option: value}`, each `--option value` on the plugin's sbatch command line)
/// as `sbatch_options`, without the options the connector owns.
fn sbatch_options(custom: &Map<String, Value>) -> Result<Value, Flyte1Error> {
    let mut out = BTreeMap::new();
    match custom.get("sbatch_config") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let name = k.trim_start_matches('-');
                if crate::render::options::OVERRIDDEN_FROM_SCRIPT.contains(&name) {
                    tracing::info!(
                        option = name,
                        "sbatch_config option overridden: the connector sets the job's name, files \
                         and working directory (GetTaskLogs returns the job's output)"
                    );
                    continue;
                }
                let text = scalar_text(v).ok_or_else(|| {
                    custom_err(
                        &format!("sbatch_config.{k}"),
                        "must be a string or a number",
                    )
                })?;
                out.insert(name.to_string(), Value::String(text));
            }
        }
        Some(_) => {
            return Err(custom_err(
                "sbatch_config",
                "must be a map of option to value",
            ));
        }
    }
    Ok(Value::Object(out.into_iter().collect()))
}

/// A config value as the plugin's `str(val)` would put it on the command line.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(crate::render::custom::number_text(n)),
        Value::Bool(b) => Some(if *b { "True" } else { "False" }.to_string()),
        _ => None,
    }
}

/// The service's answer to GetTask as Flyte 1's `Resource`. The messages are Flyte 2's
/// descendants: the phase enum has the same values, and a literal has the same fields, so each
/// output literal crosses by its protobuf bytes (pinned by `literals_cross_unchanged` below).
pub fn resource(r: connector::Resource) -> admin::Resource {
    admin::Resource {
        outputs: r.outputs.map(literal_map),
        message: r.message,
        log_links: r.log_links.into_iter().map(task_log).collect(),
        phase: r.phase,
        custom_info: r.custom_info,
        ..Default::default()
    }
}

fn literal_map(o: task2::Outputs) -> core1::LiteralMap {
    core1::LiteralMap {
        literals: o
            .literals
            .into_iter()
            .map(|nl| {
                let value = nl.value.map(|l| literal(&l)).unwrap_or_default();
                (nl.name, value)
            })
            .collect(),
    }
}

fn literal(l: &core2::Literal) -> core1::Literal {
    // Same field numbers and types (flyteidl2's literals.proto is flyteidl's, minus artifacts):
    // a decode of the other's bytes cannot fail.
    core1::Literal::decode(l.encode_to_vec().as_slice()).unwrap_or_default()
}

fn task_log(l: core2::TaskLog) -> core1::TaskLog {
    core1::TaskLog {
        uri: l.uri,
        name: l.name,
        message_format: l.message_format,
        ttl: l.ttl,
        show_while_pending: l.show_while_pending,
        hide_once_finished: l.hide_once_finished,
    }
}

/// What the Flyte 1 agent is called and serves (`ListAgents`, `GetAgent`).
pub fn agent(name: &str) -> admin::Agent {
    #[allow(deprecated)]
    admin::Agent {
        name: name.to_string(),
        supported_task_types: TASK_TYPES.iter().map(|t| t.to_string()).collect(),
        is_sync: false,
        supported_task_categories: TASK_TYPES
            .iter()
            .map(|t| admin::TaskCategory {
                name: t.to_string(),
                version: 0,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request made by flytekit and flytekitplugins-slurm 1.16.31 (`scripts/make-flyte1-fixtures.py`).
    fn fixture(name: &str) -> admin::CreateTaskRequest {
        let path = format!(
            "{}/tests/fixtures/flyte1/{name}.pb",
            env!("CARGO_MANIFEST_DIR")
        );
        admin::CreateTaskRequest::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
    }

    #[test]
    fn slurm_fn_becomes_a_function_task_with_its_options_and_identity() {
        let r = request(&fixture("slurm_fn_script")).unwrap();
        assert_eq!(r.spec.task_type, TaskType::Function);
        assert_eq!(r.spec.task_name, "flyte1_fixture_tasks.mean");
        assert_eq!(
            (
                r.spec.exec.project.as_str(),
                r.spec.exec.domain.as_str(),
                r.spec.exec.run_name.as_str(),
                r.spec.exec.action_name.as_str(),
                r.spec.exec.attempt
            ),
            ("flytesnacks", "development", "f1fixture01", "n0", 0)
        );
        // job-name is the connector's (the key is in it); the rest are sbatch's.
        assert_eq!(
            r.spec.custom["sbatch_options"],
            serde_json::json!({"partition": "debug", "time": "00:10:00"})
        );
        assert_eq!(
            r.spec.custom["connection"],
            serde_json::json!({"host": "login.hpc.example.org"}),
            "ssh_config's host picks the cluster; its username is SSH's and ignored"
        );
        assert!(
            r.spec.custom["script"]
                .as_str()
                .unwrap()
                .contains("{task.fn}")
        );
        assert_eq!(r.service_account, "default");
        assert!(r.script_file.is_none() && r.secrets.is_empty());
        let args = &r.spec.container.as_ref().unwrap().args;
        assert!(args.windows(2).any(|w| w == ["--prev-checkpoint", ""]));

        let retry = request(&fixture("slurm_fn_retry")).unwrap();
        assert_eq!(retry.spec.exec.attempt, 1, "a retry is a new attempt");
    }

    #[test]
    fn slurm_names_its_script_file_and_arguments() {
        let r = request(&fixture("slurm_script_path")).unwrap();
        assert_eq!(r.spec.task_type, TaskType::SlurmScript);
        assert_eq!(r.script_file.as_deref(), Some("/home/alice/jobs/train.sh"));
        assert_eq!(r.spec.script_args, ["--epochs", "3", "--tag", "run one"]);
        assert_eq!(
            r.spec.custom["sbatch_options"],
            serde_json::json!({"partition": "debug", "time": "00:05:00"}),
            "output is the connector's (GetTaskLogs reads it)"
        );
    }

    #[test]
    fn what_the_plugin_never_writes_is_refused_by_name() {
        let with = |key: &str, v: prost_types::Value| {
            let mut req = fixture("slurm_script_path");
            let t = req.template.as_mut().unwrap();
            t.custom.as_mut().unwrap().fields.insert(key.into(), v);
            request(&req).unwrap_err().to_string()
        };
        let s = |t: &str| prost_types::Value {
            kind: Some(prost_types::value::Kind::StringValue(t.into())),
        };
        let e = with("output_locs", s("x"));
        assert!(
            e.contains("output_locs") && e.contains("SlurmShellTask"),
            "{e}"
        );
        let e = with("sbatch", s("x"));
        assert!(
            e.contains("`sbatch`") && e.contains("batch_script_path"),
            "{e}"
        );
        let e = with("batch_script_path", s("train.sh"));
        assert!(e.contains("absolute path"), "{e}");

        let mut req = fixture("slurm_fn_plain");
        req.template.as_mut().unwrap().r#type = "sensor".into();
        assert_eq!(
            request(&req).unwrap_err(),
            Flyte1Error::TaskType("sensor".into())
        );
        let mut req = fixture("slurm_fn_plain");
        req.task_execution_metadata = None;
        assert_eq!(request(&req).unwrap_err(), Flyte1Error::NoExecutionId);
    }

    #[test]
    fn literals_cross_unchanged() {
        use core2::{
            Blob, BlobMetadata, BlobType, Literal, Primitive, Scalar, literal, primitive, scalar,
        };
        let blob = Literal {
            value: Some(literal::Value::Scalar(Box::new(Scalar {
                value: Some(scalar::Value::Blob(Blob {
                    uri: "s3://b/out/model".into(),
                    metadata: Some(BlobMetadata {
                        r#type: Some(BlobType {
                            format: String::new(),
                            dimensionality: 1,
                        }),
                    }),
                })),
            }))),
            ..Default::default()
        };
        let int = Literal {
            value: Some(literal::Value::Scalar(Box::new(Scalar {
                value: Some(scalar::Value::Primitive(Primitive {
                    value: Some(primitive::Value::Integer(42)),
                })),
            }))),
            ..Default::default()
        };
        let v2 = connector::Resource {
            outputs: Some(task2::Outputs {
                literals: vec![
                    task2::NamedLiteral {
                        name: "model".into(),
                        value: Some(blob),
                    },
                    task2::NamedLiteral {
                        name: "n".into(),
                        value: Some(int),
                    },
                ],
            }),
            message: "done".into(),
            phase: 3,
            log_links: vec![core2::TaskLog {
                uri: "https://logs/1".into(),
                name: "Slurm".into(),
                ..Default::default()
            }],
            custom_info: None,
        };
        let v1 = resource(v2);
        assert_eq!(v1.phase, 3);
        assert_eq!(v1.message, "done");
        assert_eq!(v1.log_links[0].uri, "https://logs/1");
        let out = v1.outputs.unwrap().literals;
        let Some(core1::literal::Value::Scalar(s)) = &out["model"].value else {
            panic!("{out:?}")
        };
        let Some(core1::scalar::Value::Blob(b)) = &s.value else {
            panic!("{s:?}")
        };
        assert_eq!(b.uri, "s3://b/out/model");
        assert_eq!(
            b.metadata
                .as_ref()
                .unwrap()
                .r#type
                .as_ref()
                .unwrap()
                .dimensionality,
            1
        );
        let Some(core1::literal::Value::Scalar(s)) = &out["n"].value else {
            panic!("{out:?}")
        };
        assert_eq!(
            s.value,
            Some(core1::scalar::Value::Primitive(core1::Primitive {
                value: Some(core1::primitive::Value::Integer(42))
            }))
        );
    }
}
