//! Job files through the whole service, in front of mock-slurmrestd (which really runs the batch
//! scripts, so the exit-status marker is really written by the rendered script):
//! - retention: a finished (or deleted) job's logs, marker and outputs folder are removed the
//!   configured time after its task ended — not while it runs, not before the time;
//! - no accounting: a job that aged out of slurmctld between two polls, with slurmdbd down, ends
//!   SUCCEEDED / FAILED with its exit code from the marker instead of being reported lost;
//! - job arrays: each element's marker (`<job>_<index>.exit`) resolves it the same way, and
//!   retention removes every element's logs and marker.

use crate::common;
use common::mock::Mock;
use common::server::Server;
use common::{RequestExt, get_req, mock_request};

use std::path::Path;
use std::time::{Duration, Instant};

use mock_slurmrestd::{FaultConfig, MockConfig};
use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::{CreateTaskRequest, DeleteTaskRequest, Resource};
use slurm_connector::proto::core::task_execution::Phase;
use tonic::transport::Channel;

async fn mock(tag: &str, min_job_age: Duration, faults: FaultConfig) -> Mock {
    Mock::start_with(
        tag,
        MockConfig {
            nodes: 1,
            cpus: 16,
            min_job_age,
            faults,
            ..Mock::config()
        },
    )
    .await
}

/// The mock runs jobs on this machine: the shared filesystem is the same path on both sides.
fn deployment(env: &Mock, poll: Duration, retention: Option<Duration>) -> DeploymentConfig {
    let jobs = env.jobs();
    let mut c = env.cluster(env.static_auth(), None);
    c.shared_mounts = vec![(jobs.display().to_string(), jobs)];
    let mut d = common::mock::deployment(c, poll);
    d.job_files_retention = retention;
    d
}

/// The script fixture with its own script and attempt number (a distinct execution each).
fn request(fixture: &str, script: &str, attempt: u32, prefix: Option<&str>) -> CreateTaskRequest {
    let mut req = mock_request(fixture).script(script).attempt(attempt);
    if let Some(p) = prefix {
        req.output_prefix = p.to_string();
    }
    req
}

async fn get(c: &mut AsyncConnectorServiceClient<Channel>, meta: &[u8]) -> Resource {
    c.get_task(get_req(meta))
        .await
        .expect("GetTask never fails")
        .into_inner()
        .resource
        .unwrap()
}

fn terminal(p: i32) -> bool {
    Phase::of(p).is_terminal()
}

