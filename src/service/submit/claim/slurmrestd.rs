//! The protocol's [`Slurm`] through slurmrestd: a held submit carries the claim's marker in its
//! comment (`<its own comment> [slurm-connector claim <marker>]`), the release restores the
//! job's own comment in the same update, and held jobs are found by that marker in slurmctld's
//! listing.

use crate::render::naming;
use crate::slurmrestd::{self, Client, ClientError, JobDescription, JobId, JobInfo};

use super::format::JobRef;
use super::protocol::Slurm;

/// The tag a held job's comment carries for `marker`.
pub fn marker_tag(marker: &str) -> String {
    naming::claim_mark(marker)
}

/// One execution's (or batch's) view of a cluster through slurmrestd.
pub struct Slurmrestd<'a> {
    /// The client that submits, lists, releases and cancels: the task's user's.
    pub client: &'a Client,
    /// The job's own comment, which it has once released.
    pub comment: Option<&'a str>,
    /// The task asked for `--hold` itself: the release removes only the marker.
    pub keep_held: bool,
}

fn target(job: JobRef) -> slurmrestd::JobRef {
    match job {
        JobRef::Job { job_id } => JobId(job_id).into(),
        JobRef::Element {
            array_job_id,
            index,
        } => slurmrestd::JobRef {
            id: JobId(array_job_id),
            element: Some(index),
        },
    }
}

/// Whether `j` is held by its submitter with a claim's marker in its comment (`marker`: that
/// one; `None`: any).
pub fn held_with(j: &JobInfo, marker: Option<&str>) -> bool {
    naming::held_for_claim(j)
        && marker.is_none_or(|m| {
            j.comment
                .as_deref()
                .is_some_and(|c| c.contains(&marker_tag(m)))
        })
}

/// The job (or element) a held record stands for: an array's own record stands for its held
/// remainder, named by the array's id.
fn job_of(j: &JobInfo) -> JobRef {
    match j.array {
        Some(slurmrestd::ArrayMembership {
            array_job_id,
            task_id: Some(index),
        }) => JobRef::Element {
            array_job_id: array_job_id.0,
            index,
        },
        Some(a) => JobRef::Job {
            job_id: a.array_job_id.0,
        },
        None => JobRef::Job { job_id: j.job_id.0 },
    }
}

impl Slurm for Slurmrestd<'_> {
    type Job = JobDescription;
    type Error = ClientError;

    async fn submit_held(
        &self,
        job: &JobDescription,
        marker: &str,
        indices: Option<&[u32]>,
    ) -> Result<u32, ClientError> {
        let mut held = job.clone();
        held.hold = Some(true);
        held.comment = Some(format!(
            "{}{}",
            job.comment.as_deref().unwrap_or_default(),
            marker_tag(marker)
        ));
        if let Some(ix) = indices {
            held.array = Some(crate::render::array::expr(ix));
        }
        Ok(self.client.submit(&held).await?.0)
    }

    async fn held(&self, marker: &str) -> Result<Vec<JobRef>, ClientError> {
        let jobs = self.client.jobs().await?;
        Ok(jobs
            .iter()
            .filter(|j| held_with(j, Some(marker)))
            .map(job_of)
            .collect())
    }

    async fn awaits_release(&self, job: JobRef, marker: Option<&str>) -> Result<bool, ClientError> {
        let id = match job {
            JobRef::Job { job_id } => job_id,
            JobRef::Element { array_job_id, .. } => array_job_id,
        };
        let records = self.client.job_records(JobId(id)).await?;
        let own = |j: &&JobInfo| match job {
            JobRef::Job { .. } => j.job_id.0 == id,
            // The element's own record, else the array's held remainder it may be part of.
            JobRef::Element { index, .. } => j.array.is_some_and(|a| a.task_id == Some(index)),
        };
        let record = records.iter().find(own).or_else(|| match job {
            JobRef::Element { .. } => records
                .iter()
                .find(|j| j.array.is_some_and(|a| a.task_id.is_none())),
            JobRef::Job { .. } => None,
        });
        Ok(record.is_some_and(|j| held_with(j, marker)))
    }

    async fn release(&self, job: JobRef) -> Result<(), ClientError> {
        self.client
            .release(
                target(job),
                Some(self.comment.unwrap_or_default()),
                self.keep_held,
            )
            .await
            .map(|_| ())
    }

    async fn cancel(&self, job: JobRef) -> Result<(), ClientError> {
        self.client.cancel(target(job), None).await.map(|_| ())
    }
}
