//! Everything CreateTask decides and checks before it touches slurmctld, in the order it runs
//! ([`prepare_on`]):
//! - a Flyte 1 `slurm` task's script read from the cluster's shared filesystem ([`read_script`]);
//! - [`prepare`]: whom the task runs as (the identity rules; a refusal submits nothing), its
//!   working directory, the rendered job for the cluster's API version, and the rule's admission
//!   (account, limits). One function that `slurm-connector render` calls too, so what it prints
//!   is what CreateTask would submit;
//! - what the rendered job reads there checked: a pre-staged image ([`check_staged_image`]) and a
//!   Flyte 1 shell task's output locations ([`check_output_locations`]).
//!
//! A wrong path is a CreateTask error naming the field and the fix, not a job that queues,
//! starts and only then fails.

use futures::TryStreamExt;

use crate::config::{ClusterConfig, DeploymentConfig, TASK_TOKEN_SECRET};
use crate::render::{self, DeclaredOutput, Rendered, StagedImage, TaskSpec};
use crate::service::cluster::{ClusterRuntime, render_config};
use crate::service::error::ServiceError;
use crate::service::wire::TaskRequest;
use crate::slurmrestd::ApiVersion;
use crate::staging::{Staging, StagingError, UploadMode};

use super::identity::{self, RunAs};

/// A task ready to submit.
#[derive(Debug)]
pub struct Prepared {
    pub rendered: Rendered,
    /// The Slurm user an identity rule runs it as (`None`: the deployment's own user, or the
    /// user of the task's own token).
    pub slurm_user: Option<String>,
}

/// The decisions of the module comment for `request` (either protocol's) on `cluster`, rendered for `api_version`;
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

/// CreateTask's preparation of `request` on `rt` (see the module comment). `own_token`: the
/// task brings its own slurmrestd token (a connection secret).
pub async fn prepare_on(
    deployment: &DeploymentConfig,
    rt: &ClusterRuntime,
    request: &mut TaskRequest,
    own_token: bool,
) -> Result<Prepared, ServiceError> {
    let (cluster, staging) = (&rt.cfg.name, rt.staging.as_deref());
    if let Some(path) = request.script_file.take() {
        let script = read_script(cluster, staging, &path).await?;
        set_script(&mut request.spec, script);
    }
    let api_version = api_version_of(rt).await?;
    let served = rt.client().served_versions();
    let task = prepare(
        deployment,
        &rt.cfg,
        request,
        api_version,
        &served,
        own_token,
    )?;
    if let Some(image) = &task.rendered.staged_image {
        check_staged_image(cluster, staging, image).await?;
    }
    if request.spec.shell_template.is_some() {
        check_output_locations(cluster, staging, &task.rendered.declared_outputs).await?;
    }
    Ok(task)
}

/// The API version to render for: the one the cluster serves (chosen at start, or now when it
/// was unreachable then). Unreachable now but known from before: that one (the submit waits
/// for the cluster to come back). Never reached since start: the error (nothing to render for).
async fn api_version_of(rt: &ClusterRuntime) -> Result<ApiVersion, ServiceError> {
    match rt.client().version().await {
        Ok(v) => Ok(v),
        Err(e) => match rt.client().api_version() {
            Some(v) if e.is_transient() => Ok(v),
            _ => Err(ServiceError::slurm(
                "finding which slurmrestd API version the cluster serves",
            )(e)),
        },
    }
}

/// The largest script read: slurmctld's default `max_script_size`; a bigger one it would refuse
/// anyway, after the connector had read it all.
const MAX_SCRIPT_BYTES: u64 = render::coalesce::MAX_SCRIPT_BYTES as u64;

/// The text of the script at `path` on `cluster`'s shared filesystem. A Flyte 1 `slurm` task
/// (flytekitplugins-slurm's `SlurmTask`) names a batch script already on the cluster
/// (`batch_script_path`); slurmrestd takes a script body, not a path, so CreateTask reads the
/// file through staging and submits its text, as `sbatch PATH ARGS` reads the file (and its
/// `#SBATCH` lines); the arguments reach it through `set --` (`render::script`).
async fn read_script(
    cluster: &str,
    staging: Option<&dyn Staging>,
    path: &str,
) -> Result<String, ServiceError> {
    let field = "batch_script_path";
    let Some(staging) = staging else {
        return Err(ServiceError::Invalid(format!(
            "{field} `{path}`: cluster `{cluster}` has no staging (its shared filesystem mounted in the \
             connector, or the stager sidecar), and the connector reads a Flyte 1 slurm task's script \
             through it (slurmrestd takes a script body, not a path); configure staging for the \
             cluster (`FLYTE_SLURM_SHARED_MOUNTS` or `FLYTE_SLURM_STAGER_URL`, docs/configuration.md)"
        )));
    };
    let refused = |reason: String| {
        ServiceError::Invalid(format!(
            "{field} `{path}` on cluster `{cluster}`: {reason}; put the script under a folder the \
             connector may read (its staging roots), or add the script's folder to them"
        ))
    };
    let missing = || {
        ServiceError::Invalid(format!(
            "{field} `{path}` does not exist on cluster `{cluster}`'s shared filesystem; fix the \
             task's batch_script_path (SlurmTask(batch_script_path=...)) or copy the script there"
        ))
    };
    let transient = |e: StagingError| {
        ServiceError::Unavailable(format!(
            "reading {field} `{path}` on cluster `{cluster}` (try again): {e}"
        ))
    };
    let stat = match staging.stat(path).await {
        Ok(Some(s)) => s,
        Ok(None) | Err(StagingError::NotFound { .. }) => return Err(missing()),
        Err(StagingError::Refused { reason, .. }) => return Err(refused(reason)),
        Err(e) => return Err(transient(e)),
    };
    if stat.size > MAX_SCRIPT_BYTES {
        return Err(ServiceError::Invalid(format!(
            "{field} `{path}` on cluster `{cluster}` is {} bytes; Slurm takes batch scripts up to \
             {MAX_SCRIPT_BYTES} bytes (max_script_size)",
            stat.size
        )));
    }
    let stream = match staging.read(path).await {
        Ok(s) => s,
        Err(StagingError::NotFound { .. }) => return Err(missing()),
        Err(StagingError::Refused { reason, .. }) => return Err(refused(reason)),
        Err(e) => return Err(transient(e)),
    };
    let mut bytes = Vec::with_capacity(stat.size as usize);
    let mut stream = stream;
    while let Some(chunk) = stream.try_next().await.map_err(|e| {
        ServiceError::Unavailable(format!(
            "reading {field} `{path}` on cluster `{cluster}` (try again): {e}"
        ))
    })? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > MAX_SCRIPT_BYTES {
            return Err(ServiceError::Invalid(format!(
                "{field} `{path}` on cluster `{cluster}` grew past {MAX_SCRIPT_BYTES} bytes while \
                 it was read; Slurm takes batch scripts up to that size (max_script_size)"
            )));
        }
    }
    String::from_utf8(bytes).map_err(|_| {
        ServiceError::Invalid(format!(
            "{field} `{path}` on cluster `{cluster}` is not UTF-8 text; slurmrestd takes a batch \
             script as a JSON string"
        ))
    })
}

