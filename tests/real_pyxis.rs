//! The real tier for native `slurm` tasks from pre-staged images: a Flyte 2 Python task run by
//! Flyte's own entrypoint (`a0`, flyte from PyPI) through `srun --container-image=...` with
//! Pyxis 0.24 + Enroot 4.1.2 (built by `dev-cluster --pyxis`), and through `apptainer exec`,
//! each from an image file the connector's image map chose for a registry reference that exists
//! in no registry (`ghcr.io/flyteorg/flyte-native:2.12.1` → `/shared/images/flyte-native.sqsh`
//! / `.sif`). Submitted by the real `slurm-connector serve` to a real Slurm 26.05.
//!
//! ```sh
//! sudo deploy/dev-cluster/dev-cluster --release 26.05 --apptainer --pyxis --min-job-age 5 run cargo test --test real_pyxis
//! ```
//! The Pyxis tests skip with a reason unless that cluster's environment (with
//! `SLURM_DEV_CLUSTER_PYXIS=1`) is exported, the Apptainer ones unless `SLURM_DEV_CLUSTER_APPTAINER=1`.

use prost::Message;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::proto::core::{ErrorDocument, container_error};
use slurm_connector::proto::task::Outputs;

mod common;

#[path = "real_apptainer/support.rs"]
mod support;
use support::*;

async fn create(c: &Cluster, tag: &str, task: &str, x: i64) -> (Serve, Client, Work, Vec<u8>) {
    let (serve, mut client) = serve_for(c, tag).await;
    let w = work(c, tag, x);
    let req = request(c, &w, task, &run_name(tag), x);
    let meta = client
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    (serve, client, w, meta)
}

type Client =
    slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient<
        tonic::transport::Channel,
    >;

