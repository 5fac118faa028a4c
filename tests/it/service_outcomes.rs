//! The outcome and upload counters through the whole service, in front of mock-slurmrestd
//! (which really runs the batch scripts): a task's terminal answer is counted once however often
//! GetTask gives it, with its phase, failure class and status code; an output upload is counted
//! by its result once it settles.

use crate::common;
use common::mock::Mock;
use common::server::Server;
use common::{RequestExt, get_req, mock_request};

use std::time::{Duration, Instant};

use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::Resource;
use slurm_connector::proto::core::task_execution::Phase;

/// Polled every 200 ms: the counters follow the tallies at each tick.
const POLL: Duration = Duration::from_millis(200);

/// The mock runs jobs on this machine: the shared filesystem is the same path on both sides.
fn deployment(env: &Mock) -> DeploymentConfig {
    let jobs = env.jobs();
    let mut c = env.cluster(env.static_auth(), None);
    c.shared_mounts = vec![(jobs.display().to_string(), jobs)];
    common::mock::deployment(c, POLL)
}

async fn get(c: &mut common::server::Grpc, meta: &[u8]) -> Resource {
    c.get_task(get_req(meta))
        .await
        .expect("GetTask never fails")
        .into_inner()
        .resource
        .unwrap()
}

/// GetTask until a terminal answer (30 s at most).
async fn terminal(c: &mut common::server::Grpc, meta: &[u8]) -> Resource {
    let start = Instant::now();
    loop {
        let r = get(c, meta).await;
        if Phase::of(r.phase).is_terminal() {
            return r;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{}", r.message);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the series `name{labels}` on the connector's `/metrics`, if it is there.
async fn value(server: &Server, name: &str, labels: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://{}/metrics", server.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.parse().unwrap())
}

/// The series' value once it reached `want` (within 5 s), then a few ticks later: a counter
/// that grew past it fails, one that never reached it fails with what it was.
async fn settles_at(server: &Server, name: &str, labels: &str, want: f64) {
    let start = Instant::now();
    while value(server, name, labels).await != Some(want) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{name}{{{labels}}} is {:?}, not {want}",
            value(server, name, labels).await
        );
        tokio::time::sleep(POLL).await;
    }
    tokio::time::sleep(POLL * 3).await;
    assert_eq!(
        value(server, name, labels).await,
        Some(want),
        "{name}{{{labels}}}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_answer_is_counted_once_with_its_class_and_code() {
    let env = Mock::start("outcomes", Duration::from_secs(600), Default::default()).await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let meta = c
        .create_task(mock_request("script_no_io.pb").script("#!/bin/bash\nexit 3\n"))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let first = terminal(&mut c, &meta).await;
    assert_eq!(
        first.phase,
        Phase::RetryableFailed as i32,
        "{}",
        first.message
    );
    assert!(first.message.starts_with("[FAILED]"), "{}", first.message);
    // Asked again, as Flyte does: the same answer, not a second outcome.
    let again = get(&mut c, &meta).await;
    assert_eq!((again.phase, &again.message), (first.phase, &first.message));
    let labels = r#"cluster="mock",phase="retryable_failed",class="user",reason="FAILED""#;
    settles_at(&server, "slurm_connector_task_outcomes_total", labels, 1.0).await;
    // Its one submit made one duplicate check (the index's first listing is not one).
    let cluster = r#"cluster="mock""#;
    settles_at(
        &server,
        "slurm_connector_duplicate_checks_total",
        cluster,
        1.0,
    )
    .await;
    get(&mut c, &meta).await;
    settles_at(&server, "slurm_connector_task_outcomes_total", labels, 1.0).await;
    server.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_uploads_are_counted_by_result() {
    let env = Mock::start("uploads", Duration::from_secs(600), Default::default()).await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let store = format!("file://{}", env.dir.join("store").display());
    let create = |script: &str, attempt: u32| {
        let mut req = mock_request("script_preprocess.pb")
            .script(script)
            .attempt(attempt);
        req.output_prefix = store.clone();
        req
    };
    let writes = "#!/bin/bash\nmkdir -p \"$FLYTE_OUTPUT_SHARDS\"\necho f > \"$FLYTE_OUTPUT_SHARDS/a\"\necho s > \"$FLYTE_OUTPUT_STATS\"\n";
    let (ok, missing) = (create(writes, 0), create("#!/bin/bash\nexit 0\n", 1));
    let ok = c.create_task(ok).await.unwrap().into_inner().resource_meta;
    let missing = c
        .create_task(missing)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;

    // A job that wrote nothing: its declared outputs are missing, the upload fails the task.
    let failed = terminal(&mut c, &missing).await;
    assert_eq!(failed.phase, Phase::Failed as i32, "{}", failed.message);
    assert!(
        failed.message.contains("was not written"),
        "{}",
        failed.message
    );
    get(&mut c, &missing).await;
    let uploads = "slurm_connector_output_uploads_total";
    settles_at(&server, uploads, r#"cluster="mock",result="failed""#, 1.0).await;
    let labels = r#"cluster="mock",phase="failed",class="permanent",reason="none""#;
    settles_at(&server, "slurm_connector_task_outcomes_total", labels, 1.0).await;

    let done = terminal(&mut c, &ok).await;
    assert_eq!(done.phase, Phase::Succeeded as i32, "{}", done.message);
    get(&mut c, &ok).await;
    settles_at(&server, uploads, r#"cluster="mock",result="ok""#, 1.0).await;
    settles_at(&server, uploads, r#"cluster="mock",result="failed""#, 1.0).await;
    server.stop().await;
    env.stop().await;
}
