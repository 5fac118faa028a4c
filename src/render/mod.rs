//! Job rendering: a Flyte task becomes a slurmrestd JSON job description (pure, no I/O).
//!
//! slurmrestd never reads `#SBATCH` lines, so rendering turns everything a task says — the
//! plugin's first-class fields, its `sbatch_options` and the script's own directives — into
//! job-description fields, exactly as `sbatch` would have interpreted them, and builds the script
//! and environment the published Python plugin (`flyteplugins-slurm`) would have produced: the
//! same `FLYTE_INPUT_<NAME>` / `FLYTE_OUTPUT_<NAME>` variables and the same script around the
//! user's.
//!
//! Modules, one job each: [`spec`] inputs, [`custom`] the plugin config, [`directives`] the
//! `#SBATCH` parser, [`options`] THE sbatch options (one item each, with its per-version support), [`merge`] precedence, [`apply`] option → field,
//! [`units`] time/size syntaxes, [`env`] the environment, [`script`] the script text, [`naming`]
//! job names and the idempotency key.

pub mod apply;
pub mod array;
pub mod clustered;
pub mod coalesce;
pub mod custom;
mod derive;
pub mod directives;
pub mod env;
pub mod error;
pub mod interruptible;
pub mod marker;
pub mod merge;
pub mod naming;
pub mod options;
pub mod ranks;
mod resume;
pub mod script;
pub mod shell;
pub mod spec;
pub mod template;

use std::collections::BTreeMap;

pub use crate::domain::units;
pub use crate::staging::outputs::{DeclaredOutput, OutputKind, UploadMode};
pub use error::{Origin, RenderError};
pub use naming::{
    COMMENT_MAX, KeysIn, NAME_KEYS_MAX, PACKED_KEY_LEN, idempotency_key, key_from_comment,
    key_from_job_name, key_of_record, keys_comment, keys_name, packed_keys_all, record_keys,
};
pub use spec::{
    CLUSTERED_TASK_TYPE, ContainerSpec, ExecutionIdentity, InputValue, InterfaceKind, RenderConfig,
    ShellTemplate, TaskConfig, TaskSpec, TaskType,
};

pub use crate::config::images::{ImageMap, StagedImage};
use crate::slurmrestd::job_description::JobDescription;
use crate::staging::JobFiles;

/// A rendered task.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub job: JobDescription,
    pub job_name: String,
    /// [`idempotency_key`] of the execution; also at the start of `job.comment`.
    pub key: String,
    pub stdout_path: String,
    pub stderr_path: String,
    /// Script tasks' declared outputs (empty for native tasks: their entrypoint writes outputs).
    pub declared_outputs: Vec<DeclaredOutput>,
    /// Several ranks (`ranks`): only rank 0 writes the result; a failure names the rank.
    pub ranks: bool,
    /// A clustered task's `failure_policy.max_restarts`, when set: the job's requeue budget.
    pub max_restarts: Option<u32>,
    /// A native task's image mapped to a pre-staged file (the service checks that it exists).
    pub staged_image: Option<StagedImage>,
    /// The task opted out of coalescing (`sbatch_options: {no-coalesce: true}`).
    pub no_coalesce: bool,
}

/// Renders with the current time (only `--begin`/`--deadline` read it).
pub fn render(spec: &TaskSpec, cfg: &RenderConfig) -> Result<Rendered, RenderError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    render_at(spec, cfg, now)
}

fn clean_dir(path: &str, field: &str) -> Result<String, RenderError> {
    if !path.starts_with('/') || path.chars().any(|c| c.is_control()) {
        return Err(RenderError::config(
            field,
            format!(
                "`{}` must be an absolute path on the cluster's shared filesystem",
                path.escape_default()
            ),
        ));
    }
    let trimmed = path.trim_end_matches('/');
    Ok(if trimmed.is_empty() {
        "/".to_string()
    } else {
        trimmed.to_string()
    })
}

