//! Building and loading CreateTaskRequests for the `render` and `submit` commands: what the Flyte
//! backend would send, made from a plain batch script (or read from a file).

use std::collections::HashMap;
use std::path::Path;

use prost::Message;

use crate::proto::DESCRIPTORS;
use crate::proto::connector::{CreateTaskRequest, TaskExecutionMetadata};
use crate::proto::core::{
    self, Identifier, Literal, LiteralType, NodeExecutionIdentifier, Primitive, Scalar,
    TaskExecutionIdentifier, TaskTemplate, TypedInterface, Variable, VariableEntry, VariableMap,
    WorkflowExecutionIdentifier,
};
use crate::proto::task::{Inputs, NamedLiteral};

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a binary CreateTaskRequest: {detail}")]
    DecodePb { path: String, detail: String },
    #[error("{path} is not a protobuf-JSON CreateTaskRequest: {detail}")]
    DecodeJson { path: String, detail: String },
    #[error("--input {0}: expected NAME=VALUE")]
    InputSyntax(String),
    #[error("--output {0}: expected NAME=file or NAME=dir")]
    OutputSyntax(String),
}

/// A CreateTaskRequest of either protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Loaded {
    /// Flyte 2's (`flyteidl2.connector`), as flyte and flyteplugins-slurm make it.
    Flyte2(CreateTaskRequest),
    /// Flyte 1's (`flyteidl.admin`), as flytekit and flytekitplugins-slurm make it.
    Flyte1(crate::proto::flyte1::admin::CreateTaskRequest),
}

/// Read a CreateTaskRequest of either Flyte. The two messages share their field numbers (Flyte
/// 2's descends from Flyte 1's), so the bytes alone do not say which; the task config does:
/// flytekitplugins-slurm always writes `ssh_config` and `sbatch_config`, which the Flyte 2
/// plugin never does (it writes `connection` and `sbatch`/`sbatch_options`).
pub fn load_any(path: &Path) -> Result<Loaded, RequestError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| RequestError::Read {
        path: shown.clone(),
        source,
    })?;
    let json = path.extension().is_some_and(|e| e == "json");
    let flyte1 = || -> Result<Loaded, RequestError> {
        let r = if json {
            from_json_as(&bytes, "flyteidl.admin.CreateTaskRequest").map_err(|detail| {
                RequestError::DecodeJson {
                    path: shown.clone(),
                    detail,
                }
            })?
        } else {
            crate::proto::flyte1::admin::CreateTaskRequest::decode(bytes.as_slice()).map_err(
                |e| RequestError::DecodePb {
                    path: shown.clone(),
                    detail: e.to_string(),
                },
            )?
        };
        Ok(Loaded::Flyte1(r))
    };
    // Flyte 1's JSON inputs are a map where Flyte 2's are a list: a Flyte 1 file fails here.
    let v2 = if json {
        from_json(&bytes)
    } else {
        CreateTaskRequest::decode(bytes.as_slice()).map_err(|e| e.to_string())
    };
    match v2 {
        Ok(r) if !is_flyte1(&r) => Ok(Loaded::Flyte2(r)),
        Ok(_) => flyte1(),
        Err(detail) => flyte1().map_err(|_| {
            if json {
                RequestError::DecodeJson {
                    path: shown.clone(),
                    detail,
                }
            } else {
                RequestError::DecodePb {
                    path: shown.clone(),
                    detail,
                }
            }
        }),
    }
}

/// The task config flytekitplugins-slurm (Flyte 1) writes.
fn is_flyte1(r: &CreateTaskRequest) -> bool {
    r.template
        .as_ref()
        .and_then(|t| t.custom.as_ref())
        .is_some_and(|c| {
            c.fields.contains_key("ssh_config") || c.fields.contains_key("sbatch_config")
        })
}

/// Protobuf JSON → CreateTaskRequest. prost has no JSON mapping of its own; prost-reflect reads
/// the canonical one (camelCase names, int64 as strings, enums by name) from the descriptors.
pub fn from_json(bytes: &[u8]) -> Result<CreateTaskRequest, String> {
    from_json_as(bytes, "flyteidl2.connector.CreateTaskRequest")
}

