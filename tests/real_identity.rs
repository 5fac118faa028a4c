//! Real tier: each task runs as its people's Slurm user and account (issue 15), on the dev
//! cluster's users alice, bob and carol and accounts physics and chem (`lib/identities.sh`):
//! - two projects mapped to two users with different accounts: their jobs' UserName and Account
//!   in `sacct`, their files owned by those users, `slurm_user` in `resource_meta`;
//! - a partition, a QOS or a node count outside the rule is INVALID_ARGUMENT, an unmapped project
//!   under `deny` PERMISSION_DENIED, and slurmdbd saw no job of any of them;
//! - jobs of three users running: still one REQUEST_JOB_STATE per poll tick (sdiag);
//! - a connector restarted between CreateTask and DeleteTask cancels a proxied user's job
//!   (privileged token + X-SLURM-USER-NAME);
//! - minted tokens of two users renewed across many 2 s lifetimes; per-user token files;
//! - a task's own `slurm_jwt` runs as the token's user (no deployment X-SLURM-USER-NAME);
//! - start refuses a rule whose user slurmdbd does not know, or lacks the rule's account;
//! - TLS: stunnel4 in front of slurmrestd with a CA made here: works with `ca_file`, and without
//!   it is refused naming the host and the reason (tier `tls`).
//!
//! `deploy/dev-cluster/dev-cluster --release 24.11 --min-job-age 5 run cargo test --test real_identity`

mod common;
use common::identity::rule;
use common::request::RequestExt;
use common::server::{Grpc, Server};
use common::skip::{Tier, skip};

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "real_slurm/connector.rs"]
#[allow(dead_code)]
mod connector;
use connector::job_of;

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use slurm_connector::config::identity::{DefaultAction, IdentityRule};
use slurm_connector::config::{AuthConfig, DeploymentConfig};
use slurm_connector::proto::connector::{CreateTaskRequest, DeleteTaskRequest, TaskCategory};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::cluster::ClusterRuntime;
use slurm_connector::slurmrestd::{BaseState, ClientError, JobId};
use slurm_connector::tracker::TrackerConfig;

/// One test at a time: the sdiag count and "nothing was submitted" look at the whole cluster.
static SERIAL: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

fn cluster() -> Option<support::Cluster> {
    let c = support::cluster()?;
    if !c.accounting {
        skip(
            Tier::Accounting,
            "the dev cluster runs without slurmdbd; identity tests read sacct (`up` without --no-accounting)",
        );
        return None;
    }
    Some(c)
}

/// The dev cluster with `rules` (numbered in order) and `default`, each user's files in
/// `/shared/<user>`.
fn deployment(
    c: &support::Cluster,
    rules: Vec<IdentityRule>,
    default: DefaultAction,
) -> DeploymentConfig {
    let mut d = connector::deployment(c, 3);
    let cl = d.clusters.get_mut(&c.name).unwrap();
    cl.working_dir = Some("/shared/{user}".into());
    cl.identities.rules = rules
        .into_iter()
        .enumerate()
        .map(|(i, r)| IdentityRule { number: i + 1, ..r })
        .collect();
    cl.identities.default = default;
    d
}

fn request(tag: &str, project: &str, script: &str) -> CreateTaskRequest {
    connector::request(tag, script).project(project)
}

/// Adds `sbatch_options` entries to the task.
fn with_options(mut req: CreateTaskRequest, opts: &[(&str, &str)]) -> CreateTaskRequest {
    use prost_types::value::Kind;
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    let mut s = prost_types::Struct::default();
    for (k, v) in opts {
        s.fields.insert(
            k.to_string(),
            prost_types::Value {
                kind: Some(Kind::StringValue(v.to_string())),
            },
        );
    }
    custom.fields.insert(
        "sbatch_options".into(),
        prost_types::Value {
            kind: Some(Kind::StructValue(s)),
        },
    );
    req
}

fn meta_json(meta: &[u8]) -> serde_json::Value {
    serde_json::from_slice(meta).unwrap()
}

