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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use slurm_connector::slurmrestd::{
    Auth, BaseState, CancelOutcome, Client, ClientConfig, ClientError, JobDescription, JobId,
    JobState, RequestObserver, Secret,
};

/// What `dev-cluster env` exported.
struct Cluster {
    name: String,
    url: url::Url,
    key_file: PathBuf,
    user: String,
    /// The jobs' working directory, as the cluster sees it.
    workdir: String,
    /// The same directory as this process sees it (through FLYTE_SLURM_SHARED_MOUNTS).
    workdir_local: PathBuf,
    release: String,
    cache: String,
    script: PathBuf,
    accounting: bool,
    min_job_age: u64,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The cluster, or `None` after printing why the test is skipped.
fn cluster() -> Option<Cluster> {
    let (Some(url), Some(_root)) = (var("FLYTE_SLURM_RESTD_URL"), var("SLURM_DEV_CLUSTER_ROOT"))
    else {
        eprintln!(
            "skipping: FLYTE_SLURM_RESTD_URL and SLURM_DEV_CLUSTER_ROOT are not set; bring up a real Slurm with \
             `deploy/dev-cluster/dev-cluster up` and `eval \"$(deploy/dev-cluster/dev-cluster env)\"`"
        );
        return None;
    };
    let need = |name: &str| {
        var(name).unwrap_or_else(|| panic!("{name} is not set: export all of `dev-cluster env`"))
    };
    let workdir = need("FLYTE_SLURM_WORKING_DIR");
    let workdir_local = local_path(&need("FLYTE_SLURM_SHARED_MOUNTS"), &workdir);
    Some(Cluster {
        name: var("SLURM_DEV_CLUSTER_NAME").unwrap_or_else(|| "dev".to_string()),
        url: url.parse().expect("FLYTE_SLURM_RESTD_URL is a URL"),
        key_file: need("FLYTE_SLURM_JWT_KEY_FILE").into(),
        user: need("FLYTE_SLURM_USERNAME"),
        workdir,
        workdir_local,
        release: need("SLURM_DEV_CLUSTER_RELEASE"),
        cache: need("SLURM_DEV_CLUSTER_CACHE"),
        script: need("SLURM_DEV_CLUSTER_SCRIPT").into(),
        accounting: need("SLURM_DEV_CLUSTER_ACCOUNTING") == "1",
        min_job_age: need("SLURM_DEV_CLUSTER_MIN_JOB_AGE")
            .parse()
            .expect("SLURM_DEV_CLUSTER_MIN_JOB_AGE is a number"),
    })
}

macro_rules! require_cluster {
    () => {
        match cluster() {
            Some(c) => c,
            None => return,
        }
    };
}

/// Maps a cluster path to a local one with `cluster_prefix=local_path[,...]`.
fn local_path(mounts: &str, cluster_path: &str) -> PathBuf {
    for entry in mounts.split(',') {
        let (prefix, local) = entry
            .split_once('=')
            .expect("FLYTE_SLURM_SHARED_MOUNTS entries are prefix=path");
        if let Some(rest) = cluster_path.strip_prefix(prefix) {
            return Path::new(local).join(rest.trim_start_matches('/'));
        }
    }
    panic!("{cluster_path} is not under any of FLYTE_SLURM_SHARED_MOUNTS={mounts}");
}

impl Cluster {
    /// A client as the connector builds one: `user_name` is the X-SLURM-USER-NAME header (the
    /// job user; with a root/SlurmUser token it proxies that user).
    fn config(&self, auth: Auth, user_name: Option<&str>) -> ClientConfig {
        let mut cfg = ClientConfig::new(self.name.clone(), self.url.clone(), auth);
        cfg.user_name = user_name.map(str::to_string);
        // A loaded 2-core CI machine: never fail a test on a slow answer.
        cfg.request_timeout = Duration::from_secs(30);
        cfg
    }

