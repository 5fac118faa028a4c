//! One configured cluster at run time: its slurmrestd client, state tracker, staging backend,
//! and the idempotency index that makes CreateTask submit each execution at most once.


pub(crate) mod jobfiles;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{AuthConfig, ClusterConfig, Secret};
use crate::render::RenderConfig;
use crate::slurmrestd::{Auth, Client, ClientConfig, ClientError, JobDescription, JobId};
use crate::staging::{OutputBlob, Staging, Transfer};
use crate::tracker::{SlurmApi, Tracker, TrackerConfig};

use crate::service::background::Background;
use crate::service::submit::idempotency::{Index, Winner, awaiting_comment};
use crate::service::wire::meta::ResourceMeta;
use crate::service::submit::pacing::Pacer;

/// How CreateTask's submit came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// This call submitted the execution's job.
    Fresh(JobId),
    /// The cluster already had it (a retried CreateTask, a restart, another replica).
    Adopted(JobId),
    /// Another replica submitted the same execution at the same time and its job is older:
    /// ours was cancelled before it ran.
    LostRace { winner: JobId, cancelled: JobId },
}

impl Submitted {
    /// The execution's one job.
    pub fn job_id(self) -> JobId {
        match self {
            Submitted::Fresh(id) | Submitted::Adopted(id) => id,
            Submitted::LostRace { winner, .. } => winner,
        }
    }
}

/// Where one execution's submit is.
#[derive(Debug, Clone)]
pub enum Progress {
    /// Waiting for a slot behind other submits, or retrying after `last_error`.
    Waiting {
        tries: u32,
        last_error: Option<String>,
        /// The last try met an outage (slurmctld or slurmrestd unreachable), not a refusal.
        outage: bool,
    },
    /// The job the execution has (the meta with its id is remembered on the runtime).
    Done(Submitted),
    /// Failed for good; what CreateTask or GetTask report.
    Failed { message: String, transient: bool },
    /// A DeleteTask came first: nothing was (or stays) submitted.
    Withdrawn,
}

/// A step of [`ClusterRuntime::submit_once`] that failed.
#[derive(Debug)]
pub struct SubmitFailure {
    /// What was being done, and what state it leaves.
    pub what: String,
    pub error: SubmitError,
}

/// Why a step of a submit failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Slurm(#[from] ClientError),
    /// On a cluster without accounting, the exit-status marker that may name the execution's
    /// finished job could not be read: whether it already ran is unknown, so nothing is
    /// submitted until it can be read (retried like a hiccup of slurmrestd).
    #[error("cannot read the exit-status marker {path}: {source}")]
    Marker {
        path: String,
        #[source]
        source: crate::staging::StagingError,
    },
}

impl SubmitError {
    /// Worth trying again: slurmrestd's hiccups, and any marker read (a stager or shared
    /// filesystem that is back decides it).
    pub fn is_transient(&self) -> bool {
        match self {
            SubmitError::Slurm(e) => e.is_transient(),
            SubmitError::Marker { .. } => true,
        }
    }
}

/// Connector-side output uploads by job, running or settled. Bounded: a settled one is dropped
/// once no GetTask has read it for the deployment's `terminal_ttl` (the tracker forgets the
/// finished job after as long); a GetTask after that starts a new transfer of the same files:
/// idempotent, only slower.
pub type Transfers = Background<JobId, Arc<Transfer<Vec<OutputBlob>>>>;

/// How long a submission is remembered in memory (a backend retries CreateTask within minutes).
const REMEMBER_SUBMISSIONS: Duration = Duration::from_secs(24 * 3600);
/// The request timeout of submits (and their check and release): they run in their own task,
/// bound by no RPC deadline, so they wait out slurmrestd's BACKOFF retries under slurmctld's
/// rate limiting rather than give up on a job slurmrestd then creates anyway.
pub const SUBMIT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

