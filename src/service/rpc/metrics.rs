//! Prometheus metrics on their own listener: the Python connector's `flyte_connector_*` names
//! (dashboards keep working after a swap) plus the connector's own.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub task_type: String,
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailLabels {
    pub task_type: String,
    pub operation: String,
    pub error_code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestLabels {
    pub cluster: String,
    pub operation: String,
    /// The slurmrestd data_parser version of the request (`v0.0.42`).
    pub api_version: String,
    /// The Slurm daemon the request was for (`slurmctld`, `slurmdbd`: `slurmrestd::Daemon`).
    pub daemon: String,
    /// The HTTP status, or what came instead (`unreachable`, `timeout`, `closed`:
    /// `slurmrestd::Reply`).
    pub status: String,
}

/// What this binary is (`crate::build_info`): one series, always 1, so a dashboard can tell
/// replicas of different builds apart (`count by (git_hash)`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub git_hash: String,
    pub api_versions: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub cluster: String,
}

/// One of the service's maps keyed by execution or job (`executions`, `index_jobs`), so that
/// what bounds each one can be watched.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub cluster: String,
    pub state: String,
}

/// A task's outcome (`cluster/tallies.rs`): every value from a fixed set, so the series stay
/// bounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub cluster: String,
    pub phase: String,
    pub class: String,
    pub reason: String,
}

/// What tasks used (`cluster/tallies.rs`): the Flyte project and domain, a few per site.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UsageLabels {
    pub cluster: String,
    pub project: String,
    pub domain: String,
}

type FloatCounter = Counter<f64, std::sync::atomic::AtomicU64>;

/// An output upload's result: `ok` or `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UploadLabels {
    pub cluster: String,
    pub result: String,
}

pub struct Metrics {
    registry: Registry,
    /// One series, set once at start (`crate::build_info`).
    pub build_info: Family<BuildLabels, Gauge>,
    pub success: Family<OpLabels, Counter>,
    pub failure: Family<FailLabels, Counter>,
    pub latency: Family<OpLabels, Histogram>,
    pub slurmrestd_requests: Family<RestLabels, Counter>,
    pub tracked_jobs: Family<ClusterLabels, Gauge>,
    /// Output transfers kept (running, or settled and read within `terminal_ttl`).
    pub output_transfers: Family<ClusterLabels, Gauge>,
    /// Entries of the per-execution and per-job maps (see [`StateLabels`]).
    pub state_entries: Family<StateLabels, Gauge>,
    pub poll_tick: Family<ClusterLabels, Histogram>,
    pub token_refreshes: Family<ClusterLabels, Counter>,
    pub submits: Family<ClusterLabels, Counter>,
    pub duplicate_creates: Family<ClusterLabels, Counter>,
    /// The duplicate check's listings of a cluster's job states (`submit/idempotency`).
    pub duplicate_checks: Family<ClusterLabels, Counter>,
    /// CreateTasks answered before their submit was done (paced or retried).
    pub deferred_creates: Family<ClusterLabels, Counter>,
    /// Submits waiting for a slot, and the slots there are now (`service/submit/pacing.rs`).
    pub submits_waiting: Family<ClusterLabels, Gauge>,
    pub submit_limit: Family<ClusterLabels, Gauge>,
    /// Answers that showed slurmctld throttling (late, timed out, 5xx), since start.
    pub submits_throttled: Family<ClusterLabels, Gauge>,
    pub cluster_full: Family<ClusterLabels, Gauge>,
    pub submits_refused_full: Family<ClusterLabels, Gauge>,
    /// Coalescing (`service/submit/coalesce.rs`): job arrays submitted for batches, the tasks
    /// they carry, the seconds those tasks waited for their batch, and those waiting now.
    pub coalesced_arrays: Family<ClusterLabels, Counter>,
    pub coalesced_elements: Family<ClusterLabels, Counter>,
    pub coalesce_wait: Family<ClusterLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    pub coalesce_waiting: Family<ClusterLabels, Gauge>,
    /// Executions' first terminal GetTask answers, by phase, failure class and status code.
    pub task_outcomes: Family<OutcomeLabels, Counter>,
    /// Uploads of declared outputs to object storage, by result.
    pub output_uploads: Family<UploadLabels, Counter>,
    /// What tasks used, from Slurm's accounting: tasks counted, each of
    /// `tallies::USAGE_FIGURES` summed, and each task's CPU efficiency.
    pub task_accounted: Family<UsageLabels, Counter>,
    pub task_usage: [Family<UsageLabels, FloatCounter>; USAGE_FIGURES.len()],
    pub task_cpu_efficiency: Family<UsageLabels, Histogram>,
}

use crate::service::cluster::tallies::USAGE_FIGURES;

