//! The typed facade over the generated client: what the connector calls.
//!
//! Every call goes through the negotiated version's `Dialect` (`dialect.rs`), chosen once at
//! negotiation, and its request through a `Caller` (`caller.rs`), which attaches credentials,
//! retries what is safe to retry, re-mints a rejected token once, and turns every answer — JSON
//! or `text/plain` — into a domain value or a [`ClientError`] that names the cluster, the
//! operation and the fix.
//!
//! Beside it: `negotiate` (which API version, and when to look again), `derived` (the same
//! cluster with other credentials, user or timeout) and `http` (the HTTP client and TLS CAs).

use std::collections::HashMap;
use std::sync::Arc;

use std::sync::RwLock;
use std::sync::atomic::AtomicBool;

use super::auth::TokenSource;
use super::caller::Caller;
use super::classify;
use super::dialect::{DbJobsFilter, Dialect};
use super::errno;
use super::error::ClientError;
use super::types::{
    CancelOutcome, ClusterConf, Diag, JobId, JobInfo, JobRef, JobState, JobUsage, Partition, Ping,
    States,
};
use super::{ApiVersion, JobDescription};

/// A point in time as slurmdb's `start_time`/`end_time` take it in version `v`. v0.0.40/41's
/// timestamp parser refuses unix seconds in a query (422, error 9202: recorded on 24.11,
/// tests/fixtures/slurmrestd/24.11_v0.0.4{0,1}_slurmdb-jobs-since-unix.json); Slurm's `parse_time`
/// form `now-N` (seconds) is read by every version, relative to slurmdbd's own clock.
fn query_time(v: ApiVersion, unix: i64, now: i64) -> String {
    match v {
        ApiVersion::V0040 | ApiVersion::V0041 => format!("now-{}", (now - unix).max(0)),
        _ => unix.to_string(),
    }
}

/// Every version's dialect, built once, oldest first: choosing another version is a lookup (why a
/// trait: `dialect.rs`).
struct Dialects([Box<dyn Dialect>; ApiVersion::ALL.len()]);

impl Dialects {
    fn get(&self, v: ApiVersion) -> &dyn Dialect {
        let d = self.0.iter().find(|d| d.version() == v);
        d.expect("a dialect for every version").as_ref()
    }

    /// Every dialect, oldest first.
    fn all(&self) -> impl Iterator<Item = &dyn Dialect> {
        self.0.iter().map(|d| d.as_ref())
    }
}

pub(super) mod config;
mod derived;
mod http;
mod negotiate;

pub use config::{ClientConfig, DEFAULT_STATE_CHUNK, RequestObserver};

pub use negotiate::Negotiated;
use negotiate::VersionState;

