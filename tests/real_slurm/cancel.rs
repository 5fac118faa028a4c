//! Cancel on a real Slurm, from tests/real_slurm.rs: a pending job (held through the job
//! description, or by `sbatch --hold` in the cluster), a running one and again once cancelled, a
//! finished one and an unknown id.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_pending_job() {
    let c = require_cluster!();
    let client = c.user_client();
    // Held jobs stay pending: one held through the job description (`hold: true`), one held by
    // `sbatch --hold` inside the cluster (a job the connector did not submit).
    let mut job = c.job("held", "#!/bin/bash\ntrue\n");
    job.hold = Some(true);
    let held_by_rest = submit(&client, &job).await;
    let out = c
        .dev_cluster(&[
            "exec",
            "--user",
            &c.user,
            "sbatch",
            "--hold",
            "--parsable",
            "--chdir",
            &c.workdir,
            "--job-name",
            &unique("held-sbatch"),
            "--wrap",
            "true",
        ])
        .await;
    let held_by_sbatch: JobId = out
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .expect("sbatch --parsable prints the job id");
    for id in [held_by_rest, held_by_sbatch] {
        let all = states(&client, &[id]).await;
        assert_eq!(
            all.get(&id).map(|s| &s.base),
            Some(&BaseState::Pending),
            "job {id}: {all:?}"
        );
        assert_eq!(
            client.cancel(id, None).await.expect("cancel pending"),
            CancelOutcome::Cancelled,
            "job {id}"
        );
        wait_base(&client, id, BaseState::Cancelled).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_running_job_then_again() {
    let c = require_cluster!();
    let client = c.user_client();
    let id = submit(&client, &c.job("running", "#!/bin/bash\nsleep 120\n")).await;
    wait_base(&client, id, BaseState::Running).await;

    assert_eq!(
        client.cancel(id, None).await.expect("cancel running"),
        CancelOutcome::Cancelled
    );
    wait_base(&client, id, BaseState::Cancelled).await;
    assert_eq!(
        client.cancel(id, None).await.expect("cancel again"),
        cancel_outcome(&client, CancelOutcome::AlreadyFinished)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_finished_job_and_an_unknown_one() {
    let c = require_cluster!();
    let client = c.user_client();
    let id = submit(&client, &c.job("finished", "#!/bin/bash\ntrue\n")).await;
    wait_base(&client, id, BaseState::Completed).await;
    assert_eq!(
        client.cancel(id, None).await.expect("cancel finished"),
        cancel_outcome(&client, CancelOutcome::AlreadyFinished)
    );
    wait_base(&client, id, BaseState::Completed).await;

    assert_eq!(
        client
            .cancel(JobId(999_999), None)
            .await
            .expect("cancel unknown"),
        cancel_outcome(&client, CancelOutcome::Unknown)
    );
    assert!(
        client
            .job(JobId(999_999))
            .await
            .expect("job/999999")
            .is_none()
    );
}
