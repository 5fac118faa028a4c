//! One configured cluster at run time ([`ClusterRuntime`]): its config, slurmrestd clients
//! (the deployment's, and one per Slurm user of the identity rules), state tracker, staging
//! backend and job files, and the state kept by execution and by job. What bounds each map:
//! - `executions` (`submit/execution.rs`): `terminal_ttl` after an execution's last change (a
//!   day when its submit may have made an unseen job), never while its submit runs;
//! - `index` (`submit/idempotency/`): a week after a job left slurmctld (what a new replica
//!   reads from slurmdbd);
//! - `transfers` ([`Transfers`]) and the tracker's jobs: `terminal_ttl` after the job ended and
//!   was last read;
//! - `batches` (`submit/batches.rs`): CreateTasks for at most the coalescing window (2 s);
//! - `users`: one client per Slurm user a task ran as (the users the identity rules name);
//! - `job_files` (`cluster/jobfiles.rs`): until its files are removed (retention), or, without
//!   retention, the job's end;
//! - `tallies` (`cluster/tallies.rs`): the keys of the last 50 000 executions whose outcome was
//!   counted.
//!
//! Imports `wire`, `background` and the state types of `submit/`; see `service/mod.rs`.

pub(crate) mod jobfiles;
pub(crate) mod tallies;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{AuthConfig, ClusterConfig, Coalesce, Secret};
use crate::render::RenderConfig;
use crate::slurmrestd::{Auth, Client, ClientConfig, ClientError, JobRef};
use crate::staging::{OutputBlob, Staging, Transfer};
use crate::tracker::{SlurmApi, Tracker, TrackerConfig};

use crate::service::background::Background;
use crate::service::submit::coalesce_settings::Coalescing;
use crate::service::submit::execution::Executions;
use crate::service::submit::idempotency::Index;
use crate::service::submit::pacing::Pacer;
use crate::service::wire::meta::ResourceMeta;

/// Connector-side output uploads by job, running or settled. Bounded: a settled one is dropped
/// once no GetTask has read it for the deployment's `terminal_ttl` (the tracker forgets the
/// finished job after as long); a GetTask after that starts a new transfer of the same files:
/// idempotent, only slower.
/// By job, or by element of a coalesced array (each element a task with its own outputs).
pub type Transfers = Background<JobRef, Arc<Transfer<Vec<OutputBlob>>>>;

/// The request timeout of submits (and their check and release): they run in their own task,
/// bound by no RPC deadline, so they wait out slurmrestd's BACKOFF retries under slurmctld's
/// rate limiting rather than give up on a job slurmrestd then creates anyway.
pub const SUBMIT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

pub struct ClusterRuntime {
    pub cfg: ClusterConfig,
    pub client: Client,
    pub tracker: Arc<Tracker>,
    pub staging: Option<Arc<dyn Staging>>,
    /// This process's state of each execution (`submit/execution.rs`: one entry, one expiry).
    pub executions: Executions,
    /// CreateTasks waiting for their coalescing window (`submit/coalesce.rs`).
    pub batches: crate::service::submit::batches::Batches,
    /// Whether this cluster coalesces, decided the first time a CreateTask asks
    /// ([`ClusterRuntime::coalescing`]).
    coalescing: tokio::sync::OnceCell<Coalescing>,
    /// The cluster's jobs by execution key: who already has a job, who won a race.
    pub(crate) index: Index,
    /// How many submits run at once (`pacing.rs`).
    pub pacer: Arc<Pacer>,
    /// The deployment's client with [`SUBMIT_REQUEST_TIMEOUT`].
    pub(crate) submit_client: Client,
    /// Connector-side output uploads in flight or done, by job ([`Transfers`]).
    pub transfers: Transfers,
    /// Jobs' files (exit-status markers, retention); present when staging is configured.
    pub job_files: Option<Arc<jobfiles::Registry>>,
    /// Submits between their held submit and their release; closed at shutdown (`submit/handoff.rs`).
    pub submits: crate::service::submit::gate::Gate,
    /// Outcomes and output uploads counted since start, for the metrics (`tallies.rs`).
    pub tallies: Arc<tallies::Tallies>,
    /// Clients acting as each Slurm user of the identity rules (`client_as`): (calls, submits),
    /// made once so each user's minted token is cached and renewed like the deployment's.
    users: Mutex<HashMap<String, (Client, Client)>>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "cluster `{0}` has no slurmrestd credentials: set FLYTE_SLURM_JWT, FLYTE_SLURM_JWT_FILE or \
         FLYTE_SLURM_JWT_KEY_FILE (or jwt_file / jwt_key_file in the config file)"
    )]
    NoAuth(String),
    #[error("cluster `{cluster}`: {source}")]
    Client {
        cluster: String,
        source: Box<ClientError>,
    },
    #[error("cluster `{cluster}` staging: {source}")]
    Staging {
        cluster: String,
        source: Box<crate::staging::StagingError>,
    },
}

