//! The declared outputs: a succeeded job's File/Dir outputs uploaded to object storage (in the
//! background: [`crate::service::background`]); the task is SUCCEEDED only once they are
//! (`service/phase.rs`).

use crate::staging::{self, DeclaredOutput, OutputBlob, Transfer, TransferOutcome, UploadMode};

use crate::service::cluster::ClusterRuntime;
use crate::service::phase::Outputs;
use crate::service::wire::meta::ResourceMeta;

/// The confinement root used when outputs are all uploaded by the job itself and no staging is
/// configured: no file is ever read through it.
const NO_STAGING_ROOT: &str = "/nonexistent/slurm-connector-no-staging";

pub fn declared(meta: &ResourceMeta) -> Vec<DeclaredOutput> {
    meta.outputs.values().cloned().collect()
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

/// What the upload of the declared outputs says, for the answer.
#[derive(Debug)]
pub enum Upload {
    /// The connector must upload them and has no staging backend: why, and the way out.
    NoStaging(String),
    /// Going: the message that says how far.
    Going(String),
    Uploaded(Vec<OutputBlob>),
    /// An output is missing or cannot be stored: why.
    Failed(String),
    Cancelled,
}

/// Starts (or joins) the upload of a succeeded task's declared outputs: GetTask's fact of them
/// and what it says; no fact for a task that declared none.
pub async fn upload(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    ceiling: &Result<staging::Ceiling, String>,
) -> (Option<Outputs>, Option<Upload>) {
    if meta.outputs.is_empty() {
        return (None, None);
    }
    let decl = declared(meta);
    let needs_staging = decl.iter().any(|d| d.upload == UploadMode::Connector);
    let (fact, said) = match (&rt.staging, needs_staging) {
        (None, true) => (
            Outputs::NoStaging,
            Upload::NoStaging(format!(
                "{}; or declare the outputs with output_upload=\"job\" so the job uploads them itself",
                staging::settings::not_configured()
            )),
        ),
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
                None => (
                    Outputs::Uploading,
                    Upload::Going(staging::outputs::pending_message(
                        &meta.target().to_string(),
                        &decl,
                        progress,
                    )),
                ),
                Some(TransferOutcome::Succeeded(blobs)) => {
                    (Outputs::Uploaded, Upload::Uploaded(blobs.to_vec()))
                }
                // The job finished: an output that is missing now never appears.
                Some(TransferOutcome::Failed(why)) => {
                    (Outputs::Failed, Upload::Failed(why.to_string()))
                }
                Some(TransferOutcome::Cancelled) => (Outputs::Cancelled, Upload::Cancelled),
            }
        }
    };
    (Some(fact), Some(said))
}
