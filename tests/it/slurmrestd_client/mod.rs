//! Contract tests of the slurmrestd facade: wiremock replays real slurmrestd responses
//! (tests/fixtures/slurmrestd/, recorded on Slurm 24.11 and 26.05) and checks what we send.

use crate::common;
mod failures;
mod operations;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::Recorded;
use slurm_connector::slurmrestd::{
    Auth, BaseState, CancelOutcome, Client, ClientConfig, ClientError, Daemon, Exchange,
    JobDescription, JobId, Reply, RetryPolicy, Secret,
};
use wiremock::matchers::{header, header_exists, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const TOKEN: &str = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.c2ln";

/// A wiremock slurmrestd that serves v0.0.42 only, as 24.11 minus its older versions.
async fn serving_v0042() -> MockServer {
    common::serving("24.11", &["v0.0.42"]).await
}

/// What the client sent, less the version probes.
async fn sent(server: &MockServer) -> Vec<Request> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !r.url.path().ends_with("/ping/"))
        .collect()
}

fn config(server: &MockServer, auth: Auth) -> ClientConfig {
    let mut cfg = ClientConfig::new("testcluster", server.uri().parse().unwrap(), auth);
    cfg.retry = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    cfg.request_timeout = Duration::from_secs(2);
    cfg
}

fn static_client(server: &MockServer) -> Client {
    Client::new(config(
        server,
        Auth::Static {
            token: Secret::new(format!("SLURM_JWT={TOKEN}")),
        },
    ))
    .unwrap()
}

fn key_file() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sc-client-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("jwt_hs256.key");
    std::fs::write(&key, b"0123456789abcdef0123456789abcdef").unwrap();
    key
}

fn job() -> JobDescription {
    JobDescription {
        name: "flyte-test".into(),
        script: "#!/bin/bash\necho hi\n".into(),
        current_working_directory: "/tmp".into(),
        environment: vec![("PATH".into(), "/bin:/usr/bin".into())],
        ..Default::default()
    }
}
