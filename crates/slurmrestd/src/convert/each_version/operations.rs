// Part of the seam (see decode.rs, which holds the imports of all three parts).

// ---------------------------------------------------------------------------------------------
// The operations the facade uses, on this version's generated client

type Answer<T> = Result<ResponseValue<T>, GenError<T>>;

/// This version's generated client, with one method per facade operation: its `Dialect`.
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
        c: Caller<'_>,
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

    async fn controller_records(
        &self,
        c: Caller<'_>,
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

    async fn accounting_records(
        &self,
        c: Caller<'_>,
        id: JobId,
    ) -> Result<Vec<g::Job>, ClientError> {
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

    /// slurmdbd's `GET jobs/` with `filter`, in slurmdbd's order (oldest first). The generated
    /// call takes all of the filters positionally: they are spelt out once, in `quirks::db_jobs`.
    async fn db_jobs(
        &self,
        c: Caller<'_>,
        op: &'static str,
        filter: &DbJobsFilter<'_>,
    ) -> Result<Vec<g::Job>, ClientError> {
        let resp = self
            .call(c, op, Idempotency::Idempotent, |a| {
                quirks::db_jobs(a, filter)
            })
            .await?;
        Ok(resp.jobs.unwrap_or_default())
    }
}

// The operations' documentation is on the trait (`dialect.rs`).
impl Dialect for Api {
    fn version(&self) -> ApiVersion {
        VERSION
    }

    fn submit<'a>(
        &'a self,
        c: Caller<'a>,
        job: &'a JobDescription,
    ) -> BoxFuture<'a, Result<Submitted, ClientError>> {
        Box::pin(async move {
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
        })
    }

    fn release<'a>(
        &'a self,
        c: Caller<'a>,
        target: JobRef,
        comment: Option<&'a str>,
        keep_held: bool,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            // `<array>_<index>` releases that element alone; the array's id, all it has held.
            let id = target.to_string();
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
        })
    }

    fn states<'a>(
        &'a self,
        c: Caller<'a>,
        ids: &'a Vec<String>,
    ) -> BoxFuture<'a, Result<States, ClientError>> {
        Box::pin(async move {
            let resp = self
                .call(c, "jobs_state", Idempotency::Idempotent, |a| {
                    a.slurm_get_jobs_state(Some(ids))
                })
                .await?;
            Ok(states_of(
                resp.jobs.iter().flatten().filter_map(state_entry),
            ))
        })
    }

    fn job<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
    ) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async move {
            let records = self.controller_records(c, id).await?;
            Ok(records.iter().filter_map(job_info).collect())
        })
    }

    fn controller_usage<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
        now: i64,
    ) -> BoxFuture<'a, Result<Vec<JobUsage>, ClientError>> {
        Box::pin(async move {
            let records = self.controller_records(c, id).await?;
            Ok(records
                .iter()
                .filter_map(|j| controller_usage(j, now))
                .collect())
        })
    }

    fn jobs<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async move {
            let resp = self
                .call(c, "jobs", Idempotency::Idempotent, |a| {
                    a.slurm_get_jobs(None, None)
                })
                .await?;
            Ok(resp.jobs.iter().flatten().filter_map(job_info).collect())
        })
    }

    fn cancel<'a>(
        &'a self,
        c: Caller<'a>,
        target: JobRef,
        signal: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<i32>, ClientError>> {
        Box::pin(async move {
            let id = target.to_string();
            let resp = self
                .call(c, "cancel", Idempotency::Idempotent, |a| {
                    a.slurm_delete_job(&id, None, signal)
                })
                .await?;
            Ok(quirks::cancel_codes(&resp))
        })
    }

    fn accounting_job<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
    ) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async move {
            let records = self.accounting_records(c, id).await?;
            Ok(records.iter().filter_map(accounting_job).collect())
        })
    }

    fn accounting_usage<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
    ) -> BoxFuture<'a, Result<Vec<JobUsage>, ClientError>> {
        Box::pin(async move {
            let records = self.accounting_records(c, id).await?;
            Ok(records.iter().filter_map(accounting_usage).collect())
        })
    }

    fn accounting_jobs<'a>(
        &'a self,
        c: Caller<'a>,
        op: &'static str,
        filter: &'a DbJobsFilter<'a>,
    ) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async move {
            let records = self.db_jobs(c, op, filter).await?;
            Ok(records.iter().filter_map(accounting_job).collect())
        })
    }

    fn accounting_usages<'a>(
        &'a self,
        c: Caller<'a>,
        op: &'static str,
        filter: &'a DbJobsFilter<'a>,
    ) -> BoxFuture<'a, Result<Vec<JobUsage>, ClientError>> {
        Box::pin(async move {
            let records = self.db_jobs(c, op, filter).await?;
            Ok(records.iter().filter_map(accounting_usage).collect())
        })
    }

    fn user<'a>(
        &'a self,
        c: Caller<'a>,
        name: &'a str,
        cluster: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<UserRecord>, ClientError>> {
        Box::pin(async move {
            let resp = self
                .call(c, "slurmdb_user", Idempotency::Idempotent, |a| {
                    a.slurmdb_get_user(name, Some("true"))
                })
                .await?;
            Ok(user_record(&resp, name, cluster))
        })
    }

    fn ping<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<Vec<Ping>, ClientError>> {
        Box::pin(async move {
            let resp = self
                .call(c, "ping", Idempotency::Idempotent, |a| a.slurm_get_ping())
                .await?;
            Ok(resp.pings.iter().flatten().map(quirks::ping).collect())
        })
    }

    fn probe<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<ServerInfo, ClientError>> {
        Box::pin(async move {
            let resp = self
                .call(c, "probe", Idempotency::Probe, |a| a.slurm_get_ping())
                .await?;
            Ok(resp.server())
        })
    }

    fn diag<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<Diag, ClientError>> {
        Box::pin(async move {
            let resp = self
                .call(c, "diag", Idempotency::Idempotent, |a| a.slurm_get_diag())
                .await?;
            Ok(diag_of(&resp))
        })
    }

    fn conf<'a>(
        &'a self,
        c: Caller<'a>,
    ) -> BoxFuture<'a, Result<Option<ClusterConf>, ClientError>> {
        Box::pin(quirks::conf(self, c))
    }

    fn partitions<'a>(
        &'a self,
        c: Caller<'a>,
    ) -> BoxFuture<'a, Result<Vec<Partition>, ClientError>> {
        Box::pin(async move {
            let resp = self
                .call(c, "partitions", Idempotency::Idempotent, |a| {
                    a.slurm_get_partitions(None, None)
                })
                .await?;
            Ok(partitions_of(&resp))
        })
    }
}
