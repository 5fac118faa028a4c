//! `slurm-connector check` against a slurmrestd that serves other API versions than asked: the
//! version row says what is wrong (the versions on each side), and a good token is never
//! reported as rejected because of a version 404 (what `check` did before it negotiated).

use crate::common;

use common::{Recorded, serving};
use slurm_connector::cli::check::check_cluster;
use slurm_connector::config::{AuthConfig, ClusterConfig, Coalesce};
use slurm_connector::slurmrestd::{ApiVersion, Secret};
use std::time::Duration;
use wiremock::Mock;
use wiremock::matchers::{method, path};

fn cluster(url: &str, pinned: Option<ApiVersion>) -> ClusterConfig {
    ClusterConfig {
        api_version: pinned,
        username: Some("flyte".into()),
        auth: Some(AuthConfig::Token(Secret::new(
            "eyJhbGciOiJIUzI1NiJ9.e30.c2ln",
        ))),
        ..ClusterConfig::new("hpc", url.parse().unwrap())
    }
}

const SLURM_2611: &[&str] = &["v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"];

#[tokio::test]
async fn a_pinned_version_the_cluster_lacks_is_the_version_row_not_the_token_row() {
    let server = serving("26.11rc1", SLURM_2611).await;
    let rows = check_cluster(
        &cluster(&server.uri(), Some(ApiVersion::V0042)),
        None,
        Coalesce::Auto,
        Default::default(),
    )
    .await;
    let row = |what: &str| rows.iter().find(|r| r.what == what);
    assert!(row("slurmrestd reachable").unwrap().ok, "{rows:#?}");
    let v = row("API version").expect("a version row");
    assert!(!v.ok);
    assert!(
        v.detail.contains("v0.0.42") && v.detail.contains("v0.0.43, v0.0.44, v0.0.45, v0.0.46"),
        "{}",
        v.detail
    );
    assert!(row("token accepted").is_none(), "{rows:#?}");
}

#[tokio::test]
async fn the_chosen_version_and_why_then_the_token() {
    let server = serving("26.11rc1", SLURM_2611).await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.46/diag/"))
        .respond_with(Recorded::load("26.11rc1_v0.0.46_jobs-state-one").response())
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.46/partitions/"))
        .respond_with(Recorded::load("26.11rc1_v0.0.46_jobs-state-one").response())
        .mount(&server)
        .await;
    let rows = check_cluster(
        &cluster(&server.uri(), None),
        None,
        Coalesce::Auto,
        Default::default(),
    )
    .await;
    let v = rows.iter().find(|r| r.what == "API version").unwrap();
    assert!(v.ok, "{rows:#?}");
    assert!(
        v.detail.starts_with("v0.0.46 (Slurm 26.11.0-0rc1)") && v.detail.contains("newest"),
        "{}",
        v.detail
    );
    let t = rows.iter().find(|r| r.what == "token accepted").unwrap();
    assert!(t.ok, "{rows:#?}");
}

/// Against mock-slurmrestd (which runs jobs): with accounting, `accounting (slurmdbd)` answers;
/// without it (slurmrestd run with `-s openapi/slurmctld`), the row is still ✓ and says what
/// degrades, since the connector works without slurmdbd; and the user row needs slurmdbd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounting_is_checked_and_its_absence_is_said_not_failed() {
    for accounting in [true, false] {
        let env = common::mock::Mock::start_with(
            "check",
            mock_slurmrestd::MockConfig {
                accounting,
                ..common::mock::Mock::config()
            },
        )
        .await;
        let cluster = env.cluster(env.static_auth(), Some("flyte"));
        let rows = check_cluster(&cluster, None, Coalesce::Auto, Default::default()).await;
        let acct = rows
            .iter()
            .find(|r| r.what == "accounting (slurmdbd)")
            .unwrap_or_else(|| panic!("{rows:#?}"));
        assert!(acct.ok, "{rows:#?}");
        if accounting {
            assert_eq!(acct.detail, "slurmdbd answers");
            assert!(rows.iter().any(|r| r.what == "job user known"), "{rows:#?}");
        } else {
            assert!(
                acct.detail.starts_with("not served") && acct.detail.contains("exit-status marker"),
                "{}",
                acct.detail
            );
            assert!(rows.iter().all(|r| r.what != "job user known"), "{rows:#?}");
        }
        env.stop().await;
    }
}

