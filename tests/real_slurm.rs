//! The real tier: the slurmrestd client against a real Slurm (`deploy/dev-cluster`).
//!
//! Every test skips (with the reason on stderr) unless the dev cluster's environment is present:
//! ```sh
//! deploy/dev-cluster/dev-cluster --release 24.11 --min-job-age 5 up
//! eval "$(deploy/dev-cluster/dev-cluster --release 24.11 env)"
//! cargo test --test real_slurm
//! ```
//! The tests share the one cluster and run in parallel; each uses its own jobs (unique names) and
//! never assumes the queue is empty. Jobs that sleep carry a time limit, so a failed test cannot
//! leave them running for long.
//!
//! tests/real_slurm/ holds two families of them, `cancel.rs` and `job_states.rs` (one `jobs/state`
//! request for many jobs), beside the helpers the real tiers share (`support.rs`, `connector.rs`).

use std::time::Duration;

use slurm_connector::slurmrestd::job_description::Limit;
use slurm_connector::slurmrestd::{
    ApiVersion, Auth, BaseState, CancelOutcome, ClientError, JobId, Secret,
};

// Root files of integration tests look for modules next to them, hence the path.
mod common;
use common::skip::{Tier, skip};

#[path = "real_slurm/support.rs"]
mod support;
// Only its deployment is used here (the other tiers drive the connector through gRPC).
#[allow(dead_code)]
#[path = "real_slurm/connector.rs"]
mod connector;
use support::*;

macro_rules! require_cluster {
    () => {
        match cluster() {
            Some(c) => c,
            None => return,
        }
    };
}

// Two families of tests in tests/real_slurm/ (declared after the macro, which they use).
#[path = "real_slurm/cancel.rs"]
mod cancel;
#[path = "real_slurm/claim.rs"]
mod claim;
#[path = "real_slurm/job_states.rs"]
mod job_states;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_runs_the_job_as_the_user_with_its_fields() {
    let c = require_cluster!();
    let client = c.user_client();
    let mut job = c.job("submit", include_str!("fixtures/real/whoami.sh"));
    job.environment
        .push(("GREETING".to_string(), "from-rest".to_string()));
    job.standard_output = Some(format!("{}/{}.out", c.workdir, job.name));
    job.standard_error = Some(format!("{}/{}.err", c.workdir, job.name));
    job.comment = Some("real tier".to_string());
    job.cpus_per_task = Some(2);
    job.time_limit = Some(Limit::Finite(5));
    let id = submit(&client, &job).await;
    wait_base(&client, id, BaseState::Completed).await;

    let info = client
        .job(id)
        .await
        .expect("job/{id}")
        .expect("slurmctld still knows the job");
    assert_eq!(info.job_id, id);
    assert_eq!(info.name, job.name);
    assert_eq!(info.state.base, BaseState::Completed);
    assert_eq!(info.user.as_deref(), Some(c.user.as_str()));
    assert_eq!(
        info.current_working_directory.as_deref(),
        Some(c.workdir.as_str())
    );
    assert_eq!(info.comment.as_deref(), Some("real tier"));
    assert_eq!(info.partition.as_deref(), Some("debug"));
    assert_eq!(info.exit_code.as_ref().and_then(|e| e.return_code), Some(0));
    assert!(
        info.start_time.is_some() && info.end_time.is_some(),
        "{info:?}"
    );