fn efficiency_histogram() -> Histogram {
    // 0.05 to 1.0 in steps of 0.05 (seff's percentages; above 1 only with hyper-threads counted).
    Histogram::new((1..=20).map(|i| f64::from(i) * 0.05))
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let m = Metrics {
            build_info: Family::default(),
            success: Family::default(),
            failure: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            slurmrestd_requests: Family::default(),
            tracked_jobs: Family::default(),
            output_transfers: Family::default(),
            state_entries: Family::default(),
            poll_tick: Family::new_with_constructor(latency_histogram),
            token_refreshes: Family::default(),
            submits: Family::default(),
            duplicate_creates: Family::default(),
            duplicate_checks: Family::default(),
            deferred_creates: Family::default(),
            submits_waiting: Family::default(),
            submit_limit: Family::default(),
            submits_throttled: Family::default(),
            cluster_full: Family::default(),
            submits_refused_full: Family::default(),
            coalesced_arrays: Family::default(),
            coalesced_elements: Family::default(),
            coalesce_wait: Family::default(),
            coalesce_waiting: Family::default(),
            task_outcomes: Family::default(),
            output_uploads: Family::default(),
            task_accounted: Family::default(),
            task_usage: Default::default(),
            task_cpu_efficiency: Family::new_with_constructor(efficiency_histogram),
            registry: Registry::default(),
        };
        m.build_info
            .get_or_create(&BuildLabels {
                version: crate::build_info::VERSION.to_string(),
                git_hash: crate::build_info::GIT_HASH.to_string(),
                api_versions: crate::build_info::API_VERSIONS.to_string(),
            })
            .set(1);
        m.register_service(&mut registry);
        m.register_tasks(&mut registry);
        m.register_submits(&mut registry);
        Arc::new(Metrics { registry, ..m })
    }

    /// The build, the RPCs, slurmrestd's requests and the state the service keeps.
    fn register_service(&self, registry: &mut Registry) {
        registry.register(
            "slurm_connector_build_info",
            "The connector's version, git commit and the slurmrestd API versions it speaks (always 1)",
            self.build_info.clone(),
        );
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "flyte_connector_requests_success",
            "Successful connector requests",
            self.success.clone(),
        );
        registry.register(
            "flyte_connector_requests_failure",
            "Failed connector requests",
            self.failure.clone(),
        );
        registry.register(
            "flyte_connector_request_latency_seconds",
            "Connector request latency",
            self.latency.clone(),
        );
        registry.register(
            "slurm_connector_slurmrestd_requests",
            "HTTP requests to slurmrestd by operation, API version, daemon (slurmctld, slurmdbd) and status (the HTTP status; unreachable: no connection made, connect timeouts included; timeout: no answer within the request timeout; closed: the connection ended without an answer)",
            self.slurmrestd_requests.clone(),
        );
        registry.register(
            "slurm_connector_tracked_jobs",
            "Jobs the state tracker follows",
            self.tracked_jobs.clone(),
        );
        registry.register(
            "slurm_connector_output_transfers",
            "Connector-side output transfers kept: running, or settled and read within terminal_ttl",
            self.output_transfers.clone(),
        );
        registry.register(
            "slurm_connector_state_entries",
            "Entries of the connector's maps by execution (executions) and by job (index_jobs: the duplicate check's index)",
            self.state_entries.clone(),
        );
    }

    /// What became of executions: outcomes, output uploads, and their accounted usage.
    fn register_tasks(&self, registry: &mut Registry) {
        registry.register(
            "slurm_connector_task_outcomes",
            "Executions' first terminal GetTask answer on this replica, by phase, failure class (user, permanent, infrastructure, none) and the status code the message starts with",
            self.task_outcomes.clone(),
        );
        registry.register(
            "slurm_connector_output_uploads",
            "Uploads of executions' declared outputs to object storage, by result (ok, failed), counted when each attempt settles",
            self.output_uploads.clone(),
        );
        registry.register(
            "slurm_connector_task_accounted",
            "Executions whose Slurm accounting (slurmdbd) came with their first terminal GetTask answer, by Flyte project and domain",
            self.task_accounted.clone(),
        );
        for ((name, help), family) in USAGE_FIGURES.iter().zip(&self.task_usage) {
            registry.register(
                format!("slurm_connector_task_{name}"),
                *help,
                family.clone(),
            );
        }
        registry.register(
            "slurm_connector_task_cpu_efficiency",
            "Each accounted execution's CPU time used over CPU time allocated (seff's CPU efficiency)",
            self.task_cpu_efficiency.clone(),
        );
    }

    /// The write path: polling, tokens, submits, pacing and coalescing.
    fn register_submits(&self, registry: &mut Registry) {
        registry.register(
            "slurm_connector_poll_tick_seconds",
            "Duration of one state-tracker poll round",
            self.poll_tick.clone(),
        );
        registry.register(
            "slurm_connector_token_refreshes",
            "slurmrestd tokens minted or re-read",
            self.token_refreshes.clone(),
        );
        registry.register(
            "slurm_connector_jobs_submitted",
            "Jobs submitted to Slurm",
            self.submits.clone(),
        );
        registry.register(
            "slurm_connector_duplicate_creates",
            "CreateTask calls answered with an already submitted job (idempotency)",
            self.duplicate_creates.clone(),
        );
        registry.register(
            "slurm_connector_duplicate_checks",
            "Listings of the cluster's job states made for the duplicate check (one jobs/state each, shared by every submit waiting for it)",
            self.duplicate_checks.clone(),
        );
        registry.register(
            "slurm_connector_deferred_creates",
            "CreateTask calls answered before their submit was done (throttled or retried); GetTask says QUEUED until it is",
            self.deferred_creates.clone(),
        );
        registry.register(
            "slurm_connector_submits_waiting",
            "Submits waiting for a slot (slurmctld throttling shrinks the slots)",
            self.submits_waiting.clone(),
        );
        registry.register(
            "slurm_connector_submit_slots",
            "Submits a cluster runs at once now (halved on throttling, grown back on prompt answers)",
            self.submit_limit.clone(),
        );
        registry.register(
            "slurm_connector_submit_throttle_signals",
            "Submit answers since start that showed slurmctld throttling (slower than 2 s, timed out on a connection made, 5xx; a connect timeout is an outage, not throttling)",
            self.submits_throttled.clone(),
        );
        registry.register(
            "slurm_connector_cluster_full",
            "1 while slurmctld refuses submits because its MaxJobCount is reached (submits wait, one probe every 5 s)",
            self.cluster_full.clone(),
        );
        registry.register(
            "slurm_connector_submits_refused_full",
            "Submits since start that slurmctld refused because its MaxJobCount was reached",
            self.submits_refused_full.clone(),
        );
        registry.register(
            "slurm_connector_coalesced_arrays",
            "Job arrays submitted for batches of coalesced CreateTasks",
            self.coalesced_arrays.clone(),
        );
        registry.register(
            "slurm_connector_coalesced_elements",
            "CreateTasks submitted as elements of coalesced job arrays (divided by coalesced_arrays: the mean batch)",
            self.coalesced_elements.clone(),
        );
        registry.register(
            "slurm_connector_coalesce_wait_seconds",
            "Seconds coalesced CreateTasks waited for their batch to be submitted, summed (divided by coalesced_elements: the mean wait)",
            self.coalesce_wait.clone(),
        );
        registry.register(
            "slurm_connector_coalesce_waiting",
            "CreateTasks waiting in open batches for their coalescing window",
            self.coalesce_waiting.clone(),
        );
    }

    /// The pacing gauges of a cluster, from its pacer's view.
    pub fn pacing(&self, cluster: &str, v: crate::service::submit::pacing::PaceView) {
        let l = ClusterLabels {
            cluster: cluster.to_string(),
        };
        self.submits_waiting.get_or_create(&l).set(v.waiting as i64);
        self.submit_limit.get_or_create(&l).set(v.limit as i64);
        self.submits_throttled
            .get_or_create(&l)
            .set(v.throttled as i64);
        self.cluster_full.get_or_create(&l).set(i64::from(v.full));
        self.submits_refused_full
            .get_or_create(&l)
            .set(v.full_refusals as i64);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }

    pub fn observe(
        &self,
        task_type: &str,
        operation: &str,
        elapsed: Duration,
        error: Option<tonic::Code>,
    ) {
        let op = OpLabels {
            task_type: task_type.to_string(),
            operation: operation.to_string(),
        };
        self.latency
            .get_or_create(&op)
            .observe(elapsed.as_secs_f64());
        match error {
            None => {
                self.success.get_or_create(&op).inc();
            }
            Some(code) => {
                self.failure
                    .get_or_create(&FailLabels {
                        task_type: op.task_type,
                        operation: op.operation,
                        error_code: format!("{code:?}"),
                    })
                    .inc();
            }
        }
    }
}

/// Serves `GET /metrics`, and `GET /healthz` (200 `SERVING` while `serving`, 503 `NOT_SERVING`
/// once the drain began: what grpc.health.v1 answers, for probes that cannot speak TLS to the
/// gRPC port), until `shutdown` resolves.
pub async fn serve(
    metrics: Arc<Metrics>,
    serving: Arc<std::sync::atomic::AtomicBool>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let healthz = get(move || {
        let up = serving.load(std::sync::atomic::Ordering::SeqCst);
        async move {
            if up {
                (StatusCode::OK, "SERVING\n")
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, "NOT_SERVING\n")
            }
        }
    });
    let app = axum::Router::new().route("/healthz", healthz).route(
        "/metrics",
        get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    m.encode(),
                )
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
