//! Everything CreateTask decides before it touches the cluster, in one function that
//! `slurm-connector render` calls too, so what it prints is what CreateTask would submit:
//! whom the task runs as (the identity rules; a refusal submits nothing), its working
//! directory, the rendered job for the cluster's API version, and the rule's admission
//! (account, limits).

use crate::config::{ClusterConfig, DeploymentConfig, TASK_TOKEN_SECRET};
use crate::render::{self, Rendered, TaskSpec};
use crate::service::cluster::render_config;
use crate::service::error::ServiceError;
use crate::service::wire::TaskRequest;
use crate::slurmrestd::ApiVersion;

use super::identity::{self, RunAs};

/// A task ready to submit.
#[derive(Debug)]
pub struct Prepared {
    pub rendered: Rendered,
    /// The Slurm user an identity rule runs it as (`None`: the deployment's own user, or the
    /// user of the task's own token).
    pub slurm_user: Option<String>,
}

/// The decisions above for `request` (either protocol's) on `cluster`, rendered for `api_version`;
/// a job that version cannot express (a field it lacks) is rendered for the newest of `served`
/// (the other versions the cluster serves) that can, and submitted through it
/// (`JobDescription::submit_version`). `own_token`: the task brings its own slurmrestd token
/// (a connection secret).
pub fn prepare(
    deployment: &DeploymentConfig,
    cluster: &ClusterConfig,
    request: &TaskRequest,
    api_version: ApiVersion,
    served: &[ApiVersion],
    own_token: bool,
) -> Result<Prepared, ServiceError> {
    let spec = &request.spec;
    let who = request.requester();
    let run_as = identity::decide(&cluster.name, &cluster.identities, &who)?;
    if let RunAs::Rule(rule) = &run_as {
        identity::check_no_chosen_user(&cluster.name, &spec.custom, rule)?;
        if own_token {
            return Err(ServiceError::Invalid(format!(
                "connection secret `{TASK_TOKEN_SECRET}`: cluster {} runs this task as Slurm user \
                 {:?} ({}); a task's own token would run it as the token's user instead; remove \
                 the secret from the task",
                cluster.name,
                rule.slurm_user,
                rule.describe()
            )));
        }
    }
    let slurm_user = run_as.slurm_user().map(str::to_string);
    let defaults = render_config(cluster);
    let working_dir = identity::working_dir_for(
        defaults.working_dir.as_deref(),
        slurm_user.as_deref().or(cluster.username.as_deref()),
    )
    .map_err(ServiceError::Invalid)?;
    let render_cfg = render::RenderConfig {
        api_version,
        clustered: deployment.clustered.clone(),
        interruptible: deployment.interruptible.clone(),
        working_dir,
        ..defaults
    };
    let mut rendered = match render::render(spec, &render_cfg) {
        Ok(r) => r,
        Err(e @ render::RenderError::NotInApiVersion { .. }) => {
            render_in_another_version(spec, &render_cfg, served, &cluster.name)
                .ok_or_else(|| ServiceError::Invalid(e.to_string()))?
        }
        Err(e) => return Err(ServiceError::Invalid(e.to_string())),
    };
    if let RunAs::Rule(rule) = &run_as {
        identity::admit(&cluster.name, rule, &mut rendered.job)?;
    }
    Ok(Prepared {
        rendered,
        slurm_user,
    })
}

/// The job rendered for the newest version of `served` (other than the one it was refused
/// for) that can express it, marked to be submitted through that version; `None` when none can.
fn render_in_another_version(
    spec: &TaskSpec,
    cfg: &render::RenderConfig,
    served: &[ApiVersion],
    cluster: &str,
) -> Option<render::Rendered> {
    served
        .iter()
        .rev()
        .filter(|v| **v != cfg.api_version)
        .find_map(|v| {
            let other = render::RenderConfig {
                api_version: *v,
                ..cfg.clone()
            };
            let mut r = render::render(spec, &other).ok()?;
            tracing::info!(cluster, api_version = %cfg.api_version, submit_version = %v, job_name = %r.job_name, "the cluster's API version cannot express this job and another version it serves can: submitting it through that one");
            r.job.submit_version = Some(*v);
            Some(r)
        })
}