fn from_json_as<M: Message + Default>(bytes: &[u8], name: &str) -> Result<M, String> {
    let pool = prost_reflect::DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string())?;
    let desc = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("{name} is missing from the compiled descriptors"))?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let msg =
        prost_reflect::DynamicMessage::deserialize(desc, &mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    msg.transcode_to::<M>().map_err(|e| e.to_string())
}

/// A value given on the command line, typed the way a user means it.
fn literal_of(value: &str) -> (Literal, LiteralType) {
    use core::literal::Value as L;
    use core::literal_type::Type as T;
    use core::primitive::Value as P;
    use core::scalar::Value as S;
    let scalar = |value| Literal {
        value: Some(L::Scalar(Box::new(Scalar { value: Some(value) }))),
        ..Default::default()
    };
    let simple = |t: core::SimpleType| LiteralType {
        r#type: Some(T::Simple(t as i32)),
        ..Default::default()
    };
    let prim = |p| scalar(S::Primitive(Primitive { value: Some(p) }));
    if let Ok(i) = value.parse::<i64>() {
        return (prim(P::Integer(i)), simple(core::SimpleType::Integer));
    }
    if let Ok(f) = value.parse::<f64>() {
        return (prim(P::FloatValue(f)), simple(core::SimpleType::Float));
    }
    if value == "true" || value == "false" {
        return (
            prim(P::Boolean(value == "true")),
            simple(core::SimpleType::Boolean),
        );
    }
    if value.contains("://") {
        let blob = core::Blob {
            metadata: Some(core::BlobMetadata {
                r#type: Some(core::BlobType::default()),
            }),
            uri: value.to_string(),
        };
        let t = LiteralType {
            r#type: Some(T::Blob(core::BlobType::default())),
            ..Default::default()
        };
        return (scalar(S::Blob(blob)), t);
    }
    (
        prim(P::StringValue(value.to_string())),
        simple(core::SimpleType::String),
    )
}

/// What `submit SCRIPT` needs to build a `slurm_script` task.
#[derive(Debug, Clone, Default)]
pub struct ScriptTask {
    pub script: String,
    pub name: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub partition: Option<String>,
    pub sbatch_options: Vec<(String, String)>,
    pub output_prefix: String,
    pub project: String,
    pub domain: String,
    pub run_name: String,
}

