//! The typed facade over the generated client: what the connector calls.
//!
//! Every call goes through [`Client::call`], which attaches credentials, retries what is safe to
//! retry, re-mints a rejected token once, and turns every answer — JSON or `text/plain` — into a
//! domain value or a [`ClientError`] that names the cluster, the operation and the fix.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use progenitor_client::{Error as GenError, ResponseValue};
use url::Url;

use super::JobDescription;
use super::auth::{Auth, TokenSource};
use super::classify;
use super::convert::{self, Envelope};
use super::error::ClientError;
use super::generated::v0042 as api;
use super::retry::RetryPolicy;
use super::transport::{self, CallContext};
use super::types::{CancelOutcome, Diag, JobId, JobInfo, JobState, JobUsage, Partition, Ping};

/// Slurm error numbers the connector acts on.
pub mod errno {
    /// "Invalid job id specified": unknown to slurmctld (never existed, or aged out).
    pub const INVALID_JOB_ID: i32 = 2017;
    /// "Job/step already completing or completed".
    pub const ALREADY_DONE: i32 = 2021;
    /// "Protocol authentication error": slurmctld rejected the token.
    pub const AUTH: i32 = 1007;
}

/// Default number of ids per `jobs/state` request: ~16 bytes each keeps the URL near 6 KiB,
/// under the 8 KiB many proxies allow.
pub const DEFAULT_STATE_CHUNK: usize = 400;

/// Observes every HTTP exchange (for metrics): operation, status (None: no response).
pub type RequestObserver = Arc<dyn Fn(&'static str, Option<u16>) + Send + Sync>;

#[derive(Clone)]
pub struct ClientConfig {
    /// The cluster's name, used in every error and log line.
    pub cluster: String,
    /// Where slurmrestd listens, e.g. `http://slurmrestd.hpc:6820` (no `/slurm/...` suffix).
    pub base_url: Url,
    pub auth: Auth,
    /// `X-SLURM-USER-NAME`: the user jobs run as. With a SlurmUser/root token this proxies that
    /// user; with a user's own token it must equal the token's user (or be left out).
    pub user_name: Option<String>,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry: RetryPolicy,
    pub state_chunk: usize,
    pub observer: Option<RequestObserver>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("cluster", &self.cluster)
            .field("base_url", &self.base_url.as_str())
            .field("auth", &self.auth)
            .field("user_name", &self.user_name)
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("state_chunk", &self.state_chunk)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    pub fn new(cluster: impl Into<String>, base_url: Url, auth: Auth) -> ClientConfig {
        ClientConfig {
            cluster: cluster.into(),
            base_url,
            auth,
            user_name: None,
            request_timeout: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(3),
            retry: RetryPolicy::default(),
            state_chunk: DEFAULT_STATE_CHUNK,
            observer: None,
        }
    }
}

/// Whether a call may be repeated without changing the outcome.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idempotency {
    /// GETs and DELETE (cancelling twice is harmless): retry transient failures.
    Idempotent,
    /// A submit: only retried when the request surely never reached slurmrestd.
    OnlyIfNeverSent,
}

