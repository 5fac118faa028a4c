//! The connector service: what a Flyte backend talks to over gRPC.
//!
//! [`Connector`] holds the operations (CreateTask, GetTask, DeleteTask, GetTaskLogs,
//! GetTaskMetrics), each a short function over the folders below; read them in this order:
//!
//! - `rpc/`: the edge: gRPC handlers, listeners, TLS, health, Prometheus metrics.
//! - `wire/`: the request turned into the renderer's input, GetTask's [`TaskStatus`] turned into
//!   each protocol's answer, and `resource_meta`.
//! - `cluster/`: one configured cluster at run time (client, tracker, staging, job files, and
//!   the state of its executions and jobs).
//! - `submit/`: the write path: prepare (identity, render, admission), the per-execution state,
//!   one job per execution across replicas, pacing, deferral, takeover, tombstones.
//! - `report/`: the read path: GetTask's facts from the tracker's snapshot and its answer of the
//!   decided phase (message, stderr tails, accounting, log links), logs and task metrics.
//! - `phase`: the one place a task's phase is decided, from the facts the read path gathered.
//! - `background`: work per key (a native result's read, an output upload) joined by every
//!   GetTask and evicted after it settled. `error`: the one error type, mapped to `Status`.
//!
//! GetTask answers a [`TaskStatus`] (`wire/status.rs`): the connector's own terms, which each
//! protocol's handler turns into its wire's `Resource` once.
//!
//! # A GetTask, file by file
//!
//! Each step file is entered once; the helpers a step calls (the meta's and snapshot's methods,
//! `render`, `staging`, the message's words) return to it without calling another step.
//!
//! 1. `rpc/handler.rs`: the protocol's `get_task` (`async_service!`, expanded in
//!    `rpc/grpc.rs` or `rpc/flyte1.rs`) reads the request and calls `Grpc::serve_get`.
//! 2. `mod.rs`: [`Connector::get`] decodes the `resource_meta` (`wire/meta.rs`), finds its
//!    cluster and asks the tracker.
//! 3. `tracker/`: the job's snapshot (`Tracker::status_of`): Slurm's state, exit code, reason,
//!    accounting, whether it is held for the connector's check.
//! 4. `report/mod.rs`: the facts of the snapshot (an element's own, the task's own job:
//!    `own_job.rs`, the requeues against the budget, the accounting awaited).
//! 5. `phase.rs`: the phase, decided once; it awaits the two facts that cost a read only when a
//!    rule needs them (`report/native_result.rs`, `report/outputs.rs`).
//! 6. `report/answer.rs`: the [`TaskStatus`] of the decision (its message, with `message.rs`,
//!    `tails.rs` and `accounting.rs`); `report/mod.rs` then counts a terminal answer
//!    (`cluster/tallies.rs`) and cancels a job past its requeue budget, and `mod.rs` notes the
//!    job's files (`cluster/jobfiles.rs`).
//! 7. `wire/convert.rs` (Flyte 2) or `wire/flyte1.rs` (Flyte 1): the handler's `Wire::status`
//!    turns the [`TaskStatus`] into the protocol's `Resource`.
//!
//! A deferred meta whose job is not known yet is answered by `submit/deferred.rs` after step 2.
//!
//! Imports go down this list: `wire`, `phase` and `background` import nothing of `service`; `cluster`
//! imports them and the state types it keeps from `submit/` (`execution`, `idempotency`,
//! `pacing`, `gate`: leaves that import no `cluster`); the rest of `submit/` and `report/`
//! import `cluster`, never each other; only `mod.rs` and `rpc/` see everything.

mod background;
mod cluster;
mod error;
mod phase;
mod report;
mod rpc;
mod submit;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

