//! Helpers of tests/real_apptainer.rs (and real_pyxis.rs, real_multinode.rs): the dev cluster's
//! environment, the connector binary, a work folder with the task code and inputs.pb, GetTask
//! polling; beside it `request.rs`, the CreateTaskRequest the Flyte SDK would make, and
//! `processes.rs`, the processes and containers of a Slurm job (both re-exported here).
#![allow(dead_code)]

use std::os::unix::fs::chown;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::skip::{Tier, skip};
use prost::Message;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::{GetTaskRequest, Resource, TaskCategory};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::proto::core::{self, Literal, Primitive, Scalar};
use slurm_connector::proto::task::{Inputs, NamedLiteral};
use tonic::transport::Channel;

// A module file loaded with #[path] finds its own modules beside it: tests/real_apptainer/*.rs.
mod processes;
mod request;
// Unused where a tier needs neither (real_multinode builds its own requests, real_failures
// looks at no process), as `dead_code` above allows.
#[allow(unused_imports)]
pub use processes::*;
#[allow(unused_imports)]
pub use request::*;

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
def probe(x: int) -> int:
    return int(os.environ["SC_PROBE"]) + x


@env.task
def sleepy(x: int) -> int:
    time.sleep(600)
    return x


@env.task
async def checkpointed(x: int) -> str:
    # x steps of 0.1 s; the step saved with flyte.Checkpoint every 20 steps and when Slurm's
    # warning (SIGUSR1) arrives; a run resumes from what the checkpoint loads. Async: a signal
    # handler needs the main thread, where a0's event loop runs (a sync task runs in a thread).
    import asyncio
    import signal

    cp = flyte.ctx().checkpoint
    loaded = await cp.load()
    start = int(loaded.read_text()) if loaded is not None else 0
    warned = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, warned.set)
    print(f"run {os.environ.get('SLURM_RESTART_COUNT', '0')} starts at step {start}", flush=True)
    step = start
    while step < x:
        await asyncio.sleep(0.1)
        step += 1
        if warned.is_set() or step % 20 == 0:
            await cp.save(str(step).encode())
            if warned.is_set():
                print(f"warned: checkpoint at step {step}", flush=True)
            warned.clear()
    return f"resumed at step {start} after {os.environ.get('SLURM_RESTART_COUNT', '0')} restarts"
"#;

pub struct Cluster {
    pub root: PathBuf,
    /// The task template's image: the .sif's path, or (mapped) a registry reference.
    pub image: String,
    /// `custom.container.runtime`.
    pub runtime: &'static str,
    /// A connector config file (`FLYTE_SLURM_CONFIG`) with the image map, when mapped.
    pub config_file: Option<PathBuf>,
}

/// The registry reference the mapped tests give their tasks: it exists in no registry, so a
/// task only runs if the image map turned it into the pre-staged file.
pub const MAPPED_IMAGE: &str = "ghcr.io/flyteorg/flyte-native:2.12.1";

/// The dev cluster with `runtime`'s images pre-staged in /shared/images (`--pyxis` makes the
/// .sqsh, `--apptainer` the .sif; both are bound there read-only), and a connector config file
/// mapping [`MAPPED_IMAGE`] to them: `ghcr.io/flyteorg/*` → `/shared/images/{name}.sqsh|.sif`.
pub fn mapped_cluster(runtime: &'static str) -> Option<Cluster> {
    let (tier, flag, var) = match runtime {
        "pyxis" => (Tier::Pyxis, "--pyxis", "SLURM_DEV_CLUSTER_PYXIS"),
        _ => (
            Tier::Apptainer,
            "--apptainer",
            "SLURM_DEV_CLUSTER_APPTAINER",
        ),
    };
    let need = ["FLYTE_SLURM_RESTD_URL", "SLURM_DEV_CLUSTER_ROOT"];
    if std::env::var(var).as_deref() != Ok("1")
        || need.iter().any(|v| std::env::var_os(v).is_none())
    {
        skip(
            tier,
            format!(
                "no dev cluster with {runtime}; run under `deploy/dev-cluster/dev-cluster --release 26.05 \
                 {flag} run cargo test --test real_pyxis` (or eval its `env` while it is up)"
            ),
        );
        return None;
    }
    let root = PathBuf::from(std::env::var("SLURM_DEV_CLUSTER_ROOT").unwrap());
    let ext = if runtime == "pyxis" { "sqsh" } else { "sif" };
    let staged = root.join(format!("shared/images/flyte-native.{ext}"));
    if !staged.is_file() {
        skip(
            tier,
            format!(
                "{} is not there: an older dev-cluster without /shared/images?",
                staged.display()
            ),
        );
        return None;
    }
    let file = std::env::temp_dir().join(format!(
        "sc-real-{runtime}-{}-{}.toml",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::write(
        &file,
        format!(
            "[clusters.default]\nrestd_url = \"{}\"\n\n[[clusters.default.images]]\nmatch = \"ghcr.io/flyteorg/*\"\n\
             pyxis = \"/shared/images/{{name}}.sqsh\"\napptainer = \"/shared/images/{{name}}.sif\"\n",
            std::env::var("FLYTE_SLURM_RESTD_URL").unwrap()
        ),
    )
    .unwrap();
    Some(Cluster {
        root,
        image: MAPPED_IMAGE.into(),
        runtime,
        config_file: Some(file),
    })
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
        runtime: "apptainer",
        config_file: None,
    })
}

pub struct Serve(Child);

impl From<Child> for Serve {
    fn from(c: Child) -> Self {
        Serve(c)
    }
}

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
    serve_with(tag, port, None).await
}

/// [`serve`] for `c`: with its config file (the image map) when it has one.
pub async fn serve_for(c: &Cluster, tag: &str) -> (Serve, AsyncConnectorServiceClient<Channel>) {
    serve_with(tag, free_port(), c.config_file.as_deref()).await
}

pub async fn serve_with(
    tag: &str,
    port: u16,
    config: Option<&std::path::Path>,
) -> (Serve, AsyncConnectorServiceClient<Channel>) {
    let data = std::env::temp_dir().join(format!("sc-real-apptainer-{}-{tag}", std::process::id()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
    if let Some(f) = config {
        cmd.env("FLYTE_SLURM_CONFIG", f);
    }
    let child = cmd
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .env("FLYTE_SLURM_POLL_INTERVAL", "1s")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let child = Serve(child);
    (child, connect_when_listening(port).await)
}

/// A gRPC client of the `serve` just started on `port`, once it listens (60 s at most).
pub async fn connect_when_listening(port: u16) -> AsyncConnectorServiceClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // A connect to a free port of the ephemeral range can meet itself (TCP simultaneous
        // open: local port == remote port) before serve binds it; that is no listener. Seen in
        // a CI dry run: the client "connected", the first call was refused.
        let listening = std::net::TcpStream::connect(("127.0.0.1", port))
            .is_ok_and(|s| s.local_addr().is_ok_and(|a| a.port() != port));
        if listening
            && let Ok(c) =
                AsyncConnectorServiceClient::connect(format!("http://127.0.0.1:{port}")).await
        {
            return c;
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

/// The Slurm job of `meta`, also when CreateTask answered deferred (`common::request::job_of`).
pub async fn job_of(client: &mut AsyncConnectorServiceClient<Channel>, meta: &[u8]) -> u64 {
    crate::common::request::job_of(client, get_req(meta)).await
}