/// A slurmrestd client for one cluster. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    api: api::Client,
    cfg: Arc<ClientConfig>,
    tokens: Arc<TokenSource>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cfg", &self.cfg)
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
        let http = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .timeout(cfg.request_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {e}")))?;
        let base = cfg.base_url.as_str().trim_end_matches('/').to_string();
        Ok(Client {
            api: api::Client::new_with_client(&base, http),
            tokens: Arc::new(TokenSource::new(cfg.auth.clone())),
            cfg: Arc::new(cfg),
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

    /// Submit one batch job. A 200 without `job_id` is a failure (slurmrestd's way of saying a
    /// field had the wrong type: no job was created). Never retried once it may have been sent.
    pub async fn submit(&self, job: &JobDescription) -> Result<JobId, ClientError> {
        let body = convert::submit_request(job);
        let resp = self
            .call("submit", Idempotency::OnlyIfNeverSent, |api| {
                api.slurm_v0042_post_job_submit(&body)
            })
            .await?;
        match resp.job_id.and_then(|id| u32::try_from(id).ok()) {
            Some(id) => {
                for w in resp.warnings() {
                    tracing::warn!(cluster = %self.cfg.cluster, job_id = id, warning = %w, "slurmrestd warning on submit");
                }
                Ok(JobId(id))
            }
            None => Err(ClientError::SubmitWithoutJobId {
                cluster: self.cfg.cluster.clone(),
                warnings: resp.warnings(),
            }),
        }
    }

    /// The states of many jobs in ONE request (repeated `job_id=`; chunked only when the URL
    /// would get too long). An id missing from the answer is not known to slurmctld (aged out
    /// or never existed): it is simply absent from the map.
    pub async fn states(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobState>, ClientError> {
        let mut out = HashMap::with_capacity(ids.len());
        if ids.is_empty() {
            return Ok(out);
        }
        for chunk in ids.chunks(self.cfg.state_chunk.max(1)) {
            let query: Vec<String> = chunk.iter().map(|id| id.to_string()).collect();
            let resp = self
                .call("jobs_state", Idempotency::Idempotent, |api| {
                    api.slurm_v0042_get_jobs_state(Some(&query))
                })
                .await?;
            out.extend(resp.jobs.iter().flatten().filter_map(convert::state_entry));
        }
        Ok(out)
    }

    /// One job's full record; `None` when slurmctld does not know it (404 / error 2017).
    pub async fn job(&self, id: JobId) -> Result<Option<JobInfo>, ClientError> {
        Ok(self
            .controller_records(id)
            .await?
            .iter()
            .find_map(convert::job_info))
    }

    /// slurmctld's records of one job; empty when it does not know the job.
    async fn controller_records(
        &self,
        id: JobId,
    ) -> Result<Vec<api::types::V0042JobInfo>, ClientError> {
        let id_s = id.to_string();
        let result = self
            .call("job", Idempotency::Idempotent, |api| {
                api.slurm_v0042_get_job(&id_s, None, None)
            })
            .await;
        match result {
            Ok(resp) => Ok(resp.jobs.map(|j| j.0).unwrap_or_default()),
            Err(e) if classify::is_unknown_job(&e) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// slurmdbd's records of one job, newest first (an array or requeued job has several).
    async fn accounting_records(
        &self,
        id: JobId,
    ) -> Result<Vec<api::types::V0042Job>, ClientError> {
        let id_s = id.to_string();
        let resp = self
            .call("accounting_job", Idempotency::Idempotent, |api| {
                api.slurmdb_v0042_get_job(&id_s)
            })
            .await?;
        let mut jobs = resp.jobs.map(|j| j.0).unwrap_or_default();
        jobs.reverse();
        Ok(jobs)
    }

    /// Every job slurmctld knows, as full records. Heavy (~5 KB a job): for adopting jobs after a
    /// restart, never for polling.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>, ClientError> {
        let resp = self
            .call("jobs", Idempotency::Idempotent, |api| {
                api.slurm_v0042_get_jobs(None, None)
            })
            .await?;
        Ok(resp
            .jobs
            .iter()
            .flat_map(|j| j.0.iter())
            .filter_map(convert::job_info)
            .collect())
    }

    /// Cancel (or signal) a job. Already finished (2021) and unknown (2017) are outcomes, not
    /// errors: cancelling is idempotent.
    pub async fn cancel(
        &self,
        id: JobId,
        signal: Option<&str>,
    ) -> Result<CancelOutcome, ClientError> {
        let id_s = id.to_string();
        let resp = self
            .call("cancel", Idempotency::Idempotent, |api| {
                api.slurm_v0042_delete_job(&id_s, None, signal)
            })
            .await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) if classify::is_unknown_job(&e) => return Ok(CancelOutcome::Unknown),
            Err(e) => return Err(e),
        };
        let codes: Vec<i32> = resp
            .status
            .iter()
            .flat_map(|s| s.0.iter())
            .filter_map(|s| s.error.as_ref()?.code)
            .collect();
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
        Ok(self
            .accounting_records(id)
            .await?
            .iter()
            .filter_map(convert::accounting_job)
            .find(|j| j.job_id == id))
    }

    /// What a job used, for GetTaskMetrics: slurmdbd's record (usage, once steps end) when it has
    /// one, else slurmctld's view (times, allocations). `None` when neither knows the job.
    pub async fn usage(&self, id: JobId) -> Result<Option<JobUsage>, ClientError> {
        // Without accounting (or with slurmdbd down) slurmctld still knows running jobs.
        let accounting_error = match self.accounting_records(id).await {
            Ok(records) => {
                let found = records
                    .iter()
                    .filter_map(convert::accounting_usage)
                    .find(|u| u.job_id == id);
                if found.is_some() {
                    return Ok(found);
                }
                None
            }
            Err(e) => Some(e),
        };
        let now = chrono::Utc::now().timestamp();
        let found = self
            .controller_records(id)
            .await?
            .iter()
            .filter_map(|j| convert::controller_usage(j, now))
            .find(|u| u.job_id == id);
        match (found, accounting_error) {
            // Unknown to slurmctld while slurmdbd could not answer: not "no such job".
            (None, Some(e)) => Err(e),
            (found, _) => Ok(found),
        }
    }

    /// Accounting records of many jobs in one request (repeated `step=`; slurmdbd has no `job`
    /// filter). Ids slurmdbd does not know are absent.
    pub async fn accounting_jobs(
        &self,
        ids: &[JobId],
    ) -> Result<HashMap<JobId, JobInfo>, ClientError> {
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(self.cfg.state_chunk.max(1)) {
            let steps: Vec<String> = chunk.iter().map(|id| id.to_string()).collect();
            let resp = self
                .call("accounting_jobs", Idempotency::Idempotent, |api| {
                    db_jobs(
                        api,
                        DbJobsFilter {
                            step: Some(&steps),
                            ..DbJobsFilter::default()
                        },
                    )
                })
                .await?;
            for job in resp
                .jobs
                .iter()
                .flat_map(|j| j.0.iter())
                .filter_map(convert::accounting_job)
            {
                out.insert(job.job_id, job);
            }
        }
        Ok(out)
    }

    /// Accounting records of the jobs submitted since `since_unix` (optionally one user's), without
    /// their steps. For recognising jobs that already left slurmctld (e.g. when a connector restarts
    /// and the backend retries a CreateTask long after the job ended); heavy, so called rarely.
    pub async fn accounting_jobs_since(
        &self,
        since_unix: i64,
        user: Option<&str>,
    ) -> Result<Vec<JobInfo>, ClientError> {
        let since = since_unix.to_string();
        let resp = self
            .call("accounting_jobs_since", Idempotency::Idempotent, |api| {
                db_jobs(
                    api,
                    DbJobsFilter {
                        skip_steps: Some("true"),
                        start_time: Some(&since),
                        users: user,
                        ..DbJobsFilter::default()
                    },
                )
            })
            .await?;
        Ok(resp
            .jobs
            .iter()
            .flat_map(|j| j.0.iter())
            .filter_map(convert::accounting_job)
            .collect())
    }

    /// The controllers' ping answers. Beware: a rejected token still gets 200 with "DOWN".
    pub async fn ping(&self) -> Result<Vec<Ping>, ClientError> {
        let resp = self
            .call("ping", Idempotency::Idempotent, |api| {
                api.slurm_v0042_get_ping()
            })
            .await?;
        Ok(convert::pings(&resp))
    }

    /// slurmctld's statistics (a real auth check, unlike ping, and the RPC counts per type).
    pub async fn diag(&self) -> Result<Diag, ClientError> {
        let resp = self
            .call("diag", Idempotency::Idempotent, |api| {
                api.slurm_v0042_get_diag()
            })
            .await?;
        Ok(convert::diag(&resp))
    }

    pub async fn partitions(&self) -> Result<Vec<Partition>, ClientError> {
        let resp = self
            .call("partitions", Idempotency::Idempotent, |api| {
                api.slurm_v0042_get_partitions(None, None)
            })
            .await?;
        Ok(convert::partitions(&resp))
    }

    /// One operation with credentials, retries and one re-mint after a rejected token.
    async fn call<'a, T, F, Fut>(
        &'a self,
        operation: &'static str,
        idem: Idempotency,
        f: F,
    ) -> Result<T, ClientError>
    where
        T: Envelope,
        F: Fn(&'a api::Client) -> Fut,
        Fut: Future<Output = Result<ResponseValue<T>, GenError<T>>>,
    {
        let mut attempt = 1;
        let mut reminted = false;
        loop {
            let token = self
                .tokens
                .token()
                .map_err(|source| ClientError::Credentials {
                    cluster: self.cfg.cluster.clone(),
                    source,
                })?;
            let ctx = CallContext::new(&token, self.cfg.user_name.as_deref()).ok_or_else(|| {
                ClientError::InvalidRequest {
                    cluster: self.cfg.cluster.clone(),
                    operation,
                    detail: "the token or user name holds characters an HTTP header cannot carry"
                        .into(),
                }
            })?;
            let note = ctx.response();
            let result = transport::with_context(ctx, f(&self.api)).await;
            if let Some(observe) = &self.cfg.observer {
                observe(operation, note.status());
            }
            let err = match classify::classify(
                &self.cfg,
                operation,
                result,
                note.status(),
                note.was_json(),
            ) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if matches!(err, ClientError::Rejected { .. }) && !reminted && self.cfg.auth.can_renew()
            {
                // A token can be rejected because it expired early, the key rotated, or the file
                // was replaced: get a fresh one and try once more.
                tracing::info!(cluster = %self.cfg.cluster, operation, "token rejected; renewing it and retrying once");
                self.tokens.invalidate();
                reminted = true;
                continue;
            }
            let may_retry = match idem {
                Idempotency::Idempotent => err.is_transient(),
                Idempotency::OnlyIfNeverSent => err.never_sent(),
            };
            if !may_retry || attempt >= self.cfg.retry.max_attempts {
                return Err(err);
            }
            let delay = self.cfg.retry.delay(attempt);
            tracing::debug!(cluster = %self.cfg.cluster, operation, attempt, ?delay, error = %err, "retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

/// The filters of slurmdbd's `GET jobs/` this client uses. The generated call takes all 34 of
/// them positionally (progenitor's positional interface): it is spelt out once, here.
#[derive(Default)]
struct DbJobsFilter<'a> {
    skip_steps: Option<&'a str>,
    start_time: Option<&'a str>,
    step: Option<&'a Vec<String>>,
    users: Option<&'a str>,
}

fn db_jobs<'a>(
    api: &'a api::Client,
    f: DbJobsFilter<'a>,
) -> impl Future<
    Output = Result<
        ResponseValue<api::types::V0042OpenapiSlurmdbdJobsResp>,
        GenError<api::types::V0042OpenapiSlurmdbdJobsResp>,
    >,
> + 'a {
    #[rustfmt::skip]
    let call = api.slurmdb_v0042_get_jobs(
        None, None, None, None, None, None, None, None, None, None, // 1-10
        None, None, None, None, None, None, None, None, None, None, // 11-20
        None, None, None, None, None, None, // 21-26
        f.skip_steps, f.start_time, None, f.step, None, f.users, None, None, // 27-34
    );
    call
}
