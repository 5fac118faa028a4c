//! `submit --request` for a native (`slurm`) task does what the Flyte backend does before
//! CreateTask: renders the entrypoint's argument templates (`{{.input}}`, `{{.outputPrefix}}`,
//! `{{.rawOutputDataPrefix}}`, `{{.checkpointOutputPrefix}}`, `{{.prevCheckpointPrefix}}`,
//! `{{.runName}}`, `{{.actionName}}`, ...) and writes the request's inputs as `inputs.pb` where
//! `--inputs` points, so `a0` finds them.
//!
//! Where things go (the backend's layout is its own business; this one keeps an attempt's files
//! together): inputs at `<output_prefix>/inputs.pb`, raw data under `<output_prefix>/raw`,
//! checkpoints under `<output_prefix>/_flytecheckpoints`, no previous checkpoint (a first attempt).
//! A `file://` (or bare absolute) target is a path on the cluster: it is written through
//! `FLYTE_SLURM_SHARED_MOUNTS` when set (cluster_prefix=local_path), else at the same path here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use object_store::ObjectStoreExt;
use prost::Message;

use crate::proto::connector::CreateTaskRequest;
use crate::staging::{Roots, objstore};

#[derive(Debug, thiserror::Error)]
pub enum NativeInputsError {
    #[error(
        "the native task's request has no output_prefix: its entrypoint writes outputs.pb there; \
         set `outputPrefix` in the request or pass --output-prefix"
    )]
    NoOutputPrefix,
    #[error(
        "the native task's container args have no `--inputs` to write inputs.pb to; the Flyte entrypoint \
         (a0) needs `--inputs {{{{.input}}}}`"
    )]
    NoInputsArg,
    #[error("writing inputs.pb to {target}: {detail}")]
    Write { target: String, detail: String },
    #[error("FLYTE_SLURM_SHARED_MOUNTS: {0}")]
    Mounts(String),
}

/// The template values for this request, keyed by lower-cased name (Flyte matches them without
/// regard to case, with optional spaces: `{{ .Input }}`).
pub fn template_values(req: &CreateTaskRequest) -> BTreeMap<&'static str, String> {
    let prefix = req.output_prefix.trim_end_matches('/').to_string();
    let tid = req
        .task_execution_metadata
        .as_ref()
        .and_then(|m| m.task_execution_id.as_ref());
    let node = tid.and_then(|t| t.node_execution_id.as_ref());
    let run = node
        .and_then(|n| n.execution_id.as_ref())
        .map(|w| w.name.clone())
        .unwrap_or_default();
    let action = node.map(|n| n.node_id.clone()).unwrap_or_default();
    let mut v = BTreeMap::new();
    v.insert("input", objstore::join_uri(&prefix, "inputs.pb"));
    v.insert("inputprefix", prefix.clone());
    v.insert("outputprefix", prefix.clone());
    v.insert("rawoutputdataprefix", objstore::join_uri(&prefix, "raw"));
    v.insert(
        "checkpointoutputprefix",
        objstore::join_uri(&prefix, "_flytecheckpoints"),
    );
    v.insert("prevcheckpointprefix", String::new());
    v.insert("runname", run);
    v.insert("actionname", action);
    v
}

/// Replaces every known `{{.name}}` in `arg`; unknown ones stay for the entrypoint (a0 fills in
/// e.g. `{{.runStartTime}}` itself).
pub fn render_arg(arg: &str, values: &BTreeMap<&'static str, String>) -> String {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| regex::Regex::new(r"\{\{\s*\.([A-Za-z]+)\s*\}\}").expect("valid"));
    re.replace_all(arg, |c: &regex::Captures| {
        values
            .get(c[1].to_ascii_lowercase().as_str())
            .cloned()
            .unwrap_or_else(|| c[0].to_string())
    })
    .into_owned()
}

/// The value after `--inputs` / `-i` (or `--inputs=...`).
fn inputs_arg(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--inputs" || a == "-i" {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix("--inputs=") {
            return Some(v.to_string());
        }
    }
    None
}

