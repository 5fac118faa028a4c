//! Real tier: declared outputs and exit-status markers on the real dev cluster, through the
//! connector's gRPC service (in-process `serve_with`) and both staging backends:
//! - local mount: `FLYTE_SLURM_SHARED_MOUNTS` maps the cluster's `/shared` to the chroot on this
//!   host (what `dev-cluster env` exports);
//! - sidecar: a real `slurm-connector stager` process on loopback with a bearer token file, the
//!   connector configured with its URL (no mount).
//!
//! For each backend the preprocess fixture (a `slurm_script` task with a File and a Dir output)
//! lands in a local `file://` object store and comes back as SINGLE / MULTIPART Blob literals; a
//! missing output fails the task with the message; an output above the ceiling is refused with
//! the message about `output_upload='job'`; and every job leaves the exit-status marker the
//! rendered script writes (`0`, and `3` for a failing script).
//! The path-escape corpus through both backends is `staging_backends.rs`' (not repeated here).
//!
//! Skipped (with the reason) when the dev-cluster environment is not exported:
//! `eval "$(deploy/dev-cluster/dev-cluster --release 24.11 env)"`.

mod common;
use common::RequestExt;
use common::server::Server;
use common::skip::{Tier, skip};

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use slurm_connector::config::{AuthConfig, ClusterConfig, DeploymentConfig, UploadLimit};
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::{CreateTaskRequest, GetTaskRequest, Resource};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::proto::core::{blob_type::BlobDimensionality, literal, scalar};
use tonic::transport::Channel;

/// The ceiling for these tests: the fixture's outputs are far below it, the oversized job's far
/// above.
const CEILING: u64 = 1_000_000;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unique() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    )
}

/// A real `slurm-connector stager` process (killed on drop).
struct Stager {
    child: std::process::Child,
    url: String,
    token_file: PathBuf,
}

