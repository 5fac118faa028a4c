//! `slurm-connector serve`: gRPC (connector, metadata, health) on one listener, Prometheus on
//! another, one state tracker per cluster, graceful shutdown on SIGTERM or Ctrl-C (the drain:
//! `submit/deferred.rs`, `hand_off`).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::DeploymentConfig;
use crate::proto::connector::async_connector_service_server::AsyncConnectorServiceServer;
use crate::proto::connector::connector_metadata_service_server::ConnectorMetadataServiceServer;
use crate::proto::flyte1::service::agent_metadata_service_server::AgentMetadataServiceServer;
use crate::proto::flyte1::service::async_agent_service_server::AsyncAgentServiceServer;
use crate::tracker::TrackerConfig;

use super::handler::Grpc;
use super::metrics::{
    self, ClusterLabels, Metrics, OutcomeLabels, RestLabels, StateLabels, UploadLabels, UsageLabels,
};
use super::tasks::Background;
use crate::service::Connector;
use crate::service::cluster::{BuildError, ClusterRuntime};

#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// gRPC, default `0.0.0.0:8000`.
    pub listen: SocketAddr,
    /// Prometheus `/metrics`, default `0.0.0.0:9090`.
    pub metrics_listen: SocketAddr,
    pub config: DeploymentConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "no slurmrestd configured (set FLYTE_SLURM_RESTD_URL or give --config); the embedded \
         stand-in must be started by the caller and configured as a cluster"
    )]
    NoCluster,
    #[error(transparent)]
    Cluster(#[from] BuildError),
    /// The cluster answers, but in no version the connector can use: serving would fail every
    /// CreateTask, so the process does not start (and a rollout stops at this pod).
    #[error("cluster {cluster}: {source}")]
    ApiVersion {
        cluster: String,
        #[source]
        source: Box<crate::slurmrestd::ClientError>,
    },
    /// An identity rule names a user the cluster does not have (or must not be used).
    #[error("cluster {cluster}: {problem}")]
    Identity { cluster: String, problem: String },
    /// Identity rules on a port anyone may reach (`config::Protections::refusal` says why and how
    /// to fix it).
    #[error("{0}")]
    IdentityRulesExposed(String),
    /// The store claims are written to cannot hold them (no conditional writes, unreachable,
    /// denied): replicas could not agree on which job runs a task (`FLYTE_SLURM_CLAIMS`).
    #[error("claims (FLYTE_SLURM_CLAIMS): {0}")]
    Claims(#[from] crate::service::claim::ClaimError),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        addr: SocketAddr,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
    /// The compiled descriptors do not make a reflection service: a build defect.
    #[error("gRPC reflection: {0}")]
    Reflection(String),
    #[error("metrics server: {0}")]
    Metrics(std::io::Error),
}

/// Binds both listeners and serves until SIGTERM or Ctrl-C.
pub async fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    // Before anything listens (`serve_with` checks again on the address it was given).
    if let Some(why) = opts.config.protections(Some(opts.listen)).refusal() {
        return Err(ServeError::IdentityRulesExposed(why));
    }
    let grpc = bind(opts.listen, "gRPC").await?;
    let metrics = bind(opts.metrics_listen, "metrics").await?;
    serve_with(opts.config, grpc, metrics, shutdown_signal()).await
}

