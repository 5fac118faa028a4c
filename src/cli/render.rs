//! `slurm-connector render --request FILE [--api-version vX]`: the exact JSON body CreateTask
//! would POST to `/slurm/<version>/job/submit`, or the error CreateTask would return. Nothing is
//! submitted and no cluster is contacted.
//!
//! The version defaults to the selected cluster's pinned `api_version`, else v0.0.42. Rendering
//! makes no network call, so it cannot negotiate the version as `serve` does (the newest both
//! sides serve); a pinned version is what that deployment gets, and v0.0.42 is the one version
//! every Slurm from 24.11 to 26.05 serves, so it is the body most clusters get today. The newest
//! version would be right only for 26.11. `--api-version` shows what another cluster would get
//! (and which options it refuses).

use std::path::Path;

use super::{embedded, request};
use crate::config::DeploymentConfig;
use crate::service::prepare;
use crate::slurmrestd::ApiVersion;

#[derive(Debug, thiserror::Error)]
pub enum RenderCliError {
    #[error(transparent)]
    Request(#[from] request::RequestError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// What CreateTask would answer with INVALID_ARGUMENT.
    #[error("{0}")]
    Refused(String),
}

/// When neither `--api-version` nor the cluster pins one (see the module comment).
pub const DEFAULT_API_VERSION: ApiVersion = ApiVersion::V0042;

/// The submit body, pretty-printed, for the cluster the task would go to, rendered and encoded
/// for `api_version` (default: that cluster's pinned one, else [`DEFAULT_API_VERSION`]).
pub fn run(
    request_file: &Path,
    config_file: Option<&Path>,
    api_version: Option<ApiVersion>,
) -> Result<String, RenderCliError> {
    let mut task_request = match request::load_any(request_file)? {
        request::Loaded::Flyte2(req) => crate::service::flyte2_request(&req)
            .map_err(|e| RenderCliError::Refused(e.to_string()))?,
        request::Loaded::Flyte1(req) => crate::service::flyte1_request(&req)
            .map_err(|e| RenderCliError::Refused(e.to_string()))?,
    };
    if let Some(path) = task_request.script_file.take() {
        // CreateTask reads it through the cluster's staging; offline, this machine's copy
        // (where the cluster's filesystem is mounted) is the one there is.
        let script = std::fs::read_to_string(&path).map_err(|e| {
            RenderCliError::Refused(format!(
                "batch_script_path `{path}`: cannot read it here ({e}); render reads the script \
                 locally, so run it where the cluster's shared filesystem is mounted"
            ))
        })?;
        crate::service::set_script(&mut task_request.spec, script);
    }
    let spec = &task_request.spec;
    let deployment = DeploymentConfig::load(config_file)?;
    let cluster = if deployment.clusters.is_empty() {
        // What `serve` would use with its embedded default (the URL does not matter here).
        let layout = embedded::EmbeddedLayout::new(&embedded::default_data_dir());
        embedded::cluster_config(&layout, "http://127.0.0.1:0".parse().expect("a URL"))
    } else {
        let requested = spec.requested_cluster();
        deployment
            .select_cluster(requested, spec.requested_host())
            .map_err(RenderCliError::Refused)?
            .clone()
    };
    // CreateTask's own decisions: the same user, account, limits and refusals.
    let api_version = api_version
        .or(cluster.api_version)
        .unwrap_or(DEFAULT_API_VERSION);
    // Offline: no other version the cluster serves is known, so none is fallen back to.
    let task = prepare(
        &deployment,
        &cluster,
        &task_request,
        api_version,
        &[],
        false,
    )
    .map_err(|e| RenderCliError::Refused(e.to_string()))?;
    let rendered = task.rendered;
    let body = crate::slurmrestd::convert::submit_body_json(api_version, &rendered.job)
        .map_err(|e| RenderCliError::Refused(e.to_string()))?;
    Ok(serde_json::to_string_pretty(&body).expect("JSON serializes"))
}
