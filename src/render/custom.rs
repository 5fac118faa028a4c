//! `TaskTemplate.custom` as written by flyteplugins-slurm 2.x, accepted unchanged. It is a
//! protobuf Struct, so every number arrives as a float and `null` stands for "not set".

use serde_json::{Map, Value};

use super::error::RenderError;
use super::{OutputKind, UploadMode};

/// Top-level keys of the published plugin's config.
const KNOWN_KEYS: &[&str] = &[
    "connection",
    "sbatch",
    "sbatch_options",
    "container",
    "env",
    "modules",
    "working_dir",
    "secrets",
    "script",
    "outputs",
    "output_upload",
];

/// SSH-era connection keys with no meaning here: accepted so existing tasks keep working, but a
/// REST connector dials nothing a task names (the deployment says which slurmrestd to use).
const SSH_CONNECTION_KEYS: &[&str] = &["port", "known_hosts", "skip_host_key_verification"];

/// `custom.connection`: which configured cluster the task selects, and whom it names. Nothing
/// in it is dialled or trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    /// `cluster`: a configured cluster, by name (`TaskSpec::requested_cluster`).
    pub cluster: Option<String>,
    /// `host`, the SSH login host: it selects the cluster listing it in `ssh_hosts`
    /// (`TaskSpec::requested_host`).
    pub host: Option<String>,
    /// `username` (the SSH plugin's), `slurm_user` or `user`: never whom the job runs as; a
    /// deployment whose identity rules decide that refuses a task naming another user.
    pub named_users: Vec<(NamedUserKey, String)>,
}

/// Which `connection` key named a user (said back in a refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedUserKey {
    Username,
    SlurmUser,
    User,
}

impl NamedUserKey {
    /// The field as the task config spells it.
    pub fn field(self) -> &'static str {
        match self {
            NamedUserKey::Username => "connection.username",
            NamedUserKey::SlurmUser => "connection.slurm_user",
            NamedUserKey::User => "connection.user",
        }
    }
}

impl Connection {
    fn parse(m: &Map<String, Value>) -> Result<Connection, RenderError> {
        let mut c = Connection::default();
        for (k, v) in m {
            let text = || -> Result<Option<String>, RenderError> {
                match v {
                    Value::Null => Ok(None),
                    Value::String(s) => Ok(Some(s.clone())),
                    _ => Err(RenderError::config(
                        format!("connection.{k}"),
                        "must be a string",
                    )),
                }
            };
            let user = |key| text().map(|t| t.map(|t| (key, t)));
            match k.as_str() {
                "cluster" => c.cluster = text()?,
                "host" => c.host = text()?,
                "username" => c.named_users.extend(user(NamedUserKey::Username)?),
                "slurm_user" => c.named_users.extend(user(NamedUserKey::SlurmUser)?),
                "user" => c.named_users.extend(user(NamedUserKey::User)?),
                _ if v.is_null() => {}
                k if SSH_CONNECTION_KEYS.contains(&k) => {
                    tracing::info!(key = %k, "ignoring SSH-era `connection` key: jobs go through slurmrestd");
                }
                k => {
                    tracing::info!(key = %k, "ignoring an unknown `connection` key");
                }
            }
        }
        if c.named_users
            .iter()
            .any(|(k, _)| *k == NamedUserKey::Username)
        {
            tracing::info!(
                key = "username",
                "ignoring SSH-era `connection` key: jobs go through slurmrestd"
            );
        }
        Ok(c)
    }
}

/// First-class `sbatch` fields and the sbatch option each one is.
pub const FIRST_CLASS: &[(&str, &str)] = &[
    ("partition", "partition"),
    ("nodes", "nodes"),
    ("ntasks", "ntasks"),
    ("cpus_per_task", "cpus-per-task"),
    ("gres", "gres"),
    ("gpus_per_node", "gpus-per-node"),
    ("mem", "mem"),
    ("time_limit", "time"),
    ("account", "account"),
    ("qos", "qos"),
    ("reservation", "reservation"),
    ("constraint", "constraint"),
];