async fn bind(addr: std::net::SocketAddr, what: &'static str) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, what, source })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// Builds the clusters and serves on given listeners until `shutdown` resolves (tests use this).
pub async fn serve_with(
    config: DeploymentConfig,
    grpc_listener: TcpListener,
    metrics_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if config.clusters.is_empty() {
        return Err(ServeError::NoCluster);
    }
    // On the configuration as loaded, whichever route the rules came by (a clusters file from
    // a ConfigMap, FLYTE_SLURM_CONFIG from any environment source), before anything is served.
    if let Some(why) = config
        .protections(grpc_listener.local_addr().ok())
        .refusal()
    {
        return Err(ServeError::IdentityRulesExposed(why));
    }
    // Before any cluster is contacted: a certificate that does not load stops the start at once.
    let tls = match &config.server_tls {
        Some(files) => Some(Arc::new(super::tls::ServerTls::load(files)?)),
        None => None,
    };
    // Before any cluster is contacted too: a store where replicas cannot agree stops the start.
    let claims = crate::service::claim::check_at_start(&config.claims).await?;
    let m = Metrics::new();
    let clusters = build_clusters(&config, &m).await?;

    let background = start_background(&config, &clusters, &m, tls.as_ref());
    log_protections(&config, grpc_listener.local_addr().ok(), tls.as_deref());

    let grace = config.shutdown_grace;
    let connector = Arc::new(Connector::new(config, clusters, m.clone()));
    let holder = connector.claims().holder();
    let once_only = connector.claims().settings().once_only;
    tracing::info!(claims = %claims, holder = %holder.name, lease = ?holder.lease, ?once_only, "claims");
    if once_only == crate::config::claims::OnceOnly::Claims {
        tracing::warn!(
            "FLYTE_SLURM_ONCE_ONLY=claims (experimental): every job is made once through its execution's claim; every replica must say the same"
        );
    }
    let grpc = Grpc(connector.clone());

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_SERVICES {
        health_reporter
            .set_service_status(name, tonic_health::ServingStatus::Serving)
            .await;
    }

    // /healthz on the metrics port says what grpc.health.v1 says, for probes that cannot speak
    // TLS to the gRPC port (Kubernetes' gRPC probes cannot).
    let serving = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let metrics_task = tokio::spawn(metrics::serve(
        m,
        serving.clone(),
        metrics_listener,
        background.stopped(),
    ));
    let addr = grpc_listener.local_addr().ok();
    tracing::info!(
        ?addr,
        "serving flyteidl2.connector.AsyncConnectorService (Flyte 2) and flyteidl.service.AsyncAgentService (Flyte 1)"
    );
    // The server stops accepting only once the CreateTasks in flight are done (below): until
    // then it keeps answering, so health checks see NOT_SERVING and new CreateTasks get their
    // hand-off instead of a refused connection.
    let (stop_accepting, accepting_stopped) = tokio::sync::oneshot::channel::<()>();
    let router = router(grpc, health_service)?;
    let stop_accepting_rx = async move {
        let _ = accepting_stopped.await;
    };
    let server = spawn_server(router, tls.as_deref(), grpc_listener, stop_accepting_rx);
    // On its own task (above): it must go on accepting (health checks, refusals) while this one
    // drains.
    let mut server = server;
    tokio::pin!(shutdown);
    let (result, deadline) = tokio::select! {
        r = &mut server => (joined(r), tokio::time::Instant::now()),
        _ = &mut shutdown => {
            let deadline = tokio::time::Instant::now() + grace;
            drain(&connector, &health_reporter, &serving, deadline, grace).await;
            let _ = stop_accepting.send(());
            let r = match tokio::time::timeout_at(deadline, &mut server).await {
                Ok(r) => joined(r),
                Err(_) => {
                    tracing::warn!(grace = ?grace, "shutdown: calls still in flight at the drain deadline; closing their connections");
                    server.abort();
                    Ok(())
                }
            };
            (r, deadline)
        }
    };
    // The poll loops and sweeps stop at their next turn; one stuck in a slow slurmrestd request
    // is not waited for past the deadline (it would only have refreshed a cache).
    let deadline = deadline.max(tokio::time::Instant::now() + BACKGROUND_STOP);
    background.stop(deadline).await;
    if let Ok(Ok(Err(e))) = tokio::time::timeout_at(deadline, metrics_task).await {
        return Err(ServeError::Metrics(e));
    }
    if result.is_ok() {
        tracing::info!("shut down");
    }
    result.map_err(ServeError::from)
}

/// The gRPC server on a task of its own (it must go on accepting, for health checks and
/// hand-offs, while `serve_with` drains), until `stop` resolves.
fn spawn_server(
    router: tonic::transport::server::Router,
    tls: Option<&super::tls::ServerTls>,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    match tls {
        Some(tls) => {
            tokio::spawn(router.serve_with_incoming_shutdown(tls.incoming(listener), stop))
        }
        None => tokio::spawn(router.serve_with_incoming_shutdown(
            // Small unary RPCs: without TCP_NODELAY each answer waits on Nagle + delayed ACK
            // (BENCHMARKS.md has the figures).
            tokio_stream::StreamExt::map(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                |r| {
                    r.inspect(|s| {
                        let _ = s.set_nodelay(true);
                    })
                },
            ),
            stop,
        )),
    }
}

/// Shutdown's first half: probes and load balancers told first (NOT_SERVING), new CreateTasks
/// handed to another replica, then the CreateTasks and submits in flight let finish, until
/// `deadline`.
async fn drain(
    connector: &Connector,
    health: &tonic_health::server::HealthReporter,
    serving: &std::sync::atomic::AtomicBool,
    deadline: tokio::time::Instant,
    grace: std::time::Duration,
) {
    serving.store(false, std::sync::atomic::Ordering::SeqCst);
    for name in HEALTH_SERVICES {
        health
            .set_service_status(name, tonic_health::ServingStatus::NotServing)
            .await;
    }
    let creates = connector.drain.close();
    let submits: usize = connector
        .clusters
        .values()
        .map(|rt| rt.submitter.close())
        .sum();
    tracing::info!(create_tasks_in_flight = creates, submits_in_flight = submits, grace = ?grace, "shutting down: health NOT_SERVING, new CreateTasks handed to another replica, letting the CreateTasks and submits in flight finish");
    let all_done = async {
        connector.drain.idle().await;
        for rt in connector.clusters.values() {
            rt.submitter.idle().await;
        }
    };
    if tokio::time::timeout_at(deadline, all_done).await.is_err() {
        tracing::warn!(grace = ?grace, "shutdown: CreateTasks or submits still in flight at the drain deadline; exiting anyway (a job left held is released by the retried CreateTask)");
    }
}

/// Each configured cluster's runtime, its API version chosen and its identity rules checked: a
/// cluster that serves none of our versions, or whose rules name users it lacks, stops the start.
async fn build_clusters(
    config: &DeploymentConfig,
    m: &Arc<Metrics>,
) -> Result<BTreeMap<String, Arc<ClusterRuntime>>, ServeError> {
    let tracker_cfg = TrackerConfig {
        poll_interval: config.poll_interval,
        terminal_ttl: config.terminal_ttl,
        accounting_wait: config.accounting_wait,
        ..TrackerConfig::default()
    };
    let mut clusters = BTreeMap::new();
    for (name, c) in &config.clusters {
        let mm = m.clone();
        let cluster = name.clone();
        let observer: crate::slurmrestd::RequestObserver = Arc::new(move |e| {
            mm.slurmrestd_requests
                .get_or_create(&RestLabels {
                    cluster: cluster.clone(),
                    operation: e.operation.to_string(),
                    api_version: e.version.as_str().to_string(),
                    daemon: e.daemon.as_str().to_string(),
                    status: e.reply.label(),
                })
                .inc();
        });
        let mm = m.clone();
        let tick: crate::tracker::TickObserver = Arc::new(move |cluster, took, _asked| {
            mm.poll_tick
                .get_or_create(&ClusterLabels {
                    cluster: cluster.to_string(),
                })
                .observe(took.as_secs_f64());
        });
        let rt = ClusterRuntime::build(c.clone(), tracker_cfg.clone(), Some(observer), Some(tick))?;
        // The API version is chosen now, so a cluster that serves none of ours (or not the pinned
        // one) stops the start with the versions on each side. An unreachable one does not: it
        // is chosen at the first call that reaches it.
        match rt.client().negotiate().await {
            Ok(n) => {
                tracing::info!(cluster = %name, api_version = %n.version, release = ?n.server.release, reason = %n.reason(), "slurmrestd API version")
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(cluster = %name, error = %e, "slurmrestd unreachable at start; its API version is chosen when it answers")
            }
            Err(e) => {
                return Err(ServeError::ApiVersion {
                    cluster: name.clone(),
                    source: Box::new(e),
                });
            }
        }
        crate::service::submit::identity::check_at_start(name, &c.identities, rt.client())
            .await
            .map_err(|problem| ServeError::Identity {
                cluster: name.clone(),
                problem,
            })?;
        tracing::info!(cluster = %name, url = %c.restd_url, staging = rt.staging.is_some(), identity_rules = c.identities.rules.len(), "cluster configured");
        clusters.insert(name.clone(), Arc::new(rt));
    }
    Ok(clusters)
}

/// The long-running tasks, registered by name (`tasks.rs`): per cluster its poll loop, its
/// takeovers of deferred submits and held jobs left held (`submit/takeover.rs`), its gauges and (with retention) its job-file sweeper; the certificate reloader.
fn start_background(
    config: &DeploymentConfig,
    clusters: &BTreeMap<String, Arc<ClusterRuntime>>,
    m: &Arc<Metrics>,
    tls: Option<&Arc<super::tls::ServerTls>>,
) -> Background {
    let mut background = Background::default();
    for rt in clusters.values() {
        let name = &rt.cfg.name;
        let tracker = rt.tracker.clone();
        background.spawn(format!("tracker[{name}]"), |stop| tracker.run(stop));
        let taken = rt.clone();
        background.spawn(format!("takeovers[{name}]"), |stop| {
            crate::service::submit::deferred::run_takeovers(taken, stop)
        });
        let (rt, mm, interval) = (rt.clone(), m.clone(), config.poll_interval);
        background.spawn(format!("gauges[{name}]"), move |stop| {
            refresh_gauges(rt, mm, interval, stop)
        });
    }
    // Job-file retention: one sweeper per cluster that can reach its filesystem.
    if let Some(keep) = config.job_files_retention {
        for rt in clusters.values() {
            if let Some(j) = &rt.job_files {
                tracing::info!(cluster = %rt.cfg.name, keep = ?keep, "removing finished jobs' files after the retention time");
                let (j, name) = (j.clone(), rt.cfg.name.clone());
                let every = crate::service::cluster::jobfiles::sweep_interval(keep);
                background.spawn(format!("job-file sweeper[{name}]"), move |stop| {
                    j.run_sweeps(name, keep, every, stop)
                });
            }
        }
    }
    if let Some(tls) = tls {
        let tls = Arc::clone(tls);
        background.spawn("certificate reloader", |stop| tls.watch(stop));
    }
    tracing::info!(tasks = ?background.names(), "background tasks started");
    background
}

/// Every service on the gRPC port: both Flytes' protocols, health, reflection, and the refusal
/// of Flyte 1's connector-service.
fn router(
    grpc: Grpc,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> Result<tonic::transport::server::Router, ServeError> {
    // Reflection over the same port (and the same TLS): `grpcurl HOST:8000 list` shows the
    // connector, metadata and health services without their protos.
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::DESCRIPTORS)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    Ok(tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(AsyncConnectorServiceServer::new(grpc.clone()))
        .add_service(ConnectorMetadataServiceServer::new(grpc.clone()))
        // Flyte 1's agent protocol beside it: one deployment serves both Flytes.
        .add_service(AsyncAgentServiceServer::new(grpc.clone()))
        .add_service(AgentMetadataServiceServer::new(grpc))
        // Flyte >= 1.15's connector-service plugin: refused with what to route to instead.
        .add_service(super::flyte1::Flyte1ConnectorRefusal))
}

/// One cluster's gauges, refreshed every `interval` until `stop`: the runtime's sizes
/// ([`ClusterRuntime::gauges`]) and the counters' growth since the last turn.
async fn refresh_gauges(
    rt: Arc<ClusterRuntime>,
    mm: Arc<Metrics>,
    interval: std::time::Duration,
    stop: impl Future<Output = ()>,
) {
    let label = ClusterLabels {
        cluster: rt.cfg.name.clone(),
    };
    let mut last = crate::service::cluster::Gauges::default();
    let mut tallied = Tallied::default();
    let mut tick = tokio::time::interval(interval);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {
                let g = rt.gauges();
                mm.tracked_jobs.get_or_create(&label).set(g.tracked_jobs as i64);
                mm.output_transfers.get_or_create(&label).set(g.output_transfers as i64);
                for (state, n) in [("executions", Some(g.submit.executions)), ("index_jobs", g.submit.index_jobs)] {
                    let Some(n) = n else { continue };
                    let labels = StateLabels { cluster: rt.cfg.name.clone(), state: state.into() };
                    mm.state_entries.get_or_create(&labels).set(n as i64);
                }
                mm.token_refreshes.get_or_create(&label).inc_by(g.token_refreshes.saturating_sub(last.token_refreshes));
                mm.coalesced_arrays.get_or_create(&label).inc_by(g.submit.batches.arrays - last.submit.batches.arrays);
                mm.coalesced_elements.get_or_create(&label).inc_by(g.submit.batches.elements - last.submit.batches.elements);
                mm.coalesce_wait.get_or_create(&label).inc_by(g.submit.batches.wait_seconds - last.submit.batches.wait_seconds);
                mm.coalesce_waiting.get_or_create(&label).set(g.submit.batches_waiting as i64);
                // Also refreshed by each CreateTask; here for the submits that end after it
                // (deferred, paced, coalesced), which is when a full cluster's refusals grow.
                mm.pacing(&rt.cfg.name, rt.submitter.pacing());
                mm.submits.get_or_create(&label).inc_by(g.submit.submitted - last.submit.submitted);
                mm.duplicate_creates.get_or_create(&label).inc_by(g.submit.adopted - last.submit.adopted);
                mm.duplicate_checks.get_or_create(&label).inc_by(g.submit.checks - last.submit.checks);
                tallied.add_growth(&rt, &mm);
                last = g;
            }
        }
    }
}