// The public surface: what `cli`, the tests and the benches use. The folders stay private, so
// they can be reshaped without breaking a caller.
pub use crate::render::naming::AWAITING_CHECK;
pub use cluster::{BuildError, ClusterRuntime, client_auth, render_config};
pub use error::ServiceError;
pub use phase::of_snapshot as snapshot_phase;
pub use rpc::metrics::Metrics;
pub use rpc::serve::{ServeError, ServeOptions, serve, serve_with};
pub use rpc::tls::{RELOAD_EVERY as TLS_RELOAD_EVERY, ServerTls, TlsError};
pub use submit::claim;
pub use submit::coalesce::cap_for as coalesce_cap;
pub use submit::coalesce_settings::{Coalescing, Limits as ArrayLimits};
pub use submit::identity::check_at_start as check_identities;
pub use submit::prepare::{Prepared, prepare, set_script};
pub use wire::TaskRequest;
pub use wire::convert::{request as flyte2_request, task_spec};
pub use wire::flyte1::{Flyte1Error, TASK_TYPES as FLYTE1_TASK_TYPES, request as flyte1_request};
pub use wire::meta::{Decoded, DeferredSubmit, ResourceMeta, decode as decode_meta};
pub use wire::status::{ArrayElement, LogLink, MetricResult, MetricsQuery, SlurmJob, TaskStatus};

use crate::config::DeploymentConfig;
use crate::config::claims::OnceOnly;
use crate::render;
use crate::slurmrestd::JobId;
use crate::staging;

use report::native_result;
use rpc::metrics;
use submit::deferred::{self, Pending};
use submit::execution::Progress;
use submit::paced;
use submit::{coalesce, gate};
use wire::meta;