pub use crate::domain::site::Runtime;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerConfig {
    pub runtime: Runtime,
    pub args: Vec<String>,
    pub image: Option<String>,
    pub mounts: Vec<String>,
    pub workdir: Option<String>,
    pub srun_args: Vec<String>,
}

/// A value of `sbatch_options`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptValue {
    /// `true`: the option without a value (`--exclusive`).
    Flag,
    Value(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlurmCustom {
    /// First-class fields that are set: (field, option, value).
    pub sbatch: Vec<(&'static str, &'static str, String)>,
    /// `sbatch_options` in key order (a Struct has no order; sorted for a stable rendering).
    pub sbatch_options: Vec<(String, OptValue)>,
    pub container: ContainerConfig,
    pub env: Vec<(String, String)>,
    pub modules: Vec<String>,
    pub working_dir: Option<String>,
    pub script: Option<String>,
    pub outputs: Vec<(String, OutputKind)>,
    pub output_upload: UploadMode,
    pub connection: Connection,
    /// `sbatch_options: {no-coalesce: true}`: the task is always a job of its own, never an
    /// element of a coalesced job array (`FLYTE_SLURM_COALESCE_WINDOW`).
    pub no_coalesce: bool,
}

/// The one `sbatch_options` key that is the connector's, not sbatch's: the task's opt-out of
/// coalescing. Kept in `sbatch_options` because that is the only free-form per-task map the
/// published plugin writes.
pub const NO_COALESCE: &str = "no-coalesce";

/// A Struct number as sbatch would read it: integral floats without a fraction.
pub fn number_text(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
        _ => n.to_string(),
    }
}

fn string_or_null(v: &Value, field: &str) -> Result<Option<String>, RenderError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(RenderError::config(field, "must be a string")),
    }
}

fn string_list(v: &Value, field: &str) -> Result<Vec<String>, RenderError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                _ => Err(RenderError::config(field, "must be a list of strings")),
            })
            .collect(),
        _ => Err(RenderError::config(field, "must be a list of strings")),
    }
}

fn object<'a>(v: &'a Value, field: &str) -> Result<Option<&'a Map<String, Value>>, RenderError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => Ok(Some(m)),
        _ => Err(RenderError::config(field, "must be a mapping")),
    }
}

fn scalar_text(v: &Value, field: &str) -> Result<Option<String>, RenderError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Number(n) => Ok(Some(number_text(n))),
        _ => Err(RenderError::config(field, "must be a string or a number")),
    }
}