pub struct ClusterRuntime {
    pub cfg: ClusterConfig,
    pub client: Client,
    pub tracker: Arc<Tracker>,
    pub staging: Option<Arc<dyn Staging>>,
    pub render: RenderConfig,
    /// key → the job this process submitted (or found) for it.
    submitted: Mutex<HashMap<String, (ResourceMeta, Instant)>>,
    /// The cluster's jobs by execution key: who already has a job, who won a race.
    pub(crate) index: Index,
    /// How many submits run at once (`pacing.rs`).
    pub pacer: Arc<Pacer>,
    /// This process's submits by key, running or settled (`deferred.rs`).
    #[allow(clippy::type_complexity)]
    pub(crate) paced: Mutex<HashMap<String, (tokio::sync::watch::Receiver<Progress>, Instant)>>,
    /// Keys DeleteTask withdrew before their job existed, and when.
    pub(crate) withdrawn: Mutex<HashMap<String, Instant>>,
    /// The deployment's client with [`SUBMIT_REQUEST_TIMEOUT`].
    pub(crate) submit_client: Client,
    /// Keys whose submit may or may not have created a job (timeout after sending): the next
    /// CreateTask must look at the cluster again before submitting.
    uncertain: Mutex<HashSet<String>>,
    key_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Connector-side output uploads in flight or done, by job ([`Transfers`]).
    pub transfers: Transfers,
    /// Jobs' files (exit-status markers, retention); present when staging is configured.
    pub job_files: Option<Arc<jobfiles::Registry>>,
    /// Submits between their held submit and their release; closed at shutdown (`shutdown.rs`).
    pub submits: crate::service::submit::gate::Gate,
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

impl ClusterRuntime {
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
        let render = render_config(&cfg);
        let transfer_keep = tracker.terminal_ttl();
        // Fails only where a client could not be built at all, which `client` was.
        let submit_client = client
            .with_request_timeout(SUBMIT_REQUEST_TIMEOUT)
            .unwrap_or_else(|_| client.clone());
        ClusterRuntime {
            cfg,
            submit_client,
            pacer: Pacer::new(crate::config::DEFAULT_SUBMITS_IN_FLIGHT),
            paced: Mutex::new(HashMap::new()),
            withdrawn: Mutex::new(HashMap::new()),
            client,
            tracker,
            staging,
            render,
            submitted: Mutex::new(HashMap::new()),
            index: Index::default(),
            uncertain: Mutex::new(HashSet::new()),
            key_locks: Mutex::new(HashMap::new()),
            transfers: Background::new(transfer_keep),
            job_files: None,
            submits: crate::service::submit::gate::Gate::default(),
            users: Mutex::new(HashMap::new()),
        }
    }

