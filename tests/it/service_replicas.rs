//! Several connector replicas over one cluster (issue 19), in front of mock-slurmrestd: Slurm is
//! the only state they share, and each execution still gets exactly one job.
//! - The reported case: replica B takes its index of the cluster's jobs with an unrelated
//!   CreateTask, replica A submits task X, the backend retries X on B: B answers with A's job.
//! - A race: the same CreateTasks sent to three replicas at the same instant. Every replica
//!   answers each execution with the same job; exactly one job per execution is left, the
//!   others were cancelled while held (they never started), and the survivor runs to its end
//!   with its comment free of the connector's mark.
//! - Deferred submits (`service/submit/deferred.rs`): a CreateTask whose submit is slow is answered
//!   before its deadline with a deferred meta that any replica resolves to the one job; a
//!   replica that sees one long unsubmitted takes it over (still one job); a DeleteTask before
//!   the job exists leaves nothing running, even when the submit was already on its way.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::drill::{
    self, Grpc, Mock, Server, cluster_jobs, create, deferred_key, delete_req, get, is_deferred,
    job_id, jobs_by_key, live_jobs, request, slow_submits, until_phase,
};
use mock_slurmrestd::FaultConfig;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::slurmrestd::{Auth, BaseState, Client, ClientConfig, Secret};

async fn replicas(mock: &Mock, n: usize) -> (Vec<Server>, Vec<Grpc>) {
    replicas_waiting(mock, n, slurm_connector::config::DEFAULT_SUBMIT_WAIT).await
}

