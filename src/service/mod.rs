//! The connector service: what a Flyte backend talks to over gRPC.
//!
//! [`Connector`] holds the operations (CreateTask, GetTask, DeleteTask, GetTaskLogs,
//! GetTaskMetrics), each a short function over the folders below; read them in this order:
//!
//! - `rpc/`: the edge: gRPC handlers, listeners, TLS, health, Prometheus metrics.
//! - `wire/`: the request turned into the renderer's input, and `resource_meta`.
//! - `cluster/`: one configured cluster at run time (client, tracker, staging, job files, and
//!   the state of its executions and jobs).
//! - `submit/`: the write path: prepare (identity, render, admission), the per-execution state,
//!   one job per execution across replicas, pacing, deferral, takeover, tombstones.
//! - `report/`: the read path: GetTask's verdict from the tracker's snapshot (budget, native
//!   result, outputs, stderr tails, message, log links), logs and task metrics.
//! - `background`: work per key (a native result's read, an output upload) joined by every
//!   GetTask and evicted after it settled. `error`: the one error type, mapped to `Status`.
//!
//! Imports go down this list: `wire` and `background` import nothing of `service`; `cluster`
//! imports them; `submit` and `report` import `cluster`; only `mod.rs` and `rpc` see all.

mod background;
pub mod cluster;
pub mod report;
pub mod rpc;
pub mod submit;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tonic::Status;

pub use rpc::metrics;
pub use rpc::serve::{ServeError, ServeOptions, serve, serve_with};
pub use rpc::tls::{RELOAD_EVERY as TLS_RELOAD_EVERY, ServerTls, TlsError};
pub use submit::idempotency::AWAITING_CHECK;
pub use submit::identity;
pub use wire::{convert, meta};

use crate::config::DeploymentConfig;
use crate::proto::connector::{CreateTaskRequest, Resource};
use crate::proto::core::task_execution::Phase;
use crate::render;
use crate::slurmrestd::{ClientError, JobId};
use crate::staging;

use cluster::{ClusterRuntime, Submitted};
use submit::deferred::{self, Pending};
use submit::{gate, handoff as shutdown, staged_image};
use report::{self as status, native_result};
use meta::{Decoded, ResourceMeta};
use metrics::Metrics;

/// Lines per stream GetTaskLogs returns when the request says 0.
const DEFAULT_LOG_LINES: u64 = 500;

pub struct Connector {
    pub deployment: DeploymentConfig,
    pub clusters: BTreeMap<String, Arc<ClusterRuntime>>,
    pub metrics: Arc<Metrics>,
    ceiling: Result<staging::Ceiling, String>,
    /// Native tasks' results being read (or read) at their output prefix.
    native: native_result::Probes,
    /// CreateTask admission while shutting down, and the ones in flight.
    pub drain: gate::Gate,
}

fn client_status(e: &ClientError, what: &str) -> Status {
    let msg = format!("{what}: {e}");
    if e.is_transient() {
        Status::unavailable(msg)
    } else if e.is_auth() {
        Status::permission_denied(msg)
    } else if matches!(
        e,
        ClientError::Slurm { .. } | ClientError::SubmitWithoutJobId { .. }
    ) {
        Status::invalid_argument(msg)
    } else {
        Status::internal(msg)
    }
}

impl Connector {
    pub fn new(
        deployment: DeploymentConfig,
        clusters: BTreeMap<String, Arc<ClusterRuntime>>,
        metrics: Arc<Metrics>,
    ) -> Connector {
        let ceiling = match &deployment.upload_max_bytes {
            crate::config::UploadLimit::Bytes(n) => Ok(staging::Ceiling::Bytes(*n)),
            crate::config::UploadLimit::Unlimited => Ok(staging::Ceiling::Unlimited),
            crate::config::UploadLimit::Malformed(m) => Err(m.clone()),
        };
        for rt in clusters.values() {
            rt.pacer.set_max(deployment.submits_in_flight);
        }
        Connector {
            deployment,
            clusters,
            metrics,
            ceiling,
            native: native_result::Probes::default(),
            drain: gate::Gate::default(),
        }
    }

    fn cluster(&self, name: &str) -> Result<&Arc<ClusterRuntime>, Status> {
        self.clusters.get(name).ok_or_else(|| {
            Status::not_found(format!(
                "resource_meta names cluster `{name}`, which this connector does not have; configured: {}",
                self.deployment.cluster_names()
            ))
        })
    }

