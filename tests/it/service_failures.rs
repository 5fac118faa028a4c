//! Failure classes through the whole service, in front of mock-slurmrestd (which really runs
//! the scripts and enforces time limits, one "minute" shortened to 300 ms): a script exiting 3
//! and a job past its time limit are RETRYABLE_FAILED (the task's `retries` apply), their
//! messages start with the stable tag line, and `custom_info` carries the facts; a cancelled job
//! is ABORTED with no class.

use crate::common;
use common::drill;

use std::time::Duration;

use mock_slurmrestd::{MockConfig, MockServer};
use slurm_connector::config::{AuthConfig, ClusterConfig, Secret};
use slurm_connector::proto::connector::Resource;
use slurm_connector::proto::core::task_execution::Phase;

use drill::{Grpc, Server, create, deployment, job_id, request, wait_terminal};

const KEY: &[u8] = b"service-failures-test-key-0123456789ab";

async fn env(
    tag: &str,
) -> (
    mock_slurmrestd::MockHandle,
    Server,
    Grpc,
    std::path::PathBuf,
) {
    env_with(
        tag,
        MockConfig {
            jwt_key: KEY.to_vec(),
            nodes: 2,
            cpus: 8,
            minute: Duration::from_millis(300),
            kill_wait: Duration::from_millis(200),
            ..MockConfig::default()
        },
        None,
    )
    .await
}