/// The script read becomes the task's script: from here on it renders as a `slurm_script` task
/// (its `#SBATCH` lines, then the task's `sbatch_config` over them, as on sbatch's command line).
pub fn set_script(spec: &mut TaskSpec, script: String) {
    if let crate::render::TaskConfig::Slurm(c) = &mut spec.custom {
        c.script = Some(script);
    }
}

/// CreateTask's check of a pre-staged image (the cluster's image map chose a file for the task's
/// image): a file the connector can see through staging and that is not there fails the task at
/// once, instead of a job that queues, starts and only then fails in Pyxis or Apptainer.
///
/// Where the connector cannot see the path (no staging, or a path outside the shared roots such as
/// a node-local `/images`), it is not checked here; the rendered script checks it on the node
/// and fails with a message naming the file and the rule (see `render/script.rs`).
async fn check_staged_image(
    cluster: &str,
    staging: Option<&dyn Staging>,
    image: &StagedImage,
) -> Result<(), ServiceError> {
    let Some(staging) = staging else {
        return Ok(());
    };
    match staging.stat(&image.path).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(ServiceError::Invalid(format!(
            "image `{}`: the image rule `{}` of cluster `{cluster}` maps it to the pre-staged file \
             {}, which does not exist; stage the image there (e.g. `enroot import -o {} docker://...` \
             for Pyxis, `apptainer build {} docker://...` for Apptainer) or fix the rule in the \
             connector's config file",
            image.reference, image.pattern, image.path, image.path, image.path
        ))),
        // Outside what the connector may read: the job's own check reports it.
        Err(StagingError::Refused { .. }) => Ok(()),
        Err(e) => {
            // Staging hiccupped: not a reason to fail the task (the job checks it too).
            tracing::warn!(cluster, path = %image.path, error = %e, "could not check the pre-staged image; the job checks it on the node");
            Ok(())
        }
    }
}

/// Checks each declared output the connector uploads can be read where the task writes it. A
/// Flyte 1 shell task (`SlurmShellTask`) names where on the cluster its script writes each
/// output (`output_locs`), and the connector uploads them from there once the job succeeds; a
/// location it may not read (outside its staging roots), or a cluster with no staging, would
/// only show after the job ran, as a failed task.
async fn check_output_locations(
    cluster: &str,
    staging: Option<&dyn Staging>,
    outputs: &[DeclaredOutput],
) -> Result<(), ServiceError> {
    for o in outputs.iter().filter(|o| o.upload == UploadMode::Connector) {
        let field = format!("output_locs `{}` (`{}`)", o.name, o.written_to);
        let Some(staging) = staging else {
            return Err(ServiceError::Invalid(format!(
                "{field}: cluster `{cluster}` has no staging (its shared filesystem mounted in \
                 the connector, or the stager sidecar), and the connector uploads a shell task's \
                 outputs from there; configure staging for the cluster (`FLYTE_SLURM_SHARED_MOUNTS` \
                 or `FLYTE_SLURM_STAGER_URL`, docs/configuration.md)"
            )));
        };
        match staging.stat(&o.written_to).await {
            // Not written yet (or left by an earlier run, replaced by this one): readable there.
            Ok(_) | Err(StagingError::NotFound { .. }) => {}
            Err(StagingError::Refused { reason, .. }) => {
                return Err(ServiceError::Invalid(format!(
                    "{field} on cluster `{cluster}`: {reason}; write the output under a folder the \
                     connector may read (its staging roots), or add that folder to them"
                )));
            }
            Err(e) => {
                return Err(ServiceError::Unavailable(format!(
                    "checking {field} on cluster `{cluster}` (try again): {e}"
                )));
            }
        }
    }
    Ok(())
}