/// A slurmrestd nothing listens for: the one row says which prerequisite to look at.
#[tokio::test]
async fn an_unreachable_slurmrestd_names_the_prerequisite() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rows = check_cluster(
        &cluster(&format!("http://127.0.0.1:{port}"), None),
        None,
        Coalesce::Auto,
        Default::default(),
    )
    .await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert!(!rows[0].ok);
    assert!(
        rows[0].detail.contains("prerequisite: slurmrestd running")
            && rows[0].detail.contains("rest_auth/jwt"),
        "{}",
        rows[0].detail
    );
}

/// The gRPC port's row: identity rules on a port anyone can reach is a ✗ naming the fix; the same
/// rules behind a declared ingress policy, or on loopback, pass; a TLS certificate that does not
/// load is its own ✗ naming the file.
#[test]
fn identity_rules_on_an_open_port_are_a_cross() {
    use slurm_connector::cli::check::check_port;
    use slurm_connector::config::{DeploymentConfig, ServerTlsFiles};
    let mut d = DeploymentConfig::empty();
    let mut c = cluster("http://127.0.0.1:1", None);
    c.identities.rules = vec![common::identity::rule("ml", "alice", "physics")];
    d.clusters.insert(c.name.clone(), c);
    let open: std::net::SocketAddr = "0.0.0.0:8000".parse().unwrap();
    let rows = check_port(&d, open);
    let row = rows
        .iter()
        .find(|r| r.what == "who can reach the gRPC port")
        .unwrap();
    assert!(
        !row.ok
            && row.detail.contains("1 identity rules")
            && row.detail.contains("FLYTE_SLURM_INGRESS_POLICY")
            && row.detail.contains("networkPolicy"),
        "{row:?}"
    );
    assert!(check_port(&d, "127.0.0.1:8000".parse().unwrap())[0].ok);
    d.ingress_policy = Some("NetworkPolicy slurm-connector: gRPC from namespace flyte".into());
    let rows = check_port(&d, open);
    assert!(
        rows[0].ok && rows[0].detail.contains("restricted by NetworkPolicy"),
        "{rows:?}"
    );

    let dir = common::fresh_dir("sc-check-tls");
    d.server_tls = Some(ServerTlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    });
    let rows = check_port(&d, open);
    let tls = rows
        .iter()
        .find(|r| r.what == "TLS on the gRPC port")
        .unwrap();
    assert!(!tls.ok && tls.detail.contains("tls.crt"), "{tls:?}");
}

/// slurm.conf as Slurm 26.05's slurmrestd shows it (`GET conf`, v0.0.45, recorded while the dev
/// cluster's AccountingStoreFlags lacked job_comment, and no_stdio): the default coalesces with
/// the keys in the array's name and its logs' file names, 64 an array, and says why, a window set likewise; `max_script_size=` in
/// SchedulerParameters (the second
/// recording) bounds a batch's scripts. A version without `GET conf` sends no request for it.
#[tokio::test]
async fn coalescing_follows_the_clusters_slurm_conf() {
    use slurm_connector::cli::check::coalescing;
    let server = serving("26.05", &["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]).await;
    let client = common::replay_client(&server, "hpc", 1);
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.45/conf"))
        .respond_with(Recorded::load("26.05_v0.0.45_coalesce-conf-get").response())
        .expect(1)
        .mount(&server)
        .await;
    let conf = client.conf().await.unwrap().expect("v0.0.45 has GET conf");
    assert_eq!(conf.max_array_size, Some(1001));
    assert_eq!(conf.accounting_store_flags, ["job_script", "job_env"]);
    assert!(!conf.keeps_job_comments());
    assert_eq!(conf.max_script_size(), 4 * 1024 * 1024);

    let auto = coalescing(
        "hpc",
        Coalesce::Auto,
        Default::default(),
        Ok(Some(conf.clone())),
    );
    assert!(auto.ok, "{auto:?}");
    assert!(
        auto.detail.starts_with("window 100ms (auto)")
            && auto
                .detail
                .contains("keys in the array's name and its logs' file names")
            && auto.detail.contains("at most 64 elements"),
        "{}",
        auto.detail
    );
    let set = coalescing(
        "hpc",
        Coalesce::Window(Duration::from_millis(300)),
        Default::default(),
        Ok(Some(conf)),
    );
    assert!(
        set.ok && set.detail.contains("keys in the array's name"),
        "{set:?}"
    );
    server.verify().await;

    let server = serving("26.05", &["v0.0.45"]).await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.45/conf"))
        .respond_with(Recorded::load("26.05_v0.0.45_coalesce-conf-get-max-script-size").response())
        .mount(&server)
        .await;
    let conf = common::replay_client(&server, "hpc", 1)
        .conf()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(conf.max_script_size(), 1048576);

    // 24.11: no version with GET conf, no request.
    let server = serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]).await;
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex("/conf$"))
        .respond_with(wiremock::ResponseTemplate::new(404))
        .expect(0)
        .mount(&server)
        .await;
    let client = common::replay_client(&server, "hpc", 1);
    assert_eq!(client.conf().await.unwrap(), None);
    let row = coalescing("hpc", Coalesce::Auto, Default::default(), Ok(None));
    assert!(
        row.ok && row.detail.contains("v0.0.45") && row.detail.contains("at most 22 elements"),
        "{row:?}"
    );
}

