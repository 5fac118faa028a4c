//! The dev cluster as the real tier sees it: what `deploy/dev-cluster/dev-cluster env` exported,
//! clients built the way the connector builds them, and polling helpers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use crate::common::skip::{Tier, skip};
use slurm_connector::slurmrestd::job_description::Limit;
use slurm_connector::slurmrestd::{
    ApiVersion, Auth, BaseState, Client, ClientConfig, JobDescription, JobId, JobState,
};

/// What `dev-cluster env` exported.
pub struct Cluster {
    pub name: String,
    pub url: url::Url,
    pub key_file: PathBuf,
    pub user: String,
    /// The jobs' working directory, as the cluster sees it.
    pub workdir: String,
    /// The same directory as this process sees it (through FLYTE_SLURM_SHARED_MOUNTS).
    pub workdir_local: PathBuf,
    pub release: String,
    pub cache: String,
    pub script: PathBuf,
    pub accounting: bool,
    pub min_job_age: u64,
    /// `FLYTE_SLURM_API_VERSION` when the run pins one (CI's per-version matrix); `None`: the
    /// newest in common, as the connector chooses.
    pub api_version: Option<ApiVersion>,
}

pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The environment of a `serve` child process against the dev cluster, as a deployment sets it
/// (the drills' fleets: 1 s polls, job files kept for the test to read).
#[allow(dead_code)] // real_slurm itself starts no fleet
pub fn fleet_env() -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = [
        "FLYTE_SLURM_RESTD_URL",
        "FLYTE_SLURM_JWT_KEY_FILE",
        "FLYTE_SLURM_USERNAME",
        "FLYTE_SLURM_WORKING_DIR",
        "FLYTE_SLURM_SHARED_MOUNTS",
        "FLYTE_SLURM_API_VERSION",
        "FLYTE_SLURM_COALESCE_WINDOW",
        "FLYTE_SLURM_CHECK_EVERY",
    ]
    .into_iter()
    .filter_map(|k| var(k).map(|v| (k, v)))
    .collect();
    env.push(("FLYTE_SLURM_POLL_INTERVAL", "1s".into()));
    env.push(("FLYTE_SLURM_JOB_FILES_RETENTION", "off".into()));
    env
}

/// [`fleet_env`] with the once-only on claims (`FLYTE_SLURM_ONCE_ONLY=claims`) under `dir`, a
/// folder of the fleet's own, when `claims`.
#[allow(dead_code)] // real_slurm itself starts no fleet
pub fn fleet_env_on(claims: bool, dir: &Path) -> Vec<(&'static str, String)> {
    let mut env = fleet_env();
    if claims {
        env.push(("FLYTE_SLURM_ONCE_ONLY", "claims".into()));
        env.push((
            "FLYTE_SLURM_CLAIMS",
            format!("file://{}/claims", dir.display()),
        ));
    }
    env
}

/// The cluster, or `None` after reporting why the test is skipped (a failure when CI requires the
/// `cluster` tier).
pub fn cluster() -> Option<Cluster> {
    let (Some(url), Some(_root)) = (var("FLYTE_SLURM_RESTD_URL"), var("SLURM_DEV_CLUSTER_ROOT"))
    else {
        skip(
            Tier::Cluster,
            "FLYTE_SLURM_RESTD_URL and SLURM_DEV_CLUSTER_ROOT are not set; bring up a real Slurm with \
             `deploy/dev-cluster/dev-cluster up` and `eval \"$(deploy/dev-cluster/dev-cluster env)\"`",
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
        api_version: var("FLYTE_SLURM_API_VERSION")
            .filter(|v| v != "auto")
            .map(|v| {
                v.parse()
                    .expect("FLYTE_SLURM_API_VERSION is a version the connector speaks")
            }),
    })
}

