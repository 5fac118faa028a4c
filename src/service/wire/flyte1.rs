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
//! - `slurm` with an inline `script` (`SlurmShellTask`) → a `slurm_script` task whose script is a
//!   template over its inputs and `output_locs` ([`crate::render::template`]), its File/Dir
//!   outputs read where the script wrote them and uploaded like a Flyte 2 script task's.
//!   flytekit cannot register one (its `custom` holds Python types and `OutputLocation`
//!   objects), so the JSON form is this connector's: `python_input_types` `{name: "type"}`
//!   (informational: the interface types the inputs) and `output_locs`
//!   `[{"var", "location", "var_type"?}]`, as `scripts/make-flyte1-fixtures.py` writes them.
//!
//! `sbatch_config` is sbatch's command line in the plugin, so it becomes `sbatch_options` (checked
//! option by option like every task's); the options the connector owns (`job-name`, `output`,
//! `error`, `chdir`: it names the job and reads its logs) are overridden with a log note, as in a
//! script's `#SBATCH` lines. `ssh_config` is SSH's: only its `host` is read, to pick the cluster
//! that lists it in `ssh_hosts`, as the Flyte 2 plugin's `connection.host` is.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::proto::flyte1::{admin, core as core1};
use crate::proto::{json_to_struct, struct_to_json};
use crate::render::custom::{NO_COALESCE, OptValue, SlurmCustom};
use crate::render::{
    ContainerSpec, InputValue, InterfaceKind, OutputKind, ShellTemplate, TaskConfig, TaskSpec,
    TaskType,
};

use super::status::TaskStatus;
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
const SHELL_KEYS: &[&str] = &[
    "ssh_config",
    "sbatch_config",
    "batch_script_args",
    "script",
    "python_input_types",
    "output_locs",
];
/// The script the plugin's `SlurmShellTask` refuses ("write the user-defined batch script").
const DUMMY_SCRIPT: &str = "#!/bin/bash";

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
    let (task_type, shell_task) = task_kind(&t.r#type, &custom)?;

    // The plugin's config as the renderer takes it, built here from Flyte 1's keys.
    let mut config = SlurmCustom::default();
    if let Some(ssh) = custom.get("ssh_config").filter(|v| !v.is_null()) {
        let host = ssh.get("host").and_then(Value::as_str);
        tracing::info!(
            host,
            "task config `ssh_config` ignored: the connector reaches the cluster through slurmrestd \
             (its `host` only selects the cluster that lists it in `ssh_hosts`)"
        );
        config.connection.host = host.map(String::from);
    }
    (config.sbatch_options, config.no_coalesce) = sbatch_options(&custom)?;
    let parts = if shell_task {
        shell_parts(req, t, &custom, &mut config)?
    } else if task_type == TaskType::Function {
        if let Some(s) = custom.get("script").filter(|v| !v.is_null()) {
            let s = s
                .as_str()
                .ok_or_else(|| custom_err("script", "must be a string"))?;
            config.script = Some(s.to_string());
        }
        Parts::default()
    } else {
        Parts {
            script_file: Some(script_path(&custom)?),
            script_args: batch_script_args(&custom)?,
            ..Parts::default()
        }
    };
    let Parts {
        script_file,
        script_args,
        inputs,
        outputs,
        shell_template,
    } = parts;

    let tem = req.task_execution_metadata.as_ref();
    // Flyte 1's retry is a new attempt: a new key, a new job (never the previous attempt's).
    let exec = tem
        .and_then(|m| m.execution())
        .ok_or(Flyte1Error::NoExecutionId)?;
    let container = container(t);
    let spec = TaskSpec {
        task_type,
        task_name: t.id.as_ref().map(|i| i.name.clone()).unwrap_or_default(),
        custom: TaskConfig::Slurm(Box::new(config)),
        // pyflyte-execute reads its inputs itself, and a script on the cluster takes its
        // arguments, not the task's inputs: the plugin passes neither to the job. A shell task's
        // script is filled in from them.
        container,
        inputs,
        outputs,
        output_prefix: req.output_prefix.clone(),
        exec,
        env_vars: tem.map(|m| m.environment()).unwrap_or_default(),
        script_args,
        shell_template,
        interruptible: super::template_interruptible!(
            t,
            core1::task_metadata::InterruptibleValue::Interruptible
        ) || tem.is_some_and(|m| m.interruptible()),
    };
    // Flyte 1's request has no connection (no per-task secrets).
    Ok(TaskRequest::with_metadata(
        spec,
        Default::default(),
        tem.map(|t| t as &dyn Metadata),
        script_file,
    ))
}