/// A CreateTaskRequest for a `slurm_script` task, shaped like the ones flyteplugins-slurm writes
/// (`custom` with `script`, `outputs`, `sbatch`, `sbatch_options`, `output_upload`).
pub fn script_request(t: &ScriptTask) -> Result<CreateTaskRequest, RequestError> {
    let mut literals = Vec::new();
    let mut in_vars = Vec::new();
    for arg in &t.inputs {
        let (name, value) = arg
            .split_once('=')
            .ok_or_else(|| RequestError::InputSyntax(arg.clone()))?;
        let (lit, ty) = literal_of(value);
        literals.push(NamedLiteral {
            name: name.to_string(),
            value: Some(lit),
        });
        in_vars.push(VariableEntry {
            key: name.to_string(),
            value: Some(Variable {
                r#type: Some(ty),
                ..Default::default()
            }),
        });
    }
    let mut outputs = serde_json::Map::new();
    let mut out_vars = Vec::new();
    for arg in &t.outputs {
        let (name, kind) = arg
            .split_once('=')
            .ok_or_else(|| RequestError::OutputSyntax(arg.clone()))?;
        let (kind, dim) = match kind {
            "file" => ("file", core::blob_type::BlobDimensionality::Single),
            "dir" | "directory" => ("directory", core::blob_type::BlobDimensionality::Multipart),
            _ => return Err(RequestError::OutputSyntax(arg.clone())),
        };
        outputs.insert(name.to_string(), kind.into());
        let ty = LiteralType {
            r#type: Some(core::literal_type::Type::Blob(core::BlobType {
                format: String::new(),
                dimensionality: dim as i32,
            })),
            ..Default::default()
        };
        out_vars.push(VariableEntry {
            key: name.to_string(),
            value: Some(Variable {
                r#type: Some(ty),
                ..Default::default()
            }),
        });
    }
    let mut sbatch = serde_json::Map::new();
    if let Some(p) = &t.partition {
        sbatch.insert("partition".into(), p.clone().into());
    }
    let options: serde_json::Map<String, serde_json::Value> = t
        .sbatch_options
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    let custom = serde_json::json!({
        "script": t.script,
        "outputs": outputs,
        "output_upload": "connector",
        "sbatch": sbatch,
        "sbatch_options": options,
        "env": {},
        "modules": [],
    });
    let template = TaskTemplate {
        id: Some(Identifier {
            resource_type: 1,
            project: t.project.clone(),
            domain: t.domain.clone(),
            name: t.name.clone(),
            version: "cli".into(),
            ..Default::default()
        }),
        r#type: "slurm_script".into(),
        interface: Some(TypedInterface {
            inputs: Some(VariableMap { variables: in_vars }),
            outputs: Some(VariableMap {
                variables: out_vars,
            }),
        }),
        custom: Some(crate::proto::json_to_struct(&custom)),
        ..Default::default()
    };
    let env: HashMap<String, String> = [
        ("RUN_NAME", t.run_name.as_str()),
        ("ACTION_NAME", "a0"),
        ("_U_ORG_NAME", ""),
        ("_U_RUN_BASE", t.output_prefix.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Ok(CreateTaskRequest {
        inputs: Some(Inputs {
            literals,
            ..Default::default()
        }),
        template: Some(template),
        output_prefix: t.output_prefix.clone(),
        task_execution_metadata: Some(TaskExecutionMetadata {
            task_execution_id: Some(TaskExecutionIdentifier {
                node_execution_id: Some(NodeExecutionIdentifier {
                    node_id: "a0".into(),
                    execution_id: Some(WorkflowExecutionIdentifier {
                        project: t.project.clone(),
                        domain: t.domain.clone(),
                        name: t.run_name.clone(),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            namespace: format!("{}-{}", t.project, t.domain),
            environment_variables: env,
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each Flyte's fixtures, binary and JSON, are read as that Flyte's request, the same both ways.
    #[test]
    fn json_and_binary_fixtures_decode_to_the_same_request_of_their_flyte() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for (folder, flyte1, at_least) in [("requests", false, 6), ("flyte1", true, 4)] {
            let mut n = 0;
            for entry in std::fs::read_dir(root.join(folder)).unwrap().flatten() {
                let pb = entry.path();
                if pb.extension().is_none_or(|e| e != "pb") {
                    continue;
                }
                let from_pb = load_any(&pb).unwrap();
                let from_json = load_any(&pb.with_extension("json")).unwrap();
                assert_eq!(from_pb, from_json, "{}", pb.display());
                assert_eq!(
                    matches!(from_pb, Loaded::Flyte1(_)),
                    flyte1,
                    "{}",
                    pb.display()
                );
                n += 1;
            }
            assert!(n >= at_least, "{folder}: {n}");
        }
    }

    #[test]
    fn typed_literals_from_the_command_line() {
        use crate::proto::core::primitive::Value as P;
        let prim = |v: &str| match literal_of(v).0.value {
            Some(core::literal::Value::Scalar(s)) => match s.value {
                Some(core::scalar::Value::Primitive(p)) => p.value,
                _ => None,
            },
            _ => None,
        };
        assert_eq!(prim("4"), Some(P::Integer(4)));
        assert_eq!(prim("0.5"), Some(P::FloatValue(0.5)));
        assert_eq!(prim("true"), Some(P::Boolean(true)));
        assert_eq!(prim("imagenet"), Some(P::StringValue("imagenet".into())));
        assert!(prim("s3://b/k").is_none(), "URIs are blobs");
    }

    #[test]
    fn bad_syntax_names_the_argument() {
        let t = ScriptTask {
            inputs: vec!["nodelimiter".into()],
            ..Default::default()
        };
        assert!(
            script_request(&t)
                .unwrap_err()
                .to_string()
                .contains("--input nodelimiter")
        );
        let t = ScriptTask {
            outputs: vec!["x=blob".into()],
            ..Default::default()
        };
        assert!(
            script_request(&t)
                .unwrap_err()
                .to_string()
                .contains("NAME=file or NAME=dir")
        );
    }
}
