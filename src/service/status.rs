//! GetTask's answer: a tracker snapshot (plus declared outputs and the stderr tail) turned into a
//! `Resource` with the plugin's message format.

use std::time::Duration;

use crate::proto::connector::Resource;
use crate::proto::core::task_execution::Phase;
use crate::proto::core::{self, Blob, BlobMetadata, BlobType, Literal, Scalar};
use crate::proto::task::{NamedLiteral, Outputs};
use crate::staging::{
    self, DeclaredOutput, Dimensionality, OutputBlob, TransferOutcome, UploadMode,
};
use crate::tracker::JobSnapshot;

use super::cluster::ClusterRuntime;
use super::meta::ResourceMeta;
use super::native_result;

/// The confinement root used when outputs are all uploaded by the job itself and no staging is
/// configured: no file is ever read through it.
const NO_STAGING_ROOT: &str = "/nonexistent/slurm-connector-no-staging";

/// Bound on staging reads inside GetTask (the backend's deadline is 10 s).
const STAGING_BUDGET: Duration = Duration::from_secs(3);

/// `Slurm job <id> is <STATE>[, exit code x:y][, reason: r]` and the lines after it.
pub fn message(meta: &ResourceMeta, s: &JobSnapshot) -> String {
    let mut m = format!(
        "Slurm job {} is {}",
        meta.job_id,
        s.state.as_deref().unwrap_or("not known yet")
    );
    if let Some(ec) = &s.exit_code {
        m.push_str(&format!(", exit code {ec}"));
    }
    if let Some(r) = s
        .reason
        .as_deref()
        .filter(|r| !r.is_empty() && *r != "None")
    {
        m.push_str(&format!(", reason: {r}"));
    }
    if let Some(n) = &s.note {
        m.push_str(&format!("\n{n}"));
    }
    if let Some(u) = &s.unreachable {
        let since = chrono::DateTime::<chrono::Utc>::from(u.since).format("%Y-%m-%dT%H:%M:%SZ");
        m.push_str(&format!(
            "\nslurmrestd of cluster {} unreachable since {since} ({}); showing the last known state",
            meta.cluster, u.error
        ));
    }
    if !meta.stdout.is_empty() {
        m.push_str(&format!("\nstdout: {}", meta.stdout));
    }
    if !meta.stderr.is_empty() && meta.stderr != meta.stdout {
        m.push_str(&format!("\nstderr: {}", meta.stderr));
    }
    if s.phase == Phase::Running {
        m.push_str(&format!(
            "\nattach: srun --jobid={} --overlap --pty bash",
            meta.job_id
        ));
    }
    m
}

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

/// The whole GetTask resource. Never fails: staging problems become part of the message (or,
/// for declared outputs, the task's failure), never an RPC error.
/// The deployment's log-link templates filled in for this job (percent-encoded values).
fn log_links(
    templates: &[staging::logs::LogLinkTemplate],
    meta: &ResourceMeta,
) -> Vec<crate::proto::core::TaskLog> {
    let job_id = meta.job_id.to_string();
    let vars = staging::logs::LogVars {
        job_id: &job_id,
        stdout: &meta.stdout,
        stderr: &meta.stderr,
        cluster: &meta.cluster,
    };
    staging::logs::render_links(templates, &vars)
        .into_iter()
        .map(|(name, uri)| crate::proto::core::TaskLog {
            uri,
            name,
            show_while_pending: true,
            ready: true,
            ..Default::default()
        })
        .collect()
}

/// What [`resource`] reads besides the job: the deployment's settings and the native results.
pub struct Context<'a> {
    pub ceiling: &'a Result<staging::Ceiling, String>,
    pub log_templates: &'a [staging::logs::LogLinkTemplate],
    pub native: &'a native_result::Probes,
}