/// What rendering needs of a cluster's deployment settings (also used by `slurm-connector render`).
pub fn render_config(cfg: &ClusterConfig) -> RenderConfig {
    RenderConfig {
        working_dir: cfg.working_dir.clone(),
        default_partition: cfg.default_partition.clone(),
        images: cfg.images.clone(),
        ..RenderConfig::default()
    }
}

pub fn client_auth(cfg: &ClusterConfig) -> Result<Auth, BuildError> {
    Ok(match &cfg.auth {
        Some(AuthConfig::Token(t)) => Auth::Static { token: t.clone() },
        Some(AuthConfig::TokenFile(p)) => Auth::File { path: p.clone() },
        Some(AuthConfig::KeyFile { path, lifetime }) => Auth::Minted {
            key_file: path.clone(),
            token_user: cfg.username.clone().unwrap_or_default(),
            lifetime: *lifetime,
        },
        None => return Err(BuildError::NoAuth(cfg.name.clone())),
    })
}

/// What the per-cluster gauges show (`rpc/serve.rs` refreshes them every tick interval), read
/// here so nothing outside the runtime reaches into its maps for them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    pub tracked_jobs: usize,
    pub output_transfers: usize,
    pub executions: usize,
    /// `None` while the index is busy (not waited for: a gauge can skip a tick).
    pub index_jobs: Option<usize>,
    /// Since start (a counter's total).
    pub token_refreshes: u64,
    /// Since start (counters' totals).
    pub batches: crate::service::submit::batches::Totals,
    pub batches_waiting: usize,
}

impl ClusterRuntime {
    /// The gauges' values now ([`Gauges`]).
    pub fn gauges(&self) -> Gauges {
        Gauges {
            tracked_jobs: self.tracker.len(),
            output_transfers: self.transfers.len(),
            executions: self.executions.len(),
            index_jobs: self.index.size().map(|(jobs, _)| jobs),
            token_refreshes: self.client.token_refreshes(),
            batches: self.batches.totals(),
            batches_waiting: self.batches.waiting(),
        }
    }

    pub fn build(
        cfg: ClusterConfig,
        tracker_cfg: TrackerConfig,
        observer: Option<crate::slurmrestd::RequestObserver>,
        tick_observer: Option<crate::tracker::TickObserver>,
    ) -> Result<ClusterRuntime, BuildError> {
        let mut cc = ClientConfig::new(cfg.name.clone(), cfg.restd_url.clone(), client_auth(&cfg)?);
        cc.user_name = cfg.username.clone();
        cc.api_version = cfg.api_version;
        cc.ca_file = cfg.ca_file.clone();
        cc.observer = observer;
        let client = Client::new(cc).map_err(|source| BuildError::Client {
            cluster: cfg.name.clone(),
            source: Box::new(source),
        })?;
        let mut tracker = Tracker::new(
            cfg.name.clone(),
            Arc::new(client.clone()) as Arc<dyn SlurmApi>,
            tracker_cfg,
        );
        if let Some(o) = tick_observer {
            tracker = tracker.with_observer(o);
        }
        let staging = staging_for(&cfg)?;
        // Jobs that leave slurmctld on a cluster without slurmdbd are resolved from the marker
        // the rendered script leaves; the service knows where each job's marker is.
        let job_files = staging
            .clone()
            .map(|s| Arc::new(jobfiles::Registry::new(s)));
        if let Some(j) = &job_files {
            tracker = tracker.with_exit_markers(j.clone());
        }
        let mut rt = Self::assemble(cfg, client, Arc::new(tracker), staging);
        rt.job_files = job_files;
        Ok(rt)
    }

    /// From parts (tests give a tracker over a fake).
    pub fn assemble(
        cfg: ClusterConfig,
        client: Client,
        tracker: Arc<Tracker>,
        staging: Option<Arc<dyn Staging>>,
    ) -> ClusterRuntime {
        let terminal_ttl = tracker.terminal_ttl();
        // Fails only where a client could not be built at all, which `client` was.
        let submit_client = client
            .with_request_timeout(SUBMIT_REQUEST_TIMEOUT)
            .unwrap_or_else(|_| client.clone());
        ClusterRuntime {
            cfg,
            submit_client,
            pacer: Pacer::new(crate::config::DEFAULT_SUBMITS_IN_FLIGHT),
            client,
            tracker,
            staging,
            executions: Executions::new(terminal_ttl),
            batches: Default::default(),
            coalescing: tokio::sync::OnceCell::new(),
            index: Index::default(),
            transfers: Background::new(terminal_ttl),
            job_files: None,
            submits: crate::service::submit::gate::Gate::default(),
            tallies: Arc::default(),
            users: Mutex::new(HashMap::new()),
        }
    }

