//! Flyte 1's agent protocol through the whole service, in front of mock-slurmrestd (which really
//! runs the batch scripts on this machine), with requests made by flytekit and
//! flytekitplugins-slurm 1.16.31 (`tests/fixtures/flyte1/`, from `scripts/make-flyte1-fixtures.py`):
//! - `slurm_fn`: the entrypoint runs where the script says `{task.fn}`, every argument as given
//!   (the empty `--prev-checkpoint ""` kept); `outputs.pb` at the prefix → SUCCEEDED (propeller
//!   reads the outputs itself), `error.pb` → FAILED with the task's own message;
//! - `slurm`: the script file on the cluster run with its arguments and its `#SBATCH` lines; a
//!   missing file refused at CreateTask, naming `batch_script_path`;
//! - `slurm` with an inline script (`SlurmShellTask`): the script filled in from the inputs and
//!   output locations, its outputs uploaded from where it wrote them and returned as File and
//!   Directory literals; a location outside the staging roots refused at CreateTask;
//! - DeleteTask → ABORTED; a retry is a new job; ListAgents names both task types.

use crate::common;
use common::flyte1::{Agent, create, fixture, relocate_outputs, rename};
use common::mock::Mock;
use common::server::Server;

use std::path::Path;
use std::time::{Duration, Instant};

use prost::Message;
use slurm_connector::proto::flyte1::admin::{
    CreateTaskRequest, DeleteTaskRequest, GetTaskLogsRequest, GetTaskRequest, ListAgentsRequest,
    Resource, TaskCategory, get_task_logs_response,
};
use slurm_connector::proto::flyte1::service::agent_metadata_service_client::AgentMetadataServiceClient;
use slurm_connector::proto::flyte1::service::async_agent_service_client::AsyncAgentServiceClient;

/// TaskExecution.Phase of flyteidl 1 (the same values as Flyte 2's).
const RUNNING: i32 = 2;
const SUCCEEDED: i32 = 3;
const ABORTED: i32 = 4;
const FAILED: i32 = 5;
const RETRYABLE_FAILED: i32 = 8;

fn set_custom(req: &mut CreateTaskRequest, key: &str, value: prost_types::Value) {
    let t = req.template.as_mut().unwrap();
    t.custom.as_mut().unwrap().fields.insert(key.into(), value);
}

fn string(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(prost_types::value::Kind::StringValue(s.into())),
    }
}

/// The mock has one partition and no `debug`: the fixture's `partition` goes, its other options stay.
fn without_partition(req: &mut CreateTaskRequest) {
    let t = req.template.as_mut().unwrap();
    let custom = t.custom.as_mut().unwrap();
    if let Some(prost_types::Value {
        kind: Some(prost_types::value::Kind::StructValue(s)),
    }) = custom.fields.get_mut("sbatch_config")
    {
        s.fields.remove("partition");
        s.fields.remove("output");
    }
}

/// A `slurm_fn` fixture whose entrypoint is `args` and whose output prefix is `prefix`, a
/// distinct execution (its name).
fn function_request(run: &str, args: &[&str], prefix: &Path) -> CreateTaskRequest {
    let mut req = fixture("slurm_fn_script");
    without_partition(&mut req);
    set_custom(
        &mut req,
        "script",
        string("#!/bin/bash\nset -e\n{task.fn}\n"),
    );
    let t = req.template.as_mut().unwrap();
    if let Some(slurm_connector::proto::flyte1::core::task_template::Target::Container(c)) =
        t.target.as_mut()
    {
        c.args = args.iter().map(|a| a.to_string()).collect();
    }
    rename(&mut req, run);
    req.output_prefix = format!("file://{}", prefix.display());
    req
}

fn category(name: &str) -> Option<TaskCategory> {
    Some(TaskCategory {
        name: name.into(),
        version: 0,
    })
}

async fn agent(server: &Server) -> Agent {
    AsyncAgentServiceClient::connect(format!("http://{}", server.addr))
        .await
        .expect("the connector listens")
}

