//! Deployment configuration: the connector's environment (`FLYTE_SLURM_*`) and an optional TOML
//! file naming several clusters. The deployment's settings always win over a task's own config:
//! a task may only *select* one of the configured clusters by name (`custom.connection.cluster`),
//! never point the deployment's credentials at a host of its choosing.
//!
//! Precedence: built-in defaults < config file < environment (the environment describes the
//! cluster named by `FLYTE_SLURM_CLUSTER_NAME`, default `default`, and overrides that cluster's
//! entry of the file field by field).

pub mod claims;
pub mod clustered;
mod env;
mod error;
mod file;
pub mod identity;
pub mod images;
pub mod interruptible;
mod protections;
pub use protections::Protections;
pub mod units;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Tokens and keys: redacted in `Debug`/`Display` (the slurmrestd client's own type).
pub use crate::slurmrestd::Secret;
pub use error::ConfigError;
pub use units::{parse_bytes, parse_duration};

/// How the connector authenticates to one cluster's slurmrestd.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthConfig {
    /// A fixed token (`FLYTE_SLURM_JWT`; a leading `SLURM_JWT=` is accepted).
    Token(Secret),
    /// A file holding the token, re-read when it changes (`FLYTE_SLURM_JWT_FILE`).
    TokenFile(PathBuf),
    /// The cluster's HS256 key: the connector mints short-lived tokens (`FLYTE_SLURM_JWT_KEY_FILE`).
    KeyFile { path: PathBuf, lifetime: Duration },
}

/// One Slurm cluster reached through slurmrestd.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// The name tasks select it by and `resource_meta` records.
    pub name: String,
    pub restd_url: url::Url,
    /// The slurmrestd data_parser version to use (`api_version` / `FLYTE_SLURM_API_VERSION`);
    /// `None` (the default, or `auto`): the newest that the connector and the cluster both
    /// serve, chosen at start and again after slurmrestd was unreachable.
    pub api_version: Option<crate::slurmrestd::ApiVersion>,
    /// The Slurm user jobs run as (token subject / `X-SLURM-USER-NAME`).
    pub username: Option<String>,
    pub auth: Option<AuthConfig>,
    /// Absolute directory on the cluster's shared filesystem for job files.
    pub working_dir: Option<String>,
    /// `cluster_prefix → local path`: where the connector sees the cluster's filesystem.
    pub shared_mounts: Vec<(String, PathBuf)>,
    /// Partition for tasks that name none (None: Slurm's default).
    pub default_partition: Option<String>,
    /// SSH host names the published Python connector recorded in its `resource_meta` for this
    /// cluster (its `host` field): jobs it started keep being tracked after a swap.
    pub ssh_hosts: Vec<String>,
    /// Staging sidecar for logs/outputs, when the connector has no mount.
    pub stager_url: Option<url::Url>,
    pub stager_token_file: Option<PathBuf>,
    /// Who each task's job runs as (`[[clusters.NAME.identities]]`, `identity.rs`); empty: the
    /// deployment user, for every job.
    pub identities: identity::Identities,
    /// `ca_file` / `FLYTE_SLURM_CA_FILE`: a PEM bundle of CAs that slurmrestd's certificate may
    /// chain to, besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Rules turning task images into pre-staged files (`[[clusters.NAME.images]]`; see `images.rs`).
    pub images: images::ImageMap,
    /// How long opening a connection to slurmrestd may take (`connect_timeout` /
    /// `FLYTE_SLURM_CONNECT_TIMEOUT`); past it slurmrestd counts as unreachable.
    pub connect_timeout: Duration,
    /// How long slurmrestd may take to answer a request on a connection made (`request_timeout` /
    /// `FLYTE_SLURM_REQUEST_TIMEOUT`); submits wait longer (`service/cluster/clients.rs`).
    pub request_timeout: Duration,
}