/// The task's type, and whether it is a `SlurmShellTask`; `custom` holding only keys the plugin
/// writes for it.
fn task_kind(
    task_type: &str,
    custom: &Map<String, Value>,
) -> Result<(TaskType, bool), Flyte1Error> {
    // `SlurmTask` and `SlurmShellTask` share the task type; the shell task has the script inline.
    let shell_task =
        task_type == SCRIPT_TASK_TYPE && custom.get("script").is_some_and(|v| !v.is_null());
    let (task_type, keys, what) = match task_type {
        FUNCTION_TASK_TYPE => (TaskType::Function, FUNCTION_KEYS, "a `slurm_fn` task"),
        SCRIPT_TASK_TYPE if shell_task => (
            TaskType::SlurmScript,
            SHELL_KEYS,
            "a `slurm` task with an inline script (SlurmShellTask)",
        ),
        SCRIPT_TASK_TYPE => (
            TaskType::SlurmScript,
            SCRIPT_KEYS,
            "a `slurm` task (SlurmTask)",
        ),
        other => return Err(Flyte1Error::TaskType(other.to_string())),
    };
    if let Some(k) = custom.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(custom_err(
            k,
            format!(
                "not a key flytekitplugins-slurm writes for {what} (it writes {}); remove it",
                keys.join(", ")
            ),
        ));
    }
    Ok((task_type, shell_task))
}

/// What a Flyte 1 task type adds beyond the common fields: the script on the cluster (a
/// `slurm` task), its arguments, and a shell task's typed inputs and outputs.
#[derive(Default)]
struct Parts {
    script_file: Option<String>,
    script_args: Vec<String>,
    inputs: Vec<(String, InputValue)>,
    outputs: Vec<(String, InterfaceKind)>,
    shell_template: Option<ShellTemplate>,
}

/// A `SlurmShellTask`: its inline script and declared outputs (into `config`), typed inputs, and
/// where each output is written.
fn shell_parts(
    req: &admin::CreateTaskRequest,
    t: &core1::TaskTemplate,
    custom: &Map<String, Value>,
    config: &mut SlurmCustom,
) -> Result<Parts, Flyte1Error> {
    let script = custom
        .get("script")
        .and_then(Value::as_str)
        .ok_or_else(|| custom_err("script", "must be a string"))?;
    if script.trim().is_empty() || script.trim() == DUMMY_SCRIPT {
        return Err(custom_err(
            "script",
            "is empty; write the batch script (SlurmShellTask(script=...))",
        ));
    }
    config.script = Some(script.to_string());
    let inputs = literal_inputs(req.inputs.as_ref());
    let outputs = interface_outputs(t);
    check_input_types(custom, &inputs)?;
    let locations = output_locations(custom, &outputs)?;
    config.outputs = outputs
        .iter()
        .map(|(name, kind)| {
            let kind = if *kind == InterfaceKind::Dir {
                OutputKind::Dir
            } else {
                OutputKind::File
            };
            (name.clone(), kind)
        })
        .collect();
    Ok(Parts {
        script_file: None,
        script_args: batch_script_args(custom)?,
        inputs,
        outputs,
        shell_template: Some(ShellTemplate {
            output_locations: locations,
        }),
    })
}

/// A `SlurmTask`'s batch script on the cluster: an absolute path.
fn script_path(custom: &Map<String, Value>) -> Result<String, Flyte1Error> {
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
    Ok(path.to_string())
}

/// The task's container (a `slurm_fn` task runs pyflyte-execute from it).
fn container(t: &core1::TaskTemplate) -> Option<ContainerSpec> {
    t.target.as_ref().and_then(|target| match target {
        core1::task_template::Target::Container(c) => {
            let env = c.env.iter().map(|kv| (kv.key.as_str(), kv.value.as_str()));
            Some(ContainerSpec::of(&c.image, &c.command, &c.args, env))
        }
        _ => None,
    })
}

/// `batch_script_args`: the script's `$1..`.
fn batch_script_args(custom: &Map<String, Value>) -> Result<Vec<String>, Flyte1Error> {
    match custom.get("batch_script_args") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                scalar_text(v)
                    .ok_or_else(|| custom_err("batch_script_args", "must be a list of strings"))
            })
            .collect(),
        Some(_) => Err(custom_err("batch_script_args", "must be a list of strings")),
    }
}

