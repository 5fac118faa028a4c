//! Real tier: connector replicas over one real Slurm (issue 19), in-process `serve_with` each,
//! with Slurm as the only state they share:
//! - replica B takes its index with an unrelated CreateTask, A submits X, the backend's retry of
//!   X lands on B: B answers with A's job and submits nothing that runs;
//! - the same CreateTasks sent to three replicas at once: one job per execution is left (the
//!   lowest id), every replica answers with it, the others were cancelled while held (slurmctld
//!   never started them), and the survivor runs to its end, its comment free of the mark.
//!
//! Skipped (with the reason) when the dev-cluster environment is not exported:
//! `deploy/dev-cluster/dev-cluster --release 24.11 run cargo test --test real_replicas`.

mod common;
use common::server::{Grpc, Server};

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "real_slurm/connector.rs"]
mod connector;
use connector::{deployment, get, request};

use std::collections::HashMap;
use std::time::{Duration, Instant};

use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::render::key_from_comment;
use slurm_connector::slurmrestd::{BaseState, JobId, JobInfo};

fn job_id(meta: &[u8]) -> JobId {
    let v: serde_json::Value = serde_json::from_slice(meta).unwrap();
    JobId(v["job_id"].as_u64().unwrap() as u32)
}

async fn create(g: &mut Grpc, req: CreateTaskRequest) -> Vec<u8> {
    g.create_task(req)
        .await
        .unwrap_or_else(|e| panic!("CreateTask: {e}"))
        .into_inner()
        .resource_meta
}

async fn phase(g: &mut Grpc, meta: &[u8]) -> Phase {
    Phase::try_from(get(g, meta).await.phase).unwrap()
}

/// The cluster's jobs (slurmctld's view) carrying one of `keys`, by key.
async fn jobs_of(c: &support::Cluster, keys: &[String]) -> HashMap<String, Vec<JobInfo>> {
    let mut m: HashMap<String, Vec<JobInfo>> = HashMap::new();
    for j in c.user_client().jobs().await.expect("jobs") {
        if let Some(k) = j.comment.as_deref().and_then(key_from_comment)
            && keys.iter().any(|want| want == k)
        {
            m.entry(k.to_string()).or_default().push(j);
        }
    }
    m
}

/// The key the connector gave `meta`'s job, read from the job's comment on the cluster.
async fn key_of(c: &support::Cluster, meta: &[u8]) -> String {
    let id = job_id(meta);
    let j = c
        .user_client()
        .job(id)
        .await
        .expect("job")
        .expect("the job is in slurmctld");
    key_from_comment(j.comment.as_deref().unwrap())
        .expect("the comment carries the key")
        .to_string()
}

async fn replicas(c: &support::Cluster, n: usize) -> (Vec<Server>, Vec<Grpc>) {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..n {
        let s = Server::start(deployment(c, 3)).await;
        clients.push(s.client().await);
        servers.push(s);
    }
    (servers, clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_task_retried_on_another_replica_gets_the_first_replicas_job() {
    let Some(c) = support::cluster() else { return };
    let (servers, mut g) = replicas(&c, 2).await;
    // B's index is taken now, before A's job exists.
    create(
        &mut g[1],
        request("other", "#!/bin/bash\n#SBATCH -t 2\necho other\n"),
    )
    .await;
    let x = request("x", "#!/bin/bash\n#SBATCH -t 2\nsleep 5\necho x\n");
    let on_a = create(&mut g[0], x.clone()).await;
    let on_b = create(&mut g[1], x).await;
    assert_eq!(job_id(&on_b), job_id(&on_a), "B answers with A's job");

    let key = key_of(&c, &on_a).await;
    let jobs = jobs_of(&c, std::slice::from_ref(&key)).await;
    let js = &jobs[&key];
    let survivors: Vec<_> = js
        .iter()
        .filter(|j| j.state.base != BaseState::Cancelled)
        .collect();
    assert_eq!(survivors.len(), 1, "{js:#?}");
    for j in js.iter().filter(|j| j.job_id != job_id(&on_a)) {
        assert_eq!(j.nodes, None, "B's duplicate {} never started", j.job_id);
    }
    for s in servers {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_racing_on_the_same_executions_leave_one_job_each() {
    let Some(c) = support::cluster() else { return };
    let (servers, clients) = replicas(&c, 3).await;
    const TASKS: usize = 8;
    let reqs: Vec<CreateTaskRequest> = (0..TASKS)
        .map(|i| {
            request(
                &format!("race{i}"),
                "#!/bin/bash\n#SBATCH -t 2\nsleep 2\necho done\n",
            )
        })
        .collect();
    let mut calls = Vec::new();
    for (task, req) in reqs.iter().enumerate() {
        for g in &clients {
            let (mut g, req) = (g.clone(), req.clone());
            calls.push(tokio::spawn(
                async move { (task, create(&mut g, req).await) },
            ));
        }
    }
    let mut answers: HashMap<usize, Vec<JobId>> = HashMap::new();
    let mut metas: HashMap<usize, Vec<u8>> = HashMap::new();
    for call in calls {
        let (task, meta) = call.await.unwrap();
        answers.entry(task).or_default().push(job_id(&meta));
        metas.insert(task, meta);
    }
    for (task, ids) in &answers {
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "task {task}: the replicas answered with different jobs {ids:?}"
        );
    }
    let mut keys = Vec::new();
    for meta in metas.values() {
        keys.push(key_of(&c, meta).await);
    }
    let jobs = jobs_of(&c, &keys).await;
    assert_eq!(jobs.len(), TASKS);
    let mut duplicates = 0;
    for (key, js) in &jobs {
        let survivors: Vec<_> = js
            .iter()
            .filter(|j| j.state.base != BaseState::Cancelled)
            .collect();
        assert_eq!(survivors.len(), 1, "{key}: {js:#?}");
        let s = survivors[0];
        assert!(
            !s.comment.as_deref().unwrap().contains("slurm-connector"),
            "the mark is gone after the release: {:?}",
            s.comment
        );
        for j in js.iter().filter(|j| j.job_id != s.job_id) {
            duplicates += 1;
            assert!(j.job_id > s.job_id, "{key}: the lowest id wins");
            assert_eq!(j.nodes, None, "{key}: duplicate {} never started", j.job_id);
        }
    }
    eprintln!("{TASKS} executions x 3 replicas: {duplicates} duplicates cancelled while held");

    // Each survivor runs to its end, seen from any replica.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut g = clients[2].clone();
    for meta in metas.values() {
        loop {
            let p = phase(&mut g, meta).await;
            if p == Phase::Succeeded {
                break;
            }
            assert!(
                Instant::now() < deadline
                    && !matches!(p, Phase::Failed | Phase::RetryableFailed | Phase::Aborted),
                "job {} ended {p:?}",
                job_id(meta)
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    for s in servers {
        s.stop().await;
    }
}
