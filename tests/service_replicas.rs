//! Several connector replicas over one cluster (issue 19), in front of mock-slurmrestd: Slurm is
//! the only state they share, and each execution still gets exactly one job.
//! - The reported case: replica B takes its index of the cluster's jobs with an unrelated
//!   CreateTask, replica A submits task X, the backend retries X on B: B answers with A's job.
//! - A race: the same CreateTasks sent to three replicas at the same instant. Every replica
//!   answers each execution with the same job; exactly one job per execution is left, the
//!   others were cancelled while held (they never started), and the survivor runs to its end
//!   with its comment free of the connector's mark.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::drill::{self, Grpc, Mock, Server, create, job_id, request};
use mock_slurmrestd::FaultConfig;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::render::key_from_comment;
use slurm_connector::slurmrestd::{Auth, BaseState, Client, ClientConfig, JobInfo, Secret};

/// Every job slurmctld (the mock) has, as slurmrestd lists them.
async fn cluster_jobs(mock: &Mock) -> Vec<JobInfo> {
    let cfg = ClientConfig::new(
        "mock",
        mock.handle.url().parse().unwrap(),
        Auth::Static {
            token: Secret::new(mock.token()),
        },
    );
    Client::new(cfg).unwrap().jobs().await.unwrap()
}

/// The cluster's jobs by execution key.
async fn by_key(mock: &Mock) -> HashMap<String, Vec<JobInfo>> {
    let mut m: HashMap<String, Vec<JobInfo>> = HashMap::new();
    for j in cluster_jobs(mock).await {
        let key = j
            .comment
            .as_deref()
            .and_then(key_from_comment)
            .expect("every job carries its key")
            .to_string();
        m.entry(key).or_default().push(j);
    }
    m
}

async fn replicas(mock: &Mock, n: usize) -> (Vec<Server>, Vec<Grpc>) {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..n {
        let s = Server::start(mock.deployment(Duration::from_millis(200))).await;
        clients.push(s.client().await);
        servers.push(s);
    }
    (servers, clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_task_retried_on_another_replica_gets_the_first_replicas_job() {
    let mock = Mock::start(
        "replicas-retry",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (servers, mut c) = replicas(&mock, 2).await;

    // B answers an unrelated CreateTask first: its index of the cluster's jobs is taken now.
    create(&mut c[1], request(0, "#!/bin/bash\necho other\n"))
        .await
        .unwrap();
    // A answers task X.
    let x = request(1, "#!/bin/bash\nsleep 1\necho x\n");
    let on_a = create(&mut c[0], x.clone()).await.unwrap();
    // The backend's retry of X lands on B.
    let on_b = create(&mut c[1], x).await.unwrap();
    assert_eq!(job_id(&on_b), job_id(&on_a), "B answers with A's job");

    let jobs = by_key(&mock).await;
    let live: Vec<_> = jobs
        .values()
        .flatten()
        .filter(|j| j.state.base != BaseState::Cancelled)
        .map(|j| j.job_id.0)
        .collect();
    assert_eq!(live.len(), 2, "one job per execution: {live:?}");
    assert!(live.contains(&job_id(&on_a)));

    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_racing_on_the_same_executions_leave_one_job_each() {
    let mock = Mock::start(
        "replicas-race",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (servers, clients) = replicas(&mock, 3).await;
    const TASKS: u32 = 20;

    // Each execution's CreateTask reaches the three replicas at once.
    let mut calls = Vec::new();
    for task in 0..TASKS {
        for c in &clients {
            let mut c = c.clone();
            calls.push(tokio::spawn(async move {
                let meta = create(&mut c, request(task, "#!/bin/bash\nsleep 0.5\necho done\n"))
                    .await
                    .unwrap_or_else(|e| panic!("CreateTask {task}: {e}"));
                (task, meta)
            }));
        }
    }
    let mut answers: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
    for call in calls {
        let (task, meta) = call.await.unwrap();
        answers.entry(task).or_default().push(meta);
    }
    for (task, metas) in &answers {
        let ids: Vec<u32> = metas.iter().map(|m| job_id(m)).collect();
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "task {task}: the replicas answered with different jobs {ids:?}"
        );
    }

    // Every execution runs to its end on its one job.
    let mut c = clients[0].clone();
    let metas: Vec<Vec<u8>> = answers.values().map(|m| m[0].clone()).collect();
    drill::wait_all(&mut c, &metas, &[Phase::Succeeded], Duration::from_secs(60)).await;

    let jobs = by_key(&mock).await;
    assert_eq!(jobs.len(), TASKS as usize);
    let submits = mock.handle.stats().count("submit");
    for (key, js) in &jobs {
        let survivors: Vec<_> = js
            .iter()
            .filter(|j| j.state.base != BaseState::Cancelled)
            .collect();
        assert_eq!(survivors.len(), 1, "{key}: {js:#?}");
        let s = survivors[0];
        assert_eq!(s.state.base, BaseState::Completed, "{key}");
        assert!(
            !s.comment.as_deref().unwrap().contains("slurm-connector"),
            "the mark is gone after the release: {:?}",
            s.comment
        );
        // The lowest id survives; the others were cancelled before they ever ran.
        for j in js.iter().filter(|j| j.job_id != s.job_id) {
            assert!(j.job_id > s.job_id, "{key}: the lowest id wins");
            assert_eq!(j.nodes, None, "{key}: duplicate {} never started", j.job_id);
        }
    }
    eprintln!(
        "{TASKS} executions x 3 replicas: {submits} submits, {} duplicates cancelled while held",
        submits - u64::from(TASKS)
    );

    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}
