//! The client facade against mock-slurmrestd (no wiremock): the whole job lifecycle through real
//! HTTP, real scripts and the mock's faults, counted by the mock's own request counters.

use std::time::{Duration, Instant};

use mock_slurmrestd::{FaultConfig, MockConfig, MockHandle, MockServer};
use slurm_connector::slurmrestd::{
    ApiVersion, Auth, BaseState, CancelOutcome, Client, ClientConfig, ClientError, JobDescription,
    JobId, RetryPolicy,
};

const KEY: &[u8] = b"mock-key-bytes-mock-key-bytes-xx";

struct Env {
    mock: MockHandle,
    client: Client,
    /// The client's configuration, for another client of the same mock (a pinned version).
    cfg: ClientConfig,
    dir: std::path::PathBuf,
}

async fn env(min_job_age: Duration) -> Env {
    let dir = std::env::temp_dir().join(format!(
        "sc-client-mock-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("jwt.key");
    std::fs::write(&key, KEY).unwrap();
    let cfg = MockConfig {
        jwt_key: KEY.to_vec(),
        min_job_age,
        ..MockConfig::default()
    };
    let mock = MockServer::start(cfg, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut cc = ClientConfig::new(
        "mock",
        mock.url().parse().unwrap(),
        Auth::Minted {
            key_file: key,
            token_user: "flyte".into(),
            lifetime: Duration::from_secs(600),
        },
    );
    cc.user_name = Some("flyte".into());
    cc.retry = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
    };
    Env {
        client: Client::new(cc.clone()).unwrap(),
        cfg: cc,
        mock,
        dir,
    }
}

fn rand_suffix() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn job(dir: &std::path::Path, script: &str) -> JobDescription {
    JobDescription {
        name: "flyte-mock-test".into(),
        script: format!("#!/bin/bash\n{script}\n"),
        current_working_directory: dir.display().to_string(),
        environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
        standard_output: Some(format!("{}/%j.out", dir.display())),
        ..Default::default()
    }
}

async fn wait_for(client: &Client, id: JobId, done: impl Fn(&BaseState) -> bool) -> BaseState {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let states = client.states(&[id]).await.unwrap();
        if let Some(s) = states.get(&id)
            && done(&s.base)
            && s.is_finished()
        {
            return s.base.clone();
        }
        assert!(
            Instant::now() < deadline,
            "job {id} did not finish: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn submit_run_record_and_output_through_real_http() {
    let e = env(Duration::from_secs(300)).await;
    let id = e
        .client
        .submit(&job(&e.dir, "echo hello-from-mock; exit 0"))
        .await
        .unwrap();
    assert_eq!(
        wait_for(&e.client, id, |b| *b == BaseState::Completed).await,
        BaseState::Completed
    );
    let info = e.client.job(id).await.unwrap().unwrap();
    assert_eq!(info.exit_code.as_ref().unwrap().return_code, Some(0));
    let out = std::fs::read_to_string(e.dir.join(format!("{id}.out"))).unwrap();
    assert_eq!(out.trim(), "hello-from-mock");
    e.mock.shutdown().await;
}

#[tokio::test]
async fn a_failing_script_is_failed_with_its_exit_code() {
    let e = env(Duration::from_secs(300)).await;
    let id = e.client.submit(&job(&e.dir, "exit 3")).await.unwrap();
    wait_for(&e.client, id, |b| *b == BaseState::Failed).await;
    let info = e.client.job(id).await.unwrap().unwrap();
    assert_eq!(info.exit_code.unwrap().return_code, Some(3));
    e.mock.shutdown().await;
}

#[tokio::test]
async fn many_states_take_one_request() {
    let e = env(Duration::from_secs(300)).await;
    let mut ids = Vec::new();
    for _ in 0..30 {
        ids.push(e.client.submit(&job(&e.dir, "sleep 30")).await.unwrap());
    }
    e.mock.reset_stats();
    let states = e.client.states(&ids).await.unwrap();
    assert_eq!(states.len(), 30);
    assert_eq!(e.mock.stats().count("jobs_state"), 1);
    for id in &ids {
        assert_eq!(
            e.client.cancel(*id, None).await.unwrap(),
            CancelOutcome::Cancelled
        );
    }
    e.mock.shutdown().await;
}

#[tokio::test]
async fn cancel_running_then_finished_then_unknown() {
    let e = env(Duration::from_secs(300)).await;
    let id = e.client.submit(&job(&e.dir, "sleep 30")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while e
        .client
        .states(&[id])
        .await
        .unwrap()
        .get(&id)
        .map(|s| s.base.clone())
        != Some(BaseState::Running)
    {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        e.client.cancel(id, None).await.unwrap(),
        CancelOutcome::Cancelled
    );
    wait_for(&e.client, id, |b| *b == BaseState::Cancelled).await;
    assert_eq!(
        e.client.cancel(id, None).await.unwrap(),
        CancelOutcome::AlreadyFinished
    );
    assert_eq!(
        e.client.cancel(JobId(999_999), None).await.unwrap(),
        CancelOutcome::Unknown
    );
    assert_eq!(e.client.job(JobId(999_999)).await.unwrap(), None);
    e.mock.shutdown().await;
}

#[tokio::test]
async fn an_aged_out_job_is_absent_from_states_and_found_in_accounting() {
    let e = env(Duration::from_millis(300)).await;
    let id = e.client.submit(&job(&e.dir, "exit 0")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while e.client.states(&[id]).await.unwrap().contains_key(&id) {
        assert!(Instant::now() < deadline, "job never aged out");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(e.client.job(id).await.unwrap(), None);
    let acct = e
        .client
        .accounting_job(id)
        .await
        .unwrap()
        .expect("slurmdbd keeps it");
    assert_eq!(acct.state.base, BaseState::Completed);
    assert!(
        e.client
            .accounting_jobs(&[id])
            .await
            .unwrap()
            .contains_key(&id)
    );
    e.mock.shutdown().await;
}

/// The duplicate check's listing of recent jobs, and its pages, work in every version: v0.0.40/41 refuse unix
/// seconds for `start_time` (recorded on 24.11; the mock answers the same 422), so the client
/// sends them `now-N`. Before that, a CreateTask retried after its job left slurmctld was not
/// recognised on those versions.
#[tokio::test]
async fn recent_jobs_are_listed_in_every_version() {
    let e = env(Duration::from_secs(300)).await;
    let since = chrono::Utc::now().timestamp() - 60;
    let id = e.client.submit(&job(&e.dir, "exit 0")).await.unwrap();
    for v in ApiVersion::ALL {
        let mut cfg = e.cfg.clone();
        cfg.api_version = Some(v);
        let client = Client::new(cfg).unwrap();
        let jobs = client
            .accounting_jobs_since(since, None)
            .await
            .unwrap_or_else(|err| panic!("{v}: {err}"));
        assert!(jobs.iter().any(|j| j.job_id == id), "{v}: {id} not listed");
        // A page of a longer listing: a window that ended before the submit does not hold it.
        let earlier = client
            .accounting_jobs_between(since - 60, Some(since), None)
            .await
            .unwrap_or_else(|err| panic!("{v}: {err}"));
        assert!(earlier.iter().all(|j| j.job_id != id), "{v}: {id} listed");
    }
    e.mock.shutdown().await;
}

#[tokio::test]
async fn a_rejected_token_is_reminted_and_a_503_retried() {
    let e = env(Duration::from_secs(300)).await;
    // The version is chosen first (the mock serves v0.0.42), so the faults hit jobs/state.
    e.client.negotiate().await.unwrap();
    e.mock.faults().set(FaultConfig {
        reject_next_tokens: 1,
        ..FaultConfig::default()
    });
    let states = e.client.states(&[JobId(1)]).await.unwrap();
    assert!(states.is_empty());
    assert_eq!(e.client.token_refreshes(), 2, "minted, rejected, re-minted");
    e.mock.faults().set(FaultConfig {
        fail_next: 2,
        error_statuses: vec![503],
        ..FaultConfig::default()
    });
    e.client.states(&[JobId(1)]).await.unwrap();
    assert_eq!(e.mock.stats().count_status("jobs_state", 503), 2);
    e.mock.shutdown().await;
}

#[tokio::test]
async fn a_controller_outage_is_a_transient_error() {
    let e = env(Duration::from_secs(300)).await;
    e.mock.faults().controller_down_for(Duration::from_secs(30));
    let err = e.client.states(&[JobId(1)]).await.unwrap_err();
    assert!(err.is_transient() && !err.is_auth(), "{err:?}");
    let submit = e.client.submit(&job(&e.dir, "true")).await.unwrap_err();
    assert!(
        matches!(submit, ClientError::Slurm { .. } | ClientError::Http { .. }),
        "{submit:?}"
    );
    e.mock.shutdown().await;
}
