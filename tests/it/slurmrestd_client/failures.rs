//! What goes wrong between the client and slurmrestd: text/plain errors, rejected tokens, retries, timeouts, an unreachable server, and the token kept out of every message.

use super::*;

#[tokio::test]
async fn text_plain_401_keeps_its_status_and_says_no_token() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .respond_with(Recorded::load("24.11_v0.0.42_token-missing-jobs").response())
        .mount(&server)
        .await;
    let err = static_client(&server).jobs().await.unwrap_err();
    assert!(matches!(err, ClientError::NoToken { .. }), "{err:?}");
    assert!(err.to_string().contains("HTTP 401"));
}

#[tokio::test]
async fn text_plain_400_keeps_its_status() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(400).set_body_raw("Unable to parse query.", "text/plain"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let err = static_client(&server)
        .states(&[JobId(1)])
        .await
        .unwrap_err();
    match err {
        ClientError::Http { status, body, .. } => {
            assert_eq!(status, 400);
            assert_eq!(body, "Unable to parse query.");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn rejected_minted_token_is_reminted_once_then_succeeds() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.42/jobs/state/"))
        .respond_with(Recorded::load("24.11_v0.0.42_token-expired-jobs").response())
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.42/jobs/state/"))
        .respond_with(Recorded::load("24.11_v0.0.42_jobs-state-repeated").response())
        .expect(1)
        .mount(&server)
        .await;
    let auth = Auth::Minted {
        key_file: key_file(),
        token_user: "flyte".into(),
        lifetime: Duration::from_secs(600),
    };
    let client = Client::new(config(&server, auth)).unwrap();
    let states = client.states(&[JobId(31)]).await.unwrap();
    assert!(!states.is_empty());
    assert_eq!(
        client.token_refreshes(),
        2,
        "one mint, one re-mint after the 511"
    );
}

#[tokio::test]
async fn token_rejected_twice_is_a_clear_auth_error_without_the_token() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .respond_with(Recorded::load("26.05_v0.0.42_token-expired-jobs").response())
        .expect(2)
        .mount(&server)
        .await;
    let mut cfg = config(
        &server,
        Auth::Minted {
            key_file: key_file(),
            token_user: "root".into(),
            lifetime: Duration::from_secs(60),
        },
    );
    cfg.user_name = Some("flyte".into());
    let client = Client::new(cfg).unwrap();
    let err = client.jobs().await.unwrap_err();
    assert!(err.is_auth() && !err.is_transient(), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("testcluster") && msg.contains("flyte") && msg.contains("1007"),
        "{msg}"
    );
    assert!(!msg.contains("eyJ"), "no token in errors: {msg}");
}

#[tokio::test]
async fn a_static_token_is_not_retried_after_511() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .respond_with(Recorded::load("24.11_v0.0.42_token-expired-job-get").response())
        .expect(1)
        .mount(&server)
        .await;
    let err = static_client(&server).job(JobId(1)).await.unwrap_err();
    assert!(
        matches!(err, ClientError::Rejected { status: 511, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn slurmdb_auth_failure_502_7000_is_a_rejection() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .respond_with(Recorded::load("24.11_v0.0.42_token-expired-slurmdb-jobs").response())
        .mount(&server)
        .await;
    let err = static_client(&server)
        .accounting_jobs(&[JobId(1)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Rejected { status: 502, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn transient_503_is_retried_for_reads() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).set_body_raw("Service Unavailable", "text/plain"))
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .respond_with(Recorded::load("24.11_v0.0.42_jobs-state-repeated").response())
        .expect(1)
        .mount(&server)
        .await;
    let states = static_client(&server).states(&[JobId(31)]).await.unwrap();
    assert!(!states.is_empty());
}

#[tokio::test]
async fn submit_is_not_retried_after_it_may_have_been_sent() {
    let server = serving_v0042().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_raw("Service Unavailable", "text/plain"))
        .expect(1)
        .mount(&server)
        .await;
    let err = static_client(&server).submit(&job()).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
}

#[tokio::test]
async fn a_timeout_is_transient_and_retried() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .expect(3)
        .mount(&server)
        .await;
    let mut cfg = config(
        &server,
        Auth::Static {
            token: Secret::new(TOKEN),
        },
    );
    cfg.request_timeout = Duration::from_millis(200);
    let err = Client::new(cfg)
        .unwrap()
        .states(&[JobId(1)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Timeout { .. }) && err.is_transient(),
        "{err:?}"
    );
}

#[tokio::test]
async fn unreachable_slurmrestd_is_transient() {
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut cfg = ClientConfig::new(
        "down",
        url.parse().unwrap(),
        Auth::Static {
            token: Secret::new(TOKEN),
        },
    );
    cfg.retry = RetryPolicy::none();
    let err = Client::new(cfg)
        .unwrap()
        .states(&[JobId(1)])
        .await
        .unwrap_err();
    assert!(err.is_transient() && err.never_sent(), "{err:?}");
    assert!(err.to_string().contains("down"));
}

#[tokio::test]
async fn ping_with_a_bad_token_answers_down_not_an_error() {
    // The trap: ping is no auth check.
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.42/ping/"))
        .respond_with(Recorded::load("24.11_v0.0.42_token-badsig-ping").response())
        .mount(&server)
        .await;
    let pings = static_client(&server).ping().await.unwrap();
    assert!(!pings[0].responding);
}

#[test]
fn debug_output_never_shows_the_token() {
    let cfg = ClientConfig::new(
        "c",
        "http://127.0.0.1:1".parse().unwrap(),
        Auth::Static {
            token: Secret::new(TOKEN),
        },
    );
    let client = Client::new(cfg.clone()).unwrap();
    let shown = format!("{cfg:?} {client:?}");
    assert!(!shown.contains("c2VjcmV0"), "{shown}");
}

/// Every exchange a client makes, as the metrics see it.
fn observed(cfg: &mut ClientConfig) -> Arc<std::sync::Mutex<Vec<Exchange>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    cfg.observer = Some(Arc::new(move |e: &Exchange| s.lock().unwrap().push(*e)));
    seen
}

/// What was seen of the calls made, less the version probes before them.
fn calls(seen: &std::sync::Mutex<Vec<Exchange>>) -> Vec<(&'static str, Daemon, Reply)> {
    let seen = seen.lock().unwrap();
    seen.iter()
        .filter(|e| e.operation != "probe")
        .map(|e| (e.operation, e.daemon, e.reply))
        .collect()
}

/// A firewall dropping packets: the connect times out. That is an outage of slurmrestd or of the
/// path to it, not a late answer (slurmctld throttling): reqwest calls it both a connect error
/// and a timeout, and the connection-never-made reading wins: no submit pacing cut, a submit
/// safe to retry, and `status="unreachable"` for the SlurmrestdUnreachable alert.
#[tokio::test]
async fn a_connect_timeout_is_unreachable_not_late() {
    let hole = common::blackhole::Firewall::dropping().await;
    let mut cfg = ClientConfig::new(
        "blackholed",
        hole.url().parse().unwrap(),
        Auth::Static {
            token: Secret::new(TOKEN),
        },
    );
    cfg.api_version = Some(slurm_connector::slurmrestd::ApiVersion::V0042);
    cfg.retry = RetryPolicy::none();
    cfg.connect_timeout = Duration::from_millis(200);
    cfg.request_timeout = Duration::from_secs(5);
    let seen = observed(&mut cfg);
    let client = Client::new(cfg).unwrap();
    let t = std::time::Instant::now();
    let err = client.submit(&job()).await.unwrap_err();
    // Seven versions probed, each given up after the 200 ms connect timeout.
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(
        matches!(err, ClientError::Unreachable { connect: true, .. }),
        "{err:?}"
    );
    assert!(
        err.is_outage() && err.is_transient() && err.never_sent(),
        "{err:?}"
    );
    // Nothing got through, so the version probes (`/slurm/<v>/ping/`) are all there was.
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for e in &seen {
        assert_eq!(
            (e.operation, e.daemon, e.reply),
            ("probe", Daemon::Slurmctld, Reply::Unreachable)
        );
    }
    assert_eq!(seen[0].reply.label(), "unreachable");
}

/// A connection made and a request sent, its answer later than the request timeout: slurmrestd
/// or slurmctld slow (slurmctld's rate limiting looks like this), `status="timeout"`.
#[tokio::test]
async fn a_late_answer_is_late_not_unreachable() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.42/jobs/state/"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let mut cfg = config(
        &server,
        Auth::Static {
            token: Secret::new(TOKEN),
        },
    );
    cfg.api_version = Some(slurm_connector::slurmrestd::ApiVersion::V0042);
    cfg.retry = RetryPolicy::none();
    cfg.request_timeout = Duration::from_millis(300);
    let seen = observed(&mut cfg);
    let err = Client::new(cfg)
        .unwrap()
        .states(&[JobId(1)])
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(!err.is_outage() && !err.never_sent(), "{err:?}");
    assert_eq!(
        calls(&seen),
        [("jobs_state", Daemon::Slurmctld, Reply::Late)]
    );
    assert_eq!(Reply::Late.label(), "timeout");
}

