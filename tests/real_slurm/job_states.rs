//! The state poll of tests/real_slurm.rs: the states of 20 jobs and an unknown id come from one
//! `jobs/state` request (one HTTP request, one slurmctld REQUEST_JOB_STATE RPC), and every job
//! ends COMPLETED, in slurmctld or, once aged out, in slurmdbd.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use slurm_connector::slurmrestd::{Client, RequestObserver};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_of_many_jobs_come_from_one_request() {
    let c = require_cluster!();
    let client = c.user_client();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(submit(&client, &c.job(&format!("batch{i}"), "#!/bin/bash\ntrue\n")).await);
    }
    let unknown = JobId(999_999);
    let mut asked = ids.clone();
    asked.push(unknown);

    // Count the HTTP requests this client makes, and slurmctld's job-state RPCs around the call
    // (nothing else in this binary polls meanwhile: every states call takes STATE_RPC).
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let observer: RequestObserver = Arc::new(move |e: &slurm_connector::slurmrestd::Exchange| {
        seen.lock().unwrap().push((e.operation, e.reply.label()));
    });
    let mut cfg = c.config(c.minted(&c.user), Some(&c.user));
    cfg.observer = Some(observer);
    let observed = Client::new(cfg).expect("client");
    // The API version is chosen once per cluster (one ping per version), not per call.
    observed.negotiate().await.expect("a version in common");
    requests.lock().unwrap().clear();
    let all = {
        let _guard = STATE_RPC.lock().await;
        let before = job_state_rpcs(&client).await;
        let all = observed
            .states(&asked)
            .await
            .expect("jobs/state for 21 ids");
        let after = job_state_rpcs(&client).await;
        assert_eq!(
            after - before,
            1,
            "states() for {} ids must cost slurmctld one REQUEST_JOB_STATE RPC",
            asked.len()
        );
        all
    };
    assert_eq!(
        *requests.lock().unwrap(),
        vec![("jobs_state", "200".to_string())],
        "states() for {} ids must be one HTTP request",
        asked.len()
    );
    for id in &ids {
        assert!(all.contains_key(id), "job {id} missing from {all:?}");
    }
    assert!(
        !all.contains_key(&unknown),
        "unknown job {unknown} reported: {all:?}"
    );
    assert_eq!(all.len(), ids.len());

    // Every job ends COMPLETED. With a MinJobAge of seconds a job may finish and age out between
    // two polls: then slurmdbd must have it as COMPLETED.
    let mut completed = 0;
    let mut aged_out = Vec::new();
    let mut waiting = ids.clone();
    let start = Instant::now();
    while !waiting.is_empty() {
        let now = states(&client, &waiting).await;
        waiting.retain(|id| match now.get(id) {
            Some(s) if s.is_finished() => {
                assert_eq!(s.base, BaseState::Completed, "job {id}");
                completed += 1;
                false
            }
            Some(_) => true,
            None => {
                aged_out.push(*id);
                false
            }
        });
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "jobs not finished after 180 s: {now:?}"
        );
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    if !aged_out.is_empty() {
        assert!(
            c.accounting,
            "jobs {aged_out:?} vanished from slurmctld without accounting"
        );
        let start = Instant::now();
        loop {
            let acct = client
                .accounting_jobs(&aged_out)
                .await
                .expect("slurmdb jobs");
            let done = aged_out
                .iter()
                .filter(|id| {
                    acct.get(id)
                        .is_some_and(|j| j.state.base == BaseState::Completed)
                })
                .count();
            if done == aged_out.len() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "aged-out jobs {aged_out:?} not COMPLETED in slurmdbd: {acct:?}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    eprintln!(
        "20 jobs: {completed} seen COMPLETED in slurmctld, {} aged out and COMPLETED in slurmdbd",
        aged_out.len()
    );
}