    /// Reads `resource_meta` and finds its cluster. The only GetTask errors: unreadable meta,
    /// unknown cluster.
    fn locate(&self, raw: &[u8]) -> Result<(Arc<ClusterRuntime>, ResourceMeta), Status> {
        match meta::decode(raw).map_err(|e| Status::invalid_argument(e.to_string()))? {
            Decoded::Ours(m) => Ok((self.cluster(&m.cluster)?.clone(), m)),
            Decoded::Python { host, mut meta } => {
                let c = self.deployment.cluster_for_ssh_host(&host).ok_or_else(|| {
                    Status::not_found(format!(
                        "resource_meta from the Python Slurm connector names host `{host}`, which maps to \
                         no cluster of this connector; list it in the cluster's `ssh_hosts` \
                         (FLYTE_SLURM_SSH_HOSTS); configured: {}",
                        self.deployment.cluster_names()
                    ))
                })?;
                meta.cluster = c.name.clone();
                Ok((self.cluster(&c.name)?.clone(), meta))
            }
        }
    }

    /// CreateTask: render, then submit at most once per execution (run, action, attempt).
    pub async fn create(&self, req: &CreateTaskRequest) -> Result<Vec<u8>, Status> {
        // Held to the end: a shutdown waits for this call (see `shutdown.rs`). `None`: shutting
        // down, the execution is handed to another replica below.
        let _in_flight = self.drain.enter();
        let draining = _in_flight.is_none();
        let spec = convert::task_spec(req).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let requested = spec.requested_cluster();
        let cfg = self
            .deployment
            .select_cluster(requested, spec.requested_host())
            .map_err(Status::invalid_argument)?;
        let rt = self.cluster(&cfg.name)?.clone();
        let secrets: HashMap<String, String> = req
            .connection
            .as_ref()
            .map(|c| c.secrets.clone())
            .unwrap_or_default();
        let token = self
            .deployment
            .task_credential(&secrets)
            .map_err(Status::invalid_argument)?;
        // Who the job runs as, decided before anything else touches the cluster: a refusal
        // submits nothing.
        let who = identity::requester(req, &spec.exec.project, &spec.exec.domain);
        let run_as =
            identity::decide(&rt.cfg.name, &rt.cfg.identities, &who).map_err(|r| r.status())?;
        if let identity::RunAs::Rule(rule) = &run_as {
            identity::check_no_chosen_user(&rt.cfg.name, &spec.custom, rule)
                .map_err(|r| r.status())?;
            if token.is_some() {
                return Err(Status::invalid_argument(format!(
                    "connection secret `{}`: cluster {} runs this task as Slurm user {:?} ({}); \
                     a task's own token would run it as the token's user instead; remove the \
                     secret from the task",
                    crate::config::TASK_TOKEN_SECRET,
                    rt.cfg.name,
                    rule.slurm_user,
                    rule.describe()
                )));
            }
        }
        let slurm_user = run_as.slurm_user().map(str::to_string);
        let working_dir = identity::working_dir_for(
            rt.render.working_dir.as_deref(),
            slurm_user.as_deref().or(rt.cfg.username.as_deref()),
        )
        .map_err(Status::invalid_argument)?;
        // What a job description can say depends on the cluster's API version (chosen at start;
        // chosen here when the cluster was unreachable then).
        let api_version = match rt.client.version().await {
            Ok(v) => v,
            // Unreachable now, but it answered before: render for the version it served then
            // (the submit waits for it to come back). Never reached since start: nothing to
            // render for, so the error (which the backend counts as a failed attempt).
            Err(e) => match rt.client.api_version() {
                Some(v) if e.is_transient() => v,
                _ => {
                    return Err(client_status(
                        &e,
                        "finding which slurmrestd API version the cluster serves",
                    ));
                }
            },
        };
        let render_cfg = render::RenderConfig {
            api_version,
            clustered: self.deployment.clustered.clone(),
            working_dir,
            ..rt.render.clone()
        };
        let mut rendered = render::render(&spec, &render_cfg)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if let identity::RunAs::Rule(rule) = &run_as {
            identity::admit(&rt.cfg.name, rule, &mut rendered.job).map_err(|r| r.status())?;
        }
        if let Some(image) = &rendered.staged_image {
            staged_image::check(&rt.cfg.name, rt.staging.as_deref(), image).await?;
        }
        let key = rendered.key.clone();

        let lock = rt.key_lock(&key);
        let result = async {
            let _guard = lock.lock().await;
            if let Some(m) = rt.remembered(&key) {
                tracing::info!(cluster = %rt.cfg.name, job_id = %m.job_id, key, "CreateTask repeated: returning the job already submitted");
                self.metrics.duplicate_creates.get_or_create(&cluster_label(&rt)).inc();
                return Ok(m.encode());
            }
            // Refused up front (a bad credential is not worth a submit attempt).
            rt.client_for(token.as_ref())
                .map_err(|e| client_status(&e, "per-task slurmrestd credentials"))?;
            let mut template = resource_meta(&rt.cfg.name, JobId(0), &rendered);
            if spec.task_type.is_native() {
                template.native_prefix = Some(req.output_prefix.clone());
            }
            template.ranks = rendered.ranks;
            template.slurm_user = slurm_user.clone();
            // A clustered task's failure_policy.max_restarts: how often the gang may start over
            // after the cluster failed it (Slurm requeues the whole allocation).
            template.requeue_budget = Some(rendered.max_restarts.unwrap_or_else(|| {
                requeue_budget(
                    req.task_execution_metadata.as_ref(),
                    self.deployment.requeue_budget,
                )
            }));
            if draining {
                return shutdown::hand_off(&rt.cfg.name, &key, &rendered.job, template, token.is_some());
            }
            let submit_client = match &token {
                Some(_) => rt.submit_client_for(token.as_ref()),
                None => rt.submit_client_as(slurm_user.as_deref()),
            };
            let mut progress = rt.submit_paced(
                &key,
                &rendered.job,
                submit_client,
                template.clone(),
                self.on_submitted(&rt, Some(api_version), rendered.job_name.clone()),
            );
            self.metrics.pacing(&rt.cfg.name, rt.pacer.view());
            let settled = tokio::time::timeout(
                self.deployment.submit_wait,
                progress.wait_for(|p| !matches!(p, cluster::Progress::Waiting { .. })),
            )
            .await
            .map(|r| r.map(|p| p.clone()));
            let now = match settled {
                Ok(Ok(p)) => p,
                // The submit's task ended without a word: cannot happen (it always sends).
                Ok(Err(_)) => return Err(Status::internal("the submit's task ended unexpectedly")),
                Err(_) => progress.borrow().clone(),
            };
            match now {
                cluster::Progress::Done(_) => Ok(rt
                    .remembered(&key)
                    .expect("a settled submit is remembered before it is announced")
                    .encode()),
                cluster::Progress::Failed { message, transient } => Err(if transient {
                    Status::unavailable(message)
                } else {
                    Status::invalid_argument(message)
                }),
                cluster::Progress::Withdrawn => Err(Status::aborted(
                    "this execution was deleted (DeleteTask) before its job was submitted",
                )),
                cluster::Progress::Waiting {
                    tries,
                    last_error,
                    outage,
                } => {
                    // Answer now, before the backend's deadline, and let the submit go on.
                    tracing::info!(cluster = %rt.cfg.name, key, tries, last_error, outage, "submit not done within the CreateTask wait; answering with a deferred resource_meta");
                    self.metrics.deferred_creates.get_or_create(&cluster_label(&rt)).inc();
                    let mut m = template;
                    m.deferred = Some(Box::new(meta::DeferredSubmit {
                        key: key.clone(),
                        // Shutting down meanwhile: this replica will not make it, so another
                        // may at once (the duplicate check keeps it to one job either way).
                        at: if self.drain.is_closed() {
                            deferred::now_unix() - deferred::TAKE_OVER_AFTER.as_secs() as i64
                        } else {
                            deferred::now_unix()
                        },
                        job: rendered.job.clone(),
                        own_credentials: token.is_some(),
                    }));
                    Ok(m.encode())
                }
            }
        }
        .await;
        drop(lock);
        rt.release_key_lock(&key);
        result
    }

