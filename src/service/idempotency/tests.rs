//! The index of jobs by key, against a scripted slurmrestd.

use super::*;
use crate::slurmrestd::{Auth, ClientConfig, JobDescription, Secret};

/// A mock slurmrestd and a client of it.
async fn mock_cluster() -> (mock_slurmrestd::MockHandle, Client) {
    let cfg = mock_slurmrestd::MockConfig {
        jwt_key: b"idempotency-test-key-0123456789abcdef".to_vec(),
        ..mock_slurmrestd::MockConfig::default()
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
        .submit(&job(awaiting_comment(Some(
            &crate::render::naming::comment(key, None),
        ))))
        .await
        .unwrap();
    let index = Index::abandoning_after(Duration::from_millis(50));
    let w = index
        .lookup(&client, "mock", None, key, false)
        .await
        .unwrap();
    assert_eq!(
        w.map(|w| (w.job_id, w.awaiting_release)),
        Some((held, true))
    );
    // Young: a check leaves it.
    index
        .lookup(&client, "mock", None, key, true)
        .await
        .unwrap();
    assert_eq!(
        client.job(held).await.unwrap().unwrap().state.base,
        BaseState::Pending
    );
    tokio::time::sleep(Duration::from_millis(80)).await;
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
    let comment = crate::render::naming::comment(key, None);
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
    let index = Index::abandoning_after(Duration::from_millis(50));
    let w = index
        .lookup(&client, "mock", None, key, false)
        .await
        .unwrap();
    assert_eq!(
        w.map(|w| (w.job_id, w.awaiting_release)),
        Some((held, true))
    );
    // Its replica releases it (the mark goes in the same update); one element starts.
    assert!(client.release(held, Some(&comment), false).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
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
