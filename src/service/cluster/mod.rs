//! One configured cluster at run time ([`ClusterRuntime`]): its config, slurmrestd clients
//! (the deployment's, and one per Slurm user of the identity rules), state tracker, staging
//! backend and job files, and the write path's state (`submitter`, `submit/submitter.rs`). What
//! bounds each map:
//! - the submitter's `executions` (`submit/execution.rs`): `terminal_ttl` after an execution's last change (a
//!   day when its submit may have made an unseen job), never while its submit runs;
//! - its `index` (`submit/idempotency/`): a week after a job left slurmctld (what a new replica
//!   reads from slurmdbd);
//! - `transfers` ([`Transfers`]) and the tracker's jobs: `terminal_ttl` after the job ended and
//!   was last read;
//! - its `batches` (`submit/batches.rs`): CreateTasks for at most the coalescing window (2 s);
//! - `clients` (`cluster/clients.rs`): one client per Slurm user a task ran as (the users the identity rules name);
//! - `job_files` (`cluster/jobfiles.rs`): until its files are removed (retention), or, without
//!   retention, the job's end;
//! - `tallies` (`cluster/tallies.rs`): the keys of the last 50 000 executions whose outcome was
//!   counted.
//!
//! Imports `wire`, `background` and the state types of `submit/`; see `service/mod.rs`.

mod clients;
pub(crate) mod jobfiles;
pub(crate) mod tallies;

use std::sync::Arc;
use std::time::Duration;

use crate::config::{AuthConfig, ClusterConfig, Coalesce, Secret};
use crate::render::RenderConfig;
use crate::slurmrestd::{Auth, Client, ClientConfig, ClientError, JobRef};

use crate::staging::{OutputBlob, Staging, Transfer};
use crate::tracker::{SlurmApi, Tracker, TrackerConfig};
use clients::Clients;

use crate::service::background::Background;
use crate::service::submit::coalesce_settings::Coalescing;
use crate::service::submit::protocol;
use crate::service::submit::submitter::{SubmitGauges, Submitter};
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
    /// The deployment's clients, a task's own token's, and each Slurm user's (`clients.rs`).
    clients: Clients,
    pub tracker: Arc<Tracker>,
    pub staging: Option<Arc<dyn Staging>>,
    /// The write path's state: executions, the key index, batches, pacer, gate
    /// (`submit/submitter.rs`).
    pub submitter: Submitter,
    /// Connector-side output uploads in flight or done, by job ([`Transfers`]).
    transfers: Transfers,
    /// Jobs' files (exit-status markers, retention); present when staging is configured.
    pub job_files: Option<Arc<jobfiles::Registry>>,
    /// Outcomes and output uploads counted since start, for the metrics (`tallies.rs`).
    pub tallies: Arc<tallies::Tallies>,
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
    /// Since start (a counter's total).
    pub token_refreshes: u64,
    pub submit: SubmitGauges,
}

impl ClusterRuntime {
    /// The gauges' values now ([`Gauges`]).
    pub fn gauges(&self) -> Gauges {
        Gauges {
            tracked_jobs: self.tracker.len(),
            output_transfers: self.transfers.len(),
            token_refreshes: self.clients.calls().token_refreshes(),
            submit: self.submitter.gauges(),
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
        cc.connect_timeout = cfg.connect_timeout;
        cc.request_timeout = cfg.request_timeout;
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
        ClusterRuntime {
            cfg,
            clients: Clients::new(client),
            tracker,
            staging,
            submitter: Submitter::new(terminal_ttl),
            transfers: Background::new(terminal_ttl),
            job_files: None,
            tallies: Arc::default(),
        }
    }

    /// The output upload of `job` (an element's own), joined if one runs or ran, else the one
    /// `start` makes (given the one there, it may decline to start another: `None`).
    pub fn transfer(
        &self,
        job: JobRef,
        start: impl FnOnce(
            Option<&Arc<Transfer<Vec<OutputBlob>>>>,
        ) -> Option<Arc<Transfer<Vec<OutputBlob>>>>,
    ) -> Arc<Transfer<Vec<OutputBlob>>> {
        self.transfers.start_or_join(job, start)
    }

    /// Stops the output upload of `job`, if one runs (DeleteTask).
    pub fn cancel_transfer(&self, job: &JobRef) {
        if let Some(t) = self.transfers.get(job) {
            t.cancel();
        }
    }

    /// The deployment's client.
    pub fn client(&self) -> &Client {
        self.clients.calls()
    }

    /// The deployment's client with the submit's long request timeout.
    pub(crate) fn submit_client(&self) -> &Client {
        self.clients.submits()
    }

    /// What the once-only protocol works on here (its checks with the submit's long timeout:
    /// they run in a submit's own task).
    pub(crate) fn once(&self) -> protocol::Cluster<'_> {
        protocol::Cluster {
            name: &self.cfg.name,
            submitter: &self.submitter,
            checks: self.clients.submits(),
            user: self.index_user(),
            check_by: None,
            permit: None,
            arrived: None,
        }
    }

    /// Whether this cluster coalesces ([`Submitter::coalescing`]).
    pub async fn coalescing(&self, setting: Coalesce) -> Coalescing {
        self.submitter
            .coalescing(&self.cfg, self.clients.calls(), setting)
            .await
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
    /// deployment's client; [`Clients::of_user`]).
    pub fn client_as(&self, user: Option<&str>) -> Client {
        self.clients.of_user(&self.cfg, user).0
    }

    /// As [`client_as`](Self::client_as), with the submit's long request timeout.
    pub fn submit_client_as(&self, user: Option<&str>) -> Client {
        self.clients.of_user(&self.cfg, user).1
    }

    /// The client a paced submit uses: the deployment's, or the task's own token, with the
    /// submit's long request timeout.
    pub fn submit_client_for(&self, task_token: Option<&Secret>) -> Client {
        self.clients.of_task(task_token).1
    }

    /// The client for a request: the deployment's, or one with the task's own token.
    pub fn client_for(&self, task_token: Option<&Secret>) -> Client {
        self.clients.of_task(task_token).0
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
