//! slurm-connector: runs Flyte 2 and Flyte 1 tasks on Slurm through slurmrestd (REST + JWT), no
//! SSH.
//!
//! # How a task flows
//!
//! ```text
//! CreateTaskRequest ─► render ─► submit ─► track ─► stage ─► respond (GetTask: phase, outputs, logs)
//! ```
//!
//! 1. **request** — Flyte's backend calls the gRPC service ([`service`], over the protocol
//!    subset in [`proto`]: Flyte 2's connector service, or Flyte 1's agent service on the same
//!    port); each protocol's request becomes one [`service::TaskRequest`] at its seam, around a
//!    [`render::TaskSpec`] ([`service::task_spec`] for Flyte 2),
//!    and [`config`] says which cluster, credentials and working directory the deployment has.
//! 2. **render** — [`render`] makes the slurmrestd job description: the `#SBATCH` lines and the
//!    task config's options, the environment (`FLYTE_INPUT_*`, `FLYTE_OUTPUT_*`), the script with
//!    its exit-status marker. Pure: no I/O, the same input renders the same job.
//! 3. **submit** — [`slurmrestd`] is the client: JWT auth, retries, and the one seam where the
//!    generated OpenAPI types are converted to and from our own. CreateTask submits once per
//!    execution (an idempotency key in the job's comment), and answers with `resource_meta`.
//! 4. **track** — [`tracker`] polls each cluster's tracked jobs with one batched `jobs/state`
//!    request per tick, falls back to slurmdbd for jobs that left slurmctld and to the exit marker
//!    where there is no slurmdbd, and keeps what Slurm says of each job (its state, exit code,
//!    reason, failure class); the service decides the task's phase of it (`service/phase.rs`).
//! 5. **stage** — [`staging`] reads the cluster's shared filesystem (mounted here, or through a
//!    `slurm-connector stager` sidecar), confined to the configured roots: declared outputs to
//!    object storage, log tails, exit markers, and the removal of old job files.
//! 6. **respond** — [`service`] answers GetTask / GetTaskLogs / GetTaskMetrics / DeleteTask from
//!    the tracker's cache and the staged results, and exports Prometheus metrics.
//!
//! [`cli`] is the command line around it: `serve` (with an embedded default when no cluster is
//! configured), `render` a request without submitting it, `check` a deployment, `submit` a script
//! to a running connector, and the `stager` sidecar.
//!
//! # Example
//!
//! Rendering is the step a reader can run alone: a script task becomes the job slurmrestd would
//! be sent, its logs and marker in the deployment's working directory.
//!
//! ```
//! use slurm_connector::render::{
//!     ExecutionIdentity, RenderConfig, TaskConfig, TaskSpec, TaskType, render,
//! };
//!
//! // `TaskTemplate.custom` as flyteplugins-slurm writes it, parsed once.
//! let custom = serde_json::json!({ "script": "#!/bin/bash\n#SBATCH --time=5\necho hello\n" });
//! let spec = TaskSpec {
//!     task_type: TaskType::SlurmScript,
//!     task_name: "demo.hello".into(),
//!     custom: TaskConfig::parse(TaskType::SlurmScript, &custom)?,
//!     container: None,
//!     inputs: Vec::new(),
//!     outputs: Vec::new(),
//!     output_prefix: "s3://bucket/runs/r1/a0".into(),
//!     exec: ExecutionIdentity {
//!         project: "flytesnacks".into(),
//!         domain: "development".into(),
//!         run_name: "r1".into(),
//!         action_name: "a0".into(),
//!         ..ExecutionIdentity::default()
//!     },
//!     env_vars: Default::default(),
//!     script_args: Vec::new(),
//!     shell_template: None,
//!     interruptible: false,
//! };
//! let cfg = RenderConfig {
//!     working_dir: Some("/shared/flyte/jobs".into()),
//!     ..RenderConfig::default()
//! };
//! let rendered = render(&spec, &cfg)?;
//! let files = slurm_connector::staging::JobFiles::new("/shared/flyte/jobs", &rendered.job_name);
//! assert_eq!(rendered.stdout_path, files.stdout());
//! assert!(rendered.job.script.contains("echo hello"));
//! assert!(rendered.job.script.contains(&files.marker()));
//! # Ok::<(), slurm_connector::render::RenderError>(())
//! ```
//!
//! Dependencies between the modules go one way, without cycles: each uses only modules before it
//! in `build_info`, `domain`, `config`, `staging`, `render`, `tracker`, `service`, `cli`
//! (`tests/it/layering.rs` fails when one imports a later one).
//!
//! Below all of them, [`proto`] and [`slurmrestd`] are crates of their own (`crates/`: the
//! generated code and the transport around it), re-exported here under those names; Cargo keeps
//! them from importing anything of this crate.

pub mod build_info;
/// Flyte's protocols (generated), a crate of its own: `crates/proto`.
pub use slurm_connector_proto as proto;
/// The slurmrestd transport and its generated clients, a crate of its own: `crates/slurmrestd`.
pub use slurm_connector_slurmrestd as slurmrestd;
pub mod cli;
pub mod config;
pub mod domain;
pub mod render;
pub mod service;
pub mod staging;
pub mod tracker;