/// [`render`] at a given unix time (tests, and a service that wants one clock per request).
pub fn render_at(spec: &TaskSpec, cfg: &RenderConfig, now: i64) -> Result<Rendered, RenderError> {
    // A clustered task's ClusteredTaskSpec becomes a native task's Slurm config on this site.
    let (custom, clustered) = match &spec.custom {
        TaskConfig::Clustered(c) => {
            let gpus = spec.container.as_ref().and_then(|c| c.gpus);
            // The site's terms as the config the plugin would have written: one parser.
            let slurm = clustered::slurm_custom(c, &cfg.clustered, gpus)?;
            (custom::parse(&slurm)?, Some(c))
        }
        TaskConfig::Slurm(c) => (c.as_ref().clone(), None),
    };

    let working_dir = match (&cfg.working_dir, &custom.working_dir) {
        (Some(d), task) => {
            if task.as_ref().is_some_and(|t| t != d) {
                tracing::info!(deployment = %d, "task `working_dir` ignored: the deployment's FLYTE_SLURM_WORKING_DIR wins");
            }
            clean_dir(d, "FLYTE_SLURM_WORKING_DIR")?
        }
        (None, Some(t)) => clean_dir(t, "working_dir")?,
        (None, None) => return Err(RenderError::NoWorkingDir),
    };

    let key = idempotency_key(&spec.exec);
    let job_name = naming::job_name(&spec.exec.run_name, &spec.task_name, &key);

    // A Flyte 1 `slurm_fn` task's script, made from its `script` and entrypoint.
    let function_script: String;
    // A Flyte 1 `SlurmShellTask`'s script and output locations, filled in from its inputs.
    let shell = match &spec.shell_template {
        Some(t) => Some(template::fill(
            custom.script.as_deref().unwrap_or_default(),
            t,
            &spec.inputs,
        )?),
        None => None,
    };
    let (directives, user_script) = match spec.task_type {
        TaskType::Function => {
            let entrypoint: Vec<String> = spec
                .container
                .iter()
                .flat_map(|c| c.command.iter().chain(c.args.iter()))
                .cloned()
                .collect();
            function_script = script::function_script(custom.script.as_deref(), &entrypoint)?;
            (
                directives::parse_script(&function_script)?,
                Some(function_script.as_str()),
            )
        }
        TaskType::SlurmScript => {
            let s = custom
                .script
                .as_deref()
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| {
                    RenderError::config("script", "a slurm_script task needs a non-empty script")
                })?;
            let s = shell.as_ref().map_or(s, |f| f.script.as_str());
            (directives::parse_script(s)?, Some(s))
        }
        TaskType::Slurm | TaskType::Clustered => {
            for (present, field) in [
                (custom.script.is_some(), "script"),
                (!custom.outputs.is_empty(), "outputs"),
            ] {
                if present {
                    return Err(RenderError::config(
                        field,
                        "only slurm_script tasks take this; remove it",
                    ));
                }
            }
            (directives::Directives::default(), None)
        }
    };
    for (line, word) in &directives.ignored_words {
        tracing::info!(line, word = %word, "#SBATCH word is not an option; sbatch ignores it too");
    }

    let merged = merge::merge(directives.options.clone(), &custom, cfg.api_version)?;
    let mut job = JobDescription::default();
    let applied = apply::apply(
        &merged,
        &mut job,
        apply::Clock {
            now,
            utc_offset: cfg.cluster_utc_offset_seconds,
        },
        cfg.api_version,
    )?;
    if spec.interruptible {
        interruptible::apply(&mut job, &cfg.interruptible, spec.task_type);
    }
    if job.partition.is_none() {
        job.partition = cfg.default_partition.clone();
    }

    if let (Some(indexes), true) = (&job.array, spec.task_type.is_native()) {
        // One entrypoint run writes one outputs.pb at the task's prefix: elements would
        // overwrite each other's result.
        return Err(RenderError::config(
            "array",
            format!(
                "`--array={indexes}`: a `slurm` (native) task is one Flyte task run, and its \
                 elements would all write the same result; use a Flyte map task, or a \
                 `slurm_script` task for a job array"
            ),
        ));
    }
    let files = JobFiles::new(&working_dir, &job_name);
    // A job array writes one log (and one exit-status marker) per element.
    let (stdout_path, stderr_path, marker) = if job.array.is_some() {
        (
            files.element_stdout(),
            files.element_stderr(),
            files.element_marker(),
        )
    } else {
        (files.stdout(), files.stderr(), files.marker())
    };
    job.name = job_name.clone();
    job.current_working_directory = working_dir.clone();
    job.standard_output = Some(stdout_path.clone());
    job.standard_error = Some(stderr_path.clone());
    // The task's own comment, as sbatch would set it: the key is in the name.
    job.comment = applied.user_comment.clone();

    // Environment, lowest precedence first.
    let mut envb = env::EnvBuilder::default();
    for (k, v) in &cfg.base_env {
        envb.set_base(k, v, "the deployment's base environment")?;
    }
    if !envb.contains("PATH") {
        envb.set_base("PATH", spec::DEFAULT_PATH, "the connector default")?;
    }
    if spec.interruptible {
        interruptible::env(&job, &mut envb)?;
    }
    if let Some(c) = &spec.container {
        for (k, v) in &c.env {
            envb.set(k, v, "the task template's container env")?;
        }
    }
    envb.identity(&spec.exec)?;
    if spec.task_type.in_container() {
        envb.native_defaults(&spec.exec, &spec.output_prefix)?;
    }
    for (k, v) in &spec.env_vars {
        envb.set(k, v, "TaskExecutionMetadata.environment_variables")?;
    }
    for (k, v) in &custom.env {
        if k.starts_with("FLYTE_INPUT_") || k.starts_with("FLYTE_OUTPUT_") {
            return Err(RenderError::Env {
                name: k.clone(),
                problem:
                    "set by the connector from the task's inputs and outputs; remove it from `env`"
                        .into(),
            });
        }
        envb.set(k, v, "the task's `env`")?;
    }

    let header = format!(
        "# slurm-connector: Flyte task {} ({}/{}/{}/{} attempt {}), key {key}\n",
        spec.task_name.escape_default(),
        spec.exec.project.escape_default(),
        spec.exec.domain.escape_default(),
        spec.exec.run_name.escape_default(),
        spec.exec.action_name.escape_default(),
        spec.exec.attempt
    );

    // A `slurm_fn` entrypoint runs once, in the batch script, as the published plugin runs it.
    let ranks = spec.task_type.in_container() && multi_rank(&job);
    // Every shell script leaves `<working_dir>/<job>.exit` (`<job>_<index>.exit` for each
    // element of an array; see `marker`).
    let mut declared_outputs = Vec::new();
    let mut staged_image = None;
    // A script or function task's script: the user's, with the connector's preamble.
    let with_preamble = |script: &str, mkdirs: &[String], args: &[String]| {
        script::script_task(
            script,
            &script::Preamble {
                first_command_line: directives.first_command_line,
                header: &header,
                modules: &custom.modules,
                module_init_scripts: &cfg.module_init_scripts,
                mkdirs,
                exit_marker: &marker,
                args,
            },
        )
    };
    job.script = match spec.task_type {
        TaskType::SlurmScript => {
            envb.inputs(&spec.inputs)?;
            declared_outputs = outputs(spec, &custom, &files)?;
            // A shell task's outputs are read where its script wrote them.
            for (name, path) in shell.iter().flat_map(|f| &f.outputs) {
                if let Some(o) = declared_outputs.iter_mut().find(|o| &o.name == name) {
                    o.written_to = path.clone();
                }
            }
            let mut seen = BTreeMap::new();
            for o in &declared_outputs {
                let var = crate::staging::outputs::output_env_name(&o.name);
                if let Some(other) = seen.insert(var.clone(), o.name.clone()) {
                    return Err(RenderError::Output {
                        name: o.name.clone(),
                        problem: format!("maps to {var} like output `{other}`; rename one"),
                    });
                }
                envb.set(&var, &o.written_to, "the declared outputs")?;
            }
            // The job's outputs folder, when an output is written there (a shell task's are
            // where its script says).
            let mkdirs: Vec<String> = if declared_outputs.iter().any(|o| {
                o.upload == UploadMode::Connector
                    && o.written_to
                        .starts_with(&format!("{}/", files.outputs_dir()))
            }) {
                vec![files.outputs_dir()]
            } else {
                Vec::new()
            };
            with_preamble(
                user_script.expect("script tasks have a script"),
                &mkdirs,
                &spec.script_args,
            )?
        }
        TaskType::Function => {
            // pyflyte-execute writes `<prefix>/outputs.pb` and does not create a local prefix.
            let mkdirs: Vec<String> = spec
                .output_prefix
                .strip_prefix("file://")
                .map(|p| vec![p.to_string()])
                .unwrap_or_default();
            with_preamble(
                user_script.expect("function tasks have a script"),
                &mkdirs,
                &[],
            )?
        }
        TaskType::Slurm | TaskType::Clustered => {
            let container = spec.container.as_ref().ok_or_else(|| {
                RenderError::Container(
                    "a slurm task needs the template's container (image and entrypoint)".into(),
                )
            })?;
            let reference = custom
                .container
                .image
                .clone()
                .or_else(|| Some(container.image.clone()).filter(|i| !i.is_empty()))
                .ok_or_else(|| {
                    RenderError::Container(
                        "no image: set the task's image or container.image".into(),
                    )
                })?;
            // A pre-staged file replaces the registry reference (the deployment's image map).
            staged_image = cfg
                .images
                .resolve(&reference, custom.container.runtime)
                .map_err(RenderError::Container)?;
            let image = staged_image
                .as_ref()
                .map_or(reference.clone(), |s| s.path.clone());
            let mut command: Vec<String> = container
                .command
                .iter()
                .chain(container.args.iter())
                .cloned()
                .collect();
            if clustered.is_some() {
                command = clustered::worker_command(command);
            }
            // a0 writes `<prefix>/outputs.pb` and does not create a local prefix folder.
            let mkdirs: Vec<String> = spec
                .output_prefix
                .strip_prefix("file://")
                .map(|p| vec![p.to_string()])
                .unwrap_or_default();
            script::native(&script::NativeParts {
                header: &header,
                container: &custom.container,
                image: &image,
                staged_image: staged_image.as_ref(),
                container_env: &envb.task_names(),
                command: &command,
                modules: &custom.modules,
                module_init_scripts: &cfg.module_init_scripts,
                gpus_requested: applied.gpus_requested,
                mkdirs: &mkdirs,
                exit_marker: &marker,
                ranks,
            })?
        }
    };
    job.environment = envb.into_vec();

    Ok(Rendered {
        job,
        job_name,
        key,
        stdout_path,
        stderr_path,
        declared_outputs,
        ranks,
        max_restarts: clustered.map(|c| c.max_restarts).filter(|n| *n > 0),
        staged_image,
        no_coalesce: custom.no_coalesce,
    })
}

