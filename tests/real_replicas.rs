//! Real tier: connector replicas over one real Slurm (issue 19), in-process `serve_with` each,
//! with Slurm as the only state they share:
//! - replica B takes its index with an unrelated CreateTask, A submits X, the backend's retry of
//!   X lands on B: B answers with A's job and submits nothing that runs;
//! - the same CreateTasks sent to three replicas at once: one job per execution is left (the
//!   lowest id), every replica answers with it, the others were cancelled while held (slurmctld
//!   never started them), and the survivor runs to its end, its comment free of the mark.
//! - on a cluster whose slurmctld rate-limits the job user (`--rate-limit`), a fan-out of 30
//!   CreateTasks, 30 in flight with the backend's 10 s deadline each: none fails, each execution
//!   has exactly one job, and those answered before their submit was done are found by key.
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

use futures::StreamExt;

use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::render::key_of_record;
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
        if let Some(k) = key_of_record(&j, j.array.as_ref().and_then(|a| a.task_id))
            && keys.contains(&k)
        {
            m.entry(k).or_default().push(j);
        }
    }
    m
}

/// The jobs of `keys` once no replica's submit is still settling: every job not cancelled has
/// been released (its comment no longer carries the connector's hold mark). A replica whose
/// submit was deferred may land its duplicate after another's job was released; it is held
/// until that replica's duplicate check cancels it, and counting before then would count it.
/// After `within`, the jobs as they are (the assertions then say what is wrong).
async fn settled_jobs(
    c: &support::Cluster,
    keys: &[String],
    within: Duration,
) -> HashMap<String, Vec<JobInfo>> {
    let until = Instant::now() + within;
    loop {
        let jobs = jobs_of(c, keys).await;
        let holding = jobs.values().flatten().any(|j| {
            j.state.base != BaseState::Cancelled
                && j.comment
                    .as_deref()
                    .is_some_and(|m| m.contains("slurm-connector"))
        });
        if !holding || Instant::now() > until {
            return jobs;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Whether CreateTask answered before its submit was done (job_id 0, found later by its key).
fn is_deferred(meta: &[u8]) -> bool {
    String::from_utf8_lossy(meta).contains(r#""deferred""#)
}

/// The executions' keys (what the connector names their jobs by), from the requests alone (a
/// deferred meta has no job to read the key from yet).
fn keys_of(reqs: &[CreateTaskRequest]) -> Vec<String> {
    reqs.iter()
        .map(|r| {
            slurm_connector::render::idempotency_key(
                &slurm_connector::service::task_spec(r).unwrap().exec,
            )
        })
        .collect()
}

/// Waits until GetTask of every meta stops saying it is waiting to be submitted.
async fn until_submitted<'a>(
    g: &mut Grpc,
    metas: impl IntoIterator<Item = &'a Vec<u8>>,
    began: Instant,
    within: Duration,
) {
    let mut waiting: Vec<&Vec<u8>> = metas.into_iter().collect();
    while !waiting.is_empty() {
        assert!(
            began.elapsed() < within,
            "{} tasks still unsubmitted after {within:?}",
            waiting.len()
        );
        let mut still = Vec::new();
        for m in waiting {
            if get(g, m).await.message.starts_with("Not submitted yet") {
                still.push(m);
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

async fn replicas(c: &support::Cluster, n: usize) -> (Vec<Server>, Vec<Grpc>) {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..n {
        // The single-job protocol raced: tasks of one shape would otherwise be coalesced (the
        // default on every release with slurmdbd); replicas racing on coalesced arrays are
        // tests/it's `two_replicas_coalescing_the_same_burst_run_each_execution_once` and the
        // replica drill (tests/real_replica_drill.rs).
        let mut d = deployment(c, 3);
        d.coalesce = slurm_connector::config::Coalesce::Off;
        let s = Server::start(d).await;
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
    let began = Instant::now();
    let on_a = create(&mut g[0], x.clone()).await;
    let on_b = create(&mut g[1], x.clone()).await;
    // (A submit past its 5 s wait on a loaded machine answers deferred: found by key below.)
    if !is_deferred(&on_a) && !is_deferred(&on_b) {
        assert_eq!(job_id(&on_b), job_id(&on_a), "B answers with A's job");
    }
    until_submitted(&mut g[1], [&on_a, &on_b], began, Duration::from_secs(120)).await;

    let key = keys_of(std::slice::from_ref(&x)).remove(0);
    let jobs = settled_jobs(&c, std::slice::from_ref(&key), Duration::from_secs(60)).await;
    let js = &jobs[&key];
    let survivors: Vec<_> = js
        .iter()
        .filter(|j| j.state.base != BaseState::Cancelled)
        .collect();
    assert_eq!(survivors.len(), 1, "{js:#?}");
    if !is_deferred(&on_a) {
        assert_eq!(
            survivors[0].job_id,
            job_id(&on_a),
            "A's job is the one left"
        );
    }
    for j in js.iter().filter(|j| j.job_id != survivors[0].job_id) {
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
    // Answers with a job id; a replica whose submit took longer than its submit wait (a loaded
    // machine: seen in CI) answers a deferred meta instead, resolved by key below.
    let began = Instant::now();
    let mut answers: HashMap<usize, Vec<JobId>> = HashMap::new();
    let mut metas: HashMap<usize, Vec<u8>> = HashMap::new();
    for call in calls {
        let (task, meta) = call.await.unwrap();
        if !is_deferred(&meta) {
            answers.entry(task).or_default().push(job_id(&meta));
        }
        metas.insert(task, meta);
    }
    for (task, ids) in &answers {
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "task {task}: the replicas answered with different jobs {ids:?}"
        );
    }
    let mut g = clients[2].clone();
    until_submitted(&mut g, metas.values(), began, Duration::from_secs(120)).await;
    let keys = keys_of(&reqs);
    let jobs = settled_jobs(&c, &keys, Duration::from_secs(60)).await;
    assert_eq!(jobs.len(), TASKS);
    let mut duplicates = 0;
    for (task, key) in keys.iter().enumerate() {
        let js = &jobs[key];
        let survivors: Vec<_> = js
            .iter()
            .filter(|j| j.state.base != BaseState::Cancelled)
            .collect();
        assert_eq!(survivors.len(), 1, "{key}: {js:#?}");
        let s = survivors[0];
        if let Some(ids) = answers.get(&task) {
            assert_eq!(
                ids[0], s.job_id,
                "task {task}: the replicas answered the survivor"
            );
        }
        assert!(
            !s.comment
                .as_deref()
                .unwrap_or_default()
                .contains("slurm-connector"),
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

/// `FLYTE_SLURM_ONCE_ONLY=claims` (issue 52) on real Slurm: three replicas racing on the same
/// executions, with claims under a `file://` prefix of their own. The claim is held before
/// anything is submitted, so each execution has exactly one job, never a cancelled duplicate;
/// each was submitted held with the claim's mark in its comment and released with its comment
/// back; a DeleteTask after the job runs writes the tombstone and cancels it, and a CreateTask
/// retried after that submits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_claims_submit_each_execution_once() {
    use slurm_connector::config::claims::{ClaimLocation, OnceOnly};
    let Some(c) = support::cluster() else { return };
    let root = common::fresh_dir("real-claims");
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut d = deployment(&c, 3);
        // Jobs of their own here (the batch's path is the test below).
        d.coalesce = slurm_connector::config::Coalesce::Off;
        d.claims.once_only = OnceOnly::Claims;
        d.claims.location = ClaimLocation::Prefix(format!("file://{}/claims", root.display()));
        let s = Server::start(d).await;
        clients.push(s.client().await);
        servers.push(s);
    }
    const TASKS: usize = 6;
    let reqs: Vec<CreateTaskRequest> = (0..TASKS)
        .map(|i| {
            request(
                &format!("claims{i}"),
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
    let began = Instant::now();
    let mut answers: HashMap<usize, Vec<JobId>> = HashMap::new();
    let mut metas: HashMap<usize, Vec<u8>> = HashMap::new();
    for call in calls {
        let (task, meta) = call.await.unwrap();
        assert!(
            String::from_utf8_lossy(&meta).contains(r#""claim""#),
            "a meta made through a claim names it"
        );
        if !is_deferred(&meta) {
            answers.entry(task).or_default().push(job_id(&meta));
        }
        metas.insert(task, meta);
    }
    for (task, ids) in &answers {
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "task {task}: the replicas answered with different jobs {ids:?}"
        );
    }
    let mut g = clients[2].clone();
    until_submitted(&mut g, metas.values(), began, Duration::from_secs(120)).await;
    let keys = keys_of(&reqs);
    let jobs = settled_jobs(&c, &keys, Duration::from_secs(60)).await;
    assert_eq!(jobs.len(), TASKS);
    for key in &keys {
        let js = &jobs[key];
        assert_eq!(
            js.len(),
            1,
            "{key}: one job, no duplicate even cancelled: {js:#?}"
        );
        // The fixture's `sbatch_options.comment`, which the held submit's mark was added to.
        assert_eq!(
            js[0].comment.as_deref(),
            Some("nightly"),
            "{key}: the release gives the job its own comment back"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for meta in metas.values() {
        loop {
            let p = phase(&mut g, meta).await;
            if p == Phase::Succeeded {
                break;
            }
            assert!(
                Instant::now() < deadline
                    && !matches!(p, Phase::Failed | Phase::RetryableFailed | Phase::Aborted),
                "{p:?}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    // DeleteTask of a running job: the tombstone, then its cancel; a retry submits nothing.
    let x = request("claims-deleted", "#!/bin/bash\n#SBATCH -t 2\nsleep 120\n");
    let meta = create(&mut g, x.clone()).await;
    let id = job_id(&meta);
    g.delete_task(slurm_connector::proto::connector::DeleteTaskRequest {
        resource_meta: meta.clone(),
        ..Default::default()
    })
    .await
    .expect("DeleteTask");
    let key = keys_of(std::slice::from_ref(&x)).remove(0);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let p = phase(&mut g, &meta).await;
        if p == Phase::Aborted {
            break;
        }
        assert!(
            Instant::now() < until,
            "job {id:?} still {p:?} after its DeleteTask"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let again = clients[0].create_task(x).await;
    assert_eq!(
        again.as_ref().map_err(|s| s.code()).err(),
        Some(tonic::Code::Aborted),
        "{again:?}"
    );
    // Only the cancelled job (or none, once slurmctld forgot it): nothing new.
    let left: Vec<_> = jobs_of(&c, &[key]).await.into_values().flatten().collect();
    assert!(
        left.iter()
            .all(|j| j.job_id == id && j.state.base == BaseState::Cancelled),
        "{left:#?}"
    );
    for s in servers {
        s.stop().await;
    }
    let _ = std::fs::remove_dir_all(root);
}

/// `FLYTE_SLURM_ONCE_ONLY=claims` with coalescing on real Slurm, with or without slurmdbd (an
/// element is recorded in its claim, not found by keys in slurmdbd's records): a burst of 8 sent
/// to both replicas at once runs every execution once, on the element its claim records; the
/// arrays are released with their own comment (no keys, no mark).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_claims_sent_to_two_replicas_at_once_runs_each_execution_once() {
    use slurm_connector::config::claims::{ClaimLocation, OnceOnly};
    let Some(c) = support::cluster() else { return };
    let root = common::fresh_dir("real-claims-batch");
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let mut d = deployment(&c, 3);
        d.coalesce = slurm_connector::config::Coalesce::Window(Duration::from_secs(2));
        d.claims.once_only = OnceOnly::Claims;
        d.claims.location = ClaimLocation::Prefix(format!("file://{}/claims", root.display()));
        let s = Server::start(d).await;
        clients.push(s.client().await);
        servers.push(s);
    }
    const TASKS: usize = 8;
    let reqs: Vec<CreateTaskRequest> = (0..TASKS)
        .map(|i| {
            request(
                &format!("claims-batch{i}"),
                "#!/bin/bash\n#SBATCH -t 2\nsleep 1\necho done\n",
            )
        })
        .collect();
    // The burst on both replicas at once (the backend's retries landing while the first tries
    // still run): the claims may split between them into arrays with gaps, each element's meta
    // naming its array's indices.
    let began = Instant::now();
    let bursts = clients.iter().map(|g| {
        futures::future::join_all(reqs.iter().enumerate().map(|(task, req)| {
            let (mut g, req) = (g.clone(), req.clone());
            async move { (task, create(&mut g, req).await) }
        }))
    });
    let mut answered: Vec<(usize, Vec<u8>)> = futures::future::join_all(bursts)
        .await
        .into_iter()
        .flatten()
        .collect();
    // By task, the first replica's answer beside the second's.
    answered.sort_by_key(|(task, _)| *task);
    let mut g = clients[1].clone();
    until_submitted(
        &mut g,
        answered.iter().map(|(_, m)| m),
        began,
        Duration::from_secs(120),
    )
    .await;
    // Elements carry no key under claims (the array's name is its tasks' stem): the jobs are
    // the ones the answers name.
    let placed = |m: &[u8]| -> Option<(u32, Option<u32>)> {
        let v: serde_json::Value = serde_json::from_slice(m).unwrap();
        (v.get("deferred").is_none()).then(|| {
            (
                v["job_id"].as_u64().unwrap() as u32,
                v.get("element").and_then(|e| e.as_u64()).map(|e| e as u32),
            )
        })
    };
    let mut elements = 0;
    let mut ids = std::collections::BTreeSet::new();
    for pair in answered.chunks(2) {
        let (a, b) = (placed(&pair[0].1), placed(&pair[1].1));
        if let (Some(a), Some(b)) = (a, b) {
            assert_eq!(
                a, b,
                "task {}: both replicas answer with the one job",
                pair[0].0
            );
        }
        if let Some((id, element)) = a.or(b) {
            ids.insert(id);
            elements += usize::from(element.is_some());
        }
    }
    assert!(
        elements >= TASKS / 2,
        "the burst coalesced: {elements} of {TASKS} elements"
    );
    let mut live = 0;
    for id in &ids {
        for j in c.user_client().job_records(JobId(*id)).await.unwrap() {
            if j.state.base == BaseState::Cancelled {
                assert_eq!(j.nodes, None, "{id}: a cancelled element never started");
            } else {
                live += 1;
                assert!(
                    !j.comment
                        .as_deref()
                        .unwrap_or_default()
                        .contains("slurm-connector"),
                    "{id}: {:?}",
                    j.comment
                );
            }
        }
    }
    assert!(
        live <= TASKS,
        "{live} jobs run for {TASKS} tasks in {ids:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    for (_, meta) in &answered {
        loop {
            let p = phase(&mut g, meta).await;
            if p == Phase::Succeeded {
                break;
            }
            assert!(
                Instant::now() < deadline
                    && !matches!(p, Phase::Failed | Phase::RetryableFailed | Phase::Aborted),
                "{p:?}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    for s in servers {
        s.stop().await;
    }
    let _ = std::fs::remove_dir_all(root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_fan_out_is_paced_with_no_failure_and_one_job_each() {
    let Some(c) = support::cluster() else { return };
    if !c.rate_limited("real_replicas").await {
        return;
    }
    // 30 × ~3.5 RPCs is past the bucket's 30 within a second or two: most submits wait.
    const TASKS: usize = 30;
    let s = Server::start(deployment(&c, 3)).await;
    let g = s.client().await;
    let reqs: Vec<CreateTaskRequest> = (0..TASKS)
        .map(|i| request(&format!("fan{i}"), "#!/bin/bash\n#SBATCH --hold\ntrue\n"))
        .collect();
    let began = Instant::now();
    let answers: Vec<Result<Vec<u8>, tonic::Status>> = futures::stream::iter(reqs.clone())
        .map(|req| {
            let mut g = g.clone();
            async move {
                let mut r = tonic::Request::new(req);
                r.set_timeout(Duration::from_secs(10));
                g.create_task(r).await.map(|r| r.into_inner().resource_meta)
            }
        })
        .buffer_unordered(30)
        .collect()
        .await;
    let answered = began.elapsed();
    let errors: Vec<_> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert!(
        errors.is_empty(),
        "{} CreateTasks failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    let metas: Vec<Vec<u8>> = answers.into_iter().map(Result::unwrap).collect();
    let deferred = metas.iter().filter(|m| is_deferred(m)).count();
    assert!(
        deferred > 0,
        "no CreateTask waited past its 5 s: the cluster did not throttle, so nothing was tested"
    );
    // Every task gets its job: GetTask stops saying it is waiting to be submitted.
    let mut g2 = g.clone();
    until_submitted(&mut g2, &metas, began, Duration::from_secs(600)).await;
    let all = began.elapsed();
    // Exactly one live job per execution (keys from rendering the same requests).
    let keys = keys_of(&reqs);
    let jobs = settled_jobs(&c, &keys, Duration::from_secs(60)).await;
    let mut live = 0;
    for key in &keys {
        let js = jobs.get(key).map(Vec::as_slice).unwrap_or_default();
        let survivors: Vec<_> = js
            .iter()
            .filter(|j| j.state.base != BaseState::Cancelled)
            .collect();
        assert_eq!(survivors.len(), 1, "{key}: {js:#?}");
        live += 1;
        let _ = c.user_client().cancel(survivors[0].job_id, None).await;
    }
    eprintln!(
        "throttled fan-out: {TASKS} CreateTasks answered in {:.1}s, 0 errors, {deferred} deferred; \
         every task had its one job after {:.1}s; {live} live jobs",
        answered.as_secs_f64(),
        all.as_secs_f64()
    );
    s.stop().await;
}
