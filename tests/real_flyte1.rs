//! The real tier for Flyte 1: requests made by flytekit and flytekitplugins-slurm 1.16.31
//! (`tests/fixtures/flyte1/`, from `scripts/make-flyte1-fixtures.py`) sent to the real
//! `slurm-connector serve` binary through Flyte 1's `AsyncAgentService`, run on a real Slurm.
//! `slurm_fn` tasks run `pyflyte-execute` in the cluster's own Python (`dev-cluster flyte1`:
//! flytekit 1.16.31 in /opt/flyte1), as a Flyte 1 site's cluster has it; what propeller would do
//! around them is done here with the prost types: write `inputs.pb` where `--inputs` points, read
//! `outputs.pb` (a `flyteidl.core.LiteralMap`) at the output prefix.
//!
//! ```sh
//! sudo deploy/dev-cluster/dev-cluster up && sudo deploy/dev-cluster/dev-cluster flyte1
//! sudo deploy/dev-cluster/dev-cluster --min-job-age 5 run cargo test --test real_flyte1
//! ```
//! A `slurm` task with an inline script (`SlurmShellTask`) runs its script filled in from its
//! inputs and output locations; its outputs come back as File and Directory literals.
//!
//! Skips with a reason unless a dev cluster's environment with `SLURM_DEV_CLUSTER_FLYTE1_VENV`
//! is exported.

use std::os::unix::fs::chown;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use prost::Message;
use slurm_connector::proto::flyte1::admin::{
    CreateTaskRequest, DeleteTaskRequest, GetTaskRequest, Resource, TaskCategory,
};
use slurm_connector::proto::flyte1::core::{LiteralMap, literal, primitive, scalar};
use slurm_connector::proto::flyte1::service::async_agent_service_client::AsyncAgentServiceClient;

mod common;
use common::flyte1::{Agent, create, fixture, relocate_outputs, rename};
use common::skip::{Tier, skip};

#[path = "real_apptainer/support.rs"]
#[allow(unused_imports)]
mod support;
use support::{JOB_UID, Serve, free_port, serve_on};

/// flyteidl's TaskExecution.Phase values.
const RUNNING: i32 = 2;
const SUCCEEDED: i32 = 3;
const ABORTED: i32 = 4;
const FAILED: i32 = 5;
const RETRYABLE_FAILED: i32 = 8;

/// The task module the fixtures were made from, as the user's code on the cluster.
const TASKS_PY: &str = include_str!("../scripts/flyte1_fixture_tasks.py");
/// The prefixes propeller rendered into the fixtures' arguments (scripts/make-flyte1-fixtures.py).
const FIXTURE_PREFIX: &str =
    "s3://my-s3-bucket/metadata/propeller/flytesnacks-development-f1fixture01/n0/data/0";
const FIXTURE_RAW: &str = "s3://my-s3-bucket/data/xy/f1fixture01-n0-0";

struct Cluster {
    root: PathBuf,
    venv: String,
}

fn cluster() -> Option<Cluster> {
    for v in ["FLYTE_SLURM_RESTD_URL", "SLURM_DEV_CLUSTER_ROOT"] {
        if std::env::var(v).is_err() {
            skip(Tier::Cluster, format!("{v} is not set (no dev cluster)"));
            return None;
        }
    }
    let Ok(venv) = std::env::var("SLURM_DEV_CLUSTER_FLYTE1_VENV") else {
        skip(
            Tier::Flyte1,
            "SLURM_DEV_CLUSTER_FLYTE1_VENV is not set: run `dev-cluster flyte1` (flytekit in the chroot)",
        );
        return None;
    };
    Some(Cluster {
        root: PathBuf::from(std::env::var("SLURM_DEV_CLUSTER_ROOT").unwrap()),
        venv,
    })
}

/// A folder on the shared filesystem owned by the job user: the task's code, its prefix with
/// `inputs.pb`, the raw-data prefix.
struct Work {
    cluster: String,
    host: PathBuf,
}

fn work(c: &Cluster, tag: &str) -> Work {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let cluster = format!("/shared/flyte/flyte1-{tag}-{}-{stamp}", std::process::id());
    let host = c.root.join(cluster.trim_start_matches('/'));
    for d in ["", "code", "data", "raw"] {
        let p = host.join(d);
        std::fs::create_dir_all(&p).unwrap();
        chown(&p, Some(JOB_UID), Some(JOB_UID)).unwrap();
    }
    std::fs::write(host.join("code/flyte1_fixture_tasks.py"), TASKS_PY).unwrap();
    Work { cluster, host }
}

fn run_name(tag: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_007;
    format!("f1{tag}{n}")
}