/// Whether the job asks for more than one task: several nodes (`-N 2`, `-N 1-2`) or tasks.
fn multi_rank(job: &JobDescription) -> bool {
    let nodes = job.nodes.as_deref().unwrap_or("1");
    nodes.split(['-', ':']).any(|n| n.trim() != "1")
        || job.tasks.is_some_and(|t| t > 1)
        || job.tasks_per_node.is_some_and(|t| t > 1)
}

/// Declared outputs of a script task, checked against the typed interface.
fn outputs(
    spec: &TaskSpec,
    custom: &custom::SlurmCustom,
    files: &JobFiles,
) -> Result<Vec<DeclaredOutput>, RenderError> {
    if !spec.outputs.is_empty() {
        for (name, kind) in &spec.outputs {
            let declared = custom
                .outputs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, k)| *k);
            let ok = matches!(
                (kind, declared),
                (InterfaceKind::File, Some(OutputKind::File))
                    | (InterfaceKind::Dir, Some(OutputKind::Dir))
            );
            if !ok {
                return Err(RenderError::Output {
                    name: name.clone(),
                    problem: format!(
                        "the task interface says {kind:?} but the Slurm config declares {declared:?}; script \
                         tasks produce only File and Dir outputs, declared in `outputs`"
                    ),
                });
            }
        }
        if let Some((n, _)) = custom
            .outputs
            .iter()
            .find(|(n, _)| !spec.outputs.iter().any(|(m, _)| m == n))
        {
            return Err(RenderError::Output {
                name: n.clone(),
                problem: "declared in `outputs` but missing from the task interface".into(),
            });
        }
    }
    let mut out = Vec::new();
    for (name, kind) in &custom.outputs {
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains('/')
            || name.chars().any(|c| c.is_control())
        {
            return Err(RenderError::Output {
                name: name.escape_default().to_string(),
                problem: "output names must be usable as a file name (no `/`, not `.` or `..`)"
                    .into(),
            });
        }
        let prefix = spec.output_prefix.trim_end_matches('/');
        if prefix.is_empty() {
            return Err(RenderError::Output {
                name: name.clone(),
                problem: "the request has no output_prefix to upload it to".into(),
            });
        }
        let uri = format!("{prefix}/{name}");
        let written_to = match custom.output_upload {
            UploadMode::Connector => files.output(name),
            UploadMode::Job => uri.clone(),
        };
        out.push(DeclaredOutput {
            name: name.clone(),
            kind: *kind,
            upload: custom.output_upload,
            uri,
            written_to,
        });
    }
    Ok(out)
}