/// The request's inputs as the renderer reads them, sorted by name (propeller builds the map
/// from a Go map: its order is random).
fn literal_inputs(inputs: Option<&core1::LiteralMap>) -> Vec<(String, InputValue)> {
    let mut out: Vec<(String, InputValue)> = inputs
        .iter()
        .flat_map(|m| m.literals.iter())
        .map(|(name, l)| (name.clone(), input_value(Some(l))))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The interface's outputs, in name order.
fn interface_outputs(t: &core1::TaskTemplate) -> Vec<(String, InterfaceKind)> {
    let mut out: Vec<(String, InterfaceKind)> = t
        .interface
        .iter()
        .flat_map(|i| i.outputs.iter())
        .flat_map(|m| m.variables.iter())
        .map(|(name, var)| (name.clone(), interface_kind(var.r#type.as_ref())))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `python_input_types` names the task's inputs (the interface types them; the names are
/// checked so a stale config is not silently half-used).
fn check_input_types(
    custom: &Map<String, Value>,
    inputs: &[(String, InputValue)],
) -> Result<(), Flyte1Error> {
    match custom.get("python_input_types") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(m)) => match m.keys().find(|k| !inputs.iter().any(|(n, _)| n == *k)) {
            Some(k) => Err(custom_err(
                &format!("python_input_types.{k}"),
                "the request has no such input; the task's inputs are its interface's",
            )),
            None => Ok(()),
        },
        Some(_) => Err(custom_err(
            "python_input_types",
            "must be a map of input name to type name",
        )),
    }
}

/// `output_locs` as `(output, location template)`: one per File/Dir output of the interface,
/// each output located once.
fn output_locations(
    custom: &Map<String, Value>,
    outputs: &[(String, InterfaceKind)],
) -> Result<Vec<(String, String)>, Flyte1Error> {
    let shape = "must be a list of {\"var\": NAME, \"location\": PATH}";
    let locs = match custom.get("output_locs") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(custom_err("output_locs", shape)),
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, loc) in locs.iter().enumerate() {
        let field = format!("output_locs[{i}]");
        let text = |key: &str| {
            loc.get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| custom_err(&format!("{field}.{key}"), "must be a non-empty string"))
        };
        let (var, location) = (text("var")?, text("location")?);
        if let Some(k) = loc.as_object().and_then(|o| {
            o.keys()
                .find(|k| !["var", "location", "var_type"].contains(&k.as_str()))
        }) {
            return Err(custom_err(
                &format!("{field}.{k}"),
                "an output location has `var`, `location` and `var_type`; remove it",
            ));
        }
        match outputs.iter().find(|(n, _)| n == var) {
            Some((_, InterfaceKind::File | InterfaceKind::Dir)) => {}
            Some((_, InterfaceKind::Other(ty))) => {
                return Err(custom_err(
                    &format!("{field}.var"),
                    format!(
                        "output `{var}` is a {ty}; a shell task's outputs are files and \
                         directories (FlyteFile, FlyteDirectory)"
                    ),
                ));
            }
            None => {
                return Err(custom_err(
                    &format!("{field}.var"),
                    format!("the task interface has no output `{var}`"),
                ));
            }
        }
        if out.iter().any(|(n, _)| n == var) {
            return Err(custom_err(
                &format!("{field}.var"),
                format!("output `{var}` is located twice"),
            ));
        }
        out.push((var.to_string(), location.to_string()));
    }
    if let Some((name, _)) = outputs
        .iter()
        .find(|(n, _)| !out.iter().any(|(m, _)| m == n))
    {
        return Err(custom_err(
            "output_locs",
            format!("the task interface's output `{name}` has no location; add one"),
        ));
    }
    Ok(out)
}

/// `sbatch_config` (`{option: value}`, each `--option value` on the plugin's sbatch command line)
/// as `sbatch_options` (by name), without the options the connector owns; and the task's opt-out
/// of coalescing (`no-coalesce: True`).
fn sbatch_options(
    custom: &Map<String, Value>,
) -> Result<(Vec<(String, OptValue)>, bool), Flyte1Error> {
    let mut out = BTreeMap::new();
    let mut no_coalesce = false;
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
                if name == NO_COALESCE {
                    no_coalesce = match text.to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(custom_err(
                                &format!("sbatch_config.{k}"),
                                "must be True (submit this task as a job of its own, never in a \
                                 coalesced job array) or False",
                            ));
                        }
                    };
                    continue;
                }
                out.insert(name.to_string(), OptValue::Value(text));
            }
        }
        Some(_) => {
            return Err(custom_err(
                "sbatch_config",
                "must be a map of option to value",
            ));
        }
    }
    Ok((out.into_iter().collect(), no_coalesce))
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

super::status::literals!(core1);

/// GetTask's answer as Flyte 1's `Resource`.
pub fn resource(s: TaskStatus) -> admin::Resource {
    let custom_info = s.custom_info().map(|v| json_to_struct(&v));
    admin::Resource {
        outputs: s.outputs.map(|blobs| core1::LiteralMap {
            literals: blobs
                .iter()
                .map(|b| (b.name.clone(), blob_literal(b)))
                .collect(),
        }),
        message: s.message,
        log_links: s.log_links.into_iter().map(task_log).collect(),
        phase: wire_phase(s.phase),
        custom_info,
        ..Default::default()
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
mod tests;