/// Maps a cluster path to a local one with `cluster_prefix=local_path[,...]`.
pub fn local_path(mounts: &str, cluster_path: &str) -> PathBuf {
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

/// What `cancel` reports for `outcome` in the API version `client` uses: v0.0.40/41 answer a
/// finished or unknown job with the same empty 200 as a cancel (recorded on 24.11), so there it
/// reads `Cancelled`.
pub fn cancel_outcome(
    client: &Client,
    outcome: slurm_connector::slurmrestd::CancelOutcome,
) -> slurm_connector::slurmrestd::CancelOutcome {
    match client.api_version() {
        Some(v) if v < ApiVersion::V0042 => slurm_connector::slurmrestd::CancelOutcome::Cancelled,
        _ => outcome,
    }
}

impl Cluster {
    /// A client as the connector builds one: `user_name` is the X-SLURM-USER-NAME header (the
    /// job user; with a root/SlurmUser token it proxies that user).
    pub fn config(&self, auth: Auth, user_name: Option<&str>) -> ClientConfig {
        let mut cfg = ClientConfig::new(self.name.clone(), self.url.clone(), auth);
        cfg.user_name = user_name.map(str::to_string);
        cfg.api_version = self.api_version;
        // A loaded 2-core CI machine: never fail a test on a slow answer.
        cfg.request_timeout = Duration::from_secs(30);
        cfg
    }

    pub fn client(&self, auth: Auth, user_name: Option<&str>) -> Client {
        Client::new(self.config(auth, user_name)).expect("client for the dev cluster")
    }

    pub fn minted(&self, token_user: &str) -> Auth {
        Auth::Minted {
            key_file: self.key_file.clone(),
            token_user: token_user.to_string(),
            lifetime: Duration::from_secs(600),
        }
    }

    /// The connector's usual setup: tokens minted for the job user.
    pub fn user_client(&self) -> Client {
        self.client(self.minted(&self.user), Some(&self.user))
    }

    /// Whether slurmctld rate-limits RPCs (`SlurmctldParameters=rl_enable`, `dev-cluster
    /// --rate-limit`); when not, the test (of binary `test`) skips (a failure where CI requires
    /// the tier).
    #[allow(dead_code)] // real_replicas and real_coalesce ask
    pub async fn rate_limited(&self, test: &str) -> bool {
        let config = self
            .dev_cluster(&["exec", "scontrol", "show", "config"])
            .await;
        let on = config
            .lines()
            .any(|l| l.starts_with("SlurmctldParameters") && l.contains("rl_enable"));
        if !on {
            crate::common::skip::skip(
                crate::common::skip::Tier::RateLimit,
                format!(
                    "slurmctld of the dev cluster does not rate-limit (no rl_enable); run \
                     `deploy/dev-cluster/dev-cluster --release {} --rate-limit run cargo test \
                     --test {test} throttled`",
                    self.release
                ),
            );
        }
        on
    }

    /// Runs `dev-cluster <args>` for this cluster and returns its stdout.
    pub async fn dev_cluster(&self, args: &[&str]) -> String {
        let out = crate::common::output_within(
            tokio::process::Command::new(&self.script)
                .args(["--release", &self.release, "--cache", &self.cache])
                .args(args),
            std::time::Duration::from_secs(120),
        )
        .await;
        assert!(
            out.status.success(),
            "dev-cluster {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    pub fn job(&self, tag: &str, script: &str) -> JobDescription {
        JobDescription {
            name: unique(tag),
            script: script.to_string(),
            current_working_directory: self.workdir.clone(),
            environment: vec![("PATH".to_string(), "/usr/bin:/bin".to_string())],
            // Sleeping jobs die on their own if a test fails before cancelling them.
            time_limit: Some(Limit::Finite(3)),
            ..JobDescription::default()
        }
    }
}

/// Where a drill's task scripts say they ran: a file per execution (its run name) in a folder
/// beside the cluster's job files, a line per run with the job that ran it: `<id>`, or an array
/// element's `<array id>_<index>`. What tells a duplicate where Slurm's records carry no key
/// (claims). Not the element's own id: a slurmctld restarted from a state saved before an
/// element started runs it again under a new one (26.05, the crash drill: `819`, then `822`, for
/// element 0 of array 818), which is Slurm's rerun of the one job, as a requeue is.
#[allow(dead_code)] // the drills' only
pub struct Runs {
    /// The folder as the cluster sees it.
    on_cluster: String,
    local: PathBuf,
}

#[allow(dead_code)]
impl Runs {
    pub fn new(c: &Cluster) -> Runs {
        let name = unique("runs");
        let local = c.workdir_local.join(&name);
        std::fs::create_dir_all(&local).unwrap();
        // The jobs' user writes there.
        std::fs::set_permissions(&local, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        Runs {
            on_cluster: format!("{}/{name}", c.workdir),
            local,
        }
    }

    /// The script line that records a run.
    pub fn line(&self) -> String {
        format!(
            "echo \"${{SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}}${{SLURM_ARRAY_TASK_ID:+_$SLURM_ARRAY_TASK_ID}}\" \
             >> {}/\"$FLYTE_INTERNAL_EXECUTION_ID\"\n",
            self.on_cluster
        )
    }

    /// The runs of execution `run` (its run name): one job id a run.
    pub fn of(&self, run: &str) -> Vec<String> {
        std::fs::read_to_string(self.local.join(run))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

pub fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("real-{tag}-{}-{n}", std::process::id())
}

/// Every `states` call of this binary goes through this lock, so the batch test can count
/// slurmctld's REQUEST_JOB_STATE RPCs around its own call without the other tests' polling.
pub static STATE_RPC: LazyLock<tokio::sync::Mutex<()>> =
    LazyLock::new(|| tokio::sync::Mutex::new(()));

pub async fn states(client: &Client, ids: &[JobId]) -> HashMap<JobId, JobState> {
    let _guard = STATE_RPC.lock().await;
    client.states(ids).await.expect("jobs/state")
}

/// Polls one job's state until `done` holds; panics with the last state after `timeout`.
pub async fn wait_for(
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

pub async fn wait_base(client: &Client, id: JobId, base: BaseState) {
    let what = format!("{base:?}");
    wait_for(client, id, Duration::from_secs(120), &what, |s| {
        s.is_some_and(|s| s.base == base)
    })
    .await;
}

pub async fn submit(client: &Client, job: &JobDescription) -> JobId {
    client
        .submit(job)
        .await
        .unwrap_or_else(|e| panic!("submit {}: {e}", job.name))
}

pub async fn job_state_rpcs(client: &Client) -> i64 {
    let diag = client.diag().await.expect("diag");
    diag.rpcs_by_message
        .iter()
        .find(|(name, _)| name == "REQUEST_JOB_STATE")
        .map_or(0, |(_, n)| *n)
}
