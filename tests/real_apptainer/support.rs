//! Helpers of tests/real_apptainer.rs: the dev cluster's environment, the connector binary, a
//! work folder with the task code and inputs.pb, the CreateTaskRequest the Flyte SDK would make,
//! GetTask polling, and the processes of a Slurm job.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::os::unix::fs::chown;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::skip::{Tier, skip};
use prost::Message;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::{
    CreateTaskRequest, GetTaskRequest, Resource, TaskCategory, TaskExecutionMetadata,
};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::proto::core::{
    self, Container, Identifier, Literal, NodeExecutionIdentifier, Primitive, Scalar,
    TaskExecutionIdentifier, TaskTemplate, WorkflowExecutionIdentifier,
};
use slurm_connector::proto::task::{Inputs, NamedLiteral};
use tonic::transport::Channel;

pub const JOB_UID: u32 = 2000;

pub const TASKS_PY: &str = r#"import os
import sys
import time

import flyte

env = flyte.TaskEnvironment(name="native_demo")


@env.task
def double(x: int) -> int:
    return 2 * x


@env.task
def boom(x: int) -> int:
    raise ValueError(f"boom {x}")


@env.task
def vanish(x: int) -> int:
    print(f"vanishing with {x}", file=sys.stderr, flush=True)
    os._exit(0)


@env.task
def sleepy(x: int) -> int:
    time.sleep(600)
    return x
"#;

pub struct Cluster {
    pub root: PathBuf,
    pub image: String,
}

pub fn cluster() -> Option<Cluster> {
    let need = [
        "FLYTE_SLURM_RESTD_URL",
        "SLURM_DEV_CLUSTER_ROOT",
        "SLURM_DEV_CLUSTER_APPTAINER_IMAGE",
    ];
    if std::env::var("SLURM_DEV_CLUSTER_APPTAINER").as_deref() != Ok("1")
        || need.iter().any(|v| std::env::var_os(v).is_none())
    {
        skip(
            Tier::Apptainer,
            "no dev cluster with apptainer; run under `deploy/dev-cluster/dev-cluster --release 26.05 \
             --apptainer run cargo test --test real_apptainer` (or eval its `env` while it is up)",
        );
        return None;
    }
    Some(Cluster {
        root: PathBuf::from(std::env::var("SLURM_DEV_CLUSTER_ROOT").unwrap()),
        image: std::env::var("SLURM_DEV_CLUSTER_APPTAINER_IMAGE").unwrap(),
    })
}

pub struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub use crate::common::free_port;

/// The real binary with the dev cluster's FLYTE_SLURM_* environment (exported by `run`/`env`).
pub async fn serve(tag: &str) -> (Serve, AsyncConnectorServiceClient<Channel>) {
    serve_on(tag, free_port()).await
}