/// Replicas whose CreateTask waits `wait` for its submit.
async fn replicas_waiting(mock: &Mock, n: usize, wait: Duration) -> (Vec<Server>, Vec<Grpc>) {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..n {
        let mut d = mock.deployment(Duration::from_millis(200));
        d.submit_wait = wait;
        let s = Server::start(d).await;
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

    let jobs = jobs_by_key(&mock).await;
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

    let jobs = jobs_by_key(&mock).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_submit_is_answered_deferred_and_any_replica_finds_its_one_job() {
    let mock = Mock::start("deferred", Duration::from_secs(600), FaultConfig::default()).await;
    let (servers, mut c) = replicas_waiting(&mock, 2, Duration::from_millis(300)).await;
    mock.handle.faults().set(slow_submits(2000));
    let began = std::time::Instant::now();
    let meta = create(&mut c[0], request(1, "#!/bin/bash\nsleep 1\necho x\n"))
        .await
        .expect("answered before the submit is done, not failed");
    assert!(
        began.elapsed() < Duration::from_millis(1500),
        "{:?}",
        began.elapsed()
    );
    assert!(is_deferred(&meta), "{}", String::from_utf8_lossy(&meta));
    let key = deferred_key(&meta);
    let (r, _) = get(&mut c[0], &meta).await;
    let r = r.unwrap();
    assert_eq!(Phase::of(r.phase), Phase::Queued);
    assert!(r.message.starts_with("Not submitted yet"), "{}", r.message);
    // Its logs meanwhile: a line saying so, and a token to come back with, never an empty one
    // (which tells the reader the logs are complete, before the job ever ran).
    for token in ["", slurm_connector::staging::logs::NOT_STARTED_TOKEN] {
        let (token_back, lines) = logs_page(&mut c[0], &meta, token).await;
        assert_eq!(
            token_back,
            slurm_connector::staging::logs::NOT_STARTED_TOKEN
        );
        assert!(lines[0].contains("Not submitted yet"), "{lines:?}");
    }
    // The replica that did not accept it finds the job by its key once it exists, and both
    // follow it to its end.
    until_phase(&mut c[1], &meta, Phase::Succeeded).await;
    until_phase(&mut c[0], &meta, Phase::Succeeded).await;
    assert_eq!(live_jobs(&mock, &key).await.len(), 1);
    assert_eq!(mock.handle.stats().count("submit"), 1);
    for s in servers {
        s.stop().await;
    }
    mock.handle.shutdown().await;
}

/// One GetTaskLogs page: its next token and its lines.
async fn logs_page(c: &mut Grpc, meta: &[u8], token: &str) -> (String, Vec<String>) {
    use slurm_connector::proto::connector::{GetTaskLogsRequest, get_task_logs_response::Part};
    let mut stream = c
        .get_task_logs(GetTaskLogsRequest {
            resource_meta: meta.to_vec(),
            token: token.into(),
            ..Default::default()
        })
        .await
        .expect("GetTaskLogs")
        .into_inner();
    let (mut next, mut lines) = (None, Vec::new());
    while let Some(m) = stream.message().await.unwrap() {
        match m.part {
            Some(Part::Header(h)) => next = Some(h.token),
            Some(Part::Body(b)) => lines.extend(b.results),
            None => {}
        }
    }
    (next.expect("a header"), lines)
}

/// The duplicate check's first look at slurmdbd (a week of Flyte jobs) may take longer than the
/// 8 s an RPC-bound call gets: seen with 6034 jobs on a loaded machine, where every try timed out
/// and nothing was ever submitted. The check has the submit's own timeout: CreateTask answers
/// deferred, and the job is submitted once the check is done, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slurmdbd_slower_than_an_rpc_delays_the_first_submit_without_failing_it() {
    let slow_dbd = FaultConfig {
        slurmdbd_latency_ms: 9_000,
        ..FaultConfig::default()
    };
    let mock = Mock::start("slow-index", Duration::from_secs(600), slow_dbd).await;
    // Its accounting comes no sooner (each slurmdbd answer takes 9 s, longer than this wait):
    // the terminal answer is held this long, then says why.
    let mut d = mock.deployment(Duration::from_millis(200));
    d.submit_wait = Duration::from_millis(500);
    d.accounting_wait = Duration::from_secs(5);
    let servers = vec![Server::start(d).await];
    let mut c = [servers[0].client().await];
    let meta = create(&mut c[0], request(1, "#!/bin/bash\necho slow index\n"))
        .await
        .expect("answered deferred, not failed");
    assert!(is_deferred(&meta), "{}", String::from_utf8_lossy(&meta));
    let message = until_phase(&mut c[0], &meta, Phase::Succeeded).await;
    assert!(
        message.contains("no Slurm accounting: slurmdbd had no final record"),
        "{message}"
    );
    assert_eq!(mock.handle.stats().count("submit"), 1, "{message}");
    assert_eq!(live_jobs(&mock, &deferred_key(&meta)).await.len(), 1);
    for s in servers {
        s.stop().await;
    }
    mock.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deferred_submit_left_unmade_is_taken_over_by_another_replica_with_one_job() {
    let mock = Mock::start("takeover", Duration::from_secs(600), FaultConfig::default()).await;
    let (mut servers, mut c) = replicas_waiting(&mock, 2, Duration::from_millis(300)).await;
    // A's submit fails (slurmrestd answers 500) until the faults clear: A answers deferred and
    // keeps trying in the background, as a stuck replica would.
    mock.handle.faults().set(FaultConfig {
        error_rate: 1.0,
        error_statuses: vec![500],
        operations: vec!["submit".into()],
        ..FaultConfig::default()
    });
    let meta = create(&mut c[0], request(2, "#!/bin/bash\necho taken over\n"))
        .await
        .unwrap();
    assert!(is_deferred(&meta));
    let key = deferred_key(&meta);
    // A goes away with its submit unmade (a stopping replica begins no submit): only a takeover
    // by B can make the job now.
    servers.remove(0).stop().await;
    // The same meta as B sees it past the take-over age (the backend hands metas back verbatim).
    let mut old: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    let at = old["deferred"]["at"].as_i64().unwrap();
    old["deferred"]["at"] = (at - 400).into();
    let old = serde_json::to_vec(&old).unwrap();
    mock.handle.faults().clear();
    let (r, _) = get(&mut c[1], &old).await;
    let r = r.unwrap();
    assert_eq!(Phase::of(r.phase), Phase::Queued, "{}", r.message);
    // B's takeover task submits it; the meta A answered reads the same job on B.
    until_phase(&mut c[1], &old, Phase::Succeeded).await;
    until_phase(&mut c[1], &meta, Phase::Succeeded).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let live = live_jobs(&mock, &key).await;
    assert_eq!(live.len(), 1, "{live:?}");
    for s in servers {
        s.stop().await;
    }
    mock.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_before_the_job_exists_leaves_nothing_running_even_with_the_submit_on_its_way() {
    let mock = Mock::start(
        "tombstone",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (servers, mut c) = replicas_waiting(&mock, 2, Duration::from_millis(300)).await;
    mock.handle.faults().set(slow_submits(1500));
    let meta = create(&mut c[0], request(3, "#!/bin/bash\nsleep 30\n"))
        .await
        .unwrap();
    assert!(is_deferred(&meta));
    let key = deferred_key(&meta);
    // The backend aborts the task through the other replica while A's submit is in flight.
    c[1].delete_task(delete_req(&meta))
        .await
        .expect("DeleteTask");
    // By then A's submit (1.5 s) has landed; its job is cancelled soon after (waited for, not
    // assumed at a fixed time: a loaded machine is slower).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let jobs = jobs_by_key(&mock).await.remove(&key).unwrap_or_default();
        assert!(!jobs.is_empty(), "the tombstone and A's job exist");
        if jobs.iter().all(|j| j.state.base == BaseState::Cancelled) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "not all cancelled 34 s after the delete: {:?}",
            jobs.iter()
                .map(|j| (j.job_id, j.state.base.clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And the task reads as ended on either replica, not as a job to wait for.
    for ci in c.iter_mut() {
        until_phase(ci, &meta, Phase::Aborted).await;
    }
    for s in servers {
        s.stop().await;
    }
    mock.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_duplicate_nobody_settled_is_cancelled_by_the_next_check() {
    let mock = Mock::start("strays", Duration::from_secs(600), FaultConfig::default()).await;
    let (servers, mut c) = replicas(&mock, 1).await;
    let x = create(&mut c[0], request(1, "#!/bin/bash\nsleep 2\n"))
        .await
        .unwrap();
    let first = cluster_jobs(&mock)
        .await
        .into_iter()
        .find(|j| j.job_id.0 == job_id(&x))
        .unwrap();
    // A submit of the same execution that slurmrestd carried out after its caller gave up: held,
    // marked for the check, and nobody left to settle it.
    let cfg = ClientConfig::new(
        "mock",
        mock.handle.url().parse().unwrap(),
        Auth::Static {
            token: Secret::new(mock.token()),
        },
    );
    let raw = Client::new(cfg).unwrap();
    let late = raw
        .submit(&slurm_connector::slurmrestd::JobDescription {
            name: first.name.clone(),
            script: "#!/bin/bash\nsleep 2\n".into(),
            current_working_directory: "/tmp".into(),
            environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
            comment: Some(format!(
                "{}{}",
                first.comment.clone().unwrap(),
                slurm_connector::service::AWAITING_CHECK
            )),
            hold: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    // Any later CreateTask's check sees it below nobody, above the released job: cancelled.
    create(&mut c[0], request(2, "#!/bin/bash\ntrue\n"))
        .await
        .unwrap();
    let j = cluster_jobs(&mock)
        .await
        .into_iter()
        .find(|j| j.job_id == late)
        .unwrap();
    assert_eq!(j.state.base, BaseState::Cancelled, "{j:?}");
    assert_eq!(j.nodes, None, "it never started");
    for s in servers {
        s.stop().await;
    }
    mock.handle.shutdown().await;
}
