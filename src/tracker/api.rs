//! The three slurmrestd calls the tracker makes, as a trait so tests can count and fake them.

use std::collections::HashMap;

use futures::future::BoxFuture;

use crate::slurmrestd::{Client, ClientError, JobId, JobInfo, JobState, JobUsage, States};
pub use crate::staging::exit_marker::{ExitMarker, MarkerCause};

/// What the tracker needs from one cluster.
pub trait SlurmApi: Send + Sync + 'static {
    /// States of many jobs in ONE request; ids slurmctld does not know are absent.
    fn states<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>>;

    /// One job's full record from slurmctld (`None`: unknown there).
    fn job(&self, id: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>>;

    /// [`SlurmApi::states`] with the elements of the arrays among `ids`, in the same ONE
    /// request (an array's id answers one entry per element). The default knows no arrays.
    fn states_and_elements<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<States, ClientError>> {
        Box::pin(async move {
            Ok(States {
                jobs: self.states(ids).await?,
                elements: Vec::new(),
            })
        })
    }

    /// Every record slurmctld answers for `job/{id}`: for an array's id, one per element it
    /// still has (empty: unknown there). The default is [`SlurmApi::job`]'s one record.
    fn job_records(&self, id: JobId) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async move { Ok(self.job(id).await?.into_iter().collect()) })
    }

    /// Accounting records of many jobs in one request (slurmdbd); unknown ids absent.
    fn accounting_jobs<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>>;

    /// What many finished jobs used, from slurmdbd in ONE request: each id's newest record
    /// (unknown ids absent); `None`: the cluster has no accounting. The default has none.
    fn accounting_usages<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<Option<HashMap<JobId, JobUsage>>, ClientError>> {
        let _ = ids;
        Box::pin(async { Ok(None) })
    }

    /// Every run slurmdbd recorded of one job, newest first (once per requeue, to tell a
    /// preemption from a node failure). The default knows none.
    fn accounting_runs(&self, id: JobId) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        let _ = id;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Every job slurmctld knows, in ONE request (`GET jobs/`): the reasons of jobs pending
    /// long (`state_reason`, `state_description`), which `jobs/state` does not carry. The
    /// default lists none.
    fn jobs(&self) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

impl SlurmApi for Client {
    fn states<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobState>, ClientError>> {
        Box::pin(Client::states(self, ids))
    }

    fn job(&self, id: JobId) -> BoxFuture<'_, Result<Option<JobInfo>, ClientError>> {
        Box::pin(Client::job(self, id))
    }

    fn states_and_elements<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<States, ClientError>> {
        Box::pin(Client::states_and_elements(self, ids))
    }

    fn job_records(&self, id: JobId) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(Client::job_records(self, id))
    }

    fn accounting_jobs<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<HashMap<JobId, JobInfo>, ClientError>> {
        Box::pin(Client::accounting_jobs(self, ids))
    }

    fn jobs(&self) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(Client::jobs(self))
    }

    fn accounting_usages<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<Option<HashMap<JobId, JobUsage>>, ClientError>> {
        Box::pin(Client::accounting_usages(self, ids))
    }

    fn accounting_runs(&self, id: JobId) -> BoxFuture<'_, Result<Vec<JobInfo>, ClientError>> {
        Box::pin(Client::accounting_runs(self, id))
    }
}

/// Exit codes that jobs left on the cluster's shared filesystem (the rendered script's
/// `<working_dir>/<job>.exit`), for jobs that left slurmctld on a cluster without slurmdbd.
/// Injected by the service (which knows each job's files and the staging backend); the tracker
/// only asks, so it does not depend on how the filesystem is reached.
pub trait ExitMarkers: Send + Sync + 'static {
    /// `Ok(None)`: no marker (not written, or a job this reader knows nothing about).
    fn exit_code(&self, id: JobId) -> BoxFuture<'_, Result<Option<ExitMarker>, String>>;

    /// The marker of element `index` of job array `array` (each element writes its own).
    /// The default reads none.
    fn element_exit_code(
        &self,
        array: JobId,
        index: u32,
    ) -> BoxFuture<'_, Result<Option<ExitMarker>, String>> {
        let _ = (array, index);
        Box::pin(async { Ok(None) })
    }
}
