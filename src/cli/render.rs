//! `slurm-connector render --request FILE`: the exact JSON body CreateTask would POST to
//! `/slurm/v0.0.42/job/submit`, or the error CreateTask would return. Nothing is submitted.

use std::path::Path;

use super::{embedded, request};
use crate::config::DeploymentConfig;
use crate::service::cluster::render_config;

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

/// The submit body, pretty-printed, for the cluster the task would go to.
pub fn run(request_file: &Path, config_file: Option<&Path>) -> Result<String, RenderCliError> {
    let req = request::load(request_file)?;
    let spec = crate::service::convert::task_spec(&req)
        .map_err(|e| RenderCliError::Refused(e.to_string()))?;
    let deployment = DeploymentConfig::load(config_file)?;
    let render_cfg = if deployment.clusters.is_empty() {
        // What `serve` would use with its embedded default (the URL does not matter here).
        let layout = embedded::EmbeddedLayout::new(&embedded::default_data_dir());
        render_config(&embedded::cluster_config(
            &layout,
            "http://127.0.0.1:0".parse().expect("a URL"),
        ))
    } else {
        let requested = spec
            .custom
            .get("connection")
            .and_then(|c| c.get("cluster"))
            .and_then(|c| c.as_str());
        render_config(
            deployment
                .select_cluster(requested)
                .map_err(RenderCliError::Refused)?,
        )
    };
    let rendered = crate::render::render(&spec, &render_cfg)
        .map_err(|e| RenderCliError::Refused(e.to_string()))?;
    let body = crate::slurmrestd::convert::submit_body_json(render_cfg.api_version, &rendered.job)
        .map_err(|e| RenderCliError::Refused(e.to_string()))?;
    Ok(serde_json::to_string_pretty(&body).expect("JSON serializes"))
}