    /// Serializes CreateTasks of one execution (a backend retry can overlap the first call).
    pub fn key_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.key_locks
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default()
            .clone()
    }

    pub fn release_key_lock(&self, key: &str) {
        let mut locks = self.key_locks.lock().unwrap();
        if locks.get(key).is_some_and(|l| Arc::strong_count(l) == 1) {
            locks.remove(key);
        }
    }

    pub fn remembered(&self, key: &str) -> Option<ResourceMeta> {
        self.submitted
            .lock()
            .unwrap()
            .get(key)
            .map(|(m, _)| m.clone())
    }

    pub fn remember(&self, key: &str, meta: ResourceMeta) {
        let mut s = self.submitted.lock().unwrap();
        s.retain(|_, (_, at)| at.elapsed() < REMEMBER_SUBMISSIONS);
        s.insert(key.to_string(), (meta, Instant::now()));
        self.uncertain.lock().unwrap().remove(key);
    }

    pub fn mark_uncertain(&self, key: &str) {
        self.uncertain.lock().unwrap().insert(key.to_string());
    }

    /// Submits `job` for `key` unless the cluster already has a job for it, so that each key has
    /// exactly one job across retries, restarts and replicas (the protocol is in
    /// `idempotency/`). `client` submits (the deployment's, or the task's own credentials).
    /// An error says which step failed; after a failed check or release the job is held, and a
    /// retried CreateTask finds and releases it.
    pub async fn submit_once(
        &self,
        key: &str,
        job: &JobDescription,
        client: &Client,
    ) -> Result<Submitted, SubmitFailure> {
        let user = self.index_user();
        let cluster = self.cfg.name.as_str();
        // The task's own `--hold` stays: the connector removes only its mark.
        let keep_held = job.hold == Some(true);
        let retake = self.uncertain.lock().unwrap().contains(key);
        // The check through the submit's client (its long timeout): it runs in the submit's own
        // task, and its first listing reads a week of Flyte jobs from slurmdbd, which at a busy
        // site (or on a loaded machine: 6034 jobs, seen in a CI dry run) outlasts the 8 s of
        // RPC-bound calls. With the short timeout it failed every try, and nothing was submitted.
        let existing = self
            .index
            .lookup(&self.submit_client, cluster, user, key, retake)
            .await
            .map_err(|error| SubmitFailure {
                what: "cannot check whether this execution already has a job on the cluster, so \
                       nothing was submitted (a second job must never run)"
                    .into(),
                error: error.into(),
            })?;
        if let Some(w) = existing {
            self.finish_check(key, w, job, client, keep_held).await?;
            return Ok(Submitted::Adopted(w.job_id));
        }
        // Without accounting, a job that ran and left slurmctld is in no listing: its marker
        // names it (a CreateTask retried after its job ended, a deferred submit taken over).
        let ran = self
            .job_by_marker(job)
            .await
            .map_err(|error| SubmitFailure {
                what: "cannot check whether this execution's job already ran, so nothing was \
                   submitted (a second job must never run)"
                    .into(),
                error,
            })?;
        if let Some(id) = ran {
            tracing::info!(cluster, key, job_id = %id, "this execution's job already ran and left slurmctld (its exit-status marker names it): answering with it");
            self.index.note(key, id, false).await;
            return Ok(Submitted::Adopted(id));
        }

        let mut held = job.clone();
        held.hold = Some(true);
        held.comment = Some(awaiting_comment(job.comment.as_deref()));
        let mine = match client.submit(&held).await {
            Ok(id) => id,
            Err(error) => {
                if !error.never_sent() {
                    // It may have been created: look again before any new submit.
                    self.mark_uncertain(key);
                }
                return Err(SubmitFailure {
                    what: "submitting the job".into(),
                    error: error.into(),
                });
            }
        };
        let after = Instant::now();
        self.index.note(key, mine, true).await;
        let winner = self
            .index
            .refresh_after(&self.submit_client, cluster, user, key, after, mine)
            .await
            .map_err(|error| {
                self.mark_uncertain(key);
                SubmitFailure {
                    what: format!(
                        "job {mine} was submitted held, but the check that no other replica \
                         submitted this execution failed; it stays held until a retried \
                         CreateTask checks again"
                    ),
                    error: error.into(),
                }
            })?
            .expect("noted above");
        if winner.job_id == mine {
            // Ours, and held by us whatever the listing showed of it.
            let ours = Winner {
                job_id: mine,
                awaiting_release: true,
            };
            self.finish_check(key, ours, job, client, keep_held).await?;
            return Ok(Submitted::Fresh(mine));
        }
        // Another replica's job for this execution is older: ours steps back before it ran.
        tracing::info!(cluster, key, job_id = %mine, winner = %winner.job_id, "another replica submitted this execution first; cancelling our held duplicate");
        if let Err(e) = client.cancel(mine, None).await {
            // Held, so it never starts; it only lingers in the queue.
            tracing::error!(cluster, key, job_id = %mine, error = %e, "cannot cancel our held duplicate job; it never starts (held) but stays queued: `scancel {mine}`");
        }
        self.finish_check(key, winner, job, client, keep_held)
            .await?;
        Ok(Submitted::LostRace {
            winner: winner.job_id,
            cancelled: mine,
        })
    }

    /// Releases the winner if it still waits for its check (its replica may have died between
    /// its submit and its release), restoring the task's comment.
    async fn finish_check(
        &self,
        key: &str,
        w: Winner,
        job: &JobDescription,
        client: &Client,
        keep_held: bool,
    ) -> Result<(), SubmitFailure> {
        if !w.awaiting_release {
            return Ok(());
        }
        match client
            .release(w.job_id, job.comment.as_deref(), keep_held)
            .await
        {
            Ok(_) => {
                self.index.note(key, w.job_id, false).await;
                Ok(())
            }
            Err(error) => {
                self.mark_uncertain(key);
                Err(SubmitFailure {
                    what: format!(
                        "job {} is on the cluster, held for the duplicate check, and releasing it \
                         failed; a retried CreateTask releases it",
                        w.job_id
                    ),
                    error: error.into(),
                })
            }
        }
    }

    /// On a cluster without accounting, the job of `job` (by its name) that already ran and
    /// left slurmctld, as the exit-status marker its script left names it: without slurmdbd
    /// nothing else remembers such a job, and a retried CreateTask or a deferred submit taken
    /// over would run the execution a second time. `None` with accounting (the index lists
    /// slurmdbd's records then), for a job array (one marker per element), without staging,
    /// and when there is no marker or one of an older connector (without the job's id).
    pub(crate) async fn job_by_marker(
        &self,
        job: &JobDescription,
    ) -> Result<Option<JobId>, SubmitError> {
        if job.array.is_some() || !self.index.without_accounting().await {
            return Ok(None);
        }
        let Some(staging) = &self.staging else {
            return Ok(None);
        };
        let files = crate::staging::JobFiles::new(&job.current_working_directory, &job.name);
        match crate::staging::exit_marker::read_exit_marker_at(staging.as_ref(), &files.marker())
            .await
        {
            Ok(m) => Ok(m.and_then(|m| m.job_id).map(JobId)),
            Err(source) => Err(SubmitError::Marker {
                path: files.marker(),
                source,
            }),
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
    #[allow(clippy::result_large_err)]
    pub fn client_for(&self, task_token: Option<&Secret>) -> Result<Client, ClientError> {
        match task_token {
            None => Ok(self.client.clone()),
            // Shares the cluster client's negotiated API version and connection pool.
            Some(t) => Ok(self.client.with_auth(Auth::Task { token: t.clone() })),
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
