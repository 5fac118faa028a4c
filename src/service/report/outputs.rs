//! The declared outputs' stage: a succeeded job's File/Dir outputs uploaded to object storage
//! (in the background: [`crate::service::background`]), the task SUCCEEDED only once they are.

use crate::proto::core::task_execution::Phase;
use crate::proto::core::{self, Blob, BlobMetadata, BlobType, Literal, Scalar};
use crate::proto::task::{NamedLiteral, Outputs};
use crate::staging::{
    self, DeclaredOutput, Dimensionality, OutputBlob, Transfer, TransferOutcome, UploadMode,
};
use crate::tracker::FailureClass;

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;

use super::verdict::Verdict;

/// The confinement root used when outputs are all uploaded by the job itself and no staging is
/// configured: no file is ever read through it.
const NO_STAGING_ROOT: &str = "/nonexistent/slurm-connector-no-staging";

pub fn declared(meta: &ResourceMeta) -> Vec<DeclaredOutput> {
    meta.outputs.values().cloned().collect()
}

fn blob_literal(b: &OutputBlob) -> NamedLiteral {
    let dim = match b.dimensionality {
        Dimensionality::Single => core::blob_type::BlobDimensionality::Single,
        Dimensionality::Multipart => core::blob_type::BlobDimensionality::Multipart,
    };
    NamedLiteral {
        name: b.name.clone(),
        value: Some(Literal {
            value: Some(core::literal::Value::Scalar(Box::new(Scalar {
                value: Some(core::scalar::Value::Blob(Blob {
                    metadata: Some(BlobMetadata {
                        r#type: Some(BlobType {
                            format: String::new(),
                            dimensionality: dim as i32,
                        }),
                    }),
                    uri: b.uri.clone(),
                })),
            }))),
            ..Default::default()
        }),
    }
}

/// Starts the upload of `decl`, and counts its result once it settles (`cluster/tallies.rs`):
/// here, where each attempt starts once, rather than where GetTask reads it (as often as it is
/// polled). A cancelled upload (DeleteTask) is neither.
fn start(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    staging_backend: Option<std::sync::Arc<dyn staging::Staging>>,
    decl: Vec<DeclaredOutput>,
    ceiling: &Result<staging::Ceiling, String>,
) -> std::sync::Arc<Transfer<Vec<OutputBlob>>> {
    let backend = staging_backend.unwrap_or_else(|| {
        // Job uploads only: nothing is read from the cluster's filesystem, so a backend
        // confined to a root that holds nothing is enough.
        std::sync::Arc::new(staging::LocalStaging::new(
            staging::Roots::parse(NO_STAGING_ROOT).expect("a fixed absolute path"),
        ))
    });
    let c = ceiling
        .clone()
        .map_err(|message| staging::StagingError::Config {
            var: "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES",
            message,
        });
    let transfer = std::sync::Arc::new(staging::outputs::start(
        backend,
        meta.target().to_string(),
        decl,
        c,
    ));
    let (settled, tallies) = (transfer.clone(), rt.tallies.clone());
    let (cluster, job) = (meta.cluster.clone(), meta.target());
    tokio::spawn(async move {
        match settled.wait().await {
            TransferOutcome::Succeeded(_) => tallies.upload(true),
            TransferOutcome::Failed(why) => {
                tracing::warn!(cluster, job = %job, error = %why, "output upload failed");
                tallies.upload(false);
            }
            TransferOutcome::Cancelled => {}
        }
    });
    transfer
}

/// Starts (or joins) the upload of a succeeded job's outputs; RUNNING while it goes, FAILED
/// when an output is missing or cannot be stored.
pub fn apply(
    v: &mut Verdict,
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    ceiling: &Result<staging::Ceiling, String>,
) {
    if v.phase == Phase::Succeeded && !meta.outputs.is_empty() {
        let decl = declared(meta);
        let needs_staging = decl.iter().any(|d| d.upload == UploadMode::Connector);
        match (&rt.staging, needs_staging) {
            (None, true) => {
                v.phase = Phase::Failed;
                v.class = Some(FailureClass::Permanent);
                v.message.push_str(&format!(
                    "\n{}; or declare the outputs with output_upload=\"job\" so the job uploads them itself",
                    staging::settings::not_configured()
                ));
            }
            (staging_backend, _) => {
                let transfer = rt.transfer(meta.target(), |running| {
                    if running.is_some() {
                        return None;
                    }
                    Some(start(
                        rt,
                        meta,
                        staging_backend.clone(),
                        decl.clone(),
                        ceiling,
                    ))
                });
                let (outcome, progress) = (transfer.outcome(), transfer.progress());
                match outcome {
                    None => {
                        v.phase = Phase::Running;
                        v.message = staging::outputs::pending_message(
                            &meta.target().to_string(),
                            &decl,
                            progress,
                        );
                    }
                    Some(TransferOutcome::Succeeded(blobs)) => {
                        v.outputs = Some(Outputs {
                            literals: blobs.iter().map(blob_literal).collect(),
                        });
                    }
                    Some(TransferOutcome::Failed(why)) => {
                        // The job finished: an output that is missing now never appears.
                        v.phase = Phase::Failed;
                        v.class = Some(FailureClass::Permanent);
                        v.message.push_str(&format!("\n{why}"));
                    }
                    Some(TransferOutcome::Cancelled) => {
                        v.phase = Phase::Aborted;
                        v.message.push_str("\noutput upload cancelled");
                    }
                }
            }
        }
    }
}