    /// The bookkeeping once a paced submit has its job (run in the submit's own task, which may
    /// outlive the CreateTask that started it).
    fn on_submitted(
        &self,
        rt: &Arc<ClusterRuntime>,
        api_version: Option<crate::slurmrestd::ApiVersion>,
        job_name: String,
    ) -> deferred::OnDone {
        let (rt, metrics) = (rt.clone(), self.metrics.clone());
        Box::new(move |m: &ResourceMeta, submitted: Submitted| {
            metrics.pacing(&rt.cfg.name, rt.pacer.view());
            let job_id = m.job_id;
            if let Some(j) = &rt.job_files {
                j.note(m);
            }
            track(&rt, m);
            if matches!(submitted, Submitted::Fresh(_)) {
                metrics.submits.get_or_create(&cluster_label(&rt)).inc();
                tracing::info!(cluster = %rt.cfg.name, api_version = ?api_version, job_id = %job_id, job_name = %job_name, "submitted");
            } else {
                tracing::info!(cluster = %rt.cfg.name, job_id = %job_id, ?submitted, "CreateTask for an execution that already has a job on the cluster: answering with it");
                metrics
                    .duplicate_creates
                    .get_or_create(&cluster_label(&rt))
                    .inc();
            }
        })
    }

    /// A meta with its job: a deferred one is resolved by its key first (`deferred.rs`). `Err`
    /// carries what GetTask reports while no job is known yet.
    async fn locate_job(
        &self,
        raw: &[u8],
    ) -> Result<(Arc<ClusterRuntime>, Result<ResourceMeta, Pending>), Status> {
        let (rt, m) = self.locate(raw)?;
        let Some(d) = m.deferred.clone() else {
            return Ok((rt, Ok(m)));
        };
        let resolved = self.resolve_deferred(&rt, m, &d).await;
        Ok((rt, resolved))
    }