impl ClusterConfig {
    /// A cluster with only its name and slurmrestd's URL: the rest unset, as a configuration
    /// that says nothing more has it.
    pub fn new(name: impl Into<String>, restd_url: url::Url) -> ClusterConfig {
        ClusterConfig {
            name: name.into(),
            restd_url,
            api_version: None,
            username: None,
            auth: None,
            working_dir: None,
            shared_mounts: Vec::new(),
            default_partition: None,
            ssh_hosts: Vec::new(),
            stager_url: None,
            stager_token_file: None,
            identities: Default::default(),
            ca_file: None,
            images: Default::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// Everything the service needs from the deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentConfig {
    /// By name; never empty once loaded (see [`DeploymentConfig::load`]), except when
    /// `embedded` is set.
    pub clusters: BTreeMap<String, ClusterConfig>,
    /// The cluster a task gets when it names none.
    pub default_cluster: String,
    /// How often the tracker asks each cluster for its jobs' states (`FLYTE_SLURM_POLL_INTERVAL`).
    pub poll_interval: Duration,
    /// How long a finished job stays in the tracker's cache (`FLYTE_SLURM_TERMINAL_TTL`).
    pub terminal_ttl: Duration,
    /// How long a finished task's accounting is awaited from slurmdbd, its terminal answer held
    /// back meanwhile (`FLYTE_SLURM_ACCOUNTING_WAIT`; zero: accounting is not read).
    pub accounting_wait: Duration,
    /// Whether a task may bring its own slurmrestd token in `connection.secrets`
    /// (`FLYTE_SLURM_ALLOW_TASK_CREDENTIALS`, default false).
    pub allow_task_credentials: bool,
    /// Ceiling for connector-side output uploads (`FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES`;
    /// None = no limit). Kept as text too: a malformed value fails the task, not the startup.
    pub upload_max_bytes: UploadLimit,
    /// How long a finished job's files (logs, exit marker, local outputs) stay on the shared
    /// filesystem after its task ended (`FLYTE_SLURM_JOB_FILES_RETENTION`, default 7 days;
    /// `None`: kept, for `off`/`never`/`0`).
    pub job_files_retention: Option<Duration>,
    /// How many times a task's job may be put back on the cluster after the cluster failed it
    /// (node failure, preemption) before the task fails retryably (`FLYTE_SLURM_REQUEUE_BUDGET`,
    /// default 3). An interruptible task's `interruptible_failure_threshold` replaces it.
    pub requeue_budget: u32,
    /// How long CreateTask waits for its submit before answering with a deferred
    /// `resource_meta` while the submit goes on (`FLYTE_SLURM_SUBMIT_WAIT`, default 5 s; at most
    /// 9 s, under the backend's 10 s deadline). See `service/submit/deferred.rs`.
    pub submit_wait: Duration,
    /// Whether CreateTasks of one array shape arriving close together are submitted as one job
    /// array (`FLYTE_SLURM_COALESCE_WINDOW`; `service/submit/coalesce.rs`).
    pub coalesce: Coalesce,
    /// Submits one cluster runs at once at most (`FLYTE_SLURM_SUBMITS_IN_FLIGHT`, default 8);
    /// fewer while slurmctld throttles (`service/submit/pacing.rs`).
    pub submits_in_flight: usize,
    /// How long a submit's duplicate check waits at most for the cluster's next turn
    /// (`FLYTE_SLURM_CHECK_EVERY`, default 1 s; 0: at once): the checks of held jobs that
    /// come meanwhile share one listing (`service/submit/idempotency`).
    pub check_every: Duration,
    /// `FLYTE_SLURM_LOG_LINKS`: links shown in Flyte's UI for every task (`{job_id}`, ...);
    /// unset, [`units::DEFAULT_LOG_LINKS`], `off` none.
    pub log_links: Vec<units::LogLinkTemplate>,
    /// How long `serve` drains after SIGTERM / Ctrl-C before it exits anyway
    /// (`FLYTE_SLURM_SHUTDOWN_GRACE`): in-flight calls finish, new CreateTasks are refused.
    pub shutdown_grace: Duration,
    /// True when no slurmrestd is configured at all: `serve` starts the embedded stand-in.
    pub embedded: bool,
    /// `clustered-task` (`FLYTE_SLURM_CLUSTERED_*`, [`clustered`]).
    pub clustered: clustered::ClusteredSite,
    /// Where claims live and whom they name (`FLYTE_SLURM_CLAIMS`, ..., [`claims`]).
    pub claims: claims::ClaimSettings,
    /// Interruptible tasks (`FLYTE_SLURM_INTERRUPTIBLE_*`, [`interruptible`]).
    pub interruptible: interruptible::InterruptibleSite,
    /// TLS on the gRPC port: the certificate chain and key files (`tls_cert_file` /
    /// `tls_key_file`, `FLYTE_SLURM_TLS_CERT_FILE` / `FLYTE_SLURM_TLS_KEY_FILE`), re-read when
    /// they change. `None`: plaintext (inside a cluster network, behind the ingress policy).
    pub server_tls: Option<ServerTlsFiles>,
    /// What restricts who can reach the gRPC port, as the deployment declares it
    /// (`FLYTE_SLURM_INGRESS_POLICY`, e.g. the chart's NetworkPolicy): the connector cannot see a
    /// network policy, yet identity rules are only sound behind one, so it is told, logs it at
    /// start, and `check` reports a ✗ for identity rules on an open port without it.
    pub ingress_policy: Option<String>,
    /// `FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS`: serve identity rules on a port with no ingress
    /// restriction declared, which `serve` otherwise refuses (`protections.rs`). Environment
    /// only: a deployment's own decision, not a clusters file's.
    pub anyone_may_run_as_rule_users: bool,
}

/// The files of the gRPC port's certificate (PEM): the chain, leaf first, and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES` as read.
#[derive(Debug, Clone, PartialEq)]
pub enum UploadLimit {
    Bytes(u64),
    Unlimited,
    /// The value did not parse; tasks that upload through the connector fail with this message.
    Malformed(String),
}

pub const DEFAULT_CLUSTER_NAME: &str = "default";
/// A dropped SYN is sent again after 1 s, so a connect that takes longer than a few seconds
/// will not come: slurmrestd, or the path to it, is down.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// slurmrestd answers reads in well under a second unless slurmctld is overloaded or throttling.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(8);
// The one source of each default: the tracker, the staging ceiling and the CLI read these, and
// docs/configuration.md quotes them (checked by `docs_quote_the_defaults`).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_TERMINAL_TTL: Duration = Duration::from_secs(3600);
/// How long a finished task's accounting is awaited from slurmdbd before it is reported
/// without it (`FLYTE_SLURM_ACCOUNTING_WAIT`): slurmdbd has the record within a tick, so this
/// only bounds an outage of slurmdbd.
pub const DEFAULT_ACCOUNTING_WAIT: Duration = Duration::from_secs(60);
/// Requeues after infrastructure failures a task's job gets by default.
pub const DEFAULT_REQUEUE_BUDGET: u32 = 3;
/// `FLYTE_SLURM_SUBMIT_WAIT`.
pub const DEFAULT_SUBMIT_WAIT: Duration = Duration::from_secs(5);
/// The longest `FLYTE_SLURM_SUBMIT_WAIT`: CreateTask must answer within the backend's 10 s.
pub const MAX_SUBMIT_WAIT: Duration = Duration::from_secs(9);
/// Coalescing (`FLYTE_SLURM_COALESCE_WINDOW`): CreateTasks of one shape that arrive within a
/// window become one job array. Decided per cluster, once, with its slurm.conf
/// (`service::Coalescing::decide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Coalesce {
    /// `off`: every task is a job of its own.
    Off,
    /// The default (`auto`): on, with [`DEFAULT_COALESCE_WINDOW`], on each cluster whose
    /// slurm.conf shows slurmdbd keeping job comments (read through slurmrestd's `GET conf`,
    /// v0.0.45+: what finds an element by its key once it left slurmctld); off elsewhere.
    #[default]
    Auto,
    /// A duration: on with this window on every cluster with accounting; the operator vouches
    /// that slurmdbd keeps job comments where slurmrestd cannot show it.
    Window(Duration),
}

/// The window of [`Coalesce::Auto`]: a `flyte.map`'s CreateTasks arrive within milliseconds
/// of each other, and a batch goes out once none joined it for a tenth of the window
/// (BENCHMARKS.md, "Fan-out as job arrays").
pub const DEFAULT_COALESCE_WINDOW: Duration = Duration::from_millis(100);
/// The longest coalescing window: a CreateTask waits for its batch's window before its submit
/// begins, and must still answer well inside the backend's 10 s.
pub const MAX_COALESCE_WINDOW: Duration = Duration::from_secs(2);
/// `FLYTE_SLURM_SUBMITS_IN_FLIGHT`.
pub const DEFAULT_SUBMITS_IN_FLIGHT: usize = 8;
/// `FLYTE_SLURM_CHECK_EVERY`: a second. While a map streams in, its held arrays share about one
/// `jobs/state` a second instead of one each (BENCHMARKS.md, "Checks that take turns"); a lone
/// submit waits for nothing.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(1);
/// The longest `FLYTE_SLURM_CHECK_EVERY`: a held job waits that long for its release at worst.
pub const MAX_CHECK_EVERY: Duration = Duration::from_secs(5);
/// Lifetime of a minted token; it is renewed at 80% of it.
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(1800);
pub const DEFAULT_UPLOAD_MAX_BYTES: u64 = 100_000_000;
/// How long a finished job's files stay (`FLYTE_SLURM_JOB_FILES_RETENTION`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// The drain deadline after SIGTERM: twice Flyte's per-RPC deadline (10 s, so no CreateTask the
/// backend still waits for is cut), and with the chart's 10 s margin it is Kubernetes' default
/// terminationGracePeriodSeconds (30 s), so the kubelet's SIGKILL never lands mid-drain.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Slurm's usual SlurmUser.
pub const DEFAULT_SLURM_DAEMON_USER: &str = "slurm";

/// The name of the per-task slurmrestd token in `CreateTaskRequest.connection.secrets`.
pub const TASK_TOKEN_SECRET: &str = "slurm_jwt";

impl DeploymentConfig {
    /// Reads the process environment and, when given (or named by `FLYTE_SLURM_CONFIG`), the file.
    pub fn load(file: Option<&Path>) -> Result<DeploymentConfig, ConfigError> {
        Self::load_with(&|k| std::env::var(k).ok(), file)
    }

