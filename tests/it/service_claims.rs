//! `FLYTE_SLURM_ONCE_ONLY=claims` (issue 52): replicas in front of mock-slurmrestd that keep each
//! execution to one job through its claim (here under a `file://` prefix of the connector's own),
//! the scenarios of `service_replicas.rs` on the claim's path:
//! - a CreateTask retried on another replica answers with the first replica's job, read from
//!   the claim, with no second submit;
//! - the same CreateTasks at three replicas at once: one job per execution, submitted once;
//! - a slow submit is answered deferred, and any replica reads its job from the claim;
//! - a deferred submit whose replica went away holding it is taken over once the holding's
//!   lease ran out, with one job;
//! - a DeleteTask before the job exists writes the tombstone: the late holder's record is
//!   refused and its held job cancelled, never released; a CreateTask after it is aborted;
//! - a job its claim records but its recorder left held is released by a GetTask's takeover;
//! - bursts coalesced through claims: read from the claims on another replica, past what keys
//!   could hold, with members held elsewhere, and the same burst at two replicas at once (arrays
//!   with gaps, which every meta names exactly).

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::drill::{
    self, Grpc, Mock, Server, create, deferred_key, delete_req, get, is_deferred, job_id,
    jobs_by_key, live_jobs, request, slow_submits, until_phase,
};
use mock_slurmrestd::FaultConfig;
use slurm_connector::config::claims::{ClaimLocation, OnceOnly};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::slurmrestd::{Auth, BaseState, Client, ClientConfig, Secret};

fn client(mock: &Mock) -> Client {
    let cfg = ClientConfig::new(
        "mock",
        mock.handle.url().parse().unwrap(),
        Auth::Static {
            token: Secret::new(mock.token()),
        },
    );
    Client::new(cfg).unwrap()
}

/// `n` replicas on claims under the mock's folder, each CreateTask waiting `wait`, holdings
/// lasting `lease`.
async fn replicas(
    mock: &Mock,
    n: usize,
    wait: Duration,
    lease: Duration,
) -> (Vec<Server>, Vec<Grpc>) {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..n {
        let mut d = mock.deployment(Duration::from_millis(200));
        d.submit_wait = wait;
        d.claims.once_only = OnceOnly::Claims;
        d.claims.location = ClaimLocation::Prefix(format!("file://{}/claims", mock.dir.display()));
        d.claims.lease = lease;
        let s = Server::start(d).await;
        clients.push(s.client().await);
        servers.push(s);
    }
    (servers, clients)
}

const WAIT: Duration = slurm_connector::config::DEFAULT_SUBMIT_WAIT;
const LEASE: Duration = Duration::from_secs(180);

fn meta_json(meta: &[u8]) -> serde_json::Value {
    serde_json::from_slice(meta).unwrap()
}

/// The claim's records, oldest first, as JSON.
fn records(meta: &[u8]) -> Vec<serde_json::Value> {
    let uri = meta_json(meta)["claim"]
        .as_str()
        .expect("a meta made through a claim names it")
        .to_string();
    let dir = std::path::PathBuf::from(uri.strip_prefix("file://").unwrap());
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
        .collect()
}

/// The file of the claim's newest record.
fn last_record(meta: &[u8]) -> std::path::PathBuf {
    let uri = meta_json(meta)["claim"].as_str().unwrap().to_string();
    let dir = std::path::PathBuf::from(uri.strip_prefix("file://").unwrap());
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .expect("a record")
}