    /// GetTask: from the tracker's cache; never an error because slurmrestd hiccupped.
    pub async fn get(&self, raw_meta: &[u8]) -> Result<Resource, Status> {
        let (rt, m) = match self.locate_job(raw_meta).await? {
            (rt, Ok(m)) => (rt, m),
            (_, Err(p)) => {
                return Ok(Resource {
                    phase: p.phase as i32,
                    message: p.message,
                    ..Resource::default()
                });
            }
        };
        if let Some(j) = &rt.job_files {
            j.note(&m);
        }
        let indices = m
            .array_indices()
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let snap = rt.tracker.status_of(m.job_id, indices.as_deref()).await;
        if let Some((restarts, budget)) =
            status::over_budget(&m, &snap, self.deployment.requeue_budget)
            && !snap.phase.is_terminal()
        {
            // The task is reported failed from now on (the restart count stays in Slurm's
            // record): its job must not run on. Cancelling twice is harmless.
            tracing::warn!(cluster = %rt.cfg.name, job_id = %m.job_id, restarts, budget, "requeue budget spent; cancelling the job");
            if let Err(e) = rt
                .client_as(m.slurm_user.as_deref())
                .cancel(m.job_id, None)
                .await
            {
                tracing::warn!(cluster = %rt.cfg.name, job_id = %m.job_id, error = %e, "cancelling a job past its requeue budget failed; retried at the next GetTask");
            }
        }
        let ctx = status::Context {
            ceiling: &self.ceiling,
            log_templates: &self.deployment.log_links,
            native: &self.native,
            requeue_budget: self.deployment.requeue_budget,
        };
        let res = status::resource(&rt, &m, snap, &ctx).await;
        // Terminal, outputs transferred: the retention clock of the job's files starts.
        if let Some(j) = &rt.job_files
            && Phase::of(res.phase).is_terminal()
        {
            j.ended(&m, self.deployment.job_files_retention);
        }
        Ok(res)
    }

    /// DeleteTask: cancel; already finished or unknown jobs are a success.
    pub async fn delete(
        &self,
        raw_meta: &[u8],
        secrets: &HashMap<String, String>,
    ) -> Result<(), Status> {
        let (rt, m) = match self.locate_job(raw_meta).await? {
            (rt, Ok(m)) => (rt, m),
            (rt, Err(_)) => return self.delete_unsubmitted(&rt, raw_meta).await,
        };
        if let Some(t) = rt.transfers.get(&m.job_id) {
            t.cancel();
        }
        let token = self
            .deployment
            .task_credential(secrets)
            .map_err(Status::invalid_argument)?;
        let client = match &token {
            Some(_) => rt
                .client_for(token.as_ref())
                .map_err(|e| client_status(&e, "per-task slurmrestd credentials"))?,
            // The job's own user: a restarted connector or another replica cancels as it.
            None => rt.client_as(m.slurm_user.as_deref()),
        };
        let outcome = client
            .cancel(m.job_id, None)
            .await
            .map_err(|e| client_status(&e, "cancelling the job"))?;
        tracing::info!(cluster = %rt.cfg.name, job_id = %m.job_id, ?outcome, "DeleteTask");
        // A deleted task ends here even if the backend never asks about it again.
        if let Some(j) = &rt.job_files {
            j.ended(&m, self.deployment.job_files_retention);
        }
        Ok(())
    }