/// A slurmrestd client for one cluster. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    dialects: Arc<Dialects>,
    cfg: Arc<ClientConfig>,
    tokens: Arc<TokenSource>,
    version: Arc<VersionState>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cfg", &self.cfg)
            .field("version", &self.api_version())
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Result<Client, ClientError> {
        let invalid = |detail: String| ClientError::InvalidRequest {
            cluster: cfg.cluster.clone(),
            operation: "configure",
            detail,
        };
        if !matches!(cfg.base_url.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "FLYTE_SLURM_RESTD_URL must be an http:// or https:// URL, not {}",
                cfg.base_url
            )));
        }
        let (http, dialects) = Self::http(&cfg, cfg.request_timeout).map_err(invalid)?;
        Ok(Client {
            dialects: Arc::new(dialects),
            tokens: Arc::new(TokenSource::new(cfg.auth.clone())),
            version: Arc::new(VersionState {
                chosen: RwLock::new(None),
                served: RwLock::new(Vec::new()),
                stale: AtomicBool::new(false),
                negotiating: tokio::sync::Mutex::new(()),
            }),
            cfg: Arc::new(cfg),
            http,
        })
    }

    pub fn cluster(&self) -> &str {
        &self.cfg.cluster
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// How many tokens were minted or re-read (a metric).
    pub fn token_refreshes(&self) -> u64 {
        self.tokens.refreshes()
    }

    /// Every version of ours the cluster served at the last negotiation, oldest first (empty
    /// before the first).
    pub fn served_versions(&self) -> Vec<ApiVersion> {
        self.version.served.read().expect("version lock").clone()
    }

    /// The version calls use now; `None` before the first negotiation.
    pub fn api_version(&self) -> Option<ApiVersion> {
        *self.version.chosen.read().expect("version lock")
    }

    /// Submit one batch job. A 200 without `job_id` is a failure (slurmrestd's way of saying a
    /// field had the wrong type: no job was created). Never retried once it may have been sent.
    pub async fn submit(&self, job: &JobDescription) -> Result<JobId, ClientError> {
        let d = match job.submit_version {
            // Rendered for another version the cluster serves (the chosen one lacks a field
            // the job needs): that version's dialect, negotiated or not.
            Some(v) if self.api_version() != Some(v) => {
                self.current().await?;
                self.dialects.get(v)
            }
            _ => self.current().await?,
        };
        let (id, warnings) = d.submit(self.caller(), job).await?;
        match id {
            Some(id) => {
                for w in &warnings {
                    if job.hold == Some(true) && w.contains("held state") {
                        // What slurmctld says of every held submit (twice: slurmrestd repeats it
                        // as a non-zero return code): asked for, so not a warning.
                        tracing::debug!(cluster = %self.cfg.cluster, job_id = id, warning = %w, "slurmrestd on a held submit");
                    } else {
                        tracing::warn!(cluster = %self.cfg.cluster, api_version = %d.version(), job_id = id, warning = %w, "slurmrestd warning on submit");
                    }
                }
                Ok(JobId(id))
            }
            None => Err(ClientError::SubmitWithoutJobId {
                cluster: self.cfg.cluster.clone(),
                warnings,
            }),
        }
    }

    /// The states of many jobs in ONE request (repeated `job_id=`; chunked only when the URL
    /// would get too long). An id missing from the answer is not known to slurmctld (aged out
    /// or never existed): it is simply absent from the map. Array elements are left out
    /// ([`Client::states_and_elements`] has them).
    pub async fn states(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobState>, ClientError> {
        Ok(self.states_and_elements(ids).await?.jobs)
    }

    /// [`Client::states`] with the elements of the arrays among `ids`: asking for an array's
    /// id answers one entry per element slurmctld still has (`<own id>_<index>`), in the same
    /// request.
    pub async fn states_and_elements(&self, ids: &[JobId]) -> Result<States, ClientError> {
        let mut out = States::default();
        if ids.is_empty() {
            return Ok(out);
        }
        let d = self.current().await?;
        for chunk in ids.chunks(self.cfg.state_chunk.max(1)) {
            let query: Vec<String> = chunk.iter().map(|id| id.to_string()).collect();
            let states = d.states(self.caller(), &query).await?;
            out.jobs.extend(states.jobs);
            out.elements.extend(states.elements);
        }
        Ok(out)
    }

    /// The ids and states of every job slurmctld knows, in one light request (`jobs/state`
    /// without ids: ~37 bytes a job, where `jobs` sends ~5 KB). An array element is listed
    /// under its own id (the array's id for its pending remainder): each is a job whose record
    /// carries the array's comment.
    pub async fn all_states(&self) -> Result<HashMap<JobId, JobState>, ClientError> {
        let d = self.current().await?;
        let states = d.states(self.caller(), &Vec::new()).await?;
        let mut out = states.jobs;
        for e in states.elements {
            out.entry(e.id).or_insert(e.state);
        }
        Ok(out)
    }

    /// One job's full record; `None` when slurmctld does not know it (404 / error 2017).
    pub async fn job(&self, id: JobId) -> Result<Option<JobInfo>, ClientError> {
        let d = self.current().await?;
        match d.job(self.caller(), id).await {
            Ok(records) => Ok(records.into_iter().find(|j| j.job_id == id)),
            Err(e) if classify::is_unknown_job(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every record slurmctld answers for `job/{id}` (an array's id: each element it still has,
    /// and the array's own record for the pending remainder); empty when it does not know it.
    pub async fn job_records(&self, id: JobId) -> Result<Vec<JobInfo>, ClientError> {
        let d = self.current().await?;
        match d.job(self.caller(), id).await {
            Ok(records) => Ok(records),
            Err(e) if classify::is_unknown_job(&e) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Every job slurmctld knows, as full records. Heavy (~5 KB a job): for adopting jobs after a
    /// restart, never for polling.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>, ClientError> {
        let d = self.current().await?;
        d.jobs(self.caller()).await
    }

    /// Release a job submitted held (`keep_held`: leave it held, as its task asked), setting its
    /// comment to `comment` in the same update. A job that already finished (2084) or that
    /// slurmctld no longer knows (2017) has nothing to release: `Ok(false)`.
    pub async fn release(
        &self,
        target: impl Into<JobRef>,
        comment: Option<&str>,
        keep_held: bool,
    ) -> Result<bool, ClientError> {
        let d = self.current().await?;
        match d
            .release(self.caller(), target.into(), comment, keep_held)
            .await
        {
            Ok(()) => Ok(true),
            Err(e)
                if classify::is_unknown_job(&e) || classify::has_errno(&e, errno::JOB_FINISHED) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Cancel (or signal) a job. Already finished (2021) and unknown (2017) are outcomes, not
    /// errors: cancelling is idempotent. (v0.0.40/41 answer those with the same empty 200 as a
    /// cancel, so there they come back as `Cancelled`.)
    pub async fn cancel(
        &self,
        target: impl Into<JobRef>,
        signal: Option<&str>,
    ) -> Result<CancelOutcome, ClientError> {
        let d = self.current().await?;
        let codes = match d.cancel(self.caller(), target.into(), signal).await {
            Ok(codes) => codes,
            Err(e) if classify::is_unknown_job(&e) => return Ok(CancelOutcome::Unknown),
            Err(e) => return Err(e),
        };
        Ok(if codes.contains(&errno::INVALID_JOB_ID) {
            CancelOutcome::Unknown
        } else if codes.contains(&errno::ALREADY_DONE) {
            CancelOutcome::AlreadyFinished
        } else {
            CancelOutcome::Cancelled
        })
    }

    /// One job's accounting record from slurmdbd; `None` when slurmdbd has none.
    pub async fn accounting_job(&self, id: JobId) -> Result<Option<JobInfo>, ClientError> {
        let d = self.current().await?;
        let records = d.accounting_job(self.caller(), id).await?;
        Ok(records.into_iter().find(|j| j.job_id == id))
    }

    /// Every run slurmdbd recorded of job `id` (a requeued job has one record per run, each
    /// ending as that run did: PREEMPTED, NODE_FAIL, ...), newest first; empty when unknown.
    pub async fn accounting_runs(&self, id: JobId) -> Result<Vec<JobInfo>, ClientError> {
        let d = self.current().await?;
        let records = d.accounting_job(self.caller(), id).await?;
        Ok(records.into_iter().filter(|j| j.job_id == id).collect())
    }

    /// What a job used, for GetTaskMetrics: slurmdbd's record (usage, once steps end) when it has
    /// one, else slurmctld's view (times, allocations). `None` when neither knows the job.
    pub async fn usage(&self, id: JobId) -> Result<Option<JobUsage>, ClientError> {
        let d = self.current().await?;
        // Without accounting (or with slurmdbd down) slurmctld still knows running jobs.
        let accounting_error = match d.accounting_usage(self.caller(), id).await {
            Ok(records) => {
                if let Some(found) = records.into_iter().find(|u| u.job_id == id) {
                    return Ok(Some(found));
                }
                None
            }
            Err(e) => Some(e),
        };
        let now = chrono::Utc::now().timestamp();
        let found = match d.controller_usage(self.caller(), id, now).await {
            Ok(records) => records.into_iter().find(|u| u.job_id == id),
            Err(e) if classify::is_unknown_job(&e) => None,
            Err(e) => return Err(e),
        };
        match (found, accounting_error) {
            // Unknown to slurmctld while slurmdbd could not answer: not "no such job".
            (None, Some(e)) => Err(e),
            (found, _) => Ok(found),
        }
    }

    /// What each element of job array `id` used that Slurm knows of: slurmdbd's records (its
    /// `job/{array id}` lists every element), and slurmctld's view of the elements slurmdbd has
    /// no record of yet (or of all, without accounting). Empty when neither knows the array.
    pub async fn array_usage(&self, id: JobId) -> Result<Vec<JobUsage>, ClientError> {
        let d = self.current().await?;
        let mine = |u: &JobUsage| u.array.is_some_and(|a| a.array_job_id == id);
        let (mut out, accounting_error) = match d.accounting_usage(self.caller(), id).await {
            Ok(records) => (records.into_iter().filter(mine).collect::<Vec<_>>(), None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let now = chrono::Utc::now().timestamp();
        let live = match d.controller_usage(self.caller(), id, now).await {
            Ok(records) => records,
            Err(e) if classify::is_unknown_job(&e) => Vec::new(),
            Err(e) => return Err(e),
        };
        for u in live.into_iter().filter(mine) {
            // The pending remainder's record has no index: nothing ran, nothing to report.
            if u.array.is_some_and(|a| a.task_id.is_some())
                && !out.iter().any(|o| o.job_id == u.job_id)
            {
                out.push(u);
            }
        }
        if let (true, Some(e)) = (out.is_empty(), accounting_error) {
            return Err(e);
        }
        out.sort_by_key(|u| u.array.and_then(|a| a.task_id));
        Ok(out)
    }

    /// Accounting records of many jobs in one request (repeated `step=`; slurmdbd has no `job`
    /// filter). Ids slurmdbd does not know are absent. Where slurmdbd has several records of one
    /// id (each run of a requeued job; a job id a restarted slurmctld gave out again), the one
    /// submitted last: the job that has the id now.
    pub async fn accounting_jobs(
        &self,
        ids: &[JobId],
    ) -> Result<HashMap<JobId, JobInfo>, ClientError> {
        let mut out = HashMap::with_capacity(ids.len());
        if ids.is_empty() {
            return Ok(out);
        }
        let d = self.current().await?;
        for chunk in ids.chunks(self.cfg.state_chunk.max(1)) {
            let steps: Vec<String> = chunk.iter().map(|id| id.to_string()).collect();
            let filter = DbJobsFilter {
                step: Some(&steps),
                ..DbJobsFilter::default()
            };
            let jobs = d
                .accounting_jobs(self.caller(), "accounting_jobs", &filter)
                .await?;
            for j in jobs {
                match out.get(&j.job_id) {
                    Some(kept) if kept.submit_time > j.submit_time => {}
                    _ => {
                        out.insert(j.job_id, j);
                    }
                }
            }
        }
        Ok(out)
    }

    /// What many jobs used, from slurmdbd in one request (chunked like
    /// [`Client::accounting_jobs`]): each id's newest record (a requeued job's last run, as sacct
    /// shows it). Only the ids asked for: an array's id also brings its other elements. `None`:
    /// the cluster has no accounting (slurmrestd serves no slurmdb: HTTP 404).
    pub async fn accounting_usages(
        &self,
        ids: &[JobId],
    ) -> Result<Option<HashMap<JobId, JobUsage>>, ClientError> {
        let mut out = HashMap::with_capacity(ids.len());
        if ids.is_empty() {
            return Ok(Some(out));
        }
        let d = self.current().await?;
        for chunk in ids.chunks(self.cfg.state_chunk.max(1)) {
            let steps: Vec<String> = chunk.iter().map(|id| id.to_string()).collect();
            let asked: std::collections::HashSet<JobId> = chunk.iter().copied().collect();
            let filter = DbJobsFilter {
                step: Some(&steps),
                ..DbJobsFilter::default()
            };
            let usages = match d
                .accounting_usages(self.caller(), "accounting_usages", &filter)
                .await
            {
                Ok(u) => u,
                Err(ClientError::Http { status: 404, .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            // slurmdbd's order is oldest first: the newest record of an id is the last.
            out.extend(
                usages
                    .into_iter()
                    .filter(|u| asked.contains(&u.job_id))
                    .map(|u| (u.job_id, u)),
            );
        }
        Ok(Some(out))
    }

    /// Accounting records of the jobs active since `since_unix` (optionally one user's), without
    /// their steps. For recognising jobs that already left slurmctld (e.g. when a connector restarts
    /// and the backend retries a CreateTask long after the job ended).
    pub async fn accounting_jobs_since(
        &self,
        since_unix: i64,
        user: Option<&str>,
    ) -> Result<Vec<JobInfo>, ClientError> {
        self.accounting_jobs_between(since_unix, None, user).await
    }

    /// Accounting records of the jobs active (eligible, running or ending) between `start_unix`
    /// and `end_unix` (`None`: now), without their steps: one page of a long listing, which
    /// slurmdbd cannot page otherwise (a week of a busy site's jobs is hundreds of MB of JSON).
    pub async fn accounting_jobs_between(
        &self,
        start_unix: i64,
        end_unix: Option<i64>,
        user: Option<&str>,
    ) -> Result<Vec<JobInfo>, ClientError> {
        let d = self.current().await?;
        let now = chrono::Utc::now().timestamp();
        let start = query_time(d.version(), start_unix, now);
        let end = end_unix.map(|t| query_time(d.version(), t, now));
        let filter = DbJobsFilter {
            end_time: end.as_deref(),
            skip_steps: Some("true"),
            start_time: Some(&start),
            users: user,
            ..DbJobsFilter::default()
        };
        d.accounting_jobs(self.caller(), "accounting_jobs_since", &filter)
            .await
    }

    /// slurmdbd's record of Slurm user `name` with its associations on `cluster`; `None`: no
    /// such user. An `Http { status: 404 }` error means slurmrestd serves no slurmdb (no
    /// accounting): its text/plain answer for a path it has no handler for.
    pub async fn slurm_user_record(
        &self,
        name: &str,
        cluster: Option<&str>,
    ) -> Result<Option<super::users::UserRecord>, ClientError> {
        let d = self.current().await?;
        d.user(self.caller(), name, cluster).await
    }

    /// The controllers' ping answers. Beware: a rejected token still gets 200, not responding.
    pub async fn ping(&self) -> Result<Vec<Ping>, ClientError> {
        let d = self.current().await?;
        d.ping(self.caller()).await
    }

    /// slurmctld's statistics (a real auth check, unlike ping, and the RPC counts per type).
    pub async fn diag(&self) -> Result<Diag, ClientError> {
        let d = self.current().await?;
        d.diag(self.caller()).await
    }

    /// What the connector reads of slurm.conf, through the newest version the cluster serves
    /// that has `GET conf` (v0.0.45+, whichever version calls use); `None` when none does.
    pub async fn conf(&self) -> Result<Option<ClusterConf>, ClientError> {
        self.current().await?;
        for v in self.served_versions().into_iter().rev() {
            if let Some(conf) = self.dialects.get(v).conf(self.caller()).await? {
                return Ok(Some(conf));
            }
        }
        Ok(None)
    }

    pub async fn partitions(&self) -> Result<Vec<Partition>, ClientError> {
        let d = self.current().await?;
        d.partitions(self.caller()).await
    }

    /// What a dialect's operations use of this client, for one call.
    fn caller(&self) -> Caller<'_> {
        Caller {
            cfg: &self.cfg,
            tokens: &self.tokens,
            stale: &self.version.stale,
        }
    }
}
