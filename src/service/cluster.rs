//! One configured cluster at run time: its slurmrestd client, state tracker, staging backend,
//! and the idempotency index that makes CreateTask submit each execution at most once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{AuthConfig, ClusterConfig, Secret};
use crate::render::{RenderConfig, key_from_comment, key_from_job_name};
use crate::slurmrestd::{Auth, Client, ClientConfig, ClientError, JobId};
use crate::staging::{OutputBlob, Staging, Transfer};
use crate::tracker::{SlurmApi, Tracker, TrackerConfig};

use super::jobfiles;
use super::meta::ResourceMeta;

/// How long a submission is remembered in memory (a backend retries CreateTask within minutes).
const REMEMBER_SUBMISSIONS: Duration = Duration::from_secs(24 * 3600);

pub struct ClusterRuntime {
    pub cfg: ClusterConfig,
    pub client: Client,
    pub tracker: Arc<Tracker>,
    pub staging: Option<Arc<dyn Staging>>,
    pub render: RenderConfig,
    /// key → the job this process submitted (or found) for it.
    submitted: Mutex<HashMap<String, (ResourceMeta, Instant)>>,
    /// key → job id of jobs that were on the cluster when first asked (restart adoption).
    on_cluster: tokio::sync::Mutex<Option<HashMap<String, JobId>>>,
    /// Keys whose submit may or may not have created a job (timeout after sending): the next
    /// CreateTask must look at the cluster again before submitting.
    uncertain: Mutex<HashSet<String>>,
    key_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Connector-side output uploads in flight or done, by job.
    pub transfers: Mutex<HashMap<JobId, Transfer<Vec<OutputBlob>>>>,
    /// Jobs' files (exit-status markers, retention); present when staging is configured.
    pub job_files: Option<Arc<jobfiles::Registry>>,
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
/// How far back slurmdbd is searched for an execution's job when the connector (re)starts.
pub const ACCOUNTING_LOOKBACK_SECS: i64 = 7 * 24 * 3600;

pub fn render_config(cfg: &ClusterConfig) -> RenderConfig {
    RenderConfig {
        working_dir: cfg.working_dir.clone(),
        default_partition: cfg.default_partition.clone(),
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
        ClusterRuntime {
            cfg,
            client,
            tracker,
            staging,
            render,
            submitted: Mutex::new(HashMap::new()),
            on_cluster: tokio::sync::Mutex::new(None),
            uncertain: Mutex::new(HashSet::new()),
            key_locks: Mutex::new(HashMap::new()),
            transfers: Mutex::new(HashMap::new()),
            job_files: None,
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

    /// The job already on the cluster for this key, if any: from the index of the cluster's jobs
    /// taken on the first CreateTask after start (re-taken when a submit's outcome is uncertain).
    /// An error means the cluster cannot be asked — then nothing must be submitted.
    // ClientError is the client's own (large) error; boxing it here would only move the cost.
    #[allow(clippy::result_large_err)]
    pub async fn find_on_cluster(&self, key: &str) -> Result<Option<JobId>, ClientError> {
        let mut index = self.on_cluster.lock().await;
        let stale = self.uncertain.lock().unwrap().contains(key);
        if index.is_none() || stale {
            let mut jobs = self.client.jobs().await?;
            // Jobs that already left slurmctld (past MinJobAge) are only in slurmdbd: a backend
            // retrying a CreateTask long after its job ended must not get a second job.
            let since = chrono::Utc::now().timestamp() - ACCOUNTING_LOOKBACK_SECS;
            match self
                .client
                .accounting_jobs_since(since, self.cfg.username.as_deref())
                .await
            {
                Ok(acct) => jobs.extend(acct),
                // slurmdbd down or slow: we cannot know, so nothing is submitted now.
                Err(e) if e.is_transient() => return Err(e),
                // No accounting on this cluster (no /slurmdb paths): slurmctld is all there is.
                Err(e) => tracing::warn!(
                    cluster = %self.cfg.name, error = %e,
                    "cannot list slurmdbd's recent jobs; a CreateTask retried after its job left \
                     slurmctld cannot be recognised on this cluster"
                ),
            }
            let mut m = HashMap::new();
            for j in jobs {
                // The comment carries the key; slurmdbd keeps comments only with
                // AccountingStoreFlags=job_comment, so the name (which ends with it) also counts.
                let key = j
                    .comment
                    .as_deref()
                    .and_then(key_from_comment)
                    .or_else(|| key_from_job_name(&j.name));
                if let Some(k) = key {
                    // Newest wins if a key somehow appears twice (ids grow).
                    let e = m.entry(k.to_string()).or_insert(j.job_id);
                    if j.job_id > *e {
                        *e = j.job_id;
                    }
                }
            }
            tracing::info!(cluster = %self.cfg.name, jobs = m.len(), "indexed the cluster's Flyte jobs for idempotent CreateTask");
            *index = Some(m);
        }
        Ok(index.as_ref().and_then(|m| m.get(key).copied()))
    }

    /// The client for a request: the deployment's, or one with the task's own token.
    #[allow(clippy::result_large_err)]
    pub fn client_for(&self, task_token: Option<&Secret>) -> Result<Client, ClientError> {
        match task_token {
            None => Ok(self.client.clone()),
            // Shares the cluster client's negotiated API version and connection pool.
            Some(t) => Ok(self.client.with_auth(Auth::Static { token: t.clone() })),
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