/// The mock as `mock` says, and a connector in front of it (with its own `submit_wait` if set).
async fn env_with(
    tag: &str,
    mock: MockConfig,
    submit_wait: Option<Duration>,
) -> (
    mock_slurmrestd::MockHandle,
    Server,
    Grpc,
    std::path::PathBuf,
) {
    let dir = std::env::temp_dir().join(format!("svc-failures-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("jobs")).unwrap();
    let mock = MockServer::start(mock, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let token = mock.mint_token("flyte", Duration::from_secs(3600));
    let cluster = ClusterConfig {
        auth: Some(AuthConfig::Token(Secret::new(token))),
        working_dir: Some(dir.join("jobs").display().to_string()),
        ..ClusterConfig::new("mock", url::Url::parse(&mock.url()).unwrap())
    };
    let mut d = deployment(cluster, Duration::from_millis(100));
    if let Some(wait) = submit_wait {
        d.submit_wait = wait;
    }
    let server = Server::start(d).await;
    let client = server.client().await;
    (mock, server, client, dir)
}

fn info(r: &Resource, key: &str) -> Option<prost_types::value::Kind> {
    r.custom_info
        .as_ref()
        .unwrap()
        .fields
        .get(key)
        .and_then(|v| v.kind.clone())
}

fn text(s: &str) -> Option<prost_types::value::Kind> {
    Some(prost_types::value::Kind::StringValue(s.into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_failures_are_retryable_and_say_what_happened_first() {
    let (mock, server, mut c, dir) = env("user").await;

    let meta = create(&mut c, request(0, "#!/bin/bash\necho broke >&2\nexit 3\n"))
        .await
        .unwrap();
    let id = job_id(&meta);
    let r = wait_terminal(&mut c, &meta, 20).await;
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    let first = r.message.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("[FAILED] job {id} exited with code 3")),
        "{}",
        r.message
    );
    assert_eq!(
        r.message.lines().nth(1).unwrap(),
        format!("Slurm job {id} is FAILED, exit code 3:0"),
        "{}",
        r.message
    );
    assert_eq!(info(&r, "failure_class"), text("user"));
    assert_eq!(info(&r, "exit_code"), text("3:0"));
    assert_eq!(info(&r, "state"), text("FAILED"));
    assert_eq!(
        info(&r, "requeue_count"),
        Some(prost_types::value::Kind::NumberValue(0.0))
    );
    assert!(
        matches!(info(&r, "nodes"), Some(prost_types::value::Kind::StringValue(n)) if !n.is_empty()),
        "{:?}",
        r.custom_info
    );

    // A one-"minute" limit, which the script overruns.
    let meta = create(
        &mut c,
        request(1, "#!/bin/bash\n#SBATCH --time=1\nsleep 30\n"),
    )
    .await
    .unwrap();
    let id = job_id(&meta);
    let r = wait_terminal(&mut c, &meta, 20).await;
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert!(
        r.message
            .starts_with(&format!("[TIMEOUT] after 00:01:00 (job {id}")),
        "{}",
        r.message
    );
    assert_eq!(info(&r, "state"), text("TIMEOUT"));
    assert_eq!(info(&r, "failure_class"), text("user"));

    // Cancelled (DeleteTask): ABORTED, not a failure of any class.
    let meta = create(&mut c, request(2, "#!/bin/bash\nsleep 30\n"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.delete_task(drill::delete_req(&meta)).await.unwrap();
    let r = wait_terminal(&mut c, &meta, 20).await;
    assert_eq!(r.phase, Phase::Aborted as i32, "{}", r.message);
    assert!(r.message.starts_with("Slurm job "), "{}", r.message);
    assert!(
        matches!(
            info(&r, "failure_class"),
            Some(prost_types::value::Kind::NullValue(_))
        ),
        "{:?}",
        r.custom_info
    );

    server.stop().await;
    mock.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cluster at its `MaxJobCount` is not a failure (issue 38): a CreateTask slurmctld has no
/// room for answers a deferred meta, GetTask says QUEUED and why, the submit waits, one probe
/// every 5 s (not one refused submit per task per retry), and goes in once jobs left slurmctld.
/// On the mock imitating 26.05 (2007) and 24.11 (EAGAIN), as recorded on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_queues_tasks_until_jobs_leave_it() {
    for release in [
        mock_slurmrestd::SlurmVersion::V26_05,
        mock_slurmrestd::SlurmVersion::V24_11,
    ] {
        let (mock, server, mut c, dir) = env_with(
            &format!("full-{release:?}"),
            MockConfig {
                jwt_key: KEY.to_vec(),
                max_job_count: Some(4),
                min_job_age: Duration::from_secs(1),
                ..MockConfig::imitating(release)
            },
            Some(Duration::from_secs(1)),
        )
        .await;

        // 24.11 holds MaxJobCount - 1 jobs, 26.05 MaxJobCount (measured).
        let room = if release == mock_slurmrestd::SlurmVersion::V24_11 {
            3
        } else {
            4
        };
        let mut metas = Vec::new();
        for i in 0..room + 3 {
            let meta = create(&mut c, request(1 + i, "#!/bin/bash\nsleep 2\n"))
                .await
                .unwrap_or_else(|e| panic!("{release:?}: CreateTask {i} is no error: {e}"));
            metas.push(meta);
        }
        let placed = metas.iter().filter(|m| job_id(m) != 0).count();
        assert_eq!(placed, room as usize, "{release:?}: the rest deferred");
        let waiting = metas.iter().find(|m| job_id(m) == 0).unwrap();
        let (r, _) = drill::get(&mut c, waiting).await;
        let r = r.unwrap();
        assert_eq!(r.phase, Phase::Queued as i32, "{release:?}: {}", r.message);
        assert!(
            r.message.starts_with("Waiting for room on cluster mock")
                && r.message.contains("MaxJobCount"),
            "{release:?}: {}",
            r.message
        );
        for m in &metas {
            let r = wait_terminal(&mut c, m, 60).await;
            assert_eq!(
                r.phase,
                Phase::Succeeded as i32,
                "{release:?}: {}",
                r.message
            );
        }
        let s = mock.stats();
        let accepted = s.count_status("submit", 200);
        let refused = s.count("submit") - accepted;
        assert_eq!(
            accepted,
            metas.len() as u64,
            "{release:?}: one job per task"
        );
        // The first refusals of the tasks that were in flight together, then one probe per
        // 5 s: the jobs run 2 s and leave 1 s after, so a few probes in all.
        assert!(
            (1..=6).contains(&refused),
            "{release:?}: {refused} refused submits (one probe every 5 s while full)"
        );
        println!(
            "{release:?}: {} tasks, {room} at once, {refused} refused submits",
            metas.len()
        );
        drop(c);
        server.stop().await;
        mock.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