    fn client(&self, auth: Auth, user_name: Option<&str>) -> Client {
        Client::new(self.config(auth, user_name)).expect("client for the dev cluster")
    }

    fn minted(&self, token_user: &str) -> Auth {
        Auth::Minted {
            key_file: self.key_file.clone(),
            token_user: token_user.to_string(),
            lifetime: Duration::from_secs(600),
        }
    }

    /// The connector's usual setup: tokens minted for the job user.
    fn user_client(&self) -> Client {
        self.client(self.minted(&self.user), Some(&self.user))
    }

    /// Runs `dev-cluster <args>` for this cluster and returns its stdout.
    async fn dev_cluster(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new(&self.script)
            .args(["--release", &self.release, "--cache", &self.cache])
            .args(args)
            .output()
            .await
            .expect("run dev-cluster");
        assert!(
            out.status.success(),
            "dev-cluster {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    fn job(&self, tag: &str, script: &str) -> JobDescription {
        JobDescription {
            name: unique(tag),
            script: script.to_string(),
            current_working_directory: self.workdir.clone(),
            environment: vec![("PATH".to_string(), "/usr/bin:/bin".to_string())],
            // Sleeping jobs die on their own if a test fails before cancelling them.
            time_limit: Some(slurm_connector::slurmrestd::job_description::Limit::Finite(
                3,
            )),
            ..JobDescription::default()
        }
    }
}

fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("real-{tag}-{}-{n}", std::process::id())
}

/// Every `states` call of this binary goes through this lock, so the batch test can count
/// slurmctld's REQUEST_JOB_STATE RPCs around its own call without the other tests' polling.
static STATE_RPC: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

async fn states(client: &Client, ids: &[JobId]) -> HashMap<JobId, JobState> {
    let _guard = STATE_RPC.lock().await;
    client.states(ids).await.expect("jobs/state")
}

/// Polls one job's state until `done` holds; panics with the last state after `timeout`.
async fn wait_for(
    client: &Client,
    id: JobId,
    timeout: Duration,
    what: &str,
    done: impl Fn(Option<&JobState>) -> bool,
) {
    let start = Instant::now();
    loop {
        let all = states(client, &[id]).await;
        let state = all.get(&id);
        if done(state) {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "job {id} did not become {what} within {timeout:?}; last state {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_base(client: &Client, id: JobId, base: BaseState) {
    let what = format!("{base:?}");
    wait_for(client, id, Duration::from_secs(120), &what, |s| {
        s.is_some_and(|s| s.base == base)
    })
    .await;
}

async fn submit(client: &Client, job: &JobDescription) -> JobId {
    client
        .submit(job)
        .await
        .unwrap_or_else(|e| panic!("submit {}: {e}", job.name))
}

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
    job.time_limit = Some(slurm_connector::slurmrestd::job_description::Limit::Finite(
        5,
    ));
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
async fn states_of_many_jobs_come_from_one_request() {
    let c = require_cluster!();
    let client = c.user_client();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(submit(&client, &c.job(&format!("batch{i}"), "#!/bin/bash\ntrue\n")).await);
    }
    let unknown = JobId(999_999);
    let mut asked = ids.clone();
    asked.push(unknown);

    // Count the HTTP requests this client makes, and slurmctld's job-state RPCs around the call
    // (nothing else in this binary polls meanwhile: every states call takes STATE_RPC).
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let observer: RequestObserver = Arc::new(move |op: &'static str, status: Option<u16>| {
        seen.lock().unwrap().push((op, status));
    });
    let mut cfg = c.config(c.minted(&c.user), Some(&c.user));
    cfg.observer = Some(observer);
    let observed = Client::new(cfg).expect("client");
    let all = {
        let _guard = STATE_RPC.lock().await;
        let before = job_state_rpcs(&client).await;
        let all = observed
            .states(&asked)
            .await
            .expect("jobs/state for 21 ids");
        let after = job_state_rpcs(&client).await;
        assert_eq!(
            after - before,
            1,
            "states() for {} ids must cost slurmctld one REQUEST_JOB_STATE RPC",
            asked.len()
        );
        all
    };
    assert_eq!(
        *requests.lock().unwrap(),
        vec![("jobs_state", Some(200))],
        "states() for {} ids must be one HTTP request",
        asked.len()
    );
    for id in &ids {
        assert!(all.contains_key(id), "job {id} missing from {all:?}");
    }
    assert!(
        !all.contains_key(&unknown),
        "unknown job {unknown} reported: {all:?}"
    );
    assert_eq!(all.len(), ids.len());

    let start = Instant::now();
    loop {
        let all = states(&client, &ids).await;
        if ids
            .iter()
            .all(|id| all.get(id).is_some_and(|s| s.is_finished()))
        {
            for id in &ids {
                assert_eq!(all[id].base, BaseState::Completed, "job {id}");
            }
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "20 jobs not finished: {all:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn job_state_rpcs(client: &Client) -> i64 {
    let diag = client.diag().await.expect("diag");
    diag.rpcs_by_message
        .iter()
        .find(|(name, _)| name == "REQUEST_JOB_STATE")
        .map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_pending_job() {
    let c = require_cluster!();
    let client = c.user_client();
    // A held job stays pending (the job description has no hold field; sbatch --hold does it).
    let out = c
        .dev_cluster(&[
            "exec",
            "--user",
            &c.user,
            "sbatch",
            "--hold",
            "--parsable",
            "--chdir",
            &c.workdir,
            "--job-name",
            &unique("held"),
            "--wrap",
            "true",
        ])
        .await;
    let id: JobId = out
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .expect("sbatch --parsable prints the job id");
    let all = states(&client, &[id]).await;
    assert_eq!(
        all.get(&id).map(|s| &s.base),
        Some(&BaseState::Pending),
        "{all:?}"
    );

    assert_eq!(
        client.cancel(id, None).await.expect("cancel pending"),
        CancelOutcome::Cancelled
    );
    wait_base(&client, id, BaseState::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_running_job_then_again() {
    let c = require_cluster!();
    let client = c.user_client();
    let id = submit(&client, &c.job("running", "#!/bin/bash\nsleep 120\n")).await;
    wait_base(&client, id, BaseState::Running).await;

    assert_eq!(
        client.cancel(id, None).await.expect("cancel running"),
        CancelOutcome::Cancelled
    );
    wait_base(&client, id, BaseState::Cancelled).await;
    assert_eq!(
        client.cancel(id, None).await.expect("cancel again"),
        CancelOutcome::AlreadyFinished
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_finished_job_and_an_unknown_one() {
    let c = require_cluster!();
    let client = c.user_client();
    let id = submit(&client, &c.job("finished", "#!/bin/bash\ntrue\n")).await;
    wait_base(&client, id, BaseState::Completed).await;
    assert_eq!(
        client.cancel(id, None).await.expect("cancel finished"),
        CancelOutcome::AlreadyFinished
    );
    wait_base(&client, id, BaseState::Completed).await;

    assert_eq!(
        client
            .cancel(JobId(999_999), None)
            .await
            .expect("cancel unknown"),
        CancelOutcome::Unknown
    );
    assert!(
        client
            .job(JobId(999_999))
            .await
            .expect("job/999999")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aged_out_job_is_found_in_slurmdbd() {
    let c = require_cluster!();
    if !c.accounting {
        eprintln!(
            "skipping: the dev cluster runs without accounting (--no-accounting); slurmdbd is needed"
        );
        return;
    }
    if c.min_job_age > 60 {
        eprintln!(
            "skipping: MinJobAge is {} s; bring the cluster up with `--min-job-age 5` to test aging out in seconds",
            c.min_job_age
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
        CancelOutcome::Unknown
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