    /// GetTaskLogs: the job's stdout/stderr through staging, or a line saying why there are none.
    pub async fn logs(&self, raw_meta: &[u8], lines: u64) -> Result<Vec<String>, Status> {
        let (rt, m) = match self.locate_job(raw_meta).await? {
            (rt, Ok(m)) => (rt, m),
            (_, Err(p)) => return Ok(vec![p.message]),
        };
        let lines = if lines == 0 {
            DEFAULT_LOG_LINES
        } else {
            lines.min(10_000)
        } as usize;
        let indices = m
            .array_indices()
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        match &rt.staging {
            // A job array: each element's own logs, one after the other.
            Some(st) if let Some(indices) = indices => {
                let mut out = Vec::new();
                for i in indices {
                    let (stdout, stderr) = (
                        staging::element_path(&m.stdout, m.job_id.0, i),
                        staging::element_path(&m.stderr, m.job_id.0, i),
                    );
                    out.push(format!("=== element {i} of job array {} ===", m.job_id));
                    out.extend(
                        staging::logs::task_logs(
                            st.as_ref(),
                            &format!("{}_{i}", m.job_id),
                            &stdout,
                            &stderr,
                            lines,
                        )
                        .await,
                    );
                }
                Ok(out)
            }
            Some(st) => Ok(staging::logs::task_logs(
                st.as_ref(),
                &m.job_id.to_string(),
                &m.stdout,
                &m.stderr,
                lines,
            )
            .await),
            None => Ok(vec![format!(
                "Logs of Slurm job {} are on cluster {}'s filesystem ({} and {}); this connector cannot \
                 read them because no staging is configured: set FLYTE_SLURM_SHARED_MOUNTS (the \
                 filesystem is mounted here) or FLYTE_SLURM_STAGER_URL (a stager sidecar has it)",
                m.job_id, rt.cfg.name, m.stdout, m.stderr
            )]),
        }
    }
}

/// The requeue budget of a task: an interruptible task says how many interruptions it accepts
/// (`interruptible_failure_threshold`, when above zero); any other task gets the deployment's.
pub fn requeue_budget(
    tem: Option<&crate::proto::connector::TaskExecutionMetadata>,
    deployment: u32,
) -> u32 {
    match tem {
        Some(t) if t.interruptible && t.interruptible_failure_threshold > 0 => {
            t.interruptible_failure_threshold as u32
        }
        _ => deployment,
    }
}

fn cluster_label(rt: &ClusterRuntime) -> metrics::ClusterLabels {
    metrics::ClusterLabels {
        cluster: rt.cfg.name.clone(),
    }
}

/// Starts tracking a submitted job: a job array (its meta names the indices) as one.
pub(crate) fn track(rt: &ClusterRuntime, m: &ResourceMeta) {
    match m.array_indices() {
        // One array per execution: its id stands for every element.
        Ok(Some(indices)) => rt.tracker.track_array(m.job_id, &indices),
        _ => rt.tracker.track(m.job_id),
    }
}

pub fn resource_meta(cluster: &str, job_id: JobId, r: &render::Rendered) -> ResourceMeta {
    ResourceMeta {
        array: r.job.array.clone(),
        outputs: r
            .declared_outputs
            .iter()
            .map(|o| (o.name.clone(), o.clone()))
            .collect(),
        ..ResourceMeta::new(
            cluster,
            job_id,
            r.job_name.clone(),
            r.stdout_path.clone(),
            r.stderr_path.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::connector::TaskExecutionMetadata;

    #[test]
    fn interruptible_tasks_bring_their_own_requeue_budget() {
        let mut t = TaskExecutionMetadata::default();
        assert_eq!(requeue_budget(None, 3), 3);
        assert_eq!(requeue_budget(Some(&t), 3), 3);
        t.interruptible_failure_threshold = 7;
        assert_eq!(requeue_budget(Some(&t), 3), 3, "not interruptible");
        t.interruptible = true;
        assert_eq!(requeue_budget(Some(&t), 3), 7);
        t.interruptible_failure_threshold = 0;
        assert_eq!(requeue_budget(Some(&t), 3), 3, "no threshold given");
    }
}