/// A cluster's tallies (`cluster/tallies.rs`) as far as they were added to the counters.
#[derive(Default)]
struct Tallied {
    outcomes: BTreeMap<crate::service::cluster::tallies::Outcome, u64>,
    uploads: crate::service::cluster::tallies::Uploads,
    usage: BTreeMap<
        crate::service::cluster::tallies::UsageKey,
        crate::service::cluster::tallies::UsageTotals,
    >,
}

impl Tallied {
    /// Adds the tallies' growth since the last turn to the outcome and upload counters.
    fn add_growth(&mut self, rt: &ClusterRuntime, mm: &Metrics) {
        let cluster = &rt.cfg.name;
        for (o, n) in rt.tallies.outcomes() {
            let before = self.outcomes.insert(o, n).unwrap_or(0);
            let labels = OutcomeLabels {
                cluster: cluster.clone(),
                phase: o.phase.into(),
                class: o.class.into(),
                reason: o.reason.into(),
            };
            mm.task_outcomes.get_or_create(&labels).inc_by(n - before);
        }
        let now = rt.tallies.uploads();
        // Both results exist from the first turn, at 0: `increase()` sees the first failure.
        for (result, n, before) in [
            ("ok", now.ok, self.uploads.ok),
            ("failed", now.failed, self.uploads.failed),
        ] {
            let labels = UploadLabels {
                cluster: cluster.clone(),
                result: result.into(),
            };
            mm.output_uploads.get_or_create(&labels).inc_by(n - before);
        }
        self.uploads = now;
        let labels = |(project, domain): &(String, String)| UsageLabels {
            cluster: cluster.clone(),
            project: project.clone(),
            domain: domain.clone(),
        };
        for (key, now) in rt.tallies.usage_totals() {
            let before = self.usage.insert(key.clone(), now).unwrap_or_default();
            let l = labels(&key);
            mm.task_accounted
                .get_or_create(&l)
                .inc_by(now.tasks - before.tasks);
            for ((family, n), b) in mm.task_usage.iter().zip(now.figures).zip(before.figures) {
                family.get_or_create(&l).inc_by(n - b);
            }
        }
        for (key, e) in rt.tallies.take_efficiencies() {
            mm.task_cpu_efficiency
                .get_or_create(&labels(&key))
                .observe(e);
        }
    }
}