impl Drop for Stager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_stager(roots: &str, dir: &Path) -> Stager {
    let token_file = dir.join("stager.token");
    std::fs::write(&token_file, format!("real-staging-{}\n", unique())).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
    // The dev-cluster env is exported for this test: the stager gets only what is meant for it.
    for (k, _) in std::env::vars() {
        if k.starts_with("FLYTE_SLURM_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args([
            "stager",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--roots",
            roots,
        ])
        .arg("--token-file")
        .arg(&token_file)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start slurm-connector stager");
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..100 {
        if http
            .get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Stager {
                child,
                url,
                token_file,
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the stager did not become healthy at {url}");
}

enum Backend<'a> {
    Local(&'a str),
    Sidecar(&'a Stager),
}

fn deployment(c: &support::Cluster, backend: &Backend) -> DeploymentConfig {
    let mut d = DeploymentConfig::empty();
    d.poll_interval = Duration::from_secs(1);
    d.upload_max_bytes = UploadLimit::Bytes(CEILING);
    // Keep the job files: the test reads the markers after the tasks ended.
    d.job_files_retention = None;
    let (shared_mounts, stager_url, stager_token_file) = match backend {
        Backend::Local(mounts) => (
            mounts
                .split(',')
                .map(|e| {
                    let (c, l) = e.split_once('=').unwrap();
                    (c.to_string(), PathBuf::from(l))
                })
                .collect(),
            None,
            None,
        ),
        Backend::Sidecar(s) => (
            Vec::new(),
            Some(url::Url::parse(&s.url).unwrap()),
            Some(s.token_file.clone()),
        ),
    };
    d.clusters.insert(
        c.name.clone(),
        ClusterConfig {
            name: c.name.clone(),
            restd_url: c.url.clone(),
            api_version: c.api_version,
            username: Some(c.user.clone()),
            auth: Some(AuthConfig::KeyFile {
                path: c.key_file.clone(),
                lifetime: Duration::from_secs(600),
            }),
            working_dir: Some(c.workdir.clone()),
            shared_mounts,
            default_partition: None,
            ssh_hosts: Vec::new(),
            stager_url,
            stager_token_file,
            identities: Default::default(),
            ca_file: None,
            images: Default::default(),
            connect_timeout: slurm_connector::config::DEFAULT_CONNECT_TIMEOUT,
            request_timeout: slurm_connector::config::DEFAULT_REQUEST_TIMEOUT,
        },
    );
    d.default_cluster = c.name.clone();
    d
}

/// The preprocess fixture as the SDK wrote it, with: a run name unique to this test run (the
/// cluster keeps earlier runs' jobs, and the same execution would be adopted, not resubmitted),
/// no partition/QOS/account (the dev cluster has its own), the given script when not `None`, and
/// a `file://` output prefix.
fn preprocess(tag: &str, script: Option<&str>, prefix: &str) -> CreateTaskRequest {
    let mut req = common::request("script_preprocess.pb");
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    custom.fields.remove("sbatch");
    // The dev node is small: its own #SBATCH lines for 2 CPUs / 2G are dropped, the rest kept.
    let script = script
        .map(str::to_string)
        .or_else(|| match &custom.fields["script"].kind {
            Some(prost_types::value::Kind::StringValue(s)) => Some(
                s.lines()
                    .filter(|l| {
                        !l.starts_with("#SBATCH --mem") && !l.starts_with("#SBATCH --cpus-per-task")
                    })
                    .map(|l| format!("{l}\n"))
                    .collect(),
            ),
            _ => None,
        });
    if let Some(s) = script {
        req = req.script(&s);
    }
    let tid = req
        .task_execution_metadata
        .as_mut()
        .unwrap()
        .task_execution_id
        .as_mut()
        .unwrap();
    let wf = tid
        .node_execution_id
        .as_mut()
        .unwrap()
        .execution_id
        .as_mut()
        .unwrap();
    wf.name = format!("rs-{tag}-{}", unique());
    req.output_prefix = prefix.to_string();
    req
}

async fn wait_terminal(c: &mut AsyncConnectorServiceClient<Channel>, meta: &[u8]) -> Resource {
    let start = Instant::now();
    loop {
        let r = c
            .get_task(common::get_req(meta))
            .await
            .expect("GetTask never fails")
            .into_inner()
            .resource
            .unwrap();
        if Phase::of(r.phase).is_terminal() {
            return r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "no terminal phase in 180 s: {}",
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn job_name(r: &Resource) -> String {
    match &r.custom_info.as_ref().unwrap().fields["job_name"].kind {
        Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
        other => panic!("job_name: {other:?}"),
    }
}

/// name → (uri, dimensionality) of the Blob literals in a task's outputs.
fn blobs(r: &Resource) -> Vec<(String, String, BlobDimensionality)> {
    let outs = r.outputs.as_ref().expect("outputs");
    outs.literals
        .iter()
        .map(|nl| {
            let lit = nl.value.as_ref().unwrap();
            let Some(literal::Value::Scalar(s)) = &lit.value else {
                panic!("{}: not a scalar", nl.name)
            };
            let Some(scalar::Value::Blob(b)) = &s.value else {
                panic!("{}: not a blob", nl.name)
            };
            let t = b.metadata.as_ref().unwrap().r#type.as_ref().unwrap();
            assert_eq!(t.format, "");
            (
                nl.name.clone(),
                b.uri.clone(),
                BlobDimensionality::try_from(t.dimensionality).unwrap(),
            )
        })
        .collect()
}

/// The job's exit-status marker without its job id (checked to be the task's job).
fn marker(c: &support::Cluster, r: &Resource) -> String {
    let p = c.workdir_local.join(format!("{}.exit", job_name(r)));
    let line = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    common::request::marker_without_job(&line, r)
}

/// The four cases through one connector configured with `backend`.
async fn outputs_through(c: &support::Cluster, backend: Backend<'_>, name: &str, store: &Path) {
    let server = Server::start(deployment(c, &backend)).await;
    let mut client = server.client().await;
    let prefix = |case: &str| format!("file://{}/{name}/{case}", store.display());

    let missing_script = "#!/bin/bash\nprintf '{\"rows\": 0}\\n' > \"$FLYTE_OUTPUT_STATS\"\n";
    let big_script = "#!/bin/bash\nmkdir -p \"$FLYTE_OUTPUT_SHARDS\"\necho a > \"$FLYTE_OUTPUT_SHARDS/a\"\n\
                      head -c 2000000 /dev/zero > \"$FLYTE_OUTPUT_STATS\"\n";
    let failing_script = "#!/bin/bash\nset -e\necho 'about to fail' >&2\nexit 3\n";
    let cases = [
        ("ok", None),
        ("missing", Some(missing_script)),
        ("big", Some(big_script)),
        ("failing", Some(failing_script)),
    ];
    let mut metas = Vec::new();
    for (case, script) in cases {
        let req = preprocess(&format!("{name}-{case}"), script, &prefix(case));
        let meta = client
            .create_task(req)
            .await
            .unwrap_or_else(|e| panic!("{name}/{case}: CreateTask: {e}"))
            .into_inner()
            .resource_meta;
        metas.push((case, meta));
    }
    for (case, meta) in &metas {
        let r = wait_terminal(&mut client, meta).await;
        let ctx = format!("{name}/{case}: {}", r.message);
        match *case {
            "ok" => {
                assert_eq!(r.phase, Phase::Succeeded as i32, "{ctx}");
                let mut b = blobs(&r);
                b.sort();
                let base = prefix("ok");
                assert_eq!(
                    b,
                    vec![
                        (
                            "shards".to_string(),
                            format!("{base}/shards"),
                            BlobDimensionality::Multipart
                        ),
                        (
                            "stats".to_string(),
                            format!("{base}/stats"),
                            BlobDimensionality::Single
                        ),
                    ],
                    "{ctx}"
                );
                // The bytes landed in the store: the fixture's input n_shards files and the stats.
                let dir = store.join(name).join("ok");
                let stats = std::fs::read_to_string(dir.join("stats")).unwrap();
                assert!(stats.starts_with("{\"rows\": "), "{stats:?}");
                let n: usize = stats
                    .trim()
                    .trim_start_matches("{\"rows\": ")
                    .trim_end_matches('}')
                    .parse()
                    .unwrap();
                let mut shards: Vec<String> = std::fs::read_dir(dir.join("shards"))
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                    .collect();
                shards.sort();
                assert_eq!(shards.len(), n, "{shards:?}");
                assert_eq!(
                    std::fs::read_to_string(dir.join("shards/shard-1.csv")).unwrap(),
                    "row 1\n"
                );
                assert_eq!(marker(c, &r), "0 - -\n", "{ctx}");
            }
            "missing" => {
                assert_eq!(r.phase, Phase::Failed as i32, "{ctx}");
                assert!(
                    r.message.contains("Output 'shards'") && r.message.contains("was not written"),
                    "{ctx}"
                );
                // The script itself exited 0: the marker says so, the missing output fails it.
                assert_eq!(marker(c, &r), "0 - -\n", "{ctx}");
            }
            "big" => {
                assert_eq!(r.phase, Phase::Failed as i32, "{ctx}");
                assert!(
                    r.message.contains("Output 'stats'")
                        && r.message.contains("output_upload='job'")
                        && r.message.contains("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES"),
                    "{ctx}"
                );
                assert!(!store.join(name).join("big/stats").exists(), "{ctx}");
            }
            "failing" => {
                assert_eq!(r.phase, Phase::RetryableFailed as i32, "{ctx}");
                assert!(r.message.contains("exit code 3:0"), "{ctx}");
                assert!(r.message.contains("about to fail"), "stderr tail: {ctx}");
                assert_eq!(marker(c, &r), "3 - -\n", "{ctx}");
            }
            _ => unreachable!(),
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_and_markers_through_the_local_mount() {
    let Some(c) = support::cluster() else { return };
    let dir = Dir(std::env::temp_dir().join(format!("real-staging-local-{}", unique())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let mounts = support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap();
    outputs_through(&c, Backend::Local(&mounts), "local", &dir.0.join("store")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_and_markers_through_a_stager_sidecar() {
    let Some(c) = support::cluster() else { return };
    let dir = Dir(std::env::temp_dir().join(format!("real-staging-sidecar-{}", unique())));
    std::fs::create_dir_all(&dir.0).unwrap();
    // The stager has the mount; the connector has none, only the stager's URL and token.
    let mounts = support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap();
    let stager = start_stager(&mounts, &dir.0).await;
    outputs_through(
        &c,
        Backend::Sidecar(&stager),
        "sidecar",
        &dir.0.join("store"),
    )
    .await;
}

/// scancel (DeleteTask) of a rendered job on real Slurm: the task ends ABORTED as without the
/// marker wrapper (Slurm's CANCELLED wins over the batch shell's exit), and the recorder still
/// writes the status the script died with (SIGTERM: 143) before Slurm's SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_is_aborted_and_still_leaves_its_marker() {
    let Some(c) = support::cluster() else { return };
    let dir = Dir(std::env::temp_dir().join(format!("real-staging-cancel-{}", unique())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let mounts = support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap();
    let server = Server::start(deployment(&c, &Backend::Local(&mounts))).await;
    let mut client = server.client().await;
    let script = "#!/bin/bash\necho started\nwhile :; do sleep 1; done\n";
    let prefix = format!("file://{}/store", dir.0.display());
    let meta = client
        .create_task(preprocess("cancel", Some(script), &prefix))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    // Running, and the script itself has started (its first line is in stdout).
    let start = Instant::now();
    let name = loop {
        let r = client
            .get_task(GetTaskRequest {
                resource_meta: meta.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .resource
            .unwrap();
        // A CreateTask answered before its submit was done (a deferred meta, on a loaded
        // machine) has no job to name yet: asked again.
        let name = r.custom_info.is_some().then(|| job_name(&r));
        let out = name
            .as_ref()
            .map(|n| c.workdir_local.join(format!("{n}.out")));
        if r.phase == Phase::Running as i32
            && out.is_some_and(|o| std::fs::read_to_string(o).is_ok_and(|s| s.contains("started")))
        {
            break name.unwrap_or_default();
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{}", r.message);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    client
        .delete_task(slurm_connector::proto::connector::DeleteTaskRequest {
            resource_meta: meta.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let r = wait_terminal(&mut client, &meta).await;
    assert_eq!(r.phase, Phase::Aborted as i32, "{}", r.message);
    assert!(r.message.contains("CANCELLED"), "{}", r.message);
    let marker = c.workdir_local.join(format!("{name}.exit"));
    let start = Instant::now();
    while !marker.exists() && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        common::request::marker_without_job(&std::fs::read_to_string(&marker).unwrap(), &r),
        "143 TERM -\n"
    );
    server.stop().await;
}

/// On a cluster without slurmdbd (`dev-cluster --no-accounting`), a job that left slurmctld
/// before the connector saw it end is resolved from the exit-status marker the job itself wrote:
/// connector A submits (always deferred: no submit wait) and is stopped; once slurmctld has
/// purged the job (MinJobAge), connector B is asked about the deferred meta, finds the job by its
/// marker and answers FAILED with the script's exit code, not "lost" nor "not submitted yet"; a
/// CreateTask retried on B gets that job, and nothing is submitted again. Skips on a cluster
/// with accounting (CI runs it in a stanza of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_accounting_an_aged_out_job_is_resolved_from_its_marker() {
    let Some(c) = support::cluster() else { return };
    if c.accounting {
        skip(
            Tier::NoAccounting,
            "the dev cluster has accounting (run it with --no-accounting)",
        );
        return;
    }
    let dir = Dir(std::env::temp_dir().join(format!("real-staging-noacct-{}", unique())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let mounts = support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap();
    let prefix = format!("file://{}/store", dir.0.display());
    let script = "#!/bin/bash\necho failing >&2\nexit 3\n";
    let req = preprocess("noacct", Some(script), &prefix);

    // Connector A: answers CreateTask before its submit is done (a deferred meta, as under a
    // throttled slurmctld), submits, and never polls again before it stops.
    let mut d = deployment(&c, &Backend::Local(&mounts));
    d.poll_interval = Duration::from_secs(3600);
    d.submit_wait = Duration::ZERO;
    let a = Server::start(d).await;
    let mut ac = a.client().await;
    let meta = ac
        .create_task(req.clone())
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let answered: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert!(
        answered.get("deferred").is_some(),
        "a deferred meta: {answered}"
    );
    let job_id = common::request::job_of(&mut ac, common::get_req(&meta)).await;
    let job_id = slurm_connector::slurmrestd::JobId(job_id as u32);
    a.stop().await;

    // slurmctld forgets the job MinJobAge after it ends (its purge runs about once a minute).
    let client = c.user_client();
    let start = Instant::now();
    while client.job(job_id).await.unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "job {job_id} still in slurmctld after 240 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Connector B has never seen the job: slurmctld does not know it, there is no slurmdbd.
    let b = Server::start(deployment(&c, &Backend::Local(&mounts))).await;
    let mut bc = b.client().await;
    let r = wait_terminal(&mut bc, &meta).await;
    assert_eq!(r.phase, Phase::RetryableFailed as i32, "{}", r.message);
    assert!(r.message.starts_with("[FAILED] job "), "{}", r.message);
    assert!(r.message.contains("exit code 3:0"), "{}", r.message);
    assert!(r.message.contains("exit-status marker"), "{}", r.message);
    assert!(r.message.contains("failing"), "stderr tail: {}", r.message);
    assert_eq!(marker(&c, &r), "3 - -\n");
    b.stop().await;

    // The same CreateTask again (the backend's retry) to connector C, which knows nothing of
    // it: C answers with the job that ran (its marker names it) and submits nothing.
    let c3 = Server::start(deployment(&c, &Backend::Local(&mounts))).await;
    let mut cc = c3.client().await;
    let again = cc
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let again: serde_json::Value = serde_json::from_slice(&again).unwrap();
    assert_eq!(again["job_id"].as_u64(), Some(job_id.0.into()), "{again}");
    let name = job_name(&r);
    let listed = client.jobs().await.unwrap();
    assert!(
        !listed.iter().any(|j| j.name == name),
        "the execution was submitted again: {:?}",
        listed.iter().filter(|j| j.name == name).collect::<Vec<_>>()
    );
    c3.stop().await;
}

/// Live logs on real Slurm: a job writes a timestamped line every 100 ms for 10 s and a reader
/// follows it with GetTaskLogs' token every 250 ms, as a log viewer would. Every line comes
/// exactly once and in order, lines come while the job still runs (followed, not read at the
/// end), and once the job ended and its log was read the token is empty. Prints the delay from
/// a line written on the compute node to its return (BENCHMARKS.md "Live logs").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_followed_live_from_a_running_job() {
    use slurm_connector::proto::connector::{GetTaskLogsRequest, get_task_logs_response};
    let Some(c) = support::cluster() else { return };
    let mounts = support::var("FLYTE_SLURM_SHARED_MOUNTS").unwrap();
    let dir = Dir(std::env::temp_dir().join(format!("real-staging-logs-{}", unique())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let server = Server::start(deployment(&c, &Backend::Local(&mounts))).await;
    let mut client = server.client().await;
    const LINES: u64 = 100;
    let script = format!(
        "#!/bin/bash\nfor i in $(seq 0 {}); do echo \"live $i $(date +%s%N)\"; sleep 0.1; done\n\
         mkdir -p \"$FLYTE_OUTPUT_SHARDS\"\necho a > \"$FLYTE_OUTPUT_SHARDS/a\"\n\
         echo '{{\"rows\": 1}}' > \"$FLYTE_OUTPUT_STATS\"\n",
        LINES - 1
    );
    let prefix = format!("file://{}/store", dir.0.display());
    let req = preprocess("logs", Some(&script), &prefix);
    let meta = client
        .create_task(req)
        .await
        .expect("CreateTask")
        .into_inner()
        .resource_meta;
    let started = Instant::now();
    let (mut token, mut seen, mut delays_ms) = (String::new(), 0u64, Vec::new());
    let (mut while_running, mut polls) = (0u64, 0u64);
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "not all lines in 180 s: {seen} seen"
        );
        let phase = client
            .get_task(common::get_req(&meta))
            .await
            .unwrap()
            .into_inner()
            .resource
            .unwrap()
            .phase;
        let mut stream = client
            .get_task_logs(GetTaskLogsRequest {
                resource_meta: meta.clone(),
                token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("GetTaskLogs")
            .into_inner();
        polls += 1;
        let mut next = None;
        while let Some(m) = stream.message().await.unwrap() {
            match m.part {
                Some(get_task_logs_response::Part::Header(h)) => next = Some(h.token),
                Some(get_task_logs_response::Part::Body(b)) => {
                    let now_ns = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_nanos() as i128;
                    for l in b.lines.iter().filter(|l| l.message.starts_with("live ")) {
                        let mut w = l.message.split(' ').skip(1);
                        let i: u64 = w.next().unwrap().parse().unwrap();
                        let at: i128 = w.next().unwrap().parse().unwrap();
                        assert_eq!(i, seen, "every line once, in order: {:?}", l.message);
                        assert_eq!(l.short_pod_name, "stdout");
                        seen += 1;
                        // The first page is the tail of what was there already: only lines
                        // that came on later pages measure following.
                        if !token.is_empty() {
                            delays_ms.push(((now_ns - at) / 1_000_000) as u64);
                        }
                        if phase == Phase::Running as i32 {
                            while_running += 1;
                        }
                    }
                }
                None => {}
            }
        }
        token = next.expect("a header with the next token comes first");
        if token.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(seen, LINES, "all lines, then an empty token");
    assert!(
        while_running > LINES / 2,
        "{while_running} of {LINES} lines came while the job ran: not followed live"
    );
    delays_ms.sort_unstable();
    let pct = |p: usize| delays_ms[(delays_ms.len() * p / 100).min(delays_ms.len() - 1)];
    println!(
        "live logs: {} lines followed over {polls} polls every 250 ms; delay from the line written \
         on the compute node to GetTaskLogs' answer: p50 {} ms, p95 {} ms, max {} ms",
        delays_ms.len(),
        pct(50),
        pct(95),
        delays_ms.last().unwrap()
    );
    server.stop().await;
}