/// slurmdbd down: slurmrestd answers its `/slurmdb/` paths with 502. Every accounting call,
/// `accounting_usages` (the tracker's, every tick) included, is labelled `daemon="slurmdbd"` from
/// the path it went to, and a refused port is `unreachable`.
#[tokio::test]
async fn slurmdbd_answers_are_labelled_by_their_path() {
    let server = serving_v0042().await;
    Mock::given(method("GET"))
        .and(path("/slurmdb/v0.0.42/jobs/"))
        .respond_with(ResponseTemplate::new(502).set_body_raw("Bad Gateway", "text/plain"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.42/jobs/state/"))
        .respond_with(Recorded::load("24.11_v0.0.42_jobs-state-repeated").response())
        .mount(&server)
        .await;
    let mut cfg = config(
        &server,
        Auth::Static {
            token: Secret::new(TOKEN),
        },
    );
    cfg.api_version = Some(slurm_connector::slurmrestd::ApiVersion::V0042);
    cfg.retry = RetryPolicy::none();
    let seen = observed(&mut cfg);
    let client = Client::new(cfg).unwrap();
    client.accounting_usages(&[JobId(1)]).await.unwrap_err();
    client.accounting_jobs(&[JobId(1)]).await.unwrap_err();
    client.accounting_jobs_since(0, None).await.unwrap_err();
    client.states(&[JobId(31)]).await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("accounting_usages", Daemon::Slurmdbd, Reply::Status(502)),
            ("accounting_jobs", Daemon::Slurmdbd, Reply::Status(502)),
            (
                "accounting_jobs_since",
                Daemon::Slurmdbd,
                Reply::Status(502)
            ),
            ("jobs_state", Daemon::Slurmctld, Reply::Status(200)),
        ]
    );

    // Nothing listens: refused, never sent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut cfg = ClientConfig::new(
        "down",
        url.parse().unwrap(),
        Auth::Static {
            token: Secret::new(TOKEN),
        },
    );
    cfg.api_version = Some(slurm_connector::slurmrestd::ApiVersion::V0042);
    cfg.retry = RetryPolicy::none();
    let seen = observed(&mut cfg);
    Client::new(cfg)
        .unwrap()
        .states(&[JobId(1)])
        .await
        .unwrap_err();
    assert_eq!(seen.lock().unwrap()[0].reply, Reply::Unreachable);
}
