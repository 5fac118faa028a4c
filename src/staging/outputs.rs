//! Declared outputs of a script task, after its job COMPLETED.
//!
//! upload "connector": the script wrote to a path on the shared filesystem; each file (or every
//! file of a directory) is streamed to its final URI `<output_prefix>/<name>[/<relative>]`.
//! upload "job": the script uploaded itself; each URI must exist. Either way the result is a list
//! of [`OutputBlob`]s the service turns into Blob literals, or a `Failed` message naming the
//! output — a missing output fails the task even on exit code 0.

use std::sync::Arc;

use super::backend::{EntryKind, Staging, WalkEntry};
use super::error::{Result, StagingError};
use super::objstore;
use super::size::{Ceiling, UPLOAD_MAX_BYTES_VAR, human};
use super::transfer::{Transfer, TransferCtl};

// Declared outputs are one type from the task config to the upload: the renderer makes them,
// `resource_meta` carries them (these serde names are its wire strings, shared with the Python
// plugin's meta: an unknown one is an error, never a default), staging uploads them.

/// A file (a SINGLE blob) or a directory (MULTIPART); `file` / `directory` in `resource_meta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OutputKind {
    #[serde(rename = "file")]
    File,
    #[serde(rename = "directory")]
    Dir,
}

/// Who moves an output's bytes; `connector` / `job` in `resource_meta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UploadMode {
    /// The job writes a path on the shared filesystem; the connector (or its stager) moves the
    /// bytes after the job.
    #[default]
    Connector,
    /// The job script uploads to the final URI itself.
    Job,
}

/// One declared output. `uri` is the final location `<output_prefix>/<name>` (see
/// [`output_uri`]); `written_to` is what the job was told to write (`FLYTE_OUTPUT_<NAME>`): a
/// cluster path for `upload: Connector`, the final URI for `Job`. In `resource_meta` the name is
/// the key of the `outputs` map, so it is not repeated in the value; the fields are in the order
/// `resource_meta` has always written them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeclaredOutput {
    #[serde(skip)]
    pub name: String,
    #[serde(default)]
    pub uri: String,
    pub kind: OutputKind,
    pub upload: UploadMode,
    #[serde(default)]
    pub written_to: String,
}

/// Blob dimensionality as flyteidl names it: SINGLE for a file, MULTIPART for a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimensionality {
    Single,
    Multipart,
}

/// One output ready to become `Literal{scalar: Blob{metadata{type{format: "", dimensionality}}, uri}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputBlob {
    pub name: String,
    pub uri: String,
    pub dimensionality: Dimensionality,
}

/// `<output_prefix>/<name>`.
pub fn output_uri(output_prefix: &str, name: &str) -> String {
    objstore::join_uri(output_prefix, name)
}

/// The environment variable the script is given for an output (`FLYTE_OUTPUT_<NAME>`): the
/// renderer sets it, failure messages name it.
pub fn output_env_name(name: &str) -> String {
    format!("FLYTE_OUTPUT_{}", var_suffix(name))
}