/// Parses `custom`. Unknown top-level keys are errors (a typo must not silently drop a setting);
/// SSH-era keys are accepted and ignored with a log line.
pub fn parse(custom: &Value) -> Result<SlurmCustom, RenderError> {
    let top = match custom {
        Value::Object(m) => m,
        Value::Null => {
            return Err(RenderError::config(
                "custom",
                "the task carries no Slurm config; define it with flyteplugins-slurm's `Slurm(...)`",
            ));
        }
        _ => return Err(RenderError::config("custom", "must be a mapping")),
    };
    let mut out = SlurmCustom::default();
    for (key, value) in top {
        match key.as_str() {
            "connection" => {
                if let Some(m) = object(value, "connection")? {
                    out.connection = Connection::parse(m)?;
                }
            }
            "secrets" => {
                if let Some(m) = object(value, "secrets")? {
                    for (k, v) in m {
                        if !v.is_null() {
                            tracing::info!(key = %k, "ignoring SSH-era `secrets` entry: jobs go through slurmrestd");
                        }
                    }
                }
            }
            "sbatch" => {
                for (k, v) in object(value, "sbatch")?.into_iter().flatten() {
                    let field = format!("sbatch.{k}");
                    let Some((name, opt)) = FIRST_CLASS.iter().find(|(f, _)| f == k) else {
                        return Err(RenderError::UnknownKey {
                            key: field,
                            known: FIRST_CLASS
                                .iter()
                                .map(|(f, _)| *f)
                                .collect::<Vec<_>>()
                                .join(", "),
                        });
                    };
                    if let Some(text) = scalar_text(v, &field)? {
                        out.sbatch.push((name, opt, text));
                    }
                }
            }
            "sbatch_options" => {
                let mut entries: Vec<(String, OptValue)> = Vec::new();
                for (k, v) in object(value, "sbatch_options")?.into_iter().flatten() {
                    let field = format!("sbatch_options.{k}");
                    if k == NO_COALESCE {
                        out.no_coalesce = match v {
                            Value::Bool(b) => *b,
                            Value::Null => false,
                            _ => {
                                return Err(RenderError::config(
                                    field,
                                    "must be true (submit this task as a job of its own, never \
                                     in a coalesced job array) or false",
                                ));
                            }
                        };
                        continue;
                    }
                    match v {
                        Value::Null | Value::Bool(false) => {
                            tracing::debug!(option = %k, "sbatch option set to false/null: not passed");
                        }
                        Value::Bool(true) => entries.push((k.clone(), OptValue::Flag)),
                        Value::String(s) => entries.push((k.clone(), OptValue::Value(s.clone()))),
                        Value::Number(n) => {
                            entries.push((k.clone(), OptValue::Value(number_text(n))))
                        }
                        _ => {
                            return Err(RenderError::config(
                                field,
                                "must be a string, a number or true",
                            ));
                        }
                    }
                }
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                out.sbatch_options = entries;
            }
            "container" => out.container = parse_container(value)?,
            "env" => {
                for (k, v) in object(value, "env")?.into_iter().flatten() {
                    match scalar_text(v, &format!("env.{k}"))? {
                        Some(text) => out.env.push((k.clone(), text)),
                        None => tracing::debug!(name = %k, "env entry is null: not set"),
                    }
                }
            }
            "modules" => out.modules = string_list(value, "modules")?,
            "working_dir" => out.working_dir = string_or_null(value, "working_dir")?,
            "script" => out.script = string_or_null(value, "script")?,
            "outputs" => {
                for (k, v) in object(value, "outputs")?.into_iter().flatten() {
                    let kind = match v.as_str() {
                        Some("file") => OutputKind::File,
                        Some("directory") | Some("dir") => OutputKind::Dir,
                        _ => {
                            return Err(RenderError::config(
                                format!("outputs.{k}"),
                                "must be \"file\" or \"directory\"",
                            ));
                        }
                    };
                    out.outputs.push((k.clone(), kind));
                }
            }
            "output_upload" => {
                out.output_upload = match string_or_null(value, "output_upload")?.as_deref() {
                    None | Some("connector") => UploadMode::Connector,
                    Some("job") => UploadMode::Job,
                    Some(other) => {
                        return Err(RenderError::config(
                            "output_upload",
                            format!("`{other}` is not one of \"connector\", \"job\""),
                        ));
                    }
                }
            }
            _ => {
                return Err(RenderError::UnknownKey {
                    key: key.clone(),
                    known: KNOWN_KEYS.join(", "),
                });
            }
        }
    }
    Ok(out)
}