    let out_local = c.workdir_local.join(format!("{}.out", job.name));
    let out = std::fs::read_to_string(&out_local)
        .unwrap_or_else(|e| panic!("{}: {e}", out_local.display()));
    assert_eq!(
        out.trim(),
        format!(
            "user={} uid=2000 cwd={} greeting=from-rest",
            c.user, c.workdir
        ),
        "stdout of job {id}"
    );
    let err = std::fs::read_to_string(c.workdir_local.join(format!("{}.err", job.name)))
        .expect("stderr file");
    assert_eq!(err.trim(), "to-stderr");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_reports_failed_with_its_exit_code() {
    let c = require_cluster!();
    let client = c.user_client();
    let id = submit(&client, &c.job("fail", "#!/bin/bash\nexit 3\n")).await;
    wait_base(&client, id, BaseState::Failed).await;
    let info = client.job(id).await.expect("job/{id}").expect("known job");
    assert_eq!(
        info.exit_code.as_ref().and_then(|e| e.return_code),
        Some(3),
        "{info:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_load_works_in_a_rest_job() {
    let c = require_cluster!();
    let client = c.user_client();
    let mut job = c.job("module", include_str!("fixtures/real/module-load.sh"));
    job.standard_output = Some(format!("{}/{}.out", c.workdir, job.name));
    let id = submit(&client, &job).await;
    wait_for(&client, id, Duration::from_secs(120), "finished", |s| {
        s.is_some_and(|s| s.is_finished())
    })
    .await;
    let out = std::fs::read_to_string(c.workdir_local.join(format!("{}.out", job.name)))
        .expect("job output");
    assert_eq!(
        out.trim(),
        "HELLO_MODULE=loaded HELLO_VERSION=1.0",
        "job {id}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aged_out_job_is_found_in_slurmdbd() {
    let c = require_cluster!();
    if !c.accounting {
        skip(
            Tier::Accounting,
            "the dev cluster runs without accounting (--no-accounting); slurmdbd is needed",
        );
        return;
    }
    if c.min_job_age > 60 {
        skip(
            Tier::Accounting,
            format!(
                "MinJobAge is {} s; bring the cluster up with `--min-job-age 5` to test aging out in seconds",
                c.min_job_age
            ),
        );
        return;
    }
    let client = c.user_client();
    let job = c.job("aged", "#!/bin/bash\ntrue\n");
    let id = submit(&client, &job).await;
    wait_base(&client, id, BaseState::Completed).await;
    // slurmctld purges finished jobs every 60 s once they are MinJobAge old.
    let timeout = Duration::from_secs(c.min_job_age + 150);
    wait_for(&client, id, timeout, "aged out of slurmctld", |s| {
        s.is_none()
    })
    .await;

    assert!(
        client.job(id).await.expect("job/{id}").is_none(),
        "aged-out job {id} still known to slurmctld"
    );
    assert_eq!(
        client.cancel(id, None).await.expect("cancel aged-out"),
        cancel_outcome(&client, CancelOutcome::Unknown)
    );

    let info = client
        .accounting_job(id)
        .await
        .expect("slurmdb job")
        .expect("slurmdbd has the aged-out job");
    assert_eq!(info.job_id, id);
    assert_eq!(info.name, job.name);
    assert_eq!(info.state.base, BaseState::Completed);
    assert_eq!(info.user.as_deref(), Some(c.user.as_str()));
    let many = client
        .accounting_jobs(&[id, JobId(999_999)])
        .await
        .expect("slurmdb jobs");
    assert_eq!(
        many.get(&id).map(|j| &j.state.base),
        Some(&BaseState::Completed)
    );
    assert!(!many.contains_key(&JobId(999_999)));
}

/// The versions each release really serves (measured on the dev cluster; 26.11 is the vendored
/// 26.11.0-0rc1), and the one the connector must choose: the pinned one, or the newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_gets_the_newest_version_both_sides_serve_or_the_pinned_one() {
    let c = require_cluster!();
    let served: &[ApiVersion] = match c.release.as_str() {
        "24.11" => &[ApiVersion::V0040, ApiVersion::V0041, ApiVersion::V0042],
        "26.05" => &[
            ApiVersion::V0042,
            ApiVersion::V0043,
            ApiVersion::V0044,
            ApiVersion::V0045,
        ],
        "26.11" => &[
            ApiVersion::V0043,
            ApiVersion::V0044,
            ApiVersion::V0045,
            ApiVersion::V0046,
        ],
        other => panic!("no expectation for release {other}"),
    };
    let n = c
        .user_client()
        .negotiate()
        .await
        .expect("a version in common");
    eprintln!(
        "{}: {} ({}), Slurm {:?}",
        c.release,
        n.version,
        n.reason(),
        n.server.release
    );
    assert_eq!(n.served, served, "versions served by {}", c.release);
    assert_eq!(n.version, c.api_version.unwrap_or(*served.last().unwrap()));
    assert_eq!(n.pinned, c.api_version.is_some());
    // Every call then goes to that version (meta.plugin.data_parser names it).
    let d = c.user_client().diag().await.expect("diag");
    assert_eq!(
        d.server.data_parser.as_deref(),
        Some(format!("data_parser/{}", n.version).as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_from_scontrol_and_minted_are_accepted() {
    let c = require_cluster!();
    let token = c.dev_cluster(&["token", &c.user, "300"]).await;
    let from_scontrol = c.client(
        Auth::Static {
            token: Secret::new(token.trim()),
        },
        // The connector always names the job user (FLYTE_SLURM_USERNAME); errors then name it too.
        Some(&c.user),
    );
    let minted = c.user_client();
    for (how, client) in [("scontrol token", &from_scontrol), ("minted", &minted)] {
        let id = client
            .submit(&c.job("token", "#!/bin/bash\ntrue\n"))
            .await
            .unwrap_or_else(|e| panic!("{how}: {e}"));
        let info = client
            .job(id)
            .await
            .unwrap_or_else(|e| panic!("{how}: {e}"))
            .expect("known job");
        assert_eq!(info.user.as_deref(), Some(c.user.as_str()), "{how}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_signed_with_the_wrong_key_is_an_auth_error() {
    let c = require_cluster!();
    let dir = std::env::temp_dir().join(unique("wrongkey"));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("jwt_hs256.key");
    std::fs::write(&key, rand::random::<[u8; 32]>()).unwrap();
    let client = c.client(
        Auth::Minted {
            key_file: key.clone(),
            token_user: c.user.clone(),
            lifetime: Duration::from_secs(600),
        },
        None,
    );
    let mut job = c.job("wrongkey", "#!/bin/bash\ntrue\n");
    job.comment = Some("must never run".to_string());
    let errors = [
        (
            "states",
            client.states(&[JobId(1)]).await.map(|_| ()).unwrap_err(),
        ),
        ("submit", client.submit(&job).await.map(|_| ()).unwrap_err()),
    ];
    for (op, err) in errors {
        assert_auth_error(&c, op, &err);
    }
    // The rejected submit created no job.
    let queued = c
        .dev_cluster(&["exec", "squeue", "-h", "--name", &job.name, "-o", "%i"])
        .await;
    assert_eq!(
        queued.trim(),
        "",
        "a job was created despite the rejected token"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_static_token_is_an_auth_error() {
    let c = require_cluster!();
    let token = c.dev_cluster(&["token", &c.user, "1"]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let client = c.client(
        Auth::Static {
            token: Secret::new(token.trim()),
        },
        // The connector always names the job user (FLYTE_SLURM_USERNAME); errors then name it too.
        Some(&c.user),
    );
    let err = client.states(&[JobId(1)]).await.map(|_| ()).unwrap_err();
    assert_auth_error(&c, "states", &err);
    assert!(
        !err.to_string().contains(token.trim()),
        "the token leaked into the error"
    );
}

fn assert_auth_error(c: &Cluster, op: &str, err: &ClientError) {
    let msg = err.to_string();
    assert!(err.is_auth(), "{op}: expected an auth error, got {err:?}");
    assert!(
        !err.is_transient(),
        "{op}: a rejected token is not transient: {msg}"
    );
    assert!(
        msg.contains(&c.name),
        "{op}: the error must name the cluster {}: {msg}",
        c.name
    );
    assert!(
        msg.contains(&c.user),
        "{op}: the error must name the user {}: {msg}",
        c.user
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_or_slurm_token_proxies_the_job_user() {
    let c = require_cluster!();
    for token_user in ["root", "slurm"] {
        let client = c.client(c.minted(token_user), Some(&c.user));
        let mut job = c.job(
            &format!("proxy-{token_user}"),
            include_str!("fixtures/real/whoami.sh"),
        );
        job.standard_output = Some(format!("{}/{}.out", c.workdir, job.name));
        let id = submit(&client, &job).await;
        wait_base(&client, id, BaseState::Completed).await;
        let info = client.job(id).await.expect("job/{id}").expect("known job");
        assert_eq!(
            info.user.as_deref(),
            Some(c.user.as_str()),
            "token for {token_user} proxying {}",
            c.user
        );
        let out = std::fs::read_to_string(c.workdir_local.join(format!("{}.out", job.name)))
            .expect("job output");
        assert!(
            out.starts_with(&format!("user={} uid=2000 ", c.user)),
            "token for {token_user}: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_token_cannot_proxy_another_user() {
    let c = require_cluster!();
    let client = c.client(c.minted(&c.user), Some("root"));
    let err = client
        .submit(&c.job("proxy-denied", "#!/bin/bash\ntrue\n"))
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(err.is_auth(), "expected an auth error, got {err:?}");
    assert!(err.to_string().contains(&c.name), "{err}");
}

/// `slurm-connector check` on a real Slurm names the prerequisite a failure points at: every row
/// ✓ with the dev cluster's own settings (accounting answering when it has slurmdbd, the job user
/// known), a user Slurm does not know ✗ on `job user known` (its jobs would never start), and a
/// token of another key ✗ on `token accepted`, naming slurm.conf's `AuthAltTypes=auth/jwt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_the_missing_prerequisite() {
    use slurm_connector::cli::check::check_cluster;
    use slurm_connector::config::AuthConfig;
    let c = require_cluster!();
    // The connector's own deployment of the dev cluster, as another user or with another key.
    let cluster = |user: &str, key: &std::path::Path| {
        let mut cfg = connector::deployment(&c, 3).clusters[&c.name].clone();
        cfg.username = Some(user.to_string());
        cfg.auth = Some(AuthConfig::KeyFile {
            path: key.to_path_buf(),
            lifetime: Duration::from_secs(600),
        });
        cfg
    };
    let row = |rows: &[slurm_connector::cli::check::Check], what: &str| {
        rows.iter()
            .find(|r| r.what == what)
            .unwrap_or_else(|| panic!("no `{what}` row in {rows:#?}"))
            .clone()
    };

    let rows = check_cluster(
        &cluster(&c.user, &c.key_file),
        None,
        slurm_connector::config::Coalesce::Auto,
        Default::default(),
    )
    .await;
    assert!(rows.iter().all(|r| r.ok), "{rows:#?}");
    let acct = row(&rows, "accounting (slurmdbd)");
    if c.accounting {
        assert_eq!(acct.detail, "slurmdbd answers");
        assert!(row(&rows, "job user known").detail.starts_with(&c.user));

        let rows = check_cluster(
            &cluster("nosuchuser", &c.key_file),
            None,
            slurm_connector::config::Coalesce::Auto,
            Default::default(),
        )
        .await;
        let user = row(&rows, "job user known");
        assert!(
            !user.ok && user.detail.contains("does not exist") && user.detail.contains("sacctmgr"),
            "{rows:#?}"
        );
    } else {
        assert!(acct.detail.starts_with("not served"), "{acct:?}");
        assert!(rows.iter().all(|r| r.what != "job user known"), "{rows:#?}");
    }

    let dir = std::env::temp_dir().join(unique("check-wrongkey"));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("jwt_hs256.key");
    std::fs::write(&key, rand::random::<[u8; 32]>()).unwrap();
    let rows = check_cluster(
        &cluster(&c.user, &key),
        None,
        slurm_connector::config::Coalesce::Auto,
        Default::default(),
    )
    .await;
    let token = row(&rows, "token accepted");
    assert!(
        !token.ok && token.detail.contains("AuthAltTypes=auth/jwt"),
        "{rows:#?}"
    );
    assert_eq!(
        rows.last().unwrap().what,
        "token accepted",
        "later rows repeat it"
    );
    std::fs::remove_dir_all(&dir).ok();
}