/// Who can reach the gRPC port, said once at start: identity rules decide whom a job runs as
/// from the request, which is sound only while nothing but Flyte's backend can send one.
fn log_protections(
    config: &DeploymentConfig,
    listen: Option<SocketAddr>,
    tls: Option<&super::tls::ServerTls>,
) {
    let p = config.protections(listen);
    let tls = tls.map_or_else(|| "off (plaintext)".to_string(), |t| t.describe());
    let ingress = p.ingress_policy.as_deref().unwrap_or("none declared");
    // Only with FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS: `serve_with` refuses exposed rules otherwise.
    if p.identity_rules_exposed() {
        tracing::warn!(listen = ?listen, tls = %tls, ingress_policy = ingress, identity_rules = p.identity_rules, "identity rules decide whom jobs run as, the gRPC port listens beyond loopback and no ingress restriction is declared, and FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS=true accepts that: any client that reaches it can have jobs run as the rules' users");
    } else {
        tracing::info!(listen = ?listen, tls = %tls, ingress_policy = ingress, identity_rules = p.identity_rules, "who can reach the gRPC port");
    }
}

/// The server task's outcome (a panic in it is re-raised: it is a bug, not a shutdown).
fn joined(
    r: Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>,
) -> Result<(), tonic::transport::Error> {
    match r {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Ok(()),
    }
}

/// The names grpc.health.v1 answers for: the server as a whole and each service.
const HEALTH_SERVICES: [&str; 5] = [
    "",
    "flyteidl2.connector.AsyncConnectorService",
    "flyteidl2.connector.ConnectorMetadataService",
    "flyteidl.service.AsyncAgentService",
    "flyteidl.service.AgentMetadataService",
];

/// How long the background loops get to stop once the server has (at least; more when the drain
/// ended before its deadline).
const BACKGROUND_STOP: std::time::Duration = std::time::Duration::from_secs(2);