async fn create(g: &mut Grpc, req: CreateTaskRequest) -> Vec<u8> {
    g.create_task(req)
        .await
        .unwrap_or_else(|e| panic!("CreateTask: {e}"))
        .into_inner()
        .resource_meta
}

async fn delete(g: &mut Grpc, meta: &[u8]) {
    g.delete_task(DeleteTaskRequest {
        resource_meta: meta.to_vec(),
        task_category: Some(TaskCategory {
            name: "slurm_script".into(),
            version: 0,
        }),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("DeleteTask: {e}"));
}

/// `sacct`'s `User|Account` of a job, once slurmdbd has it.
async fn sacct_user_account(c: &support::Cluster, id: JobId) -> (String, String) {
    let start = Instant::now();
    loop {
        let out = c
            .dev_cluster(&[
                "exec",
                "sacct",
                "-j",
                &id.to_string(),
                "-X",
                "-n",
                "-P",
                "-o",
                "user,account",
            ])
            .await;
        if let Some((u, a)) = out.lines().next().and_then(|l| l.split_once('|'))
            && !u.is_empty()
        {
            return (u.to_string(), a.to_string());
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "sacct has no job {id}: {out:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn phase_of(g: &mut Grpc, meta: &[u8]) -> Phase {
    Phase::try_from(connector::get(g, meta).await.phase).unwrap()
}

async fn wait_phase(g: &mut Grpc, meta: &[u8], want: Phase) {
    let r = connector::poll_until(
        g,
        meta,
        120,
        |r| r.phase == want as i32 || connector::terminal(r),
        |_| {},
    )
    .await;
    assert_eq!(Phase::try_from(r.phase).unwrap(), want, "{}", r.message);
}

#[tokio::test]
async fn two_projects_run_as_two_users_with_their_accounts_and_files() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    let d = deployment(
        &c,
        vec![rule("ml", "alice", "physics"), rule("chem", "bob", "chem")],
        DefaultAction::Deny,
    );
    let mounts = support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap();
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let script = "#!/bin/bash\necho \"user $(id -un) account $SLURM_JOB_ACCOUNT\"\n";
    let mut metas = Vec::new();
    for (project, user) in [("ml", "alice"), ("chem", "bob")] {
        let meta = create(&mut g, request(&format!("id-{project}"), project, script)).await;
        assert_eq!(
            meta_json(&meta)["slurm_user"],
            user,
            "resource_meta records the user"
        );
        metas.push((user, meta));
    }
    for (user, meta) in &metas {
        wait_phase(&mut g, meta, Phase::Succeeded).await;
        let id = job_of(&mut g, meta).await;
        let account = if *user == "alice" { "physics" } else { "chem" };
        assert_eq!(
            sacct_user_account(&c, id).await,
            (user.to_string(), account.to_string()),
            "job {id}"
        );
        let stdout = meta_json(meta)["stdout"]
            .as_str()
            .unwrap()
            .replace("%j", &id.to_string());
        assert!(
            stdout.starts_with(&format!("/shared/{user}/")),
            "{stdout}: working_dir {{user}}"
        );
        let local = support::local_path(&mounts, &stdout);
        let md = std::fs::metadata(&local).unwrap_or_else(|e| panic!("{}: {e}", local.display()));
        let uid = if *user == "alice" { 2001 } else { 2002 };
        assert_eq!(md.uid(), uid, "{} belongs to {user}", local.display());
        let text = std::fs::read_to_string(&local).unwrap();
        assert!(
            text.contains(&format!("user {user} account {account}")),
            "{text}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn limits_and_deny_refuse_before_anything_is_submitted() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    let mut ml = rule("ml", "alice", "physics");
    ml.partitions = vec!["debug".into()];
    ml.qos = vec!["normal".into()];
    ml.max_nodes = Some(1);
    let server = Server::start(deployment(&c, vec![ml], DefaultAction::Deny)).await;
    let mut g = server.client().await;
    let since = chrono::Utc::now().timestamp() - 1;
    let script = "#!/bin/bash\ntrue\n";
    let cases: [(&str, CreateTaskRequest, tonic::Code, &[&str]); 4] = [
        (
            "partition",
            with_options(request("lim-part", "ml", script), &[("partition", "gpu")]),
            tonic::Code::InvalidArgument,
            &[
                "identities[1] (project = \"ml\")",
                "[debug]",
                "partition \"gpu\"",
            ],
        ),
        (
            "qos",
            with_options(request("lim-qos", "ml", script), &[("qos", "high")]),
            tonic::Code::InvalidArgument,
            &["identities[1]", "[normal]", "qos \"high\""],
        ),
        (
            "nodes",
            with_options(request("lim-nodes", "ml", script), &[("nodes", "2")]),
            tonic::Code::InvalidArgument,
            &["identities[1]", "1 nodes (max_nodes)", "2 nodes"],
        ),
        (
            "deny",
            request("lim-deny", "etl", script),
            tonic::Code::PermissionDenied,
            &["project \"etl\"", "identity_default", "deny"],
        ),
    ];
    // These executions' keys (the end of their job names, were any submitted): the test before
    // this one may have submitted jobs up to the moment it began, which slurmdbd lists too.
    let keys: Vec<String> = cases
        .iter()
        .map(|(_, req, _, _)| {
            slurm_connector::render::idempotency_key(
                &slurm_connector::service::convert::task_spec(req)
                    .unwrap()
                    .exec,
            )
        })
        .collect();
    for (what, req, code, words) in cases {
        let e = g.create_task(req).await.expect_err(what);
        assert_eq!(e.code(), code, "{what}: {}", e.message());
        for w in words {
            assert!(
                e.message().contains(w),
                "{what}: {w:?} not in {}",
                e.message()
            );
        }
    }
    // Nothing reached Slurm: slurmdbd has no job submitted since the test began.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let jobs = c
        .user_client()
        .accounting_jobs_since(since, None)
        .await
        .expect("slurmdb jobs");
    let ours: Vec<_> = jobs
        .iter()
        .filter(|j| j.submit_time.is_some_and(|t| t >= since))
        .filter(|j| {
            slurm_connector::render::key_from_job_name(&j.name)
                .is_some_and(|k| keys.iter().any(|want| want == k))
        })
        .map(|j| (j.job_id, j.name.clone()))
        .collect();
    assert!(ours.is_empty(), "refused tasks submitted jobs: {ours:?}");
    server.stop().await;
}

/// `slurm_connector_poll_tick_seconds_count` of the cluster, from the connector's /metrics.
async fn ticks(server: &Server, cluster: &str) -> u64 {
    let text = reqwest::get(format!("http://{}/metrics", server.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| {
            l.starts_with("slurm_connector_poll_tick_seconds_count")
                && l.contains(&format!("cluster=\"{cluster}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .map_or(0, |n| n as u64)
}

#[tokio::test]
async fn one_job_state_request_per_tick_with_jobs_of_three_users() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    let d = deployment(
        &c,
        vec![
            rule("p-a", "alice", "physics"),
            rule("p-b", "bob", "chem"),
            rule("p-c", "carol", "chem"),
        ],
        DefaultAction::Deny,
    );
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let mut metas = Vec::new();
    for p in ["p-a", "p-b", "p-c"] {
        metas.push(
            create(
                &mut g,
                request(&format!("sdiag-{p}"), p, "#!/bin/bash\nsleep 60\n"),
            )
            .await,
        );
    }
    for m in &metas {
        wait_phase(&mut g, m, Phase::Running).await;
    }
    let diag = c.user_client();
    let (t0, r0) = (
        ticks(&server, &c.name).await,
        support::job_state_rpcs(&diag).await,
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (t1, r1) = (
        ticks(&server, &c.name).await,
        support::job_state_rpcs(&diag).await,
    );
    let (dt, dr) = (t1 - t0, r1 - r0);
    eprintln!("{dt} poll ticks, {dr} REQUEST_JOB_STATE RPCs, jobs of alice, bob and carol running");
    assert!(dt >= 4, "the tracker polled {dt} times in 8 s at 1 s");
    // A tick in flight at either reading may count on one side only.
    assert!(
        dr <= dt as i64 + 1,
        "{dr} REQUEST_JOB_STATE RPCs for {dt} ticks: more than one per tick"
    );
    assert!(
        dr >= dt as i64 - 1,
        "{dr} RPCs for {dt} ticks: the poll went elsewhere"
    );
    for m in &metas {
        delete(&mut g, m).await;
    }
    server.stop().await;
}

/// A token file holding a SlurmUser token (`dev-cluster token slurm`): the privileged mode.
async fn slurm_token_file(c: &support::Cluster) -> PathBuf {
    let dir = common::fresh_dir("sc-id-token");
    let f = dir.join("slurm.jwt");
    let token = c.dev_cluster(&["token", "slurm", "3600"]).await;
    std::fs::write(&f, token.trim()).unwrap();
    f
}

#[tokio::test]
async fn a_restarted_connector_cancels_a_proxied_user_s_job() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    let mut d = deployment(
        &c,
        vec![rule("ml", "alice", "physics")],
        DefaultAction::Deny,
    );
    d.clusters.get_mut(&c.name).unwrap().auth =
        Some(AuthConfig::TokenFile(slurm_token_file(&c).await));
    let first = Server::start(d.clone()).await;
    let mut g = first.client().await;
    let meta = create(
        &mut g,
        request("proxy-cancel", "ml", "#!/bin/bash\nsleep 120\n"),
    )
    .await;
    wait_phase(&mut g, &meta, Phase::Running).await;
    let id = job_of(&mut g, &meta).await;
    first.stop().await;
    let job = c.user_client().job(id).await.unwrap().expect("running job");
    assert_eq!(
        job.user.as_deref(),
        Some("alice"),
        "proxied with X-SLURM-USER-NAME"
    );

    let second = Server::start(d).await;
    let mut g = second.client().await;
    delete(&mut g, &meta).await;
    support::wait_base(&c.user_client(), id, BaseState::Cancelled).await;
    second.stop().await;
}

#[tokio::test]
async fn minted_tokens_of_several_users_renew_across_short_lifetimes() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    let mut d = deployment(
        &c,
        vec![rule("ml", "alice", "physics"), rule("chem", "bob", "chem")],
        DefaultAction::Deny,
    );
    let mut cfg = d.clusters.remove(&c.name).unwrap();
    cfg.auth = Some(AuthConfig::KeyFile {
        path: c.key_file.clone(),
        lifetime: Duration::from_secs(2),
    });
    let rt = ClusterRuntime::build(cfg, TrackerConfig::default(), None, None).unwrap();
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < Duration::from_secs(9) {
        for u in ["alice", "bob"] {
            rt.client_as(Some(u))
                .jobs()
                .await
                .unwrap_or_else(|e| panic!("{u} after {:?}: {e}", start.elapsed()));
            calls += 1;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    for u in ["alice", "bob"] {
        let n = rt.client_as(Some(u)).token_refreshes();
        // Renewed at 80% of 2 s: about every 1.6 s over 9 s.
        assert!(n >= 4, "{u}: {n} tokens minted over {calls} calls in 9 s");
        let mut job = c.job(&format!("mint-{u}"), "#!/bin/bash\ntrue\n");
        job.current_working_directory = format!("/shared/{u}");
        let id = rt
            .submit_client_as(Some(u))
            .submit(&job)
            .await
            .expect("submit");
        let j = c.user_client().job(id).await.unwrap().expect("the job");
        assert_eq!(j.user.as_deref(), Some(u));
    }
    assert_eq!(
        rt.client_as(None).token_refreshes(),
        0,
        "the deployment's own token was never needed"
    );
}

#[tokio::test]
async fn user_token_files_act_as_each_user() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    let dir = common::fresh_dir("sc-id-user-tokens");
    for u in ["alice", "bob"] {
        let t = c.dev_cluster(&["token", u, "600"]).await;
        std::fs::write(dir.join(u), t.trim()).unwrap();
    }
    let mut d = deployment(
        &c,
        vec![rule("ml", "alice", "physics"), rule("chem", "bob", "chem")],
        DefaultAction::Deny,
    );
    let mut cfg = d.clusters.remove(&c.name).unwrap();
    cfg.identities.user_jwt_dir = Some(dir.clone());
    let rt = ClusterRuntime::build(cfg, TrackerConfig::default(), None, None).unwrap();
    for u in ["alice", "bob"] {
        let mut job = c.job(&format!("file-{u}"), "#!/bin/bash\ntrue\n");
        job.current_working_directory = format!("/shared/{u}");
        let id = rt
            .submit_client_as(Some(u))
            .submit(&job)
            .await
            .expect("submit");
        let j = c.user_client().job(id).await.unwrap().expect("the job");
        assert_eq!(j.user.as_deref(), Some(u), "with {}/{u}", dir.display());
    }
    // A user without a file: the error names the file, not a token.
    let e = rt
        .client_as(Some("carol"))
        .jobs()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&dir.join("carol").display().to_string()), "{e}");
}

#[tokio::test]
async fn a_task_s_own_token_runs_as_its_user_without_the_deployment_user_name() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    // No rules: the task's own token is allowed (with a rule it is refused: tests/service_identity.rs).
    let mut d = connector::deployment(&c, 3);
    d.allow_task_credentials = true;
    d.clusters.get_mut(&c.name).unwrap().working_dir = Some("/shared/bob".into());
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let token = c.dev_cluster(&["token", "bob", "600"]).await;
    let mut req = request("own-token", "ml", "#!/bin/bash\nid -un\n");
    req.connection
        .get_or_insert_with(Default::default)
        .secrets
        .insert("slurm_jwt".into(), token.trim().to_string());
    let connection = req.connection.clone();
    let meta = create(&mut g, req).await;
    let id = job_of(&mut g, &meta).await;
    let j = c.user_client().job(id).await.unwrap().expect("the job");
    assert_eq!(
        j.user.as_deref(),
        Some("bob"),
        "the token's user, not flyte"
    );
    assert!(meta_json(&meta).get("slurm_user").is_none());
    g.delete_task(DeleteTaskRequest {
        resource_meta: meta.clone(),
        task_category: Some(TaskCategory {
            name: "slurm_script".into(),
            version: 0,
        }),
        connection,
    })
    .await
    .expect("DeleteTask with the task's token");
    server.stop().await;
}

async fn start_error(d: DeploymentConfig) -> String {
    let g = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let m = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    match tokio::time::timeout(
        Duration::from_secs(60),
        slurm_connector::service::serve_with(d, g, m, async {}),
    )
    .await
    .expect("serve_with returns")
    {
        Ok(()) => panic!("serve started with a bad identity rule"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn start_refuses_a_rule_whose_user_or_account_the_cluster_lacks() {
    let Some(c) = cluster() else { return };
    let _one = SERIAL.lock().await;
    let e = start_error(deployment(
        &c,
        vec![
            rule("ml", "alice", "physics"),
            rule("etl", "nosuchuser", "physics"),
        ],
        DefaultAction::Deny,
    ))
    .await;
    assert!(
        e.contains("identities[2] (project = \"etl\")")
            && e.contains("nosuchuser")
            && e.contains("sacctmgr"),
        "{e}"
    );
    let e = start_error(deployment(
        &c,
        vec![rule("ml", "alice", "chem")],
        DefaultAction::Deny,
    ))
    .await;
    assert!(
        e.contains("identities[1]") && e.contains("\"chem\"") && e.contains("physics"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// TLS: stunnel4 in front of slurmrestd.

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A CA and a certificate for `localhost`/127.0.0.1 signed by it (`common::tls`), and stunnel4
/// terminating TLS on a free port in front of `backend`. Returns (port, CA file, the child).
fn tls_terminator(ca: &common::tls::TestCa, backend: u16) -> (u16, PathBuf, Child) {
    let (cert, key) = ca.server_cert("localhost");
    let dir = &ca.dir;
    let port = common::free_port();
    std::fs::write(
        dir.join("stunnel.conf"),
        format!(
            "foreground = yes\npid =\n[slurmrestd]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{backend}\n\
             cert = {cert}\nkey = {key}\n",
            cert = cert.display(),
            key = key.display()
        ),
    )
    .unwrap();
    let child = Child(
        std::process::Command::new("stunnel4")
            .arg(dir.join("stunnel.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("stunnel4"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "stunnel4 did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (port, ca.ca.clone(), child)
}

#[tokio::test]
async fn tls_with_a_private_ca_works_with_ca_file_and_is_refused_without() {
    let Some(c) = cluster() else { return };
    if !common::tls::on_path("stunnel4") {
        skip(
            Tier::Tls,
            "stunnel4 is not on PATH (`apt-get install -y stunnel4 openssl`)",
        );
        return;
    }
    let Some(test_ca) = common::tls::TestCa::new("id-tls") else {
        return;
    };
    let _one = SERIAL.lock().await;
    let (port, ca, _stunnel) = tls_terminator(&test_ca, c.url.port().unwrap());
    let mut d = deployment(
        &c,
        vec![rule("ml", "alice", "physics")],
        DefaultAction::Deny,
    );
    let url: url::Url = format!("https://localhost:{port}").parse().unwrap();

    // Without the CA: refused, naming the host and why, and `serve` does not start.
    let mut plain = d.clone();
    plain.clusters.get_mut(&c.name).unwrap().restd_url = url.clone();
    let rt = ClusterRuntime::build(
        plain.clusters[&c.name].clone(),
        TrackerConfig::default(),
        None,
        None,
    )
    .unwrap();
    let e = rt
        .client
        .negotiate()
        .await
        .expect_err("an untrusted certificate");
    assert!(matches!(e, ClientError::Tls { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("localhost:{port}"))
            && msg.contains("ca_file")
            && msg.to_lowercase().contains("certificate"),
        "{msg}"
    );
    assert!(!e.is_transient(), "a certificate problem is not a hiccup");
    eprintln!("without ca_file: {msg}");
    let started = start_error(plain).await;
    assert!(started.contains(&format!("localhost:{port}")), "{started}");

    // With it: the connector runs a task through the terminator.
    let cl = d.clusters.get_mut(&c.name).unwrap();
    cl.restd_url = url;
    cl.ca_file = Some(ca);
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let meta = create(&mut g, request("tls", "ml", "#!/bin/bash\nid -un\n")).await;
    wait_phase(&mut g, &meta, Phase::Succeeded).await;
    assert_eq!(phase_of(&mut g, &meta).await, Phase::Succeeded);
    server.stop().await;
}

/// Why start says so when it cannot check a rule's user: without slurmdbd, Slurm accepts a job of
/// a user it cannot resolve and holds it for ever (measured on 24.11: UserId=99, JobHeldAdmin).
#[tokio::test]
async fn without_accounting_a_job_of_an_unknown_user_is_accepted_and_held() {
    let Some(c) = support::cluster() else { return };
    if c.accounting {
        skip(
            Tier::NoAccounting,
            "the dev cluster runs with slurmdbd (`up --no-accounting` for this test)",
        );
        return;
    }
    let _one = SERIAL.lock().await;
    let ghost = c.client(c.minted("nosuchuser"), Some("nosuchuser"));
    let id = support::submit(&ghost, &c.job("ghost", "#!/bin/bash\ntrue\n")).await;
    let privileged = c.client(c.minted("slurm"), None);
    let start = Instant::now();
    let job = loop {
        let j = privileged.job(id).await.unwrap().expect("the job");
        if j.reason.as_deref() == Some("JobHeldAdmin") || start.elapsed() > Duration::from_secs(20)
        {
            break j;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(job.state.base, BaseState::Pending, "{job:?}");
    assert_eq!(job.reason.as_deref(), Some("JobHeldAdmin"), "{job:?}");
    assert_ne!(job.user.as_deref(), Some("nosuchuser"), "{job:?}");
    privileged
        .cancel(id, None)
        .await
        .expect("cancel as SlurmUser");
}