/// Renders the templates of a native task's container in place and writes its inputs; returns
/// where inputs.pb went. Other task types are left alone (`None`).
pub async fn prepare(
    req: &mut CreateTaskRequest,
    mounts: Option<&Roots>,
) -> Result<Option<String>, NativeInputsError> {
    let is_native = req.template.as_ref().is_some_and(|t| t.r#type == "slurm");
    if !is_native {
        return Ok(None);
    }
    if req.output_prefix.trim().is_empty() {
        return Err(NativeInputsError::NoOutputPrefix);
    }
    let values = template_values(req);
    let Some(crate::proto::core::task_template::Target::Container(c)) =
        req.template.as_mut().and_then(|t| t.target.as_mut())
    else {
        // No container: CreateTask refuses it with the renderer's message.
        return Ok(None);
    };
    for a in c.command.iter_mut().chain(c.args.iter_mut()) {
        *a = render_arg(a, &values);
    }
    let all: Vec<String> = c.command.iter().chain(c.args.iter()).cloned().collect();
    let target = inputs_arg(&all).ok_or(NativeInputsError::NoInputsArg)?;
    let bytes = req.inputs.clone().unwrap_or_default().encode_to_vec();
    write(&target, bytes, mounts).await?;
    Ok(Some(target))
}

async fn write(
    target: &str,
    bytes: Vec<u8>,
    mounts: Option<&Roots>,
) -> Result<(), NativeInputsError> {
    let err = |detail: String| NativeInputsError::Write {
        target: target.to_string(),
        detail,
    };
    let cluster_path = target
        .strip_prefix("file://")
        .or_else(|| target.starts_with('/').then_some(target));
    let Some(cluster_path) = cluster_path else {
        let dest = objstore::open(target).map_err(|e| err(e.to_string()))?;
        dest.store
            .put(&dest.path, bytes.into())
            .await
            .map_err(|e| err(e.to_string()))?;
        return Ok(());
    };
    let local = match mounts {
        Some(r) => r.map(cluster_path).map_err(|e| err(e.to_string()))?.local,
        None => PathBuf::from(cluster_path),
    };
    write_local(&local, &bytes).map_err(|e| err(format!("{}: {e}", local.display())))
}

/// Writes the file, creating missing folders. What is created takes the owner of the folder it
/// is created in: `submit` often runs as root, and the job (another user) must still be able to
/// create its output folder next to the inputs.
fn write_local(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let mut missing = Vec::new();
    let mut p = parent;
    while !p.exists() {
        missing.push(p.to_path_buf());
        p = p.parent().unwrap_or(Path::new("/"));
    }
    let owner = std::fs::metadata(p)?;
    let (uid, gid) = (owner.uid(), owner.gid());
    let chown_if_root = |q: &Path| -> std::io::Result<()> {
        // Only root can give files away; anyone else keeps their own (their job runs as them).
        if running_as_root() {
            std::os::unix::fs::chown(q, Some(uid), Some(gid))?;
        }
        Ok(())
    };
    for d in missing.iter().rev() {
        std::fs::create_dir(d)?;
        chown_if_root(d)?;
    }
    std::fs::write(path, bytes)?;
    chown_if_root(path)
}

/// Whether this process runs as root: Linux makes `/proc/self` owned by the effective uid
/// (no libc dependency for one `geteuid`).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::connector::TaskExecutionMetadata;
    use crate::proto::core::{
        Container, NodeExecutionIdentifier, TaskExecutionIdentifier, TaskTemplate,
        WorkflowExecutionIdentifier, task_template::Target,
    };
    use crate::proto::task::{Inputs, NamedLiteral};

    fn req(prefix: &str, args: &[&str]) -> CreateTaskRequest {
        CreateTaskRequest {
            inputs: Some(Inputs {
                literals: vec![NamedLiteral {
                    name: "x".into(),
                    value: None,
                }],
                ..Default::default()
            }),
            template: Some(TaskTemplate {
                r#type: "slurm".into(),
                target: Some(Target::Container(Container {
                    image: "/images/x.sif".into(),
                    args: args.iter().map(|s| s.to_string()).collect(),
                    ..Default::default()
                })),
                ..Default::default()
            }),
            output_prefix: prefix.into(),
            task_execution_metadata: Some(TaskExecutionMetadata {
                task_execution_id: Some(TaskExecutionIdentifier {
                    node_execution_id: Some(NodeExecutionIdentifier {
                        node_id: "a0".into(),
                        execution_id: Some(WorkflowExecutionIdentifier {
                            name: "r1".into(),
                            ..Default::default()
                        }),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn templates_render_like_the_backend() {
        let r = req("s3://b/p/", &[]);
        let v = template_values(&r);
        assert_eq!(render_arg("{{.input}}", &v), "s3://b/p/inputs.pb");
        assert_eq!(render_arg("{{ .OutputPrefix }}", &v), "s3://b/p");
        assert_eq!(render_arg("{{.rawOutputDataPrefix}}", &v), "s3://b/p/raw");
        assert_eq!(
            render_arg("{{.checkpointOutputPrefix}}", &v),
            "s3://b/p/_flytecheckpoints"
        );
        assert_eq!(render_arg("{{.prevCheckpointPrefix}}", &v), "");
        assert_eq!(
            render_arg("run={{.runName}}/{{.actionName}}", &v),
            "run=r1/a0"
        );
        assert_eq!(render_arg("{{.runStartTime}}", &v), "{{.runStartTime}}");
    }

    #[tokio::test]
    async fn writes_inputs_where_the_rendered_inputs_arg_points_through_the_mounts() {
        let local = std::env::temp_dir().join(format!("sc-native-inputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&local);
        std::fs::create_dir_all(&local).unwrap();
        let roots = Roots::parse(&format!("/shared={}", local.display())).unwrap();
        let mut r = req(
            "file:///shared/w/out",
            &[
                "a0",
                "--inputs",
                "{{.input}}",
                "--outputs-path",
                "{{.outputPrefix}}",
            ],
        );
        let at = prepare(&mut r, Some(&roots)).await.unwrap();
        assert_eq!(at.as_deref(), Some("file:///shared/w/out/inputs.pb"));
        let Some(Target::Container(c)) = r.template.as_ref().unwrap().target.as_ref() else {
            panic!()
        };
        assert_eq!(
            c.args,
            [
                "a0",
                "--inputs",
                "file:///shared/w/out/inputs.pb",
                "--outputs-path",
                "file:///shared/w/out"
            ]
        );
        let bytes = std::fs::read(local.join("w/out/inputs.pb")).unwrap();
        let back = Inputs::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.literals[0].name, "x");
        let _ = std::fs::remove_dir_all(&local);
    }

    #[tokio::test]
    async fn refusals_name_the_fix() {
        let mut r = req("", &["a0"]);
        assert!(matches!(
            prepare(&mut r, None).await,
            Err(NativeInputsError::NoOutputPrefix)
        ));
        let mut r = req("s3://b/p", &["a0", "--outputs-path", "{{.outputPrefix}}"]);
        let e = prepare(&mut r, None).await.unwrap_err();
        assert!(e.to_string().contains("--inputs {{.input}}"), "{e}");
        let roots = Roots::parse("/shared=/tmp/x").unwrap();
        let mut r = req("file:///elsewhere/out", &["a0", "--inputs", "{{.input}}"]);
        let e = prepare(&mut r, Some(&roots)).await.unwrap_err();
        assert!(e.to_string().contains("inputs.pb"), "{e}");
        // Script tasks are not touched.
        let mut r = req("", &[]);
        r.template.as_mut().unwrap().r#type = "slurm_script".into();
        assert_eq!(prepare(&mut r, None).await.unwrap(), None);
    }
}