async fn get(c: &mut Agent, meta: &[u8], task_type: &str) -> Resource {
    c.get_task(GetTaskRequest {
        resource_meta: meta.to_vec(),
        task_category: category(task_type),
        ..Default::default()
    })
    .await
    .expect("GetTask never fails")
    .into_inner()
    .resource
    .unwrap()
}

async fn wait(c: &mut Agent, meta: &[u8], task_type: &str, done: impl Fn(i32) -> bool) -> Resource {
    let start = Instant::now();
    loop {
        let r = get(c, meta, task_type).await;
        if done(r.phase) {
            return r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no such phase within 60 s; last: {} {}",
            r.phase,
            r.message
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn terminal(p: i32) -> bool {
    [SUCCEEDED, ABORTED, FAILED, RETRYABLE_FAILED].contains(&p)
}

async fn logs(c: &mut Agent, meta: &[u8], task_type: &str) -> String {
    let mut stream = c
        .get_task_logs(GetTaskLogsRequest {
            resource_meta: meta.to_vec(),
            lines: 100,
            task_category: category(task_type),
            ..Default::default()
        })
        .await
        .expect("GetTaskLogs")
        .into_inner();
    let mut out = String::new();
    while let Some(msg) = stream.message().await.expect("a log message") {
        if let Some(get_task_logs_response::Part::Body(b)) = msg.part {
            for l in b.structured_lines {
                out.push_str(&l.message);
                out.push('\n');
            }
        }
    }
    out
}

/// The mock runs jobs on this machine: its jobs folder is the shared filesystem on both sides.
async fn start(tag: &str) -> (Mock, Server) {
    let env = Mock::start(tag, Duration::from_secs(600), Default::default()).await;
    let jobs = env.jobs();
    let mut c = env.cluster(env.static_auth(), None);
    c.shared_mounts = vec![(jobs.display().to_string(), jobs)];
    let server = Server::start(common::mock::deployment(c, Duration::from_millis(200))).await;
    (env, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_fn_runs_its_entrypoint_and_reports_outputs_and_its_own_failure() {
    let (env, server) = start("flyte1-fn").await;
    let mut c = agent(&server).await;

    // Success: the entrypoint writes outputs.pb; every argument arrives as given, the empty one too.
    let ok = env.jobs().join("prefix-ok");
    std::fs::create_dir_all(&ok).unwrap();
    let args_file = ok.join("args");
    let script = format!(
        "printf '%s|' \"$@\" > {0}; printf 'x' > {1}/outputs.pb",
        args_file.display(),
        ok.display()
    );
    let req = function_request(
        "f1ok",
        &[
            "bash",
            "-c",
            &script,
            "--",
            "--prev-checkpoint",
            "",
            "--next",
        ],
        &ok,
    );
    let meta = create(&mut c, req.clone()).await;
    let r = wait(&mut c, &meta, "slurm_fn", terminal).await;
    assert_eq!(r.phase, SUCCEEDED, "{}", r.message);
    assert!(
        r.outputs.is_none(),
        "propeller reads outputs.pb at the prefix itself"
    );
    assert_eq!(
        std::fs::read_to_string(&args_file).unwrap(),
        "--prev-checkpoint||--next|",
        "every argument quoted, the empty one kept"
    );
    // The same request again (propeller's retry of a CreateTask): the same job.
    let again = c
        .create_task(req.clone())
        .await
        .expect("CreateTask")
        .into_inner()
        .resource_meta;
    assert_eq!(
        again, meta,
        "a repeated CreateTask answers with the job already submitted"
    );
    // A new attempt is a new job.
    let mut retry = req;
    retry
        .task_execution_metadata
        .as_mut()
        .unwrap()
        .task_execution_id
        .as_mut()
        .unwrap()
        .retry_attempt = 1;
    let retried = c
        .create_task(retry)
        .await
        .expect("CreateTask")
        .into_inner()
        .resource_meta;
    assert_ne!(
        retried, meta,
        "Flyte 1's retry is a new attempt, never the old job"
    );
    wait(&mut c, &retried, "slurm_fn", terminal).await;

    // Failure: the entrypoint writes error.pb and exits 0, as pyflyte-execute does (it exits 1
    // only with FLYTE_FAIL_ON_ERROR set): the task's own account decides, not the exit code.
    let bad = env.jobs().join("prefix-bad");
    std::fs::create_dir_all(&bad).unwrap();
    let doc = slurm_connector::proto::core::ErrorDocument {
        error: Some(slurm_connector::proto::core::ContainerError {
            code: "USER:ValueError".into(),
            message: "ValueError: n must be positive".into(),
            kind: 0,
            origin: 1,
        }),
    };
    let doc_file = env.jobs().join("error-doc.pb");
    std::fs::write(&doc_file, doc.encode_to_vec()).unwrap();
    let script = format!("cp {} {}/error.pb", doc_file.display(), bad.display());
    let req = function_request("f1bad", &["bash", "-c", &script], &bad);
    let meta = c
        .create_task(req)
        .await
        .expect("CreateTask")
        .into_inner()
        .resource_meta;
    let r = wait(&mut c, &meta, "slurm_fn", terminal).await;
    assert_eq!(r.phase, FAILED, "{}", r.message);
    assert!(
        r.message.contains("ValueError: n must be positive"),
        "the task's own message: {}",
        r.message
    );
    server.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_runs_the_script_file_with_its_arguments_and_refuses_a_missing_one() {
    let (env, server) = start("flyte1-script").await;
    let mut c = agent(&server).await;
    let script = env.jobs().join("train.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH --time=5\necho \"args: $# [$1] [$2] [$3] [$4]\"\n",
    )
    .unwrap();

    let mut req = fixture("slurm_script_path");
    without_partition(&mut req);
    set_custom(
        &mut req,
        "batch_script_path",
        string(&script.display().to_string()),
    );
    rename(&mut req, "f1script");
    let meta = create(&mut c, req.clone()).await;
    let r = wait(&mut c, &meta, "slurm", terminal).await;
    assert_eq!(r.phase, SUCCEEDED, "{}", r.message);
    let out = logs(&mut c, &meta, "slurm").await;
    assert!(
        out.contains("args: 4 [--epochs] [3] [--tag] [run one]"),
        "batch_script_args as `sbatch script ARGS` passes them: {out}"
    );

    // A path that is not there: refused at CreateTask, naming the field; nothing submitted.
    let mut missing = req;
    set_custom(
        &mut missing,
        "batch_script_path",
        string(&env.jobs().join("nope.sh").display().to_string()),
    );
    rename(&mut missing, "f1missing");
    let e = c.create_task(missing).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("batch_script_path") && e.message().contains("nope.sh"),
        "{}",
        e.message()
    );
    server.stop().await;
    env.stop().await;
}

/// The fixture's shell task with its output locations under `dir` and its outputs uploaded under
/// `prefix` (a file:// store), a distinct execution.
fn shell_request(run: &str, dir: &Path, prefix: &Path) -> CreateTaskRequest {
    let mut req = fixture("slurm_shell");
    without_partition(&mut req);
    relocate_outputs(&mut req, &dir.display().to_string());
    rename(&mut req, run);
    req.output_prefix = format!("file://{}", prefix.display());
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_task_runs_its_filled_in_script_and_returns_its_outputs_as_files() {
    let (env, server) = start("flyte1-shell").await;
    let mut c = agent(&server).await;
    let results = env.jobs().join("results");
    std::fs::create_dir_all(&results).unwrap();
    let store = common::fresh_dir("flyte1-shell-store");

    let req = shell_request("f1shell", &results, &store);
    let meta = create(&mut c, req.clone()).await;
    let r = wait(&mut c, &meta, "slurm", terminal).await;
    assert_eq!(r.phase, SUCCEEDED, "{}", r.message);
    let out = logs(&mut c, &meta, "slurm").await;
    assert!(
        out.contains("greeting hello world, 3 shards, home"),
        "the script ran with its inputs: {out}"
    );
    common::flyte1::assert_shell_outputs(&r, &results, &store);

    // A location the connector may not read (outside its staging roots): refused at CreateTask,
    // naming the output; nothing submitted.
    let outside = common::fresh_dir("flyte1-shell-outside");
    let e = c
        .create_task(shell_request("f1outside", &outside, &store))
        .await
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("output_locs `report`") && e.message().contains("staging roots"),
        "{}",
        e.message()
    );
    server.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_aborts_and_list_agents_names_both_task_types() {
    let (env, server) = start("flyte1-delete").await;
    let mut meta_client = AgentMetadataServiceClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let agents = meta_client
        .list_agents(ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents;
    assert_eq!(agents.len(), 1);
    let names: Vec<&str> = agents[0]
        .supported_task_categories
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["slurm_fn", "slurm"]);
    assert!(!agents[0].is_sync);

    let mut c = agent(&server).await;
    let prefix = env.jobs().join("prefix-sleep");
    std::fs::create_dir_all(&prefix).unwrap();
    let req = function_request("f1sleep", &["sleep", "300"], &prefix);
    let meta = c
        .create_task(req)
        .await
        .expect("CreateTask")
        .into_inner()
        .resource_meta;
    // What flytepropeller's agent plugin forwards of a RUNNING task (flyteplugins v1.16.8,
    // webapi/agent/plugin.go, Status: `TaskInfo{Logs, CustomInfo}`, the message dropped): the
    // Slurm job id must be in both, as the UI shows them while the task runs.
    let running = wait(&mut c, &meta, "slurm_fn", |p| p == RUNNING).await;
    let m: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    let job_id = m["job_id"].as_u64().unwrap();
    let info = slurm_connector::proto::struct_to_json(running.custom_info.as_ref().unwrap());
    // (A protobuf Struct's numbers are doubles.)
    assert_eq!(info["job_id"].as_f64(), Some(job_id as f64), "{info}");
    let links: Vec<(&str, &str)> = running
        .log_links
        .iter()
        .map(|l| (l.name.as_str(), l.uri.as_str()))
        .collect();
    assert_eq!(
        links,
        [(
            &*format!("Slurm job {job_id} on {}", m["cluster"].as_str().unwrap()),
            &*format!("file://{}", m["stdout"].as_str().unwrap())
        )],
        "the default log link names the job"
    );
    c.delete_task(DeleteTaskRequest {
        resource_meta: meta.clone(),
        task_category: category("slurm_fn"),
        ..Default::default()
    })
    .await
    .expect("DeleteTask");
    let r = wait(&mut c, &meta, "slurm_fn", terminal).await;
    assert_eq!(r.phase, ABORTED, "{}", r.message);
    server.stop().await;
    env.stop().await;
}

/// Flyte >= 1.15's `connector-service` plugin calls `flyteidl.service.AsyncConnectorService`,
/// which is not served: every method answers UNIMPLEMENTED with what to route to instead, not
/// tonic's bare "Operation is not implemented".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flyte1_connector_service_is_refused_naming_the_agent_service() {
    let (_env, server) = start("flyte1-connector-service").await;
    agent(&server).await; // listening
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for method in ["CreateTask", "GetTask", "DeleteTask"] {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let path = format!("/flyteidl.service.AsyncConnectorService/{method}");
        let r: Result<tonic::Response<()>, tonic::Status> = grpc
            .unary(
                tonic::Request::new(()),
                path.parse().unwrap(),
                tonic_prost::ProstCodec::<(), ()>::default(),
            )
            .await;
        let status = r.expect_err("refused");
        assert_eq!(
            status.code(),
            tonic::Code::Unimplemented,
            "{method}: {status:?}"
        );
        assert!(
            status.message().contains("agent-service")
                && status.message().contains("AsyncAgentService"),
            "{method}: {}",
            status.message()
        );
    }
    // The agent service beside it still answers.
    let agents = AgentMetadataServiceClient::new(channel)
        .list_agents(slurm_connector::proto::flyte1::admin::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(agents.agents.len(), 1);
    server.stop().await;
}