/// `check --connector`: a running connector, as Flyte's backend meets it — SERVING, and the task
/// types of both protocols — then the two ways it is not reachable: a refusal (wrong port) and
/// no answer (what a NetworkPolicy that drops the caller looks like), each naming what to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_connector_reaches_both_protocols_and_names_why_not() {
    use slurm_connector::cli::connector_check::check_connector;
    let mock = common::mock::Mock::start(
        "check-connector",
        Duration::from_secs(600),
        Default::default(),
    )
    .await;
    let server = common::server::Server::start(mock.deployment(Duration::from_millis(200))).await;
    common::server::connect(server.addr).await;
    let rows = check_connector(&server.addr.to_string()).await;
    let row = |rows: &[slurm_connector::cli::check::Check], what: &str| {
        rows.iter()
            .find(|r| r.what == what)
            .unwrap_or_else(|| panic!("no row {what}: {rows:#?}"))
            .clone()
    };
    assert!(rows.iter().all(|r| r.ok), "{rows:#?}");
    assert!(row(&rows, "gRPC reachable").detail.ends_with("SERVING"));
    assert_eq!(
        row(&rows, "Flyte 2 connector service").detail,
        "task types slurm, slurm_script"
    );
    assert_eq!(
        row(&rows, "Flyte 1 agent service").detail,
        "task types slurm_fn, slurm"
    );
    server.stop().await;

    // Refused: nothing listens there any more.
    let refused = check_connector(&format!("http://127.0.0.1:{}", common::free_port())).await;
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert!(!refused[0].ok);
    assert!(
        refused[0].detail.contains("wrong host or port"),
        "{refused:#?}"
    );

    // No answer: a listener that accepts and never speaks HTTP/2, as a dropped connection does.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            open.push(s);
        }
    });
    let dropped = check_connector(&addr.to_string()).await;
    assert_eq!(dropped.len(), 1, "{dropped:#?}");
    assert!(!dropped[0].ok);
    assert!(dropped[0].detail.contains("NetworkPolicy"), "{dropped:#?}");

    // A name for several addresses (a headless Service's replicas) is checked at each: here one
    // replica serving, one whose packets are dropped.
    let server = common::server::Server::start(mock.deployment(Duration::from_millis(200))).await;
    common::server::connect(server.addr).await;
    let each = slurm_connector::cli::connector_check::check_each(
        "slurm-connector-headless.flyte.svc.cluster.local",
        &[server.addr, addr],
    )
    .await;
    let at = |a: std::net::SocketAddr| {
        each.iter()
            .filter(|r| r.cluster == a.to_string())
            .map(|r| (r.what, r.ok))
            .collect::<Vec<_>>()
    };
    assert!(
        each[0].ok && each[0].detail.contains("2 addresses"),
        "{each:#?}"
    );
    assert_eq!(
        at(server.addr),
        [
            ("gRPC reachable", true),
            ("Flyte 2 connector service", true),
            ("Flyte 1 agent service", true)
        ],
        "{each:#?}"
    );
    assert_eq!(at(addr), [("gRPC reachable", false)], "{each:#?}");
    server.stop().await;

    // A name that does not resolve (a misspelt Service, or one with no ready pod) is said so,
    // naming the headless Service's form.
    let unknown = check_connector("slurm-connector-headles.flyte.invalid:8000").await;
    assert_eq!(unknown.len(), 1, "{unknown:#?}");
    assert!(
        !unknown[0].ok && unknown[0].what == "address resolves",
        "{unknown:#?}"
    );
    assert!(
        unknown[0]
            .detail
            .contains("-headless.<namespace>.svc.cluster.local"),
        "{unknown:#?}"
    );

    // TLS is said to be out of its reach, with the tool that can.
    let tls = check_connector("https://connector.example:8000").await;
    assert!(!tls[0].ok && tls[0].detail.contains("grpcurl"), "{tls:#?}");
}