async fn wait_phase(
    c: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
    done: impl Fn(i32) -> bool,
    within: Duration,
) -> Resource {
    let start = Instant::now();
    loop {
        let r = get(c, meta).await;
        if done(r.phase) {
            return r;
        }
        assert!(
            start.elapsed() < within,
            "no such phase within {within:?}; last: {:?} {}",
            Phase::try_from(r.phase),
            r.message
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn custom_str(r: &Resource, key: &str) -> String {
    let v = r.custom_info.as_ref().unwrap().fields.get(key).unwrap();
    match &v.kind {
        Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
        other => panic!("{key}: {other:?}"),
    }
}

fn custom_num(r: &Resource, key: &str) -> u64 {
    let v = r.custom_info.as_ref().unwrap().fields.get(key).unwrap();
    match &v.kind {
        Some(prost_types::value::Kind::NumberValue(n)) => *n as u64,
        other => panic!("{key}: {other:?}"),
    }
}

/// The marker at `path` without its job id, once that id is checked to be `r`'s job.
fn marker_of(path: &Path, r: &Resource) -> String {
    let m = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    common::request::marker_without_job(&m, r)
}

/// Every file the job left in the working directory (names only).
fn job_files(workdir: &Path, job_name: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(workdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(job_name))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_files_are_removed_after_the_retention_time_and_running_ones_kept() {
    let env = mock(
        "retention",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let keep = Duration::from_secs(4);
    let server = Server::start(deployment(&env, Duration::from_millis(200), Some(keep))).await;
    let mut c = server.client().await;
    let jobs = env.dir.join("jobs");

    // One job with an outputs folder that finishes, one that keeps running throughout.
    let short = c
        .create_task(request(
            "script_preprocess.pb",
            "#!/bin/bash\nsleep 1\nmkdir -p \"$FLYTE_OUTPUT_SHARDS\"\necho f > \"$FLYTE_OUTPUT_SHARDS/a\"\necho s > \"$FLYTE_OUTPUT_STATS\"\n",
            0,
            Some(&format!("file://{}", env.dir.join("store").display())),
        ))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let long = c
        .create_task(request(
            "script_no_io.pb",
            "#!/bin/bash\nsleep 60\n",
            1,
            None,
        ))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;

    let running = wait_phase(
        &mut c,
        &short,
        |p| p == Phase::Running as i32,
        Duration::from_secs(20),
    )
    .await;
    let short_name = custom_str(&running, "job_name");
    let end = wait_phase(&mut c, &short, terminal, Duration::from_secs(30)).await;
    assert_eq!(end.phase, Phase::Succeeded as i32, "{}", end.message);
    let ended = Instant::now();
    let long_res = wait_phase(
        &mut c,
        &long,
        |p| p == Phase::Running as i32,
        Duration::from_secs(20),
    )
    .await;
    let long_name = custom_str(&long_res, "job_name");

    // Right after the end: everything is still there (logs, marker, outputs folder).
    let files = job_files(&jobs, &short_name);
    for suffix in [".out", ".err", ".exit", ".outputs"] {
        assert!(
            files.contains(&format!("{short_name}{suffix}")),
            "{suffix} missing right after the task ended: {files:?}"
        );
    }
    assert_eq!(
        marker_of(&jobs.join(format!("{short_name}.exit")), &end),
        "0 - -\n"
    );
    // Half the retention time later: still there (several sweeps have run meanwhile).
    tokio::time::sleep(keep / 2).await;
    if ended.elapsed() < keep {
        let files = job_files(&jobs, &short_name);
        assert_eq!(
            files.len(),
            4,
            "removed before the retention time: {files:?}"
        );
    }
    // After the retention time: gone, the shared root and the running job untouched.
    let start = Instant::now();
    while !job_files(&jobs, &short_name).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "files of the finished job still there: {:?}",
            job_files(&jobs, &short_name)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        ended.elapsed() >= keep,
        "removed {:?} after the end, before the retention time {keep:?}",
        ended.elapsed()
    );
    assert!(jobs.is_dir());
    let long_files = job_files(&jobs, &long_name);
    assert!(
        long_files.contains(&format!("{long_name}.out")),
        "a running job's files must stay: {long_files:?}"
    );
    assert_eq!(get(&mut c, &long).await.phase, Phase::Running as i32);

    // A deleted task's files go the same way, even if nobody asks about it again.
    c.delete_task(DeleteTaskRequest {
        resource_meta: long.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let deleted = Instant::now();
    while !job_files(&jobs, &long_name).is_empty() {
        assert!(
            deleted.elapsed() < Duration::from_secs(30),
            "files of the deleted job still there: {:?}",
            job_files(&jobs, &long_name)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        deleted.elapsed() >= keep,
        "removed before the retention time"
    );
    server.stop().await;
    env.handle.shutdown().await;
    std::fs::remove_dir_all(&env.dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_accounting_an_aged_out_job_ends_with_the_exit_code_of_its_marker() {
    // MinJobAge 1 s and a tracker polling every 4 s: the jobs run, end and leave slurmctld between
    // two polls. slurmdbd goes down once the jobs are submitted (CreateTask rightly refuses to
    // submit while it cannot check slurmdbd for an earlier job): no record anywhere, as on a
    // cluster without accounting.
    let env = mock("marker", Duration::from_secs(1), FaultConfig::default()).await;
    let server = Server::start(deployment(&env, Duration::from_secs(4), None)).await;
    let mut c = server.client().await;
    let jobs = env.dir.join("jobs");

    let ok = c
        .create_task(request(
            "script_no_io.pb",
            "#!/bin/bash\necho fine\n",
            0,
            None,
        ))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let bad = c
        .create_task(request(
            "script_no_io.pb",
            "#!/bin/bash\nset -e\necho failing >&2\nexit 3\n",
            1,
            None,
        ))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    env.handle.faults().set(FaultConfig {
        slurmdbd_down: true,
        ..FaultConfig::default()
    });

    let r = wait_phase(&mut c, &ok, terminal, Duration::from_secs(40)).await;
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    assert!(r.message.contains("exit-status marker"), "{}", r.message);
    assert!(r.message.contains("COMPLETED"), "{}", r.message);
    assert!(!r.message.contains("cannot be determined"), "{}", r.message);

    let r = wait_phase(&mut c, &bad, terminal, Duration::from_secs(40)).await;
    // The user's code failed (exit 3): retryable, so the task's `retries` apply.
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert!(r.message.starts_with("[FAILED] job "), "{}", r.message);
    assert!(r.message.contains("exit code 3:0"), "{}", r.message);
    assert!(r.message.contains("exit-status marker"), "{}", r.message);
    // The failure message still carries the stderr tail.
    assert!(r.message.contains("failing"), "{}", r.message);
    let name = custom_str(&r, "job_name");
    assert_eq!(marker_of(&jobs.join(format!("{name}.exit")), &r), "3 - -\n");

    server.stop().await;
    env.handle.shutdown().await;
    std::fs::remove_dir_all(&env.dir).ok();
}

/// A job array on a cluster without accounting whose elements end and leave slurmctld between
/// two polls: each element's own marker says how it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_accounting_an_arrays_elements_are_resolved_from_their_markers() {
    let env = mock(
        "array-marker",
        Duration::from_secs(1),
        FaultConfig::default(),
    )
    .await;
    let server = Server::start(deployment(&env, Duration::from_secs(4), None)).await;
    let mut c = server.client().await;
    let jobs = env.dir.join("jobs");
    let meta = c
        .create_task(request(
            "script_no_io.pb",
            "#!/bin/bash\n#SBATCH --array=0-2\n\
             if [ \"$SLURM_ARRAY_TASK_ID\" = 1 ]; then echo failing >&2; exit 3; fi\n",
            0,
            None,
        ))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    env.handle.faults().set(FaultConfig {
        slurmdbd_down: true,
        ..FaultConfig::default()
    });
    let r = wait_phase(&mut c, &meta, terminal, Duration::from_secs(40)).await;
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert!(
        r.message
            .lines()
            .next()
            .unwrap()
            .contains("(element 1 of job array "),
        "{}",
        r.message
    );
    assert!(r.message.contains("exit code 3:0"), "{}", r.message);
    assert!(r.message.contains("exit-status marker"), "{}", r.message);
    assert!(
        r.message.contains("\nfailing"),
        "the element's stderr tail: {}",
        r.message
    );
    let name = custom_str(&r, "job_name");
    for (i, want) in [(0, "0 - -\n"), (1, "3 - -\n"), (2, "0 - -\n")] {
        assert_eq!(marker_of(&jobs.join(format!("{name}_{i}.exit")), &r), want);
    }
    server.stop().await;
    env.handle.shutdown().await;
    std::fs::remove_dir_all(&env.dir).ok();
}

/// Retention removes every element's logs and marker once the array's task ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arrays_element_files_are_removed_after_the_retention_time() {
    let env = mock(
        "array-retention",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let server = Server::start(deployment(
        &env,
        Duration::from_millis(200),
        Some(Duration::from_secs(1)),
    ))
    .await;
    let mut c = server.client().await;
    let jobs = env.dir.join("jobs");
    let meta = c
        .create_task(request(
            "script_no_io.pb",
            "#!/bin/bash\n#SBATCH --array=0-1\necho out; echo err >&2\n",
            0,
            None,
        ))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let r = wait_phase(&mut c, &meta, terminal, Duration::from_secs(30)).await;
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    let name = custom_str(&r, "job_name");
    let v: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    let id = v["job_id"].as_u64().unwrap();
    let mut want: Vec<String> = (0..2)
        .flat_map(|i| {
            [
                format!("{name}_{i}.exit"),
                format!("{name}_{id}_{i}.err"),
                format!("{name}_{id}_{i}.out"),
            ]
        })
        .collect();
    want.sort();
    assert_eq!(job_files(&jobs, &name), want);
    let start = Instant::now();
    while !job_files(&jobs, &name).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            job_files(&jobs, &name)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.stop().await;
    env.handle.shutdown().await;
    std::fs::remove_dir_all(&env.dir).ok();
}

/// A mock cluster without slurmdbd (its slurmdb paths are unknown paths, as slurmrestd run with
/// `-s openapi/slurmctld` answers them) whose finished jobs leave slurmctld after 1 s.
async fn without_accounting(tag: &str) -> Mock {
    Mock::start_with(
        tag,
        MockConfig {
            nodes: 1,
            cpus: 16,
            min_job_age: Duration::from_secs(1),
            accounting: false,
            ..Mock::config()
        },
    )
    .await
}

/// Waits until the task has ended and its job has left slurmctld: nothing lists it now.
async fn until_gone(
    env: &Mock,
    c: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
) -> Resource {
    let r = wait_phase(c, meta, terminal, Duration::from_secs(40)).await;
    let id = custom_num(&r, "job_id");
    let start = Instant::now();
    while env.handle.in_slurmctld(id as u32) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "job {id} still in slurmctld"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    r
}

/// Without accounting, a CreateTask retried (to a restarted connector, or another replica) after
/// its job ran and left slurmctld is answered with that job, found by the exit-status marker its
/// script left under the job's name: no listing shows the job any more, and a second submit
/// would run the execution twice. Fails without the marker's job id (a second job is submitted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_accounting_a_create_task_retried_after_its_job_left_slurmctld_gets_that_job() {
    let env = without_accounting("noacct-retry").await;
    let req = request(
        "script_no_io.pb",
        "#!/bin/bash\necho once >&2\nexit 3\n",
        0,
        None,
    );

    let a = Server::start(deployment(&env, Duration::from_millis(500), None)).await;
    let mut ac = a.client().await;
    let meta = ac
        .create_task(req.clone())
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let first = until_gone(&env, &mut ac, &meta).await;
    let job = custom_num(&first, "job_id");
    a.stop().await;

    // A connector that never saw the execution: slurmctld does not know the job, there is no
    // slurmdbd; the marker says which job it was.
    let b = Server::start(deployment(&env, Duration::from_millis(500), None)).await;
    let mut bc = b.client().await;
    let again = bc
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let v: serde_json::Value = serde_json::from_slice(&again).unwrap();
    assert_eq!(
        v["job_id"].as_u64(),
        Some(job),
        "the retried CreateTask's job: {v}"
    );
    assert_eq!(env.handle.stats().count("submit"), 1, "submitted once");
    // And B reports that job's outcome from its marker.
    let r = wait_phase(&mut bc, &again, terminal, Duration::from_secs(20)).await;
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert!(r.message.contains("exit code 3:0"), "{}", r.message);
    assert!(r.message.contains("exit-status marker"), "{}", r.message);
    b.stop().await;
    env.handle.shutdown().await;
    std::fs::remove_dir_all(&env.dir).ok();
}

/// Without accounting, a deferred resource_meta (CreateTask answered before its submit was done)
/// asked of a connector that never resolved it, once its job ran and left slurmctld: the job is
/// found by its marker, and GetTask reports its outcome. Without that, GetTask said "Not
/// submitted yet" for ever and the execution was submitted again past the takeover age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_accounting_a_deferred_meta_whose_job_left_slurmctld_is_found_by_its_marker() {
    let env = without_accounting("noacct-deferred").await;
    let req = request("script_no_io.pb", "#!/bin/bash\necho fine\n", 0, None);

    // No wait at all: every CreateTask answers a deferred meta, and A submits in the background.
    let mut d = deployment(&env, Duration::from_millis(500), None);
    d.submit_wait = Duration::ZERO;
    let a = Server::start(d).await;
    let mut ac = a.client().await;
    let meta = ac
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let v: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert!(v.get("deferred").is_some(), "a deferred meta: {v}");
    let first = until_gone(&env, &mut ac, &meta).await;
    let job = custom_num(&first, "job_id");
    a.stop().await;

    let b = Server::start(deployment(&env, Duration::from_millis(500), None)).await;
    let mut bc = b.client().await;
    let r = wait_phase(&mut bc, &meta, terminal, Duration::from_secs(20)).await;
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    assert_eq!(custom_num(&r, "job_id"), job, "{}", r.message);
    assert!(r.message.contains("exit-status marker"), "{}", r.message);
    assert_eq!(env.handle.stats().count("submit"), 1, "submitted once");
    b.stop().await;
    env.handle.shutdown().await;
    std::fs::remove_dir_all(&env.dir).ok();
}
