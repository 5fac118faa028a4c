//! The claim's once-only protocol (`service::claim`) against a real Slurm through slurmrestd, from
//! tests/real_slurm.rs: the marker in a held job's comment, slurmctld's listing of held jobs by
//! it, a held array of sparse indices, and a held array's elements replaced one by one
//! (slurmrestd refuses to release one element alone).

use slurm_connector::slurmrestd::Client;
use std::collections::BTreeMap;

use slurm_connector::service::claim::{
    self, ClaimStore, Holder, JobRef, Outcome, Record, Slurm, Slurmrestd, State,
};

use super::*;

fn holder(name: &str, lease_secs: u64) -> Holder {
    Holder {
        name: name.into(),
        lease: Duration::from_secs(lease_secs),
    }
}

fn claim_at(dir: &std::path::Path, execution: &str) -> ClaimStore {
    ClaimStore::under_output_prefix(&format!("file://{}/{execution}", dir.display())).unwrap()
}

/// Each record slurmctld has of `array` by index (`None`: the array's own record, standing for
/// its held or pending remainder).
async fn elements(client: &Client, array: u32) -> BTreeMap<Option<u32>, (BaseState, String)> {
    client
        .job_records(JobId(array))
        .await
        .expect("job/{id}")
        .into_iter()
        .map(|j| {
            let index = j.array.and_then(|a| a.task_id);
            (index, (j.state.base, j.comment.unwrap_or_default()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_job_runs_once_and_a_dead_holders_held_job_is_cancelled() {
    let c = require_cluster!();
    let client = c.user_client();
    let dir = common::staging::TempDir::new("claim");
    let mut job = c.job("claim", "#!/bin/bash\nsleep 60\n");
    job.comment = Some("its own comment".into());
    let slurm = Slurmrestd {
        client: &client,
        comment: job.comment.as_deref(),
        keep_held: false,
    };

    // A replica that died after its held submit: its holding (lease 0: run out) and its held job.
    let claim = claim_at(dir.path(), "e");
    let marker = unique("fc");
    claim
        .create(Record::new(
            "dead",
            State::Submitting {
                lease_secs: 0,
                marker: marker.clone(),
                index: None,
                replaces: None,
            },
        ))
        .await
        .unwrap();
    let left = slurm.submit_held(&job, &marker, None).await.unwrap();
    assert_eq!(
        slurm.held(&marker).await.unwrap(),
        vec![JobRef::Job { job_id: left }],
        "slurmctld lists the held job by its marker"
    );

    // The retried CreateTask takes over: the dead holder's job is cancelled, its own runs.
    let got = claim::create(&claim, &slurm, &holder("r1", 60), &job, &marker)
        .await
        .unwrap();
    let Outcome::Submitted(JobRef::Job { job_id }) = got else {
        panic!("{got:?}")
    };
    wait_base(&client, JobId(left), BaseState::Cancelled).await;
    wait_base(&client, JobId(job_id), BaseState::Running).await;
    let record = client.job(JobId(job_id)).await.unwrap().unwrap();
    assert_eq!(
        record.comment.as_deref(),
        Some("its own comment"),
        "the release restores the job's own comment"
    );
    // A retry answers with it, and slurmctld has nothing held for it.
    let again = claim::create(&claim, &slurm, &holder("r2", 60), &job, &marker)
        .await
        .unwrap();
    assert_eq!(again, Outcome::Existing(JobRef::Job { job_id }, None));
    assert!(slurm.held(&marker).await.unwrap().is_empty());

    // DeleteTask: the tombstone, then the cancel.
    assert_eq!(
        claim::delete(&claim, &slurm, &holder("r2", 60))
            .await
            .unwrap(),
        Some(JobRef::Job { job_id })
    );
    wait_base(&client, JobId(job_id), BaseState::Cancelled).await;
}

/// A Slurm whose releases never arrive: a replica that died after recording.
struct DiesAtRelease<'a>(&'a Slurmrestd<'a>);

impl Slurm for DiesAtRelease<'_> {
    type Job = slurm_connector::slurmrestd::JobDescription;
    type Error = slurm_connector::slurmrestd::ClientError;

    async fn submit_held(
        &self,
        job: &Self::Job,
        marker: &str,
        indices: Option<&[u32]>,
    ) -> Result<u32, Self::Error> {
        self.0.submit_held(job, marker, indices).await
    }

    async fn held(&self, marker: &str) -> Result<Vec<JobRef>, Self::Error> {
        self.0.held(marker).await
    }

    async fn awaits_release(&self, job: JobRef, marker: Option<&str>) -> Result<bool, Self::Error> {
        self.0.awaits_release(job, marker).await
    }

    async fn release(&self, _job: JobRef) -> Result<(), Self::Error> {
        // The replica died before its release reached slurmrestd.
        Err(slurm_connector::slurmrestd::ClientError::Slurm {
            cluster: "dev".into(),
            operation: "release",
            status: 500,
            errors: Vec::new(),
        })
    }

    async fn cancel(&self, job: JobRef) -> Result<(), Self::Error> {
        self.0.cancel(job).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_held_array_left_by_a_dead_recorder_is_replaced_element_by_element() {
    let c = require_cluster!();
    let client = c.user_client();
    let dir = common::staging::TempDir::new("claim");
    let array_job = c.job("claim-array", "#!/bin/bash\nsleep 60\n");
    let slurm = Slurmrestd {
        client: &client,
        comment: None,
        keep_held: false,
    };
    let claims: Vec<ClaimStore> = (0..4)
        .map(|i| claim_at(dir.path(), &format!("m{i}")))
        .collect();
    // m2 was deleted before its batch: the array holds 0, 1 and 3.
    claim::delete(&claims[2], &slurm, &holder("r0", 60))
        .await
        .unwrap();

    // The batch's replica records every element and dies before releasing the array.
    let marker = unique("fb");
    let outcomes = claim::create_batch(
        &claims,
        &DiesAtRelease(&slurm),
        &holder("r0", 60),
        &array_job,
        &marker,
    )
    .await;
    assert!(
        matches!(outcomes[2], Ok(Outcome::Deleted)),
        "{:?}",
        outcomes[2]
    );
    let mut recorded = BTreeMap::new();
    for i in [0u32, 1, 3] {
        assert!(
            outcomes[i as usize].is_err(),
            "{i}: {:?}",
            outcomes[i as usize]
        );
        let Some(State::Recorded {
            job,
            array,
            marker: recorded_marker,
        }) = claims[i as usize]
            .read()
            .await
            .unwrap()
            .map(|c| c.record().state.clone())
        else {
            panic!("m{i} is not recorded");
        };
        // Each element's record names the array's indices: without the deleted member's; and
        // the batch's marker, which its held array carries.
        assert_eq!(array.as_deref(), Some("0-1,3"), "m{i}");
        assert_eq!(recorded_marker.as_deref(), Some(marker.as_str()), "m{i}");
        recorded.insert(i, job);
    }
    let JobRef::Element { array_job_id, .. } = recorded[&0] else {
        panic!("{:?}", recorded[&0])
    };
    for (i, job) in &recorded {
        assert_eq!(
            *job,
            JobRef::Element {
                array_job_id,
                index: *i
            }
        );
        assert!(
            slurm.awaits_release(*job, Some(&marker)).await.unwrap(),
            "{job} is held"
        );
        // Held, but not with another holding's marker (an id slurmctld gave another job).
        assert!(
            !slurm
                .awaits_release(*job, Some("fb-another"))
                .await
                .unwrap(),
            "{job} is held for another claim"
        );
    }
    let before = elements(&client, array_job_id).await;
    assert!(
        before.values().all(|(b, comment)| *b == BaseState::Pending
            && comment.contains(&claim::marker_tag(&marker))),
        "the whole array is held with the batch's marker: {before:?}"
    );

    // slurmrestd releases no element alone (the array may hold unrecorded ones): within a lease
    // of the records a retry waits; past it each element is cancelled while held and its
    // execution submitted anew, replacing it.
    let within = claim::create(&claims[1], &slurm, &holder("r1", 60), &array_job, "fc-m1")
        .await
        .unwrap();
    assert!(
        matches!(within, Outcome::InProgress { ref by, .. } if by == "r0"),
        "{within:?}"
    );
    for i in [0u32, 1, 3] {
        let marker = unique("fc");
        let got = claim::create(
            &claims[i as usize],
            &slurm,
            &holder("r1", 0),
            &array_job,
            &marker,
        )
        .await
        .unwrap();
        let Outcome::Submitted(JobRef::Job { job_id }) = got else {
            panic!("m{i}: {got:?}")
        };
        // The element is gone from the held array before its replacement runs: a pending
        // element cancelled leaves no record of its own, slurmctld takes its index out of the
        // array's remainder (24.11: `995_[1,3]` after `scancel 995_0`).
        let left = client
            .states_and_elements(&[JobId(array_job_id)])
            .await
            .expect("jobs/state");
        assert!(
            left.elements
                .iter()
                .filter(|e| e.index == i)
                .all(|e| e.state.base == BaseState::Cancelled),
            "m{i}'s element is cancelled, never released: {left:?}"
        );
        wait_base(&client, JobId(job_id), BaseState::Running).await;
        client.cancel(JobId(job_id), None).await.expect("cancel");
    }
    // What slurmctld still keeps of the array: all cancelled, none ran.
    let after = elements(&client, array_job_id).await;
    assert!(
        after.values().all(|(b, _)| *b == BaseState::Cancelled),
        "{after:?}"
    );
}