fn state_of(record: &serde_json::Value) -> String {
    record["state"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_task_retried_on_another_replica_reads_the_job_from_its_claim() {
    let mock = Mock::start(
        "claims-retry",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (servers, mut c) = replicas(&mock, 2, WAIT, LEASE).await;
    let x = request(1, "#!/bin/bash\nsleep 1\necho x\n");
    let on_a = create(&mut c[0], x.clone()).await.unwrap();
    let on_b = create(&mut c[1], x).await.unwrap();
    assert_eq!(job_id(&on_b), job_id(&on_a), "B answers with A's job");
    assert_eq!(mock.handle.stats().count("submit"), 1);
    let states: Vec<String> = records(&on_a).iter().map(state_of).collect();
    assert_eq!(states, ["submitting", "recorded"], "{:?}", records(&on_a));
    let recorded = &records(&on_a)[1];
    assert_eq!(recorded["job"]["job_id"], job_id(&on_a), "{recorded}");
    drill::wait_all(
        &mut c[1],
        std::slice::from_ref(&on_a),
        &[Phase::Succeeded],
        Duration::from_secs(60),
    )
    .await;
    let key = slurm_connector::render::key_of_record(
        &client(&mock)
            .job_records(slurm_connector::slurmrestd::JobId(job_id(&on_a)))
            .await
            .unwrap()[0],
        None,
    )
    .unwrap();
    let live = live_jobs(&mock, &key).await;
    assert_eq!(live.len(), 1, "{live:?}");
    assert!(
        !live[0]
            .comment
            .as_deref()
            .unwrap_or_default()
            .contains("slurm-connector"),
        "the claim's mark is gone after the release: {:?}",
        live[0].comment
    );
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_racing_on_the_same_executions_submit_each_once() {
    let mock = Mock::start(
        "claims-race",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (servers, clients) = replicas(&mock, 3, WAIT, LEASE).await;
    const TASKS: u32 = 12;
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
    let mut c = clients[0].clone();
    for (task, metas) in &answers {
        // A replica that waited out another's holding longer than its wait answers deferred;
        // every meta reads the same job.
        let mut ids = Vec::new();
        for m in metas {
            if !is_deferred(m) {
                ids.push(job_id(m));
            }
            until_phase(&mut c, m, Phase::Succeeded).await;
        }
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "task {task}: the replicas answered with different jobs {ids:?}"
        );
    }
    let jobs = jobs_by_key(&mock).await;
    assert_eq!(jobs.len(), TASKS as usize, "{jobs:#?}");
    for (key, js) in &jobs {
        let survivors: Vec<_> = js
            .iter()
            .filter(|j| j.state.base != BaseState::Cancelled)
            .collect();
        assert_eq!(survivors.len(), 1, "{key}: {js:#?}");
        assert_eq!(survivors[0].state.base, BaseState::Completed, "{key}");
        for j in js.iter().filter(|j| j.job_id != survivors[0].job_id) {
            assert_eq!(
                j.nodes, None,
                "{key}: a job that lost its claim never started"
            );
        }
    }
    let submits = mock.handle.stats().count("submit");
    eprintln!("{TASKS} executions x 3 replicas: {submits} submits");
    assert_eq!(
        submits,
        u64::from(TASKS),
        "one held submit per execution: the claim is held first"
    );
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_submit_is_answered_deferred_and_any_replica_reads_its_job_from_the_claim() {
    let mock = Mock::start(
        "claims-deferred",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (servers, mut c) = replicas(&mock, 2, Duration::from_millis(300), LEASE).await;
    mock.handle.faults().set(slow_submits(2000));
    let meta = create(&mut c[0], request(1, "#!/bin/bash\nsleep 1\necho x\n"))
        .await
        .expect("answered before the submit is done, not failed");
    assert!(is_deferred(&meta), "{}", String::from_utf8_lossy(&meta));
    let (r, _) = get(&mut c[1], &meta).await;
    let r = r.unwrap();
    assert_eq!(Phase::of(r.phase), Phase::Queued);
    assert!(r.message.starts_with("Not submitted yet"), "{}", r.message);
    until_phase(&mut c[1], &meta, Phase::Succeeded).await;
    until_phase(&mut c[0], &meta, Phase::Succeeded).await;
    assert_eq!(live_jobs(&mock, &deferred_key(&meta)).await.len(), 1);
    assert_eq!(mock.handle.stats().count("submit"), 1);
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deferred_submit_whose_holder_went_away_is_taken_over_past_its_lease_with_one_job() {
    let mock = Mock::start(
        "claims-takeover",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let lease = Duration::from_secs(3);
    let (mut servers, mut c) = replicas(&mock, 2, Duration::from_millis(300), lease).await;
    // A's held submits fail (slurmrestd answers 500): A holds the claim, answers deferred and
    // keeps trying, as a stuck replica would.
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
    servers.remove(0).stop().await;
    assert_eq!(state_of(records(&meta).last().unwrap()), "submitting");
    mock.handle.faults().clear();
    // Within A's lease B only reads; past it, its GetTask queues the takeover.
    let (r, _) = get(&mut c[1], &meta).await;
    let r = r.unwrap();
    assert_eq!(Phase::of(r.phase), Phase::Queued, "{}", r.message);
    assert!(r.message.contains("is submitting it"), "{}", r.message);
    until_phase(&mut c[1], &meta, Phase::Succeeded).await;
    let live = live_jobs(&mock, &key).await;
    assert_eq!(live.len(), 1, "{live:?}");
    let states: Vec<String> = records(&meta).iter().map(state_of).collect();
    assert_eq!(
        states.last().map(String::as_str),
        Some("recorded"),
        "{states:?}"
    );
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_before_the_job_exists_writes_the_tombstone_and_the_late_job_never_runs() {
    let mock = Mock::start(
        "claims-tombstone",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (servers, mut c) = replicas(&mock, 2, Duration::from_millis(300), LEASE).await;
    mock.handle.faults().set(slow_submits(1500));
    let x = request(3, "#!/bin/bash\nsleep 30\n");
    let meta = create(&mut c[0], x.clone()).await.unwrap();
    assert!(is_deferred(&meta));
    let key = deferred_key(&meta);
    c[1].delete_task(delete_req(&meta))
        .await
        .expect("DeleteTask");
    // A's held submit lands after the tombstone: its record is refused and its job cancelled.
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let jobs = jobs_by_key(&mock).await.remove(&key).unwrap_or_default();
        if !jobs.is_empty() && jobs.iter().all(|j| j.state.base == BaseState::Cancelled) {
            for j in &jobs {
                assert_eq!(j.nodes, None, "the late job never started: {j:?}");
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "A's late job not cancelled: {jobs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(state_of(records(&meta).last().unwrap()), "deleted");
    for ci in c.iter_mut() {
        until_phase(ci, &meta, Phase::Aborted).await;
    }
    // The backend's CreateTask after it (a retry) submits nothing.
    mock.handle.faults().clear();
    let submits = mock.handle.stats().count("submit");
    let again = create(&mut c[1], x).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|s| s.code() == tonic::Code::Aborted),
        "{again:?}"
    );
    assert_eq!(mock.handle.stats().count("submit"), submits);
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

/// The replica that recorded a job died before releasing it (its releases failed until it went
/// away) and its CreateTask had been answered deferred: another replica's GetTask reads the job
/// from the claim, the tracker sees it held for its claim past `pending_detail_after` (30 s),
/// and the cluster's takeover task releases it with its own comment back. One job, run once.
/// While the record names another holding's marker than the job carries, nothing releases it
/// (a mutant that ignores the marker fails here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recorded_job_left_held_is_released_through_a_get_task() {
    let mock = Mock::start(
        "claims-left-held",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (mut servers, mut c) = replicas(&mock, 2, Duration::from_millis(300), LEASE).await;
    mock.handle.faults().set(FaultConfig {
        error_rate: 1.0,
        error_statuses: vec![500],
        operations: vec!["job_update".into()],
        ..FaultConfig::default()
    });
    let meta = create(&mut c[0], request(4, "#!/bin/bash\necho left held\n"))
        .await
        .unwrap();
    assert!(is_deferred(&meta));
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while state_of(records(&meta).last().unwrap()) != "recorded" {
        assert!(std::time::Instant::now() < until, "{:?}", records(&meta));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    servers.remove(0).stop().await;
    mock.handle.faults().clear();
    let key = deferred_key(&meta);
    let held = live_jobs(&mock, &key).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].reason.as_deref(), Some("JobHeldUser"), "{held:?}");
    // While the record names another holding's marker than the held job's comment carries (as
    // when a restarted slurmctld gave the id to another execution's held job), nothing releases
    // it: past the tracker's 30 s and the takeover, it is still held.
    let last = last_record(&meta);
    let recorded = std::fs::read(&last).unwrap();
    let mut other: serde_json::Value = serde_json::from_slice(&recorded).unwrap();
    assert!(other["marker"].is_string(), "{other}");
    other["marker"] = "another-holding".into();
    std::fs::write(&last, serde_json::to_vec(&other).unwrap()).unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(40);
    while std::time::Instant::now() < until {
        let (r, _) = drill::get(&mut c[1], &meta).await;
        assert_ne!(Phase::of(r.unwrap().phase), Phase::Succeeded);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let still = live_jobs(&mock, &key).await;
    assert_eq!(still[0].reason.as_deref(), Some("JobHeldUser"), "{still:?}");
    std::fs::write(&last, &recorded).unwrap();
    let message = until_phase(&mut c[1], &meta, Phase::Succeeded).await;
    let live = live_jobs(&mock, &key).await;
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].job_id, held[0].job_id, "{message}");
    assert!(
        !live[0]
            .comment
            .as_deref()
            .unwrap_or_default()
            .contains("slurm-connector"),
        "{:?}",
        live[0].comment
    );
    assert_eq!(mock.handle.stats().count("submit"), 1);
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

/// A replica on claims (under the mock's folder) coalescing with a 2 s window (its quiet gap
/// 50 ms), the mock's jobs folder its shared filesystem.
fn coalescing_on_claims(mock: &Mock) -> slurm_connector::config::DeploymentConfig {
    let jobs = mock.dir.join("jobs");
    let mut cluster = mock.cluster(mock.static_auth(), None);
    cluster.shared_mounts = vec![(jobs.display().to_string(), jobs)];
    let mut d = common::mock::deployment(cluster, Duration::from_millis(100));
    d.coalesce = slurm_connector::config::Coalesce::Window(Duration::from_secs(2));
    d.claims.once_only = OnceOnly::Claims;
    d.claims.location = ClaimLocation::Prefix(format!("file://{}/claims", mock.dir.display()));
    d
}

/// A mock and two replicas coalescing on claims in front of it.
async fn two_coalescing_replicas(name: &str) -> (Mock, Vec<Server>, Vec<Grpc>) {
    let mock = Mock::start(name, Duration::from_secs(600), FaultConfig::default()).await;
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let s = Server::start(coalescing_on_claims(&mock)).await;
        clients.push(s.client().await);
        servers.push(s);
    }
    (mock, servers, clients)
}

/// A burst coalesced on one replica on claims, then sent again to another: every execution runs
/// once, on the element its claim records, and both replicas answer with it (the second from the
/// claims, submitting nothing). A retried CreateTask reads its element from its claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_coalesced_on_one_replica_is_read_from_its_claims_on_another() {
    use common::RequestExt;
    use slurm_connector::service::{Decoded, ResourceMeta, decode_meta};
    let (mock, servers, clients) = two_coalescing_replicas("claims-coalesce").await;
    let jobs = mock.dir.join("jobs");
    let meta_of = |m: &[u8]| -> ResourceMeta {
        match decode_meta(m).unwrap() {
            Decoded::Ours(m) => m,
            Decoded::Python { .. } => panic!(),
        }
    };
    let script = format!(
        "#!/bin/bash\necho ran >> {}/\"$FLYTE_INTERNAL_EXECUTION_ID\".count\nsleep 0.3\n",
        jobs.display()
    );
    let n = 10;
    // The burst on A, then again on B (Flyte's backend retrying each CreateTask on another
    // replica): B submits nothing. Both at once: the test after the next.
    let burst = |c: Grpc| {
        let script = script.clone();
        futures::future::join_all((0..n).map(move |i| {
            let (mut c, script) = (c.clone(), script.clone());
            async move {
                let run = format!("claimed-{i}");
                let meta = create(&mut c, request(0, &script).run_name(&run))
                    .await
                    .unwrap();
                (run, meta)
            }
        }))
    };
    let on_a = burst(clients[0].clone()).await;
    let on_b = burst(clients[1].clone()).await;
    let answers: Vec<(String, Vec<u8>)> = on_a
        .into_iter()
        .zip(on_b)
        .flat_map(|(a, b)| [a, b])
        .collect();
    let mut c = clients[0].clone();
    let mut elements = 0;
    for pair in answers.chunks(2) {
        let (a, b) = (meta_of(&pair[0].1), meta_of(&pair[1].1));
        if a.deferred.is_none() && b.deferred.is_none() {
            assert_eq!(
                (a.job_id, a.element),
                (b.job_id, b.element),
                "{}: both replicas answer with the one job",
                pair[0].0
            );
        }
        elements += usize::from(a.element.is_some());
        until_phase(&mut c, &pair[0].1, Phase::Succeeded).await;
        until_phase(&mut c, &pair[1].1, Phase::Succeeded).await;
    }
    assert!(
        elements > n / 2,
        "the burst coalesced: {elements} of {n} elements"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 0..n {
        let ran =
            std::fs::read_to_string(jobs.join(format!("claimed-{i}.count"))).unwrap_or_default();
        assert_eq!(
            ran.lines().count(),
            1,
            "claimed-{i} ran {} times",
            ran.lines().count()
        );
    }
    let submits = mock.handle.stats().count("submit");
    assert!(
        submits <= 2,
        "{submits} submits for a burst of {n} on one replica, then read from claims on the other"
    );
    // A retried CreateTask of one element reads it from its claim.
    let first = meta_of(&answers[6].1);
    let again = meta_of(
        &create(
            &mut clients[1].clone(),
            request(0, &script).run_name("claimed-3"),
        )
        .await
        .unwrap(),
    );
    assert_eq!((again.job_id, again.element), (first.job_id, first.element));
    assert_eq!(
        mock.handle.stats().count("submit"),
        submits,
        "nothing submitted again"
    );
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}

/// Under claims an array holds what `MaxArraySize` allows, not what keys fit in a name, a
/// comment or log file names: a burst of 100 is one array of 100 (keys would cap it at 22 here, where the mock shows
/// no slurm.conf, and at 88 anywhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_past_what_keys_could_hold_is_one_array() {
    use common::RequestExt;
    let mock = Mock::start(
        "claims-large",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let server = Server::start(coalescing_on_claims(&mock)).await;
    let c = server.client().await;
    let n = 100;
    // A batch goes out once none joined it for 50 ms: a loaded machine can split a burst, so up
    // to three are sent; a cap at what keys hold would split every one.
    let mut tries = 0;
    let metas = loop {
        tries += 1;
        let metas: Vec<Vec<u8>> = futures::future::join_all((0..n).map(|i| {
            let mut c = c.clone();
            async move {
                let run = format!("large-{tries}-{i}");
                create(
                    &mut c,
                    request(0, "#!/bin/bash\necho large\n").run_name(&run),
                )
                .await
                .unwrap()
            }
        }))
        .await;
        let arrays: std::collections::BTreeMap<u32, usize> =
            metas.iter().fold(Default::default(), |mut m, meta| {
                *m.entry(job_id(meta)).or_default() += 1;
                m
            });
        let largest = arrays.values().max().copied().unwrap_or_default();
        if largest > 88 {
            break metas;
        }
        assert!(
            tries < 3,
            "three bursts of {n}, the last in arrays of {arrays:?}"
        );
    };
    let mut c = c.clone();
    for m in metas.iter().step_by(17) {
        until_phase(&mut c, m, Phase::Succeeded).await;
    }
    server.stop().await;
    mock.stop().await;
}

/// A batch whose members another replica already holds: the array holds only the rest (indices
/// with gaps), and every element runs to its end; the held ones are answered from their claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_with_members_held_elsewhere_runs_every_element() {
    use common::RequestExt;
    let mock = Mock::start(
        "claims-sparse",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let (b_server, b) = {
        let mut d = coalescing_on_claims(&mock);
        d.coalesce = slurm_connector::config::Coalesce::Off;
        d.submit_wait = Duration::from_millis(300);
        let s = Server::start(d).await;
        let c = s.client().await;
        (s, c)
    };
    let a_server = Server::start(coalescing_on_claims(&mock)).await;
    let a = a_server.client().await;
    let req = |i: usize| request(0, "#!/bin/bash\necho sparse\n").run_name(&format!("sparse-{i}"));
    // B holds 1, 3 and 6 but cannot submit yet.
    mock.handle.faults().set(FaultConfig {
        error_rate: 1.0,
        error_statuses: vec![500],
        operations: vec!["submit".into()],
        ..FaultConfig::default()
    });
    for i in [1, 3, 6] {
        assert!(is_deferred(&create(&mut b.clone(), req(i)).await.unwrap()));
    }
    mock.handle.faults().clear();
    let metas: Vec<Vec<u8>> = futures::future::join_all((0..10).map(|i| {
        let mut a = a.clone();
        async move { create(&mut a, req(i)).await.unwrap() }
    }))
    .await;
    let mut c = a.clone();
    for m in &metas {
        until_phase(&mut c, m, Phase::Succeeded).await;
    }
    // Every element's meta names the indices its array has: the members B held are no
    // elements of A's arrays (a batch's index is its member's place in it).
    let named = metas_name_their_arrays(&mock, &metas).await;
    let elements: usize = named.values().map(|indices| indices.len()).sum();
    assert!(
        (2..=7).contains(&elements),
        "A's arrays hold the 7 members B did not: {named:?}"
    );
    a_server.stop().await;
    b_server.stop().await;
    mock.stop().await;
}

/// Each meta that names an element names its array's indices exactly as the cluster has them
/// (elements not cancelled); the arrays by id, with their indices.
async fn metas_name_their_arrays(
    mock: &Mock,
    metas: &[Vec<u8>],
) -> std::collections::BTreeMap<u32, std::collections::BTreeSet<u32>> {
    use slurm_connector::service::{Decoded, decode_meta};
    let mut actual: std::collections::BTreeMap<u32, std::collections::BTreeSet<u32>> =
        Default::default();
    for j in drill::cluster_jobs(mock).await {
        if let Some(a) = j.array
            && j.state.base != BaseState::Cancelled
            && let Some(i) = a.task_id
        {
            actual.entry(a.array_job_id.0).or_default().insert(i);
        }
    }
    for meta in metas {
        let Decoded::Ours(m) = decode_meta(meta).unwrap() else {
            panic!("our meta")
        };
        if m.element.is_none() {
            continue;
        }
        let named: std::collections::BTreeSet<u32> =
            m.array_indices().unwrap().unwrap().into_iter().collect();
        assert_eq!(
            Some(&named),
            actual.get(&m.job_id.0),
            "element {:?} of array {}: its meta names {:?}",
            m.element,
            m.job_id,
            m.array
        );
    }
    actual
}

/// The same burst at two replicas at the same instant: the claims split between them, each
/// replica's array holding the members it held (gaps where the other holds one). Every element
/// runs once, to its end, whichever replica is asked, and every meta names exactly the indices
/// its array has (the claim's record gives them to the replica that reads it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_at_two_replicas_at_once_runs_each_element_once_to_its_end() {
    use common::RequestExt;
    let (mock, servers, clients) = two_coalescing_replicas("claims-split").await;
    let jobs = mock.dir.join("jobs");
    let script = format!(
        "#!/bin/bash\necho ran >> {}/\"$FLYTE_INTERNAL_EXECUTION_ID\".count\nsleep 0.3\n",
        jobs.display()
    );
    let n = 12;
    // A split is likely, not certain: three bursts.
    for round in 0..3 {
        let burst = |c: Grpc| {
            let script = script.clone();
            futures::future::join_all((0..n).map(move |i| {
                let (mut c, script) = (c.clone(), script.clone());
                async move {
                    let run = format!("split-{round}-{i}");
                    create(&mut c, request(0, &script).run_name(&run))
                        .await
                        .unwrap()
                }
            }))
        };
        let (on_a, on_b) = futures::join!(burst(clients[0].clone()), burst(clients[1].clone()));
        let metas: Vec<Vec<u8>> = on_a.into_iter().chain(on_b).collect();
        for (k, m) in metas.iter().enumerate() {
            // The other replica than the one that answered, half the time.
            let mut c = clients[(k / n + k % 2) % 2].clone();
            until_phase(&mut c, m, Phase::Succeeded).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        for i in 0..n {
            let ran = std::fs::read_to_string(jobs.join(format!("split-{round}-{i}.count")))
                .unwrap_or_default();
            let times = ran.lines().count();
            assert_eq!(times, 1, "split-{round}-{i} ran {times} times");
        }
        let arrays = metas_name_their_arrays(&mock, &metas).await;
        eprintln!("arrays of burst {round} at two replicas: {arrays:?}");
    }
    for s in servers {
        s.stop().await;
    }
    mock.stop().await;
}