    /// As [`load`](Self::load), with the environment given as a lookup (tests).
    pub fn load_with(
        get: &dyn Fn(&str) -> Option<String>,
        file: Option<&Path>,
    ) -> Result<DeploymentConfig, ConfigError> {
        let file_path = match file {
            Some(p) => Some(p.to_path_buf()),
            None => get("FLYTE_SLURM_CONFIG")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        };
        let mut cfg = match &file_path {
            Some(p) => file::load(p)?,
            None => DeploymentConfig::empty(),
        };
        env::apply(&mut cfg, get)?;
        clustered::apply(&mut cfg.clustered, get)?;
        interruptible::apply(&mut cfg.interruptible, get)?;
        claims::apply(&mut cfg.claims, get)?;
        if cfg.clusters.is_empty() {
            cfg.embedded = true;
        } else if !cfg.clusters.contains_key(&cfg.default_cluster) {
            // One cluster: it is the default whatever it is called. Several: the operator must say.
            if cfg.clusters.len() == 1 {
                cfg.default_cluster = cfg.clusters.keys().next().cloned().unwrap_or_default();
            } else {
                return Err(ConfigError::Missing {
                    var: "default_cluster".into(),
                    problem: format!(
                        "no cluster named `{}`; set `default_cluster` in the config file to one of: {}",
                        cfg.default_cluster,
                        cfg.cluster_names()
                    ),
                });
            }
        }
        Ok(cfg)
    }

