//! What the facade (`client/`) asks of one API version: [`Dialect`], implemented by each
//! version's `Api` (`convert/each_version/operations.rs`, compiled once per version).
//!
//! Why a trait object: the version is decided once, at negotiation, and every call then goes
//! through the chosen version's `&dyn Dialect`, with no per-call match over the versions; and
//! adding a version is one module (`convert/v00NN.rs`) and one arm where the client builds its
//! dialects (`client/http.rs`), not an arm at every call site.

use futures::future::BoxFuture;

use super::ApiVersion;
use super::caller::Caller;
use super::error::ClientError;
use super::job_description::JobDescription;
use super::types::{
    ClusterConf, Diag, JobId, JobInfo, JobRef, JobUsage, Partition, Ping, ServerInfo, States,
};
use super::users::UserRecord;

/// The filters of slurmdbd's `GET jobs/` this client uses.
#[derive(Default)]
pub(crate) struct DbJobsFilter<'a> {
    pub(crate) end_time: Option<&'a str>,
    pub(crate) skip_steps: Option<&'a str>,
    pub(crate) start_time: Option<&'a str>,
    pub(crate) step: Option<&'a Vec<String>>,
    pub(crate) users: Option<&'a str>,
}

/// What a submit answers: the job id (`None`: a 200 without one) and slurmrestd's warnings.
pub(crate) type Submitted = (Option<u32>, Vec<String>);

/// One API version's operations, returning domain types. Each makes its request(s) through `c`
/// (credentials, retries, errors).
pub(crate) trait Dialect: Send + Sync {
    /// The version this dialect speaks.
    fn version(&self) -> ApiVersion;

    /// `POST job/submit`: the job id (`None`: a 200 without one) and slurmrestd's warnings.
    fn submit<'a>(
        &'a self,
        c: Caller<'a>,
        job: &'a JobDescription,
    ) -> BoxFuture<'a, Result<Submitted, ClientError>>;

    /// `POST job/{id}` with `hold: false` (and the comment the job keeps): releases a job
    /// submitted held. Releasing a job already released is accepted by slurmctld ("already
    /// released, ignoring request"), also once it runs.
    fn release<'a>(
        &'a self,
        c: Caller<'a>,
        target: JobRef,
        comment: Option<&'a str>,
        keep_held: bool,
    ) -> BoxFuture<'a, Result<(), ClientError>>;

    /// `GET jobs/state` of `ids` (all jobs when empty).
    #[allow(clippy::ptr_arg)] // the generated call takes a `&Vec`
    fn states<'a>(
        &'a self,
        c: Caller<'a>,
        ids: &'a Vec<String>,
    ) -> BoxFuture<'a, Result<States, ClientError>>;

    /// slurmctld's records of one job (`GET job/{id}`; an error 2017 for an unknown job).
    fn job<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
    ) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>>;

    /// slurmctld's view of one job's usage, for GetTaskMetrics.
    fn controller_usage<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
        now: i64,
    ) -> BoxFuture<'a, Result<Vec<JobUsage>, ClientError>>;

    /// Every job slurmctld knows, as full records.
    fn jobs<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>>;

    /// `DELETE job/{id}`: the Slurm error numbers of the answer's per-job status.
    fn cancel<'a>(
        &'a self,
        c: Caller<'a>,
        target: JobRef,
        signal: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<i32>, ClientError>>;

    /// slurmdbd's records of one job, newest first.
    fn accounting_job<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
    ) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>>;

    /// slurmdbd's usage records of one job, newest first.
    fn accounting_usage<'a>(
        &'a self,
        c: Caller<'a>,
        id: JobId,
    ) -> BoxFuture<'a, Result<Vec<JobUsage>, ClientError>>;

    /// slurmdbd's `GET jobs/` with the filters the facade uses, as operation `op`.
    fn accounting_jobs<'a>(
        &'a self,
        c: Caller<'a>,
        op: &'static str,
        filter: &'a DbJobsFilter<'a>,
    ) -> BoxFuture<'a, Result<Vec<JobInfo>, ClientError>>;

    /// [`Dialect::accounting_jobs`] as usage records (what each job used), in slurmdbd's order.
    fn accounting_usages<'a>(
        &'a self,
        c: Caller<'a>,
        op: &'static str,
        filter: &'a DbJobsFilter<'a>,
    ) -> BoxFuture<'a, Result<Vec<JobUsage>, ClientError>>;

    /// slurmdbd's `GET user/{name}?with_assocs`: the user's record, `None` when there is no such
    /// user. (slurmrestd without slurmdb answers its text/plain 404 of unknown paths.)
    fn user<'a>(
        &'a self,
        c: Caller<'a>,
        name: &'a str,
        cluster: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<UserRecord>, ClientError>>;

    /// The controllers' ping answers.
    fn ping<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<Vec<Ping>, ClientError>>;

    /// `GET ping/` as a probe: whether the cluster serves this version at all (404: no). Retried
    /// like any read when slurmrestd hiccups, so a 503 is not taken for an answer.
    fn probe<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<ServerInfo, ClientError>>;

    /// slurmctld's statistics.
    fn diag<'a>(&'a self, c: Caller<'a>) -> BoxFuture<'a, Result<Diag, ClientError>>;

    /// What the connector reads of slurm.conf (`GET conf`); `None`, without a request, in a
    /// version that has no such path (before v0.0.45).
    fn conf<'a>(&'a self, c: Caller<'a>)
    -> BoxFuture<'a, Result<Option<ClusterConf>, ClientError>>;

    fn partitions<'a>(
        &'a self,
        c: Caller<'a>,
    ) -> BoxFuture<'a, Result<Vec<Partition>, ClientError>>;
}