fn set_custom(req: &mut CreateTaskRequest, key: &str, value: &str) {
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    custom.fields.insert(
        key.into(),
        prost_types::Value {
            kind: Some(prost_types::value::Kind::StringValue(value.into())),
        },
    );
}

/// The `slurm_fn` fixture as propeller would send it for a run whose prefixes are in `w`: its
/// arguments rendered with them, the task's `script` activating the cluster's flytekit, and the
/// task `name` of the fixtures' module (`mean`, `plain`, or another function of it).
fn function_request(c: &Cluster, w: &Work, fixture_name: &str, run: &str) -> CreateTaskRequest {
    let mut req = fixture(fixture_name);
    let prefix = format!("file://{}/data", w.cluster);
    let raw = format!("file://{}/raw", w.cluster);
    let t = req.template.as_mut().unwrap();
    if let Some(slurm_connector::proto::flyte1::core::task_template::Target::Container(k)) =
        t.target.as_mut()
    {
        for a in &mut k.args {
            *a = a
                .replace(FIXTURE_PREFIX, &prefix)
                .replace(FIXTURE_RAW, &raw);
        }
    }
    set_custom(
        &mut req,
        "script",
        &format!(
            "#!/bin/bash\nset -e\nsource {}/bin/activate\nexport PYTHONPATH={}/code\n{{task.fn}}\n",
            c.venv, w.cluster
        ),
    );
    req.output_prefix = prefix;
    rename(&mut req, run);
    // What propeller writes before CreateTask: the inputs where `--inputs` points.
    let inputs = req.inputs.clone().unwrap_or_default();
    let at = w.host.join("data/inputs.pb");
    std::fs::write(&at, inputs.encode_to_vec()).unwrap();
    chown(&at, Some(JOB_UID), Some(JOB_UID)).unwrap();
    req
}

async fn serve(tag: &str) -> (Serve, Agent) {
    let port = free_port();
    let (child, _v2) = serve_on(tag, port).await;
    let agent = AsyncAgentServiceClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    (child, agent)
}

fn category(t: &str) -> Option<TaskCategory> {
    Some(TaskCategory {
        name: t.into(),
        version: 0,
    })
}