/// `FLYTE_INPUT_<NAME>` / `FLYTE_OUTPUT_<NAME>` suffix: upper-cased, non-alphanumerics → `_`.
/// (Here rather than in `render`, which uses it for inputs too: staging must not depend on the
/// renderer.)
pub fn var_suffix(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A GetTask message while a transfer runs, e.g.
/// `Slurm job 95 completed; uploading outputs model, metrics (12 MB of 40 MB)`.
pub fn pending_message(job_id: &str, outputs: &[DeclaredOutput], progress: (u64, u64)) -> String {
    let names: Vec<&str> = outputs.iter().map(|o| o.name.as_str()).collect();
    let (done, total) = progress;
    let amount = if total > 0 {
        format!(" ({} of {})", human(done), human(total))
    } else {
        String::new()
    };
    format!(
        "Slurm job {job_id} completed; uploading outputs {}{amount}",
        names.join(", ")
    )
}

/// Start collecting the outputs in the background. A `ceiling` that failed to parse is passed as
/// `Err` so the transfer fails with that message (the task fails; no fall back to a default).
pub fn start(
    staging: Arc<dyn Staging>,
    job_id: String,
    outputs: Vec<DeclaredOutput>,
    ceiling: Result<Ceiling>,
) -> Transfer<Vec<OutputBlob>> {
    Transfer::spawn(move |ctl| async move {
        let ceiling = ceiling?;
        collect(staging.as_ref(), &job_id, &outputs, ceiling, &ctl).await
    })
}

/// One file to move: cluster path and destination URI.
struct Move {
    from: String,
    to: String,
}

/// Plan (check everything exists and fits), then move. Planning first means a missing or
/// oversized output fails the task before any byte is sent.
pub async fn collect(
    staging: &dyn Staging,
    job_id: &str,
    outputs: &[DeclaredOutput],
    ceiling: Ceiling,
    ctl: &TransferCtl,
) -> Result<Vec<OutputBlob>> {
    let mut moves = Vec::new();
    let mut total = 0u64;
    let mut blobs = Vec::with_capacity(outputs.len());
    for out in outputs {
        ctl.check()?;
        let dimensionality = match out.kind {
            OutputKind::File => Dimensionality::Single,
            OutputKind::Dir => Dimensionality::Multipart,
        };
        match out.upload {
            UploadMode::Job => check_uploaded(job_id, out).await?,
            UploadMode::Connector => {
                let (files, size) = plan(staging, job_id, out).await?;
                if !ceiling.allows(size) {
                    let Ceiling::Bytes(max) = ceiling else {
                        unreachable!("Unlimited allows every size")
                    };
                    return Err(failed(format!(
                        "Output '{}' of Slurm job {job_id} is {}, above the {} the connector will move on a job's behalf. \
                         Set output_upload='job' on the task and have the script upload to the URI it is given in {}, \
                         or raise {UPLOAD_MAX_BYTES_VAR} on the connector deployment.",
                        out.name,
                        human(size),
                        human(max),
                        output_env_name(&out.name),
                    )));
                }
                total += size;
                moves.extend(files);
            }
        }
        blobs.push(OutputBlob {
            name: out.name.clone(),
            uri: out.uri.clone(),
            dimensionality,
        });
    }
    ctl.progress.set_total(total);
    for m in &moves {
        ctl.check()?;
        staging
            .upload_file(&m.from, &m.to, ctl)
            .await
            .map_err(|e| match e {
                StagingError::Cancelled => e,
                e => failed(format!("Uploading {} to {} failed: {e}", m.from, m.to)),
            })?;
    }
    Ok(blobs)
}

/// A terminal failure message as an error the transfer turns into `Failed(message)`.
fn failed(message: String) -> StagingError {
    StagingError::Output { message }
}

/// What to move for one "connector" output, and its size.
async fn plan(
    staging: &dyn Staging,
    job_id: &str,
    out: &DeclaredOutput,
) -> Result<(Vec<Move>, u64)> {
    let missing = || {
        failed(format!(
            "Output '{}' of Slurm job {job_id} was not written: expected a {} at {} (the path in {}).",
            out.name,
            match out.kind {
                OutputKind::File => "file",
                OutputKind::Dir => "directory",
            },
            out.written_to,
            output_env_name(&out.name)
        ))
    };
    let bad = |e: StagingError| failed(format!("Output '{}' of Slurm job {job_id}: {e}", out.name));
    let stat = staging
        .stat(&out.written_to)
        .await
        .map_err(bad)?
        .ok_or_else(missing)?;
    match (out.kind, stat.kind) {
        (OutputKind::File, EntryKind::File) => Ok((
            vec![Move {
                from: out.written_to.clone(),
                to: out.uri.clone(),
            }],
            stat.size,
        )),
        (OutputKind::Dir, EntryKind::Dir) => {
            let entries: Vec<WalkEntry> = staging.walk(&out.written_to).await.map_err(bad)?;
            let size = entries.iter().map(|e| e.size).sum();
            let base = out.written_to.trim_end_matches('/');
            let moves = entries
                .into_iter()
                .map(|e| Move {
                    from: format!("{base}/{}", e.relative),
                    to: objstore::join_uri(&out.uri, &e.relative),
                })
                .collect();
            Ok((moves, size))
        }
        (want, got) => Err(failed(format!(
            "Output '{}' of Slurm job {job_id} is declared as a {} but {} is a {}.",
            out.name,
            if want == OutputKind::File {
                "file"
            } else {
                "directory"
            },
            out.written_to,
            match got {
                EntryKind::File => "file",
                EntryKind::Dir => "directory",
                EntryKind::Other => "fifo, socket or device",
            }
        ))),
    }
}

async fn check_uploaded(job_id: &str, out: &DeclaredOutput) -> Result<()> {
    let bad = |e: StagingError| failed(format!("Output '{}' of Slurm job {job_id}: {e}", out.name));
    let dest = objstore::open(&out.uri).map_err(bad)?;
    if objstore::exists(&dest, out.kind == OutputKind::Dir)
        .await
        .map_err(bad)?
    {
        Ok(())
    } else {
        Err(failed(format!(
            "Output '{}' of Slurm job {job_id} was not uploaded: nothing at {} (output_upload='job': the script must upload it to the URI in {}).",
            out.name,
            out.uri,
            output_env_name(&out.name)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_messages() {
        assert_eq!(output_env_name("model-v2.pt"), "FLYTE_OUTPUT_MODEL_V2_PT");
        assert_eq!(output_uri("s3://b/run/", "model"), "s3://b/run/model");
        let outs = vec![
            DeclaredOutput {
                name: "model".into(),
                kind: OutputKind::File,
                upload: UploadMode::Connector,
                written_to: "/s/m".into(),
                uri: "s3://b/m".into(),
            },
            DeclaredOutput {
                name: "metrics".into(),
                kind: OutputKind::Dir,
                upload: UploadMode::Job,
                written_to: String::new(),
                uri: "s3://b/x".into(),
            },
        ];
        assert_eq!(
            pending_message("95", &outs, (12_000_000, 40_000_000)),
            "Slurm job 95 completed; uploading outputs model, metrics (12 MB of 40 MB)"
        );
        assert_eq!(
            pending_message("95", &outs[..1], (0, 0)),
            "Slurm job 95 completed; uploading outputs model"
        );
    }
}