pub async fn serve_on(tag: &str, port: u16) -> (Serve, AsyncConnectorServiceClient<Channel>) {
    let data = std::env::temp_dir().join(format!("sc-real-apptainer-{}-{tag}", std::process::id()));
    let child = Command::new(env!("CARGO_BIN_EXE_slurm-connector"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .env("FLYTE_SLURM_POLL_INTERVAL", "1s")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let child = Serve(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(c) =
            AsyncConnectorServiceClient::connect(format!("http://127.0.0.1:{port}")).await
        {
            return (child, c);
        }
        assert!(Instant::now() < deadline, "serve did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A work folder on the cluster's shared filesystem, owned by the job user: the task's code, its
/// `inputs.pb`, and (made by the rendered script) its output prefix.
pub struct Work {
    /// The cluster's path (`/shared/flyte/...`).
    pub cluster: String,
    /// Where the host sees it.
    pub host: PathBuf,
}

pub fn work(c: &Cluster, tag: &str, x: i64) -> Work {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let cluster = format!("/shared/flyte/native-{tag}-{}-{stamp}", std::process::id());
    let host = c.root.join(cluster.trim_start_matches('/'));
    for d in ["", "code", "io"] {
        let p = host.join(d);
        std::fs::create_dir_all(&p).unwrap();
        chown(&p, Some(JOB_UID), Some(JOB_UID)).unwrap();
    }
    std::fs::write(host.join("code/native_tasks.py"), TASKS_PY).unwrap();
    // What the backend writes before CreateTask: the inputs as a flyteidl2.task.Inputs.
    let inputs = Inputs {
        literals: vec![NamedLiteral {
            name: "x".into(),
            value: Some(int_literal(x)),
        }],
        ..Default::default()
    };
    std::fs::write(host.join("io/inputs.pb"), inputs.encode_to_vec()).unwrap();
    Work { cluster, host }
}

pub fn int_literal(i: i64) -> Literal {
    Literal {
        value: Some(core::literal::Value::Scalar(Box::new(Scalar {
            value: Some(core::scalar::Value::Primitive(Primitive {
                value: Some(core::primitive::Value::Integer(i)),
            })),
        }))),
        ..Default::default()
    }
}

/// What the Flyte SDK puts in a native task's template (flyte 2.12.1's container args), with
/// `{{.input}}`-style templates already rendered as the backend does before CreateTask.
pub fn request(c: &Cluster, w: &Work, task: &str, run: &str, x: i64) -> CreateTaskRequest {
    let prefix = format!("file://{}/out", w.cluster);
    let (inputs, raw, ckpt) = (
        format!("file://{}/io/inputs.pb", w.cluster),
        format!("file://{}/raw", w.cluster),
        format!("file://{}/ckpt", w.cluster),
    );
    request_with(c, w, task, run, x, [&inputs, &prefix, &raw, &ckpt, ""])
}

/// `paths`: what `--inputs`, `--outputs-path`, `--raw-data-path`, `--checkpoint-path`,
/// `--prev-checkpoint` say (rendered values, or the SDK's `{{.input}}`-style templates).
pub fn request_with(
    c: &Cluster,
    w: &Work,
    task: &str,
    run: &str,
    x: i64,
    paths: [&str; 5],
) -> CreateTaskRequest {
    let prefix = format!("file://{}/out", w.cluster);
    let args: Vec<String> = [
        "a0",
        "--inputs",
        paths[0],
        "--outputs-path",
        paths[1],
        "--version",
        "v1",
        "--raw-data-path",
        paths[2],
        "--checkpoint-path",
        paths[3],
        "--prev-checkpoint",
        paths[4],
        "--run-name",
        "{{.runName}}",
        "--name",
        "{{.actionName}}",
        "--resolver",
        "flyte._internal.resolvers.default.DefaultTaskResolver",
        "mod",
        "native_tasks",
        "instance",
        task,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let custom = serde_json::json!({
        "container": {
            "runtime": "apptainer",
            "mounts": [w.cluster],
            // a0 imports the task module from its working directory.
            "workdir": format!("{}/code", w.cluster),
        },
        "sbatch": {"time_limit": "00:10:00"},
    });
    CreateTaskRequest {
        inputs: Some(Inputs {
            literals: vec![NamedLiteral {
                name: "x".into(),
                value: Some(int_literal(x)),
            }],
            ..Default::default()
        }),
        template: Some(TaskTemplate {
            id: Some(Identifier {
                project: "flytesnacks".into(),
                domain: "development".into(),
                name: format!("native_demo.{task}"),
                version: "v1".into(),
                ..Default::default()
            }),
            r#type: "slurm".into(),
            custom: Some(slurm_connector::proto::json_to_struct(&custom)),
            target: Some(core::task_template::Target::Container(Container {
                image: c.image.clone(),
                args,
                ..Default::default()
            })),
            ..Default::default()
        }),
        output_prefix: prefix,
        task_execution_metadata: Some(TaskExecutionMetadata {
            task_execution_id: Some(TaskExecutionIdentifier {
                node_execution_id: Some(NodeExecutionIdentifier {
                    node_id: "a0".into(),
                    execution_id: Some(WorkflowExecutionIdentifier {
                        project: "flytesnacks".into(),
                        domain: "development".into(),
                        name: run.into(),
                        org: "local".into(),
                    }),
                }),
                ..Default::default()
            }),
            namespace: "flytesnacks-development".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn run_name(tag: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_007;
    format!("rapp{tag}{n}")
}

/// GetTask for a native task (category `slurm`, not the fixtures' `slurm_script`).
pub fn get_req(meta: &[u8]) -> GetTaskRequest {
    GetTaskRequest {
        task_category: Some(TaskCategory {
            name: "slurm".into(),
            version: 0,
        }),
        ..crate::common::get_req(meta)
    }
}

pub fn phase(r: &Resource) -> Phase {
    Phase::try_from(r.phase).unwrap()
}

pub async fn wait_until(
    c: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
    secs: u64,
    done: impl Fn(Phase) -> bool,
) -> Resource {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = c
            .get_task(get_req(meta))
            .await
            .expect("GetTask never fails")
            .into_inner()
            .resource
            .unwrap();
        if done(phase(&r)) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no such phase within {secs}s; last: {:?}\n{}",
            phase(&r),
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub fn job_id(meta: &[u8]) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(meta).unwrap();
    v["job_id"].as_u64().unwrap()
}

/// Processes that belong to Slurm job `job`, with their commands: its slurmstepds (`slurmstepd:
/// [JOB.STEP]`), processes whose environment says so (the batch script, srun, the container's
/// python inherit SLURM_JOB_ID), and all their descendants (apptainer's starter and
/// squashfuse_ll run with a cleaned environment under the step's slurmstepd).
pub fn job_processes(job: u64) -> Vec<(u32, String)> {
    let needle = format!("SLURM_JOB_ID={job}");
    let stepd = format!("slurmstepd: [{job}.");
    let mut parent = std::collections::BTreeMap::new();
    let mut ours = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID ...": the command may hold spaces and parentheses.
        let after = stat.rsplit_once(") ").map(|(_, a)| a).unwrap_or("");
        if let Some(ppid) = after.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok()) {
            parent.insert(pid, ppid);
        }
        let is_stepd =
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(stepd.as_bytes()));
        let has_env = std::fs::read(e.path().join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()));
        if is_stepd || has_env {
            ours.insert(pid);
        }
    }
    loop {
        let more: Vec<u32> = parent
            .iter()
            .filter(|(p, pp)| !ours.contains(*p) && ours.contains(*pp))
            .map(|(p, _)| *p)
            .collect();
        if more.is_empty() {
            break;
        }
        ours.extend(more);
    }
    ours.into_iter()
        .filter_map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((
                pid,
                String::from_utf8_lossy(&cmd)
                    .replace('\0', " ")
                    .trim()
                    .to_string(),
            ))
        })
        .collect()
}