async fn wait(
    c: &mut Agent,
    meta: &[u8],
    t: &str,
    secs: u64,
    done: impl Fn(i32) -> bool,
) -> Resource {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = c
            .get_task(GetTaskRequest {
                resource_meta: meta.to_vec(),
                task_category: category(t),
                ..Default::default()
            })
            .await
            .expect("GetTask never fails")
            .into_inner()
            .resource
            .unwrap();
        if done(r.phase) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no such phase within {secs}s; last: {} {}",
            r.phase,
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn terminal(p: i32) -> bool {
    [SUCCEEDED, ABORTED, FAILED, RETRYABLE_FAILED].contains(&p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_fn_returns_its_value_through_outputs_pb() {
    let Some(c) = cluster() else { return };
    let (_serve, mut agent) = serve("f1ok").await;
    let w = work(&c, "ok");
    // mean([1.0, 2.5, 4.0], label="run one"), with `--prev-checkpoint ""` among its arguments.
    let req = function_request(&c, &w, "slurm_fn_script", &run_name("ok"));
    let meta = create(&mut agent, req).await;
    let r = wait(&mut agent, &meta, "slurm_fn", 300, terminal).await;
    assert_eq!(r.phase, SUCCEEDED, "{}", r.message);
    assert!(r.outputs.is_none(), "propeller reads outputs.pb itself");
    let bytes = std::fs::read(w.host.join("data/outputs.pb")).unwrap();
    let out = LiteralMap::decode(bytes.as_slice()).unwrap();
    let value = match out.literals.get("o0").and_then(|l| l.value.as_ref()) {
        Some(literal::Value::Scalar(s)) => match &s.value {
            Some(scalar::Value::Primitive(p)) => p.value.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(value, Some(primitive::Value::FloatValue(2.5)));
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raising_slurm_fn_fails_with_its_message_from_error_pb() {
    let Some(c) = cluster() else { return };
    let (_serve, mut agent) = serve("f1boom").await;
    let w = work(&c, "boom");
    // The fixtures' `plain` with an input it cannot take: pyflyte-execute writes error.pb with
    // the user's exception and exits 0, as it does for any task that raises.
    let mut req = function_request(&c, &w, "slurm_fn_plain", &run_name("boom"));
    let t = req.template.as_mut().unwrap();
    if let Some(slurm_connector::proto::flyte1::core::task_template::Target::Container(k)) =
        t.target.as_mut()
    {
        let last = k.args.last_mut().unwrap();
        assert_eq!(last, "plain");
        *last = "boom".into();
    }
    let meta = create(&mut agent, req).await;
    let r = wait(&mut agent, &meta, "slurm_fn", 300, terminal).await;
    assert!(
        r.phase == FAILED || r.phase == RETRYABLE_FAILED,
        "{} {}",
        r.phase,
        r.message
    );
    assert!(
        r.message.contains("boom 41"),
        "the task's own message: {}",
        r.message
    );
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_runs_a_script_file_with_its_arguments_and_refuses_a_missing_one() {
    let Some(c) = cluster() else { return };
    let (_serve, mut agent) = serve("f1script").await;
    let w = work(&c, "script");
    let script = w.host.join("code/train.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH --time=2\necho \"train: $# [$1] [$2] [$3] [$4] on $(hostname)\"\n",
    )
    .unwrap();
    chown(&script, Some(JOB_UID), Some(JOB_UID)).unwrap();
    let mut req = fixture("slurm_script_path");
    set_custom(
        &mut req,
        "batch_script_path",
        &format!("{}/code/train.sh", w.cluster),
    );
    rename(&mut req, &run_name("script"));
    let meta = create(&mut agent, req.clone()).await;
    let r = wait(&mut agent, &meta, "slurm", 300, terminal).await;
    assert_eq!(r.phase, SUCCEEDED, "{}", r.message);
    let mut logs = agent
        .get_task_logs(slurm_connector::proto::flyte1::admin::GetTaskLogsRequest {
            resource_meta: meta.clone(),
            lines: 50,
            task_category: category("slurm"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut text = String::new();
    while let Some(m) = logs.message().await.unwrap() {
        if let Some(slurm_connector::proto::flyte1::admin::get_task_logs_response::Part::Body(b)) =
            m.part
        {
            for l in b.structured_lines {
                text.push_str(&l.message);
                text.push('\n');
            }
        }
    }
    assert!(
        text.contains("train: 4 [--epochs] [3] [--tag] [run one]"),
        "{text}"
    );

    let mut missing = req;
    set_custom(
        &mut missing,
        "batch_script_path",
        &format!("{}/code/nope.sh", w.cluster),
    );
    rename(&mut missing, &run_name("missing"));
    let e = agent.create_task(missing).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("batch_script_path") && e.message().contains("nope.sh"),
        "{}",
        e.message()
    );
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_task_fills_in_its_script_and_returns_its_outputs_as_files() {
    let Some(c) = cluster() else { return };
    let (_serve, mut agent) = serve("f1shell").await;
    let w = work(&c, "shell");
    let results = w.host.join("results");
    std::fs::create_dir_all(&results).unwrap();
    chown(&results, Some(JOB_UID), Some(JOB_UID)).unwrap();
    let store = common::fresh_dir("real-flyte1-shell-store");
    let mut req = fixture("slurm_shell");
    relocate_outputs(&mut req, &format!("{}/results", w.cluster));
    req.output_prefix = format!("file://{}", store.display());
    rename(&mut req, &run_name("shell"));
    let meta = create(&mut agent, req.clone()).await;
    let r = wait(&mut agent, &meta, "slurm", 300, terminal).await;
    assert_eq!(r.phase, SUCCEEDED, "{}", r.message);
    common::flyte1::assert_shell_outputs(&r, &results, &store);

    // A location outside the connector's staging roots: refused at CreateTask, naming the output.
    let mut outside = fixture("slurm_shell");
    relocate_outputs(&mut outside, "/etc/flyte1-results");
    outside.output_prefix = req.output_prefix.clone();
    rename(&mut outside, &run_name("outside"));
    let e = agent.create_task(outside).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("output_locs `report`"),
        "{}",
        e.message()
    );
    let _ = std::fs::remove_dir_all(&w.host);
    let _ = std::fs::remove_dir_all(&store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_slurm_fn_is_aborted() {
    let Some(c) = cluster() else { return };
    let (_serve, mut agent) = serve("f1del").await;
    let w = work(&c, "del");
    let mut req = function_request(&c, &w, "slurm_fn_plain", &run_name("del"));
    let t = req.template.as_mut().unwrap();
    if let Some(slurm_connector::proto::flyte1::core::task_template::Target::Container(k)) =
        t.target.as_mut()
    {
        *k.args.last_mut().unwrap() = "sleepy".into();
    }
    let meta = create(&mut agent, req).await;
    wait(&mut agent, &meta, "slurm_fn", 300, |p| p == RUNNING).await;
    agent
        .delete_task(DeleteTaskRequest {
            resource_meta: meta.clone(),
            task_category: category("slurm_fn"),
            ..Default::default()
        })
        .await
        .expect("DeleteTask");
    let r = wait(&mut agent, &meta, "slurm_fn", 120, terminal).await;
    assert_eq!(r.phase, ABORTED, "{}", r.message);
    let _ = std::fs::remove_dir_all(&w.host);
}