    /// Defaults, no cluster.
    pub fn empty() -> DeploymentConfig {
        DeploymentConfig {
            clusters: BTreeMap::new(),
            default_cluster: DEFAULT_CLUSTER_NAME.to_string(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            terminal_ttl: DEFAULT_TERMINAL_TTL,
            accounting_wait: DEFAULT_ACCOUNTING_WAIT,
            requeue_budget: DEFAULT_REQUEUE_BUDGET,
            submit_wait: DEFAULT_SUBMIT_WAIT,
            coalesce: Coalesce::Auto,
            submits_in_flight: DEFAULT_SUBMITS_IN_FLIGHT,
            check_every: DEFAULT_CHECK_EVERY,
            allow_task_credentials: false,
            upload_max_bytes: UploadLimit::Bytes(DEFAULT_UPLOAD_MAX_BYTES),
            job_files_retention: Some(DEFAULT_RETENTION),
            log_links: units::default_log_links(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            embedded: false,
            clustered: Default::default(),
            interruptible: Default::default(),
            claims: Default::default(),
            server_tls: None,
            ingress_policy: None,
            anyone_may_run_as_rule_users: false,
        }
    }

    pub fn cluster_names(&self) -> String {
        self.clusters
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The cluster a task runs on, decided from what its config says and nothing else:
    /// `connection.cluster` names a configured cluster; else `connection.host` (the SSH plugin's
    /// login host, which the published plugin writes and stock tasks cannot swap for a cluster
    /// name) selects the cluster whose `ssh_hosts` lists it, or that is named like it; else the
    /// default cluster. Only configured clusters and listed hosts are accepted: this is the
    /// whole of what a task may say about where it runs. A host that maps to no cluster goes to
    /// the only cluster when there is one (every SSH-era task names some login host), and is
    /// refused when there are several: running it on the default cluster could be the wrong
    /// machine, accounts and partitions.
    pub fn select_cluster(
        &self,
        cluster: Option<&str>,
        host: Option<&str>,
    ) -> Result<&ClusterConfig, String> {
        if let Some(name) = cluster {
            return self.clusters.get(name).ok_or_else(|| {
                format!(
                    "Slurm config `connection.cluster`: `{name}` is not a cluster of this \
                     connector; configured clusters: {}",
                    self.cluster_names()
                )
            });
        }
        let host = host.map(str::trim).filter(|h| !h.is_empty());
        if let Some(host) = host {
            if let Some(c) = self.cluster_listing_host(host) {
                return Ok(c);
            }
            if self.clusters.len() > 1 {
                return Err(format!(
                    "Slurm config `connection.host`: `{host}` maps to no cluster of this \
                     connector, which has several ({}); list the host in the `ssh_hosts` of \
                     the cluster it means (FLYTE_SLURM_SSH_HOSTS, or `ssh_hosts` in the \
                     clusters file), or name the cluster in `connection.cluster`",
                    self.cluster_names()
                ));
            }
        }
        let name = &self.default_cluster;
        self.clusters.get(name).ok_or_else(|| {
            format!(
                "no cluster `{name}` (the default cluster) in this connector; configured \
                 clusters: {}",
                self.cluster_names()
            )
        })
    }

    /// A cluster listing `host` in `ssh_hosts` (case-insensitively, as host names are), else a
    /// cluster named like the host.
    fn cluster_listing_host(&self, host: &str) -> Option<&ClusterConfig> {
        self.clusters
            .values()
            .find(|c| c.ssh_hosts.iter().any(|h| h.eq_ignore_ascii_case(host)))
            .or_else(|| self.clusters.get(host))
    }

    /// The cluster the Python SSH connector meant by `host` (its `resource_meta`): a cluster
    /// listing it in `ssh_hosts`, else a cluster named like the host, else the only cluster.
    pub fn cluster_for_ssh_host(&self, host: &str) -> Option<&ClusterConfig> {
        self.cluster_listing_host(host).or_else(|| {
            (self.clusters.len() == 1)
                .then(|| self.clusters.values().next())
                .flatten()
        })
    }

    /// Decides which slurmrestd token a task's request carries, if any, under the deployment's
    /// policy. `Ok(None)`: use the deployment's own credentials.
    pub fn task_credential(
        &self,
        secrets: &std::collections::HashMap<String, String>,
    ) -> Result<Option<Secret>, String> {
        let Some(token) = secrets.get(TASK_TOKEN_SECRET) else {
            return Ok(None);
        };
        if !self.allow_task_credentials {
            return Err(format!(
                "connection secret `{TASK_TOKEN_SECRET}`: this connector does not accept per-task \
                 slurmrestd tokens; remove the secret from the task, or have the operator set \
                 FLYTE_SLURM_ALLOW_TASK_CREDENTIALS=true"
            ));
        }
        let token = token.trim();
        let token = token.strip_prefix("SLURM_JWT=").unwrap_or(token);
        if token.is_empty() {
            return Err(format!("connection secret `{TASK_TOKEN_SECRET}` is empty"));
        }
        Ok(Some(Secret::new(token)))
    }
}

/// How the site settings' modules read the environment into their settings: `apply(settings, get)`.
#[cfg(test)]
type Apply<T> = fn(&mut T, &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError>;

/// One of the site settings' `apply` run on their defaults with the environment `vars` (tests).
#[cfg(test)]
pub(crate) fn applied<T: Default>(
    apply: Apply<T>,
    vars: &[(&str, &str)],
) -> Result<T, ConfigError> {
    let mut s = T::default();
    apply(&mut s, &|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })?;
    Ok(s)
}

#[cfg(test)]
mod tests;
