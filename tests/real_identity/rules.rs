//! The identity rules' tests of tests/real_identity.rs: each project's jobs run as its rule's user
//! and account with their files in that user's folder; a partition, QOS or node count outside the
//! rule, or an unmapped project under `deny`, is refused before anything reaches Slurm; start
//! refuses a rule whose user or account the cluster lacks.

use std::os::unix::fs::MetadataExt;

use super::*;

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
                &slurm_connector::service::task_spec(req).unwrap().exec,
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