    /// Whether this cluster coalesces, and its arrays' limits: decided once from `setting` and
    /// slurm.conf (one `GET conf` where slurmrestd has it), and logged. A transient error is
    /// not kept: this CreateTask goes without slurm.conf, the next one asks again.
    pub async fn coalescing(&self, setting: Coalesce) -> Coalescing {
        if setting == Coalesce::Off {
            return Coalescing::decide(setting, None);
        }
        let read = self
            .coalescing
            .get_or_try_init(|| async {
                let conf = match self.client.conf().await {
                    Ok(conf) => conf,
                    Err(e) if e.is_transient() => return Err(e),
                    Err(e) => {
                        tracing::warn!(cluster = %self.cfg.name, error = %e, "slurm.conf not readable through slurmrestd (GET conf): coalescing decided without it");
                        None
                    }
                };
                let c = Coalescing::decide(setting, conf.as_ref());
                tracing::info!(cluster = %self.cfg.name, coalescing = %c.why, max_elements = c.limits.max_elements, script_bytes = c.limits.script_bytes, "coalescing decided");
                Ok(c)
            })
            .await;
        match read {
            Ok(c) => c.clone(),
            Err(e) => {
                tracing::debug!(cluster = %self.cfg.name, error = %e, "slurm.conf not read now; asked again with the next CreateTask");
                Coalescing::decide(setting, None)
            }
        }
    }

    /// Starts tracking a submitted job: a job array (its meta names the indices) as one.
    pub fn track(&self, m: &ResourceMeta) {
        match m.array_indices() {
            // One array per execution: its id stands for every element.
            Ok(Some(indices)) => {
                let key = crate::render::key_from_job_name(&m.job_name);
                self.tracker.track_array(m.job_id, &indices, key);
                if let (Some(i), Some(k)) = (m.element, key) {
                    self.tracker.element_key(m.job_id, i, k);
                }
            }
            _ => self.tracker.track(m.job_id),
        }
    }

    /// Whose jobs the duplicate check lists: the deployment user's, or, with identity rules,
    /// every user's (the same key never belongs to two users' jobs).
    pub(crate) fn index_user(&self) -> Option<&str> {
        if self.cfg.identities.rules.is_empty() {
            self.cfg.username.as_deref()
        } else {
            None
        }
    }

    /// The client acting as Slurm user `user` (`None`, or the deployment's own user: the
    /// deployment's client). With the key file it mints `user`'s tokens; with `user_jwt_dir` it
    /// reads `<dir>/<user>`; with a token (file) it proxies `user` with `X-SLURM-USER-NAME`,
    /// which needs a SlurmUser or root token.
    pub fn client_as(&self, user: Option<&str>) -> Client {
        self.user_clients(user).0
    }

    /// As [`client_as`](Self::client_as), with the submit's long request timeout.
    pub fn submit_client_as(&self, user: Option<&str>) -> Client {
        self.user_clients(user).1
    }

    fn user_clients(&self, user: Option<&str>) -> (Client, Client) {
        let user = match user {
            Some(u) if Some(u) != self.cfg.username.as_deref() => u,
            _ => return (self.client.clone(), self.submit_client.clone()),
        };
        let mut users = self.users.lock().unwrap();
        users
            .entry(user.to_string())
            .or_insert_with(|| {
                let auth = match (&self.cfg.identities.user_jwt_dir, &self.cfg.auth) {
                    (Some(dir), _) => Some(Auth::File {
                        path: dir.join(user),
                    }),
                    (None, Some(AuthConfig::KeyFile { path, lifetime })) => Some(Auth::Minted {
                        key_file: path.clone(),
                        token_user: user.to_string(),
                        lifetime: *lifetime,
                    }),
                    (None, _) => None,
                };
                let calls = self.client.as_user(user, auth);
                let submits = self.submit_client.with_identity_of(&calls);
                (calls, submits)
            })
            .clone()
    }

    /// The client a paced submit uses: the deployment's, or the task's own token, with the
    /// submit's long request timeout.
    pub fn submit_client_for(&self, task_token: Option<&Secret>) -> Client {
        match task_token {
            None => self.submit_client.clone(),
            Some(t) => self
                .submit_client
                .with_auth(Auth::Task { token: t.clone() }),
        }
    }

    /// The client for a request: the deployment's, or one with the task's own token.
    pub fn client_for(&self, task_token: Option<&Secret>) -> Client {
        match task_token {
            None => self.client.clone(),
            // Shares the cluster client's negotiated API version and connection pool.
            Some(t) => self.client.with_auth(Auth::Task { token: t.clone() }),
        }
    }
}

/// The staging backend of a cluster from its config (mounts or stager), if any.
fn staging_for(cfg: &ClusterConfig) -> Result<Option<Arc<dyn Staging>>, BuildError> {
    use crate::staging::settings::StagingSettings;
    let settings = StagingSettings::from_cluster(cfg).map_err(|source| BuildError::Staging {
        cluster: cfg.name.clone(),
        source: Box::new(source),
    })?;
    settings
        .map(|s| s.build())
        .transpose()
        .map_err(|source| BuildError::Staging {
            cluster: cfg.name.clone(),
            source: Box::new(source),
        })
}