async fn double_succeeds(runtime: &'static str) {
    let Some(c) = mapped_cluster(runtime) else {
        return;
    };
    let (_serve, mut client, w, meta) = create(&c, &format!("{runtime}-ok"), "double", 21).await;
    let r = wait_until(&mut client, &meta, 240, Phase::is_terminal).await;
    assert_eq!(phase(&r), Phase::Succeeded, "{}", r.message);
    assert!(r.outputs.is_none(), "{:?}", r.outputs);
    let outputs = Outputs::decode(
        std::fs::read(w.host.join("out/outputs.pb"))
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    assert_eq!(outputs.literals.len(), 1, "{outputs:?}");
    assert_eq!(outputs.literals[0].name, "o0");
    assert_eq!(outputs.literals[0].value, Some(int_literal(42)));
    let _ = std::fs::remove_dir_all(&w.host);
}

async fn raising_task_fails_from_error_pb(runtime: &'static str) {
    let Some(c) = mapped_cluster(runtime) else {
        return;
    };
    let (_serve, mut client, w, meta) = create(&c, &format!("{runtime}-boom"), "boom", 21).await;
    let r = wait_until(&mut client, &meta, 240, Phase::is_terminal).await;
    let doc = ErrorDocument::decode(
        std::fs::read(w.host.join("out/error.pb"))
            .unwrap_or_else(|e| panic!("a0 wrote no error.pb ({e}): {}", r.message))
            .as_slice(),
    )
    .unwrap()
    .error
    .unwrap();
    assert_eq!(doc.code, "ValueError");
    assert_eq!(doc.message, "boom 21");
    let want = if doc.kind == container_error::Kind::Recoverable as i32 {
        Phase::RetryableFailed
    } else {
        Phase::Failed
    };
    assert_eq!(phase(&r), want, "{}", r.message);
    assert!(
        r.message.contains("error ValueError): boom 21"),
        "{}",
        r.message
    );
    assert!(!w.host.join("out/outputs.pb").exists());
    let _ = std::fs::remove_dir_all(&w.host);
}

async fn no_result_fails_with_the_stderr_tail(runtime: &'static str) {
    let Some(c) = mapped_cluster(runtime) else {
        return;
    };
    let (_serve, mut client, w, meta) = create(&c, &format!("{runtime}-vanish"), "vanish", 7).await;
    let r = wait_until(&mut client, &meta, 240, Phase::is_terminal).await;
    assert_eq!(phase(&r), Phase::Failed, "{}", r.message);
    assert!(
        r.message.contains("the task's entrypoint wrote no result"),
        "{}",
        r.message
    );
    assert!(r.message.contains("vanishing with 7"), "{}", r.message);
    let _ = std::fs::remove_dir_all(&w.host);
}

async fn cancel_aborts_and_leaves_no_container_process(runtime: &'static str) {
    let Some(c) = mapped_cluster(runtime) else {
        return;
    };
    let (_serve, mut client, w, meta) = create(&c, &format!("{runtime}-cancel"), "sleepy", 3).await;
    let job = job_of(&mut client, &meta).await;
    let before = processes_once_a0_runs(&mut client, &meta, 180).await;
    eprintln!("job {job} ({runtime}) processes before the cancel: {before:#?}");
    // Pyxis made the step's Enroot container (its unpacked root filesystem under
    // ENROOT_DATA_PATH, `pyxis_<job>.<step>`) before a0 started, and removes it even for a
    // cancelled step.
    if runtime == "pyxis" {
        let made = enroot_containers(&c, job);
        assert!(!made.is_empty(), "job {job} runs with no Enroot container");
    }
    cancel_until_no_process(&mut client, &meta).await;
    if runtime == "pyxis" {
        until_no_enroot_container(&c, job).await;
    }
    assert_processes_gone(&before);
    let _ = std::fs::remove_dir_all(&w.host);
}

/// The task's `env` wins inside the container over a variable the image defines too: the
/// .sqsh's /etc/environment says SC_PROBE=1000 (Docker's ENV, as `enroot import` writes it), the
/// task says 21, and `probe(21)` returns SC_PROBE + 21. Without `--container-env=...,SC_PROBE`
/// Pyxis would keep the image's value (measured: 1021).
async fn task_env_wins_over_the_images(runtime: &'static str) {
    let Some(c) = mapped_cluster(runtime) else {
        return;
    };
    let (_serve, mut client) = serve_for(&c, &format!("{runtime}-probe")).await;
    let w = work(&c, &format!("{runtime}-probe"), 21);
    let mut req = request(&c, &w, "probe", &run_name(&format!("{runtime}-probe")), 21);
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    custom.fields.insert(
        "env".into(),
        prost_types::Value {
            kind: Some(prost_types::value::Kind::StructValue(
                slurm_connector::proto::json_to_struct(&serde_json::json!({"SC_PROBE": "21"})),
            )),
        },
    );
    let meta = client
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let r = wait_until(&mut client, &meta, 240, Phase::is_terminal).await;
    assert_eq!(phase(&r), Phase::Succeeded, "{}", r.message);
    let outputs = Outputs::decode(
        std::fs::read(w.host.join("out/outputs.pb"))
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    assert_eq!(outputs.literals[0].value, Some(int_literal(42)));
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_the_tasks_env_wins_over_the_images() {
    task_env_wins_over_the_images("pyxis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_double_succeeds_and_outputs_pb_holds_42() {
    double_succeeds("pyxis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_a_raising_task_fails_with_the_message_from_error_pb() {
    raising_task_fails_from_error_pb("pyxis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_no_result_fails_with_the_stderr_tail() {
    no_result_fails_with_the_stderr_tail("pyxis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_cancel_is_aborted_and_leaves_no_container_process() {
    cancel_aborts_and_leaves_no_container_process("pyxis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apptainer_mapped_sif_double_succeeds_and_outputs_pb_holds_42() {
    double_succeeds("apptainer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apptainer_mapped_sif_a_raising_task_fails_with_the_message_from_error_pb() {
    raising_task_fails_from_error_pb("apptainer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apptainer_mapped_sif_no_result_fails_with_the_stderr_tail() {
    no_result_fails_with_the_stderr_tail("apptainer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apptainer_mapped_sif_cancel_is_aborted_and_leaves_no_container_process() {
    cancel_aborts_and_leaves_no_container_process("apptainer").await;
}
