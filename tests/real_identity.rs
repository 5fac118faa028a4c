//! Real tier: each task runs as its people's Slurm user and account (issue 15), on the dev
//! cluster's users alice, bob and carol and accounts physics and chem (`lib/identities.sh`):
//! - two projects mapped to two users with different accounts: their jobs' UserName and Account
//!   in `sacct`, their files owned by those users, `slurm_user` in `resource_meta` (`rules.rs`);
//! - a partition, a QOS or a node count outside the rule is INVALID_ARGUMENT, an unmapped project
//!   under `deny` PERMISSION_DENIED, and slurmdbd saw no job of any of them (`rules.rs`);
//! - jobs of three users running: still one REQUEST_JOB_STATE per poll tick (sdiag);
//! - a connector restarted between CreateTask and DeleteTask cancels a proxied user's job
//!   (privileged token + X-SLURM-USER-NAME);
//! - minted tokens of two users renewed across many 2 s lifetimes; per-user token files;
//! - a task's own `slurm_jwt` runs as the token's user (no deployment X-SLURM-USER-NAME);
//! - start refuses a rule whose user slurmdbd does not know, or lacks the rule's account
//!   (`rules.rs`);
//! - TLS: stunnel4 in front of slurmrestd with a CA made here: works with `ca_file`, and without
//!   it is refused naming the host and the reason (tier `tls`, `tls.rs`).
//!
//! `rules.rs` and `tls.rs` are in tests/real_identity/, with `helpers.rs`: the deployment under
//! rules, the tasks' requests and gRPC calls, sacct, /metrics.
//!
//! `deploy/dev-cluster/dev-cluster --release 24.11 --min-job-age 5 run cargo test --test real_identity`

mod common;
use common::identity::rule;
use common::server::Server;
use common::skip::{Tier, skip};

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "real_slurm/connector.rs"]
#[allow(dead_code)]
mod connector;
use connector::job_of;

// Root files of integration tests look for modules next to them, hence the paths.
#[path = "real_identity/helpers.rs"]
mod helpers;
use helpers::*;
#[path = "real_identity/rules.rs"]
mod rules;
#[path = "real_identity/tls.rs"]
mod tls;

use std::time::{Duration, Instant};

use slurm_connector::config::AuthConfig;
use slurm_connector::config::identity::DefaultAction;
use slurm_connector::proto::connector::{CreateTaskRequest, DeleteTaskRequest, TaskCategory};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::ClusterRuntime;
use slurm_connector::slurmrestd::BaseState;
use slurm_connector::tracker::TrackerConfig;

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
    // No rules: the task's own token is allowed (with a rule it is refused: tests/it/service_identity.rs).
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

/// Why start says so when it cannot check a rule's user: without slurmdbd, Slurm 24.11 accepts a
/// job of a user it cannot resolve and holds it for ever (UserId=99, JobHeldAdmin); 26.05 and
/// later refuse the submit itself (HTTP 500, error 6010 "Rejecting authentication of user nobody
/// or group nobody": `26.05_v0.0.44_submit-unknown-user-refused.json`), which the connector
/// reports at once as a refusal.
#[tokio::test]
async fn without_accounting_a_job_of_an_unknown_user_is_held_by_24_11_and_refused_by_26_05() {
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
    let job = c.job("ghost", "#!/bin/bash\ntrue\n");
    if c.release.as_str() >= "26.05" {
        let refused = ghost.submit(&job).await.expect_err("refused by 26.05+");
        let numbers = match &refused {
            slurm_connector::slurmrestd::ClientError::Slurm { errors, .. } => {
                errors.iter().map(|e| e.number).collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(numbers, [6010], "{refused}");
        assert!(!refused.is_transient(), "{refused}");
        return;
    }
    let id = support::submit(&ghost, &job).await;
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