pub struct Connector {
    pub deployment: DeploymentConfig,
    pub clusters: BTreeMap<String, Arc<ClusterRuntime>>,
    pub metrics: Arc<Metrics>,
    ceiling: Result<staging::Ceiling, String>,
    /// Native tasks' results being read (or read) at their output prefix.
    native: native_result::Probes,
    /// CreateTask admission while shutting down, and the ones in flight.
    pub drain: gate::Gate,
    /// Where executions' claims are, and this process as their holder (`submit/claim`).
    claims: Arc<claim::Claims>,
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
        let claims = Arc::new(claim::Claims::new(deployment.claims.clone()));
        for rt in clusters.values() {
            rt.submitter.set_claims(claims.clone());
            rt.submitter.set_max_in_flight(deployment.submits_in_flight);
            rt.submitter.set_check_every(deployment.check_every);
        }
        Connector {
            deployment,
            clusters,
            metrics,
            ceiling,
            native: native_result::Probes::default(),
            drain: gate::Gate::default(),
            claims,
        }
    }

    /// This process's claims: their holder, and the stores they are in.
    pub fn claims(&self) -> &claim::Claims {
        &self.claims
    }

    /// CreateTask of either protocol, from the [`TaskRequest`] its front end made of the wire
    /// message: prepare (identity, render, admission), then submit at most once per execution
    /// (run, action, attempt), answering within `submit_wait` (and before `answer_by`, the
    /// caller's deadline) with the job or a deferred meta (`submit/deferred.rs`).
    pub async fn create_task(
        &self,
        mut request: TaskRequest,
        answer_by: Option<Instant>,
    ) -> Result<Vec<u8>, ServiceError> {
        // Held to the end: a shutdown waits for this call. `None`: shutting down, the execution
        // is handed to another replica below (`deferred::hand_off`).
        let in_flight = self.drain.enter();
        let cfg = self
            .deployment
            .select_cluster(
                request.spec.requested_cluster(),
                request.spec.requested_host(),
            )
            .map_err(ServiceError::Invalid)?;
        let rt = self.cluster(&cfg.name)?.clone();
        let token = self
            .deployment
            .task_credential(&request.secrets)
            .map_err(ServiceError::Invalid)?;
        let task =
            submit::prepare::prepare_on(&self.deployment, &rt, &mut request, token.is_some())
                .await?;
        let spec = &request.spec;
        let (key, job) = (&task.rendered.key, &task.rendered.job);
        let mut meta = self.meta_of(&rt, &request, &task);
        if self.claims.settings().once_only == OnceOnly::Claims {
            // Opened (its store probed the first time) before anything is submitted, and named
            // in the meta so any replica finds it.
            let claim = self
                .claims
                .of(&request.spec.output_prefix, &request.spec.exec)
                .await
                .map_err(|e| match e {
                    claim::ClaimError::Store { .. } => ServiceError::Unavailable(format!(
                        "the task's claim (FLYTE_SLURM_ONCE_ONLY=claims): {e}"
                    )),
                    e => ServiceError::Invalid(format!(
                        "the task's claim (FLYTE_SLURM_ONCE_ONLY=claims): {e}"
                    )),
                })?;
            meta.claim = Some(claim.uri().to_string());
        }
        let lock = rt.submitter.lock(key);
        let _one_at_a_time = lock.lock().await;
        if let Some(m) = rt.submitter.job(key) {
            tracing::info!(cluster = %rt.cfg.name, job_id = %m.job_id, key, flyte = %request.spec.exec, "CreateTask repeated: returning the job already submitted");
            self.metrics
                .duplicate_creates
                .get_or_create(&cluster_label(&rt))
                .inc();
            return Ok(m.encode());
        }
        if in_flight.is_none() {
            return deferred::hand_off(&rt.cfg.name, key, job, meta, token.is_some());
        }
        // Within `submit_wait`, and before the caller's deadline (Flyte 1's is 3 s, below the
        // default wait): a deferred answer in time beats DEADLINE_EXCEEDED and a retried call.
        let wait = answer_by.map_or(self.deployment.submit_wait, |by| {
            by.saturating_duration_since(Instant::now())
                .min(self.deployment.submit_wait)
        });
        let answer_at = Instant::now() + wait;
        let progress = self
            .start_submit(&rt, spec, &task, token.as_ref(), meta.clone(), answer_at)
            .await;
        self.metrics.pacing(&rt.cfg.name, rt.submitter.pacing());
        match deferred::settled_within(progress, wait).await? {
            Progress::Waiting { .. } => {
                self.metrics
                    .deferred_creates
                    .get_or_create(&cluster_label(&rt))
                    .inc();
                tracing::info!(cluster = %rt.cfg.name, key, "submit not done within the CreateTask wait; answering with a deferred resource_meta");
                let closing = self.drain.is_closed();
                Ok(deferred::deferred_meta(meta, key, job, token.is_some(), closing).encode())
            }
            settled => deferred::answer(&rt, key, settled),
        }
    }

    /// Starts (or joins) the execution's submit: in its batch when coalescing is on and the task
    /// can be an array element (`submit/coalesce.rs`), else as a job of its own. `token`: the
    /// task's own slurmrestd credential, which submits it instead of the cluster's.
    async fn start_submit(
        &self,
        rt: &Arc<ClusterRuntime>,
        spec: &render::TaskSpec,
        task: &submit::prepare::Prepared,
        token: Option<&crate::slurmrestd::Secret>,
        meta: ResourceMeta,
        answer_at: Instant,
    ) -> tokio::sync::watch::Receiver<Progress> {
        let own_credentials = token.is_some();
        let client = match token {
            Some(t) => rt.submit_client_for(Some(t)),
            None => rt.submit_client_as(task.slurm_user.as_deref()),
        };
        // For the log line once the job exists (`paced::settle`).
        let flyte = Some(spec.exec.to_string());
        let (key, job) = (&task.rendered.key, &task.rendered.job);
        let coalescing = rt.coalescing(self.deployment.coalesce).await;
        let batch = match coalescing.window {
            Some(window)
                if coalesce::coalescible(
                    spec.exec.attempt,
                    task.rendered.ranks || spec.task_type == render::TaskType::Clustered,
                    own_credentials,
                    task.rendered.no_coalesce,
                    // Found by keys, an element that left slurmctld needs slurmdbd's records;
                    // recorded in its claim, it needs none.
                ) && (meta.claim.is_some() || !rt.submitter.without_accounting()) =>
            {
                coalesce::batch_of(job, task.slurm_user.as_deref(), &coalescing)
                    .map(|b| (window, b))
            }
            _ => None,
        };
        match batch {
            Some((window, batch)) => {
                let waiter = coalesce::Waiter {
                    template: meta,
                    flyte,
                    answer_by: Some(answer_at),
                };
                coalesce::submit_coalesced(rt, window, key, job, batch, client, waiter)
            }
            None => paced::submit_paced(rt, key, job, client, meta, flyte, Some(answer_at)),
        }
    }

    /// The task's `resource_meta` before its job exists (the job id is filled in once it does).
    fn meta_of(
        &self,
        rt: &ClusterRuntime,
        request: &TaskRequest,
        task: &submit::prepare::Prepared,
    ) -> ResourceMeta {
        let rendered = &task.rendered;
        let mut m = resource_meta(&rt.cfg.name, JobId(0), rendered);
        if request.spec.task_type.is_native() {
            m.native_prefix = Some(request.spec.output_prefix.clone());
        }
        m.ranks = rendered.ranks;
        m.slurm_user = task.slurm_user.clone();
        let exec = &request.spec.exec;
        m.project = Some(exec.project.clone()).filter(|p| !p.is_empty());
        m.domain = Some(exec.domain.clone()).filter(|d| !d.is_empty());
        // A clustered task's failure_policy.max_restarts: how often the gang may start over
        // after the cluster failed it (Slurm requeues the whole allocation).
        m.requeue_budget = Some(
            rendered.max_restarts.unwrap_or(
                request
                    .interruptions_allowed
                    .unwrap_or(self.deployment.requeue_budget),
            ),
        );
        m
    }

    /// GetTask: the meta's job from the tracker's cache, then the report's answer of it (its
    /// phase decided once, `phase.rs`); never an error because slurmrestd hiccupped.
    pub async fn get(&self, raw_meta: &[u8]) -> Result<TaskStatus, ServiceError> {
        let (rt, m) = match self.locate_job(raw_meta).await? {
            (rt, Ok(m)) => (rt, m),
            (_, Err(p)) => return Ok(p.status()),
        };
        let indices = m
            .array_indices()
            .map_err(|e| ServiceError::Invalid(e.to_string()))?;
        let own = render::key_from_job_name(&m.job_name);
        let snap = rt
            .tracker
            .status_of(m.job_id, indices.as_deref(), own, m.element)
            .await;
        // Still pending: a job that started since is no longer held.
        let held = snap.held_for_check && !snap.is_running() && !snap.is_over();
        if held {
            // Its replica died between its held submit and its release: settled elsewhere
            // (`submit/takeover.rs`), this call only reads.
            rt.submitter
                .settle_held(m.job_id, m.slurm_user.clone(), m.claim.clone());
        }
        let ctx = report::Context {
            ceiling: &self.ceiling,
            log_templates: &self.deployment.log_links,
            native: &self.native,
            requeue_budget: self.deployment.requeue_budget,
        };
        let res = report::status(&rt, &m, snap, held, &ctx).await;
        if let Some(j) = &rt.job_files {
            // Terminal, outputs transferred: the retention clock of the job's files starts.
            let ended = res.phase.is_terminal();
            j.answered(&m, ended.then_some(self.deployment.job_files_retention));
        }
        Ok(res)
    }

    /// DeleteTask: cancel; already finished or unknown jobs are a success.
    pub async fn delete(
        &self,
        raw_meta: &[u8],
        secrets: &HashMap<String, String>,
    ) -> Result<(), ServiceError> {
        let token = self
            .deployment
            .task_credential(secrets)
            .map_err(ServiceError::Invalid)?;
        let client_of = |rt: &ClusterRuntime, m: &ResourceMeta| match &token {
            Some(t) => rt.client_for(Some(t)),
            // The job's own user: a restarted connector or another replica cancels as it.
            None => rt.client_as(m.slurm_user.as_deref()),
        };
        let (rt, m) = self.locate(raw_meta)?;
        let mut cancelled = None;
        if let Some(uri) = &m.claim {
            // The tombstone first, whoever is submitting it: a record after it is refused.
            cancelled = submit::claimed::delete(&rt, &m, uri, &client_of(&rt, &m))
                .await
                .map_err(|e| ServiceError::Unavailable(format!("DeleteTask: {e}")))?;
            tracing::info!(cluster = %rt.cfg.name, claim = %uri, ?cancelled, "DeleteTask: tombstone written");
            if m.deferred.is_some() {
                return Ok(());
            }
        }
        let (rt, m) = match self.locate_job(raw_meta).await? {
            (rt, Ok(m)) => (rt, m),
            (rt, Err(_)) => {
                return deferred::delete_unsubmitted(&rt, &m).await.map_err(
                    ServiceError::slurm("cancelling (or leaving a tombstone for) a task deleted before its job was submitted"),
                );
            }
        };
        rt.cancel_transfer(&m.target());
        let outcome = if cancelled.is_some_and(|p| p.target() == m.target()) {
            crate::slurmrestd::CancelOutcome::Cancelled
        } else {
            client_of(&rt, &m)
                .cancel(m.target(), None)
                .await
                .map_err(ServiceError::slurm("cancelling the job"))?
        };
        tracing::info!(cluster = %rt.cfg.name, job_id = %m.job_id, element = ?m.element, ?outcome, "DeleteTask");
        if let (Some(index), crate::slurmrestd::CancelOutcome::Cancelled) = (m.element, &outcome) {
            // A pending element leaves no record of its cancel: the tracker keeps it.
            rt.tracker.element_cancelled_pending(m.job_id, index);
        }
        // A deleted task ends here even if the backend never asks about it again.
        if let Some(j) = &rt.job_files {
            j.ended(&m, self.deployment.job_files_retention);
        }
        Ok(())
    }

    /// GetTaskLogs: a page of the job's stdout/stderr through staging after `token`, or a line
    /// saying why there is none yet.
    pub async fn logs(
        &self,
        raw_meta: &[u8],
        lines: u64,
        token: &str,
    ) -> Result<report::logs::LogPage, ServiceError> {
        match self.locate_job(raw_meta).await? {
            (rt, Ok(m)) => report::logs::of_job(&rt, &m.as_task(), lines, token).await,
            // Not submitted yet: nothing to page; the same token comes back, so a reader keeps
            // its place, or one that starts at the tail once the job exists (never an empty
            // one: that ends the reader's stream before the job ran).
            (_, Err(p)) => Ok(report::logs::LogPage {
                lines: vec![crate::staging::logs::PageLine {
                    stream: "connector".into(),
                    text: p.message,
                    system: true,
                }],
                token: if token.is_empty() {
                    crate::staging::logs::NOT_STARTED_TOKEN.to_string()
                } else {
                    token.to_string()
                },
            }),
        }
    }

    /// GetTaskMetrics, with the connector's own credentials (the request carries none).
    pub async fn task_metrics(
        &self,
        raw_meta: &[u8],
        query: &MetricsQuery,
    ) -> Result<Vec<MetricResult>, ServiceError> {
        match self.locate_job(raw_meta).await? {
            (rt, Ok(m)) => report::task_metrics::of_job(&rt, &m.as_task(), query).await,
            (_, Err(p)) => Err(ServiceError::Unavailable(p.message)),
        }
    }

    fn cluster(&self, name: &str) -> Result<&Arc<ClusterRuntime>, ServiceError> {
        self.clusters.get(name).ok_or_else(|| {
            ServiceError::NotFound(format!(
                "resource_meta names cluster `{name}`, which this connector does not have; configured: {}",
                self.deployment.cluster_names()
            ))
        })
    }

    /// Reads `resource_meta` and finds its cluster. The only GetTask errors: unreadable meta,
    /// unknown cluster.
    fn locate(&self, raw: &[u8]) -> Result<(Arc<ClusterRuntime>, ResourceMeta), ServiceError> {
        match meta::decode(raw).map_err(|e| ServiceError::Invalid(e.to_string()))? {
            Decoded::Ours(m) => Ok((self.cluster(&m.cluster)?.clone(), m)),
            Decoded::Python { host, mut meta } => {
                let c = self.deployment.cluster_for_ssh_host(&host).ok_or_else(|| {
                    ServiceError::NotFound(format!(
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

    /// A meta with its job: a deferred one is resolved by its key first (`submit/deferred.rs`). `Err`
    /// carries what GetTask reports while no job is known yet.
    async fn locate_job(
        &self,
        raw: &[u8],
    ) -> Result<(Arc<ClusterRuntime>, Result<ResourceMeta, Pending>), ServiceError> {
        let (rt, m) = self.locate(raw)?;
        let Some(d) = m.deferred.clone() else {
            return Ok((rt, Ok(m)));
        };
        let resolved = deferred::resolve(&rt, m.clone(), &d).await;
        Ok((rt, resolved))
    }
}

fn cluster_label(rt: &ClusterRuntime) -> metrics::ClusterLabels {
    metrics::ClusterLabels {
        cluster: rt.cfg.name.clone(),
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
