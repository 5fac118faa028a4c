//! The index of jobs by key, against a scripted slurmrestd.

use super::*;
use crate::render::naming::awaiting_comment;
use crate::slurmrestd::{Auth, ClientConfig, JobDescription, Secret};

/// An index that abandons held jobs after 50 ms, and its first look at `key`: the job `held`,
/// awaiting its release.
async fn held_at_first_look(client: &Client, key: &str, held: JobId) -> Index {
    let index = Index::abandoning_after(ABANDON_AFTER);
    let w = index
        .lookup(client, "mock", None, key, false)
        .await
        .unwrap();
    assert_eq!(
        w.map(|w| (w.job_id, w.awaiting_release)),
        Some((held, true))
    );
    index
}

/// The abandon age of these tests: long enough that a loaded machine's first and second looks
/// fall inside it, short enough to wait out.
const ABANDON_AFTER: Duration = Duration::from_millis(600);
/// A wait past it.
const PAST_ABANDON_AGE: Duration = Duration::from_millis(700);

/// A mock slurmrestd and a client of it.
async fn mock_cluster() -> (mock_slurmrestd::MockHandle, Client) {
    mock_cluster_with(mock_slurmrestd::MockConfig::default()).await
}

/// A mock slurmrestd of `cfg` (its key set here) and a client of it as user `flyte`.
pub(in crate::service::submit) async fn mock_cluster_with(
    cfg: mock_slurmrestd::MockConfig,
) -> (mock_slurmrestd::MockHandle, Client) {
    let cfg = mock_slurmrestd::MockConfig {
        jwt_key: b"idempotency-test-key-0123456789abcdef".to_vec(),
        ..cfg
    };
    let mock = mock_slurmrestd::MockServer::start(cfg, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let token = mock.mint_token("flyte", Duration::from_secs(600));
    let client = Client::new(ClientConfig::new(
        "mock",
        mock.url().parse().unwrap(),
        Auth::Static {
            token: Secret::new(token),
        },
    ))
    .unwrap();
    (mock, client)
}

#[tokio::test]
async fn a_job_held_for_its_check_past_the_abandon_age_is_cancelled() {
    let (mock, client) = mock_cluster().await;
    let key = "0123456789abcdef";
    let job = |comment: String| JobDescription {
        name: format!("flyte-t-{key}"),
        script: "#!/bin/bash\ntrue\n".into(),
        current_working_directory: "/tmp".into(),
        environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
        comment: Some(comment),
        hold: Some(true),
        ..Default::default()
    };
    // Submitted held and marked, and its replica never came back.
    let held = client
        .submit(&job(awaiting_comment(Some(&String::from(
            "the task's own comment",
        )))))
        .await
        .unwrap();
    let index = held_at_first_look(&client, key, held).await;
    // Young: a check leaves it.
    index
        .lookup(&client, "mock", None, key, true)
        .await
        .unwrap();
    assert_eq!(
        client.job(held).await.unwrap().unwrap().state.base,
        BaseState::Pending
    );
    tokio::time::sleep(PAST_ABANDON_AGE).await;
    let w = index
        .lookup(&client, "mock", None, key, true)
        .await
        .unwrap();
    assert_eq!(
        w.map(|w| w.awaiting_release),
        Some(false),
        "no longer to release"
    );
    assert_eq!(
        client.job(held).await.unwrap().unwrap().state.base,
        BaseState::Cancelled
    );
    mock.shutdown().await;
}

/// A released job still pending past the abandon age is not abandoned: here a job array
/// whose remainder waits behind its `%1` limit (its id stays PENDING while an element runs),
/// read while it was still held for its check.
#[tokio::test]
async fn a_released_array_pending_past_the_abandon_age_is_kept() {
    let (mock, client) = mock_cluster().await;
    let key = "0123456789abcdef";
    let comment = String::from("the task's own comment");
    let held = client
        .submit(&JobDescription {
            name: format!("flyte-t-{key}"),
            script: "#!/bin/bash\nsleep 30\n".into(),
            current_working_directory: "/tmp".into(),
            environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
            comment: Some(awaiting_comment(Some(&comment))),
            hold: Some(true),
            array: Some("0-2%1".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let index = held_at_first_look(&client, key, held).await;
    // Its replica releases it (the mark goes in the same update); one element starts.
    assert!(client.release(held, Some(&comment), false).await.unwrap());
    tokio::time::sleep(PAST_ABANDON_AGE).await;
    let states = client.states_and_elements(&[held]).await.unwrap();
    assert!(
        states
            .elements
            .iter()
            .any(|e| e.state.base == BaseState::Running),
        "{states:?}"
    );
    let w = index
        .lookup(&client, "mock", None, key, true)
        .await
        .unwrap();
    assert_eq!(w.map(|w| w.job_id), Some(held));
    let after = client.states_and_elements(&[held]).await.unwrap();
    assert!(
        after
            .elements
            .iter()
            .all(|e| e.state.base != BaseState::Cancelled),
        "a released array is never cancelled as abandoned: {after:?}"
    );
    client.cancel(held, None).await.unwrap();
    mock.shutdown().await;
}

/// A page's successor spans about PAGE_JOBS jobs at the rate the page's own jobs were submitted;
/// an empty page calls for the rest at once; jobs submitted before the page (still active in it)
/// do not count.
#[test]
fn the_next_page_spans_a_thousand_jobs_at_the_rate_they_were_submitted() {
    let job = |id: u32, submitted: i64| JobInfo {
        submit_time: Some(submitted),
        ..JobInfo::new(
            JobId(id),
            "j",
            crate::slurmrestd::JobState::from_strings(["COMPLETED"]),
        )
    };
    let (start, end) = (10_000, 10_060);
    // 1300 jobs in the page's last 30 s (a burst after a quiet half minute): 43/s, so ~23 s.
    let burst: Vec<JobInfo> = (0..1300)
        .map(|i| job(i, end - 30 + i as i64 % 30))
        .collect();
    assert_eq!(next_span(&burst, start, end, 60), 23);
    // Plus a long job submitted an hour before: active in the page, but not this page's rate.
    let mut with_old = burst.clone();
    with_old.push(job(9999, start - 3600));
    assert_eq!(next_span(&with_old, start, end, 60), 23);
    // Empty: a thousand times the span (the rest of a walk at once), within a week.
    assert_eq!(next_span(&[], start, end, 60), 60_000);
    assert_eq!(next_span(&[], start, end, 86_400), ACCOUNTING_LOOKBACK_SECS);
    // A dense burst never asks for less than PAGE_MIN_SECS.
    let dense: Vec<JobInfo> = (0..5000).map(|i| job(i, end)).collect();
    assert_eq!(next_span(&dense, start, end, 60), PAGE_MIN_SECS);
}

/// A keyed job that left slurmctld is forgotten past the horizon (a week in service), and
/// only then: while in slurmctld, however old, it stays. Without this the index grew by a job
/// with every submit for the life of the process.
#[tokio::test]
async fn jobs_that_left_slurmctld_are_forgotten_past_the_horizon() {
    let (mock, client) = mock_cluster_with(mock_slurmrestd::MockConfig {
        min_job_age: Duration::from_millis(300),
        accounting: false,
        ..mock_slurmrestd::MockConfig::default()
    })
    .await;
    let key = "fedcba9876543210";
    let job = JobDescription {
        name: format!("flyte-t-{key}"),
        script: "#!/bin/bash\nsleep 600\n".into(),
        current_working_directory: "/tmp".into(),
        environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
        comment: Some(String::from("the task's own comment")),
        hold: Some(true),
        ..Default::default()
    };
    let id = client.submit(&job).await.unwrap();
    let index = Index::forgetting_after(Duration::from_millis(100));
    let found = |w: Option<Winner>| w.map(|w| w.job_id);
    let look = || index.lookup(&client, "mock", None, key, true);
    assert_eq!(found(look().await.unwrap()), Some(id));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        found(look().await.unwrap()),
        Some(id),
        "past the horizon but still in slurmctld: kept"
    );
    assert_eq!(index.size(), Some((1, 1)));
    client.cancel(id, None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while mock.in_slurmctld(id.0) {
        assert!(Instant::now() < deadline, "job {id} never left slurmctld");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        found(look().await.unwrap()),
        None,
        "left slurmctld: forgotten"
    );
    assert_eq!(index.size(), Some((0, 0)), "nothing of it is kept");
}
