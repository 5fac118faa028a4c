//! What the client logs: tokens and keys never (in logs, errors or Debug output, checked with
//! every log level on), and no warning for what the connector asked for.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Recorded;
use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, JobId, RetryPolicy};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn minting_rejection_and_errors_log_no_secret() {
    let key_bytes = b"SUPERSECRETKEYBYTES-0123456789ab";
    let dir = std::env::temp_dir().join(format!("sc-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("jwt_hs256.key");
    std::fs::write(&key_file, key_bytes).unwrap();
    let token =
        slurm_connector::slurmrestd::auth::mint_token(key_bytes, "flyte", Duration::from_secs(600))
            .unwrap();

    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let errors = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let server = MockServer::start().await;
                Mock::given(method("GET"))
                    .respond_with(Recorded::load("24.11_v0.0.42_token-expired-jobs").response())
                    .mount(&server)
                    .await;
                let mut cfg = ClientConfig::new(
                    "c",
                    server.uri().parse().unwrap(),
                    Auth::Minted {
                        key_file: key_file.clone(),
                        token_user: "flyte".into(),
                        lifetime: Duration::from_secs(600),
                    },
                );
                cfg.retry = RetryPolicy::none();
                let client = Client::new(cfg).unwrap();
                let e1 = client.states(&[JobId(1)]).await.unwrap_err();
                let e2 = client.jobs().await.unwrap_err();
                format!("{e1} {e1:?} {e2} {e2:?} {client:?}")
            })
    });
    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("token rejected"),
        "the logs were captured: {logs}"
    );
    // The signature part of any token minted with this key, and the key itself.
    let signature = token.expose().rsplit('.').next().unwrap().to_string();
    for haystack in [&logs, &errors] {
        assert!(
            !haystack.contains("SUPERSECRETKEYBYTES"),
            "key leaked: {haystack}"
        );
        assert!(!haystack.contains("eyJ"), "a JWT leaked: {haystack}");
        assert!(!haystack.contains(&signature));
    }
}

/// slurmctld answers every held submit with "Job is in held state, pending scheduler release",
/// which slurmrestd repeats as a non-zero return code (recorded: `arrays-submit-held`): for a
/// job submitted held on purpose (the connector's duplicate check, a user's `--hold`) that is
/// no warning; the same answer to a job not asked to be held still is.
#[test]
fn a_held_submit_is_not_warned_about() {
    let warn_lines = |hold: Option<bool>| -> String {
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let server = common::serving("24.11", &["v0.0.42"]).await;
                    Mock::given(method("POST"))
                        .and(wiremock::matchers::path("/slurm/v0.0.42/job/submit"))
                        .respond_with(Recorded::load("24.11_v0.0.42_arrays-submit-held").response())
                        .mount(&server)
                        .await;
                    let client = Client::new(ClientConfig::new(
                        "c",
                        server.uri().parse().unwrap(),
                        Auth::Static {
                            token: slurm_connector::slurmrestd::Secret::new("SLURM_JWT=t"),
                        },
                    ))
                    .unwrap();
                    let job = slurm_connector::slurmrestd::JobDescription {
                        name: "held".into(),
                        script: "#!/bin/bash\ntrue\n".into(),
                        current_working_directory: "/tmp".into(),
                        hold,
                        ..Default::default()
                    };
                    client
                        .submit(&job)
                        .await
                        .expect("a held submit has its job id");
                })
        });
        String::from_utf8(capture.0.lock().unwrap().clone()).unwrap()
    };
    assert_eq!(warn_lines(Some(true)), "", "held on purpose");
    let not_asked = warn_lines(None);
    assert_eq!(
        not_asked.matches("held state").count(),
        2,
        "not asked to be held: {not_asked}"
    );
}
