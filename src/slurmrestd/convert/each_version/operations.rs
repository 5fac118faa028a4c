// Part of the seam (see decode.rs, which holds the imports of all three parts).

// ---------------------------------------------------------------------------------------------
// The operations the facade uses, on this version's generated client

type Answer<T> = Result<ResponseValue<T>, GenError<T>>;

/// This version's generated client, with one method per facade operation.
#[derive(Clone)]
pub(crate) struct Api {
    raw: api::Client,
}

impl Api {
    pub(crate) fn new(base_url: &str, http: reqwest::Client) -> Api {
        Api {
            raw: api::Client::new_with_client(base_url, http),
        }
    }

    async fn call<'a, T, F, Fut>(
        &'a self,
        c: &Client,
        op: &'static str,
        idem: Idempotency,
        f: F,
    ) -> Result<T, ClientError>
    where
        T: Envelope,
        F: Fn(&'a api::Client) -> Fut,
        Fut: Future<Output = Answer<T>>,
    {
        c.call(VERSION, op, idem, || f(&self.raw)).await
    }

    /// `POST job/submit`: the job id (`None`: a 200 without one) and slurmrestd's warnings.
    pub(crate) async fn submit(
        &self,
        c: &Client,
        job: &JobDescription,
    ) -> Result<(Option<u32>, Vec<String>), ClientError> {
        let body = submit_request(job).map_err(|e| c.unexpressible(e))?;
        let resp = self
            .call(c, "submit", Idempotency::OnlyIfNeverSent, |a| {
                a.slurm_post_job_submit(&body)
            })
            .await?;
        Ok((
            resp.job_id.and_then(|id| u32::try_from(id).ok()),
            resp.warnings(),
        ))
    }

    /// `POST job/{id}` with `hold: false` (and the comment the job keeps): releases a job
    /// submitted held. Releasing a job already released is accepted by slurmctld ("already
    /// released, ignoring request"), also once it runs.
    pub(crate) async fn release(
        &self,
        c: &Client,
        id: JobId,
        comment: Option<&str>,
        keep_held: bool,
    ) -> Result<(), ClientError> {
        let id = id.to_string();
        let body = g::JobDescMsg {
            hold: (!keep_held).then_some(false),
            comment: comment.map(str::to_string),
            ..Default::default()
        };
        self.call(c, "release", Idempotency::Idempotent, |a| {
            a.slurm_post_job(&id, &body)
        })
        .await?;
        Ok(())
    }

    pub(crate) async fn states(
        &self,
        c: &Client,
        ids: &Vec<String>,
    ) -> Result<States, ClientError> {
        let resp = self
            .call(c, "jobs_state", Idempotency::Idempotent, |a| {
                a.slurm_get_jobs_state(Some(ids))
            })
            .await?;
        Ok(states_of(
            resp.jobs.iter().flatten().filter_map(state_entry),
        ))
    }

    async fn controller_records(
        &self,
        c: &Client,
        id: JobId,
    ) -> Result<Vec<g::JobInfo>, ClientError> {
        let id = id.to_string();
        let resp = self
            .call(c, "job", Idempotency::Idempotent, |a| {
                a.slurm_get_job(&id, None, None)
            })
            .await?;
        Ok(resp.jobs.unwrap_or_default())
    }

    /// slurmctld's records of one job (`GET job/{id}`; an error 2017 for an unknown job).
    pub(crate) async fn job(&self, c: &Client, id: JobId) -> Result<Vec<JobInfo>, ClientError> {
        let records = self.controller_records(c, id).await?;
        Ok(records.iter().filter_map(job_info).collect())
    }

    /// slurmctld's view of one job's usage, for GetTaskMetrics.
    pub(crate) async fn controller_usage(
        &self,
        c: &Client,
        id: JobId,
        now: i64,
    ) -> Result<Vec<JobUsage>, ClientError> {
        let records = self.controller_records(c, id).await?;
        Ok(records
            .iter()
            .filter_map(|j| controller_usage(j, now))
            .collect())
    }

    /// Every job slurmctld knows, as full records.
    pub(crate) async fn jobs(&self, c: &Client) -> Result<Vec<JobInfo>, ClientError> {
        let resp = self
            .call(c, "jobs", Idempotency::Idempotent, |a| {
                a.slurm_get_jobs(None, None)
            })
            .await?;
        Ok(resp.jobs.iter().flatten().filter_map(job_info).collect())
    }

    /// `DELETE job/{id}`: the Slurm error numbers of the answer's per-job status.
    pub(crate) async fn cancel(
        &self,
        c: &Client,
        id: JobId,
        signal: Option<&str>,
    ) -> Result<Vec<i32>, ClientError> {
        let id = id.to_string();
        let resp = self
            .call(c, "cancel", Idempotency::Idempotent, |a| {
                a.slurm_delete_job(&id, None, signal)
            })
            .await?;
        Ok(quirks::cancel_codes(&resp))
    }

    async fn accounting_records(&self, c: &Client, id: JobId) -> Result<Vec<g::Job>, ClientError> {
        let id = id.to_string();
        let resp = self
            .call(c, "accounting_job", Idempotency::Idempotent, |a| {
                a.slurmdb_get_job(&id)
            })
            .await?;
        // Newest first: an array or requeued job has several records.
        let mut jobs = resp.jobs.unwrap_or_default();
        jobs.reverse();
        Ok(jobs)
    }

    /// slurmdbd's records of one job, newest first.
    pub(crate) async fn accounting_job(
        &self,
        c: &Client,
        id: JobId,
    ) -> Result<Vec<JobInfo>, ClientError> {
        let records = self.accounting_records(c, id).await?;
        Ok(records.iter().filter_map(accounting_job).collect())
    }

    /// slurmdbd's usage records of one job, newest first.
    pub(crate) async fn accounting_usage(
        &self,
        c: &Client,
        id: JobId,
    ) -> Result<Vec<JobUsage>, ClientError> {
        let records = self.accounting_records(c, id).await?;
        Ok(records.iter().filter_map(accounting_usage).collect())
    }

    /// slurmdbd's `GET jobs/` with the filters the facade uses (the generated call takes all of
    /// them positionally: they are spelt out once, in `quirks::db_jobs`).
    pub(crate) async fn accounting_jobs(
        &self,
        c: &Client,
        op: &'static str,
        filter: &crate::slurmrestd::client::DbJobsFilter<'_>,
    ) -> Result<Vec<JobInfo>, ClientError> {
        let resp = self
            .call(c, op, Idempotency::Idempotent, |a| {
                quirks::db_jobs(a, filter)
            })
            .await?;
        Ok(resp
            .jobs
            .iter()
            .flatten()
            .filter_map(accounting_job)
            .collect())
    }

    /// slurmdbd's `GET user/{name}?with_assocs`: the user's record, `None` when there is no such
    /// user. (slurmrestd without slurmdb answers its text/plain 404 of unknown paths.)
    pub(crate) async fn user(
        &self,
        c: &Client,
        name: &str,
        cluster: Option<&str>,
    ) -> Result<Option<UserRecord>, ClientError> {
        let resp = self
            .call(c, "slurmdb_user", Idempotency::Idempotent, |a| {
                a.slurmdb_get_user(name, Some("true"))
            })
            .await?;
        Ok(user_record(&resp, name, cluster))
    }

    pub(crate) async fn ping(&self, c: &Client) -> Result<Vec<Ping>, ClientError> {
        let resp = self
            .call(c, "ping", Idempotency::Idempotent, |a| a.slurm_get_ping())
            .await?;
        Ok(resp.pings.iter().flatten().map(quirks::ping).collect())
    }

    /// `GET ping/` as a probe: whether the cluster serves this version at all (404: no). Retried
    /// like any read when slurmrestd hiccups, so a 503 is not taken for an answer.
    pub(crate) async fn probe(&self, c: &Client) -> Result<ServerInfo, ClientError> {
        let resp = self
            .call(c, "probe", Idempotency::Probe, |a| a.slurm_get_ping())
            .await?;
        Ok(resp.server())
    }

    pub(crate) async fn diag(&self, c: &Client) -> Result<Diag, ClientError> {
        let resp = self
            .call(c, "diag", Idempotency::Idempotent, |a| a.slurm_get_diag())
            .await?;
        Ok(diag_of(&resp))
    }

    pub(crate) async fn partitions(&self, c: &Client) -> Result<Vec<Partition>, ClientError> {
        let resp = self
            .call(c, "partitions", Idempotency::Idempotent, |a| {
                a.slurm_get_partitions(None, None)
            })
            .await?;
        Ok(partitions_of(&resp))
    }
}
