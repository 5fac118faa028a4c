//! The real tier for native `slurm` tasks: a Flyte 2 Python task run by Flyte's own entrypoint
//! (`a0`, flyte from PyPI in the dev cluster's task image) through `srun ... apptainer -q exec`,
//! submitted by the real `slurm-connector serve` binary to a real Slurm 26.05 (slurmrestd).
//! Driven with the connector's Rust gRPC client (tonic stubs generated from the same protos the
//! conformance script checks against the published flyteidl2). `inputs.pb` is written and
//! `outputs.pb` / `error.pb` are read with the Rust prost types: no Flyte on the host.
//!
//! ```sh
//! sudo deploy/dev-cluster/dev-cluster --release 26.05 --apptainer --min-job-age 5 run cargo test --test real_apptainer
//! ```
//! Skips with a reason unless that cluster's environment (with `SLURM_DEV_CLUSTER_APPTAINER=1`) is
//! exported.

use std::path::Path;

use prost::Message;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::proto::core::{ErrorDocument, container_error};
use slurm_connector::proto::task::{Inputs, Outputs};

mod common;
use common::skip::{Tier, skip};

#[path = "real_apptainer/support.rs"]
mod support;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_succeeds_and_outputs_pb_holds_42() {
    let Some(c) = cluster() else { return };
    let (_serve, mut client) = serve("ok").await;
    let w = work(&c, "ok", 21);
    let req = request(&c, &w, "double", &run_name("ok"), 21);
    let meta = client
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let r = wait_until(&mut client, &meta, 240, Phase::is_terminal).await;
    assert_eq!(phase(&r), Phase::Succeeded, "{}", r.message);
    // The backend reads outputs.pb at the prefix itself: no outputs literal in the Resource.
    assert!(r.outputs.is_none(), "{:?}", r.outputs);
    assert!(r.message.contains("outputs.pb"), "{}", r.message);
    let bytes = std::fs::read(w.host.join("out/outputs.pb")).unwrap();
    let outputs = Outputs::decode(bytes.as_slice()).unwrap();
    assert_eq!(outputs.literals.len(), 1, "{outputs:?}");
    assert_eq!(outputs.literals[0].name, "o0");
    assert_eq!(outputs.literals[0].value, Some(int_literal(42)));
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raising_task_fails_with_the_users_message_from_error_pb() {
    let Some(c) = cluster() else { return };
    let (_serve, mut client) = serve("boom").await;
    let w = work(&c, "boom", 21);
    let req = request(&c, &w, "boom", &run_name("boom"), 21);
    let meta = client
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let r = wait_until(&mut client, &meta, 240, Phase::is_terminal).await;
    // a0 exits 0 after a raise: the job COMPLETED, and only error.pb tells it failed.
    let doc = ErrorDocument::decode(
        std::fs::read(w.host.join("out/error.pb"))
            .expect("a0 wrote error.pb")
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
    eprintln!("GetTask message:\n{}", r.message);
    assert_eq!(phase(&r), want, "{}", r.message);
    assert!(r.message.contains("COMPLETED"), "{}", r.message);
    assert!(
        r.message.contains("error ValueError): boom 21"),
        "{}",
        r.message
    );
    assert!(!w.host.join("out/outputs.pb").exists());
    let _ = std::fs::remove_dir_all(&w.host);
}

/// The entrypoint ends without a result (the process exits 0 inside the task): the job
/// COMPLETED, yet the task FAILED, saying so, with the stderr tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_result_at_the_prefix_fails_with_the_stderr_tail() {
    let Some(c) = cluster() else { return };
    let (_serve, mut client) = serve("vanish").await;
    let w = work(&c, "vanish", 7);
    let req = request(&c, &w, "vanish", &run_name("vanish"), 7);
    let meta = client
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let r = wait_until(&mut client, &meta, 240, Phase::is_terminal).await;
    assert_eq!(phase(&r), Phase::Failed, "{}", r.message);
    assert!(
        r.message.contains("COMPLETED, exit code 0:0"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("the task's entrypoint wrote no result"),
        "{}",
        r.message
    );
    assert!(r.message.contains("vanishing with 7"), "{}", r.message);
    let _ = std::fs::remove_dir_all(&w.host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_native_task_is_aborted_and_leaves_no_container_process() {
    let Some(c) = cluster() else { return };
    if !Path::new("/proc/self/environ").exists() {
        skip(Tier::Apptainer, "no /proc to see the job's processes in");
        return;
    }
    let (_serve, mut client) = serve("cancel").await;
    let w = work(&c, "cancel", 3);
    let req = request(&c, &w, "sleepy", &run_name("cancel"), 3);
    let meta = client
        .create_task(req)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let job = job_of(&mut client, &meta).await;
    let before = processes_once_a0_runs(&mut client, &meta, 120).await;
    eprintln!("job {job} processes before the cancel: {before:#?}");
    assert!(
        before.iter().any(|(_, cmd)| cmd.contains("squashfuse")),
        "the .sif is mounted by squashfuse inside the job: {before:#?}"
    );
    cancel_until_no_process(&mut client, &meta).await;
    assert_processes_gone(&before);
    let _ = std::fs::remove_dir_all(&w.host);
}

/// `slurm-connector submit --request FILE` with the SDK's templates unrendered: the CLI writes
/// inputs.pb where `{{.input}}` points (through FLYTE_SLURM_SHARED_MOUNTS), renders the args,
/// and the task succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_request_writes_inputs_and_renders_templates() {
    let Some(c) = cluster() else { return };
    let port = free_port();
    let (_serve, _client) = serve_on("submit", port).await;
    let w = work(&c, "submit", 5);
    let req = request_with(
        &c,
        &w,
        "double",
        &run_name("submit"),
        5,
        [
            "{{.input}}",
            "{{.outputPrefix}}",
            "{{.rawOutputDataPrefix}}",
            "{{.checkpointOutputPrefix}}",
            "{{.prevCheckpointPrefix}}",
        ],
    );
    let file = w.host.join("request.pb");
    std::fs::write(&file, req.encode_to_vec()).unwrap();
    let out = common::output_within(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_slurm-connector"))
            .args(["submit", "--request"])
            .arg(&file)
            .args([
                "--connector",
                &format!("http://127.0.0.1:{port}"),
                "--poll",
                "1",
            ]),
        std::time::Duration::from_secs(300),
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "submit failed:\n{stdout}");
    assert!(
        stdout.contains(&format!(
            "inputs.pb written to file://{}/out/inputs.pb",
            w.cluster
        )),
        "{stdout}"
    );
    assert!(stdout.contains("SUCCEEDED"), "{stdout}");
    let inputs = Inputs::decode(
        std::fs::read(w.host.join("out/inputs.pb"))
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    assert_eq!(inputs.literals[0].value, Some(int_literal(5)));
    let outputs = Outputs::decode(
        std::fs::read(w.host.join("out/outputs.pb"))
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    assert_eq!(outputs.literals[0].value, Some(int_literal(10)));
    let _ = std::fs::remove_dir_all(&w.host);
}