pub async fn resource(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: JobSnapshot,
    ctx: &Context<'_>,
) -> Resource {
    let (ceiling, log_templates) = (ctx.ceiling, ctx.log_templates);
    let mut phase = snap.phase;
    let mut msg = message(meta, &snap);
    let mut outputs = None;

    // A native task's entrypoint says how the task went (outputs.pb / error.pb), not the exit code.
    if phase == Phase::Succeeded
        && let Some(prefix) = &meta.native_prefix
    {
        let source = native_result::Source::for_prefix(prefix, rt.staging.as_ref());
        match ctx
            .native
            .decision(&meta.cluster, meta.job_id, prefix, source)
            .await
        {
            Some(d) => {
                phase = d.phase;
                msg.push_str(&format!("\n{}", d.message));
            }
            None => {
                phase = Phase::Running;
                msg = format!(
                    "Slurm job {} COMPLETED; reading the task's result at {prefix}",
                    meta.job_id
                );
            }
        }
    }

    if phase == Phase::Succeeded && !meta.outputs.is_empty() {
        let decl = declared(meta);
        let needs_staging = decl.iter().any(|d| d.upload == UploadMode::Connector);
        match (&rt.staging, needs_staging) {
            (None, true) => {
                phase = Phase::Failed;
                msg.push_str(&format!(
                    "\n{}; or declare the outputs with output_upload=\"job\" so the job uploads them itself",
                    staging::settings::not_configured()
                ));
            }
            (staging_backend, _) => {
                let (outcome, progress) = {
                    let mut transfers = rt.transfers.lock().unwrap();
                    let t = transfers.entry(meta.job_id).or_insert_with(|| {
                        let backend: std::sync::Arc<dyn staging::Staging> = match staging_backend {
                            Some(s) => s.clone(),
                            // Job uploads only: nothing is read from the cluster's filesystem,
                            // so a backend confined to a root that holds nothing is enough.
                            None => std::sync::Arc::new(staging::LocalStaging::new(
                                staging::Roots::parse(NO_STAGING_ROOT)
                                    .expect("a fixed absolute path"),
                            )),
                        };
                        let c = ceiling
                            .clone()
                            .map_err(|message| staging::StagingError::Config {
                                var: "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES",
                                message,
                            });
                        staging::outputs::start(backend, meta.job_id.to_string(), decl.clone(), c)
                    });
                    (t.outcome(), t.progress())
                };
                match outcome {
                    None => {
                        phase = Phase::Running;
                        msg = staging::outputs::pending_message(
                            &meta.job_id.to_string(),
                            &decl,
                            progress,
                        );
                    }
                    Some(TransferOutcome::Succeeded(blobs)) => {
                        outputs = Some(Outputs {
                            literals: blobs.iter().map(blob_literal).collect(),
                        });
                    }
                    Some(TransferOutcome::Failed(why)) => {
                        phase = Phase::Failed;
                        msg.push_str(&format!("\n{why}"));
                    }
                    Some(TransferOutcome::Cancelled) => {
                        phase = Phase::Aborted;
                        msg.push_str("\noutput upload cancelled");
                    }
                }
            }
        }
    }

    if matches!(phase, Phase::Failed | Phase::RetryableFailed)
        && let Some(st) = &rt.staging
        && !meta.stderr.is_empty()
    {
        match tokio::time::timeout(
            STAGING_BUDGET,
            staging::logs::failure_tail(st.as_ref(), &meta.stderr),
        )
        .await
        {
            Ok(Ok(Some(tail))) => msg.push_str(&format!("\n--- last lines of stderr ---\n{tail}")),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => msg.push_str(&format!("\n(stderr not readable: {e})")),
            Err(_) => msg.push_str("\n(stderr not read: the staging backend is slow)"),
        }
    }

    let custom_info = serde_json::json!({
        "cluster": meta.cluster,
        "job_id": meta.job_id.0,
        "job_name": meta.job_name,
        "state": snap.state,
        "exit_code": snap.exit_code.as_ref().map(|e| e.to_string()),
        "stdout": meta.stdout,
        "stderr": meta.stderr,
    });
    Resource {
        outputs,
        message: msg,
        log_links: log_links(log_templates, meta),
        phase: phase as i32,
        custom_info: Some(crate::proto::json_to_struct(&custom_info)),
    }
}