fn parse_container(value: &Value) -> Result<ContainerConfig, RenderError> {
    let mut c = ContainerConfig::default();
    for (k, v) in object(value, "container")?.into_iter().flatten() {
        let field = format!("container.{k}");
        match k.as_str() {
            "runtime" => {
                c.runtime = match string_or_null(v, &field)?.as_deref() {
                    None | Some("pyxis") => Runtime::Pyxis,
                    Some("apptainer") => Runtime::Apptainer,
                    Some(other) => {
                        return Err(RenderError::config(
                            field,
                            format!("`{other}` is not a supported runtime (pyxis, apptainer)"),
                        ));
                    }
                }
            }
            "args" => c.args = string_list(v, &field)?,
            "image" => c.image = string_or_null(v, &field)?.filter(|s| !s.is_empty()),
            "mounts" => c.mounts = string_list(v, &field)?,
            "workdir" => c.workdir = string_or_null(v, &field)?.filter(|s| !s.is_empty()),
            "srun_args" => c.srun_args = string_list(v, &field)?,
            _ => {
                return Err(RenderError::UnknownKey {
                    key: field,
                    known: "runtime, args, image, mounts, workdir, srun_args".into(),
                });
            }
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_become_integers_and_ssh_keys_are_ignored() {
        let c = parse(&json!({
            "connection": {"host": "login", "port": 22.0, "cluster": "a"},
            "secrets": {"ssh_private_key": "k"},
            "sbatch": {"nodes": 2.0, "mem": "1G", "account": null},
            "sbatch_options": {"nice": 10.0, "exclusive": true, "requeue": false},
        }))
        .unwrap();
        assert_eq!(
            c.sbatch,
            vec![
                ("mem", "mem", "1G".to_string()),
                ("nodes", "nodes", "2".to_string())
            ]
        );
        assert_eq!(
            c.sbatch_options,
            vec![
                ("exclusive".into(), OptValue::Flag),
                ("nice".into(), OptValue::Value("10".into()))
            ]
        );
        assert_eq!(
            c.connection,
            Connection {
                cluster: Some("a".into()),
                host: Some("login".into()),
                named_users: vec![],
            }
        );
    }

    #[test]
    fn connection_names_users_by_key_and_refuses_what_is_no_string() {
        let c =
            parse(&json!({"connection": {"username": "bob", "user": "carol", "slurm_user": null}}))
                .unwrap();
        assert_eq!(
            c.connection.named_users,
            vec![
                (NamedUserKey::User, "carol".into()),
                (NamedUserKey::Username, "bob".into())
            ]
        );
        let e = parse(&json!({"connection": {"cluster": 3.0}}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("connection.cluster") && e.contains("must be a string"),
            "{e}"
        );
    }

    #[test]
    fn no_coalesce_is_the_connectors_and_never_reaches_sbatch() {
        let c = parse(&json!({"sbatch_options": {"no-coalesce": true, "nice": 1.0}})).unwrap();
        assert!(c.no_coalesce);
        assert_eq!(
            c.sbatch_options,
            vec![("nice".into(), OptValue::Value("1".into()))]
        );
        let c = parse(&json!({"sbatch_options": {"no-coalesce": false}})).unwrap();
        assert!(!c.no_coalesce && c.sbatch_options.is_empty());
        let e = parse(&json!({"sbatch_options": {"no-coalesce": "yes"}})).unwrap_err();
        assert!(
            e.to_string().contains("sbatch_options.no-coalesce") && e.to_string().contains("true"),
            "{e}"
        );
    }

    #[test]
    fn refusals_name_the_key() {
        let e = parse(&json!({"sbatchh": {}})).unwrap_err();
        assert!(e.to_string().contains("`sbatchh`"), "{e}");
        let e = parse(&json!({"sbatch": {"memory": "1G"}})).unwrap_err();
        assert!(e.to_string().contains("sbatch.memory"), "{e}");
        let e = parse(&json!({"container": {"runtime": "docker"}})).unwrap_err();
        assert!(e.to_string().contains("container.runtime"), "{e}");
        let e = parse(&json!({"outputs": {"m": "int"}})).unwrap_err();
        assert!(e.to_string().contains("outputs.m"), "{e}");
        let e = parse(&json!({"output_upload": "s3"})).unwrap_err();
        assert!(e.to_string().contains("output_upload"), "{e}");
        assert!(parse(&Value::Null).is_err());
    }
}
