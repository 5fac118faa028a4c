//! Flyte 1 requests as the tests send them: the fixtures made by flytekit and
//! flytekitplugins-slurm 1.16.31 (`tests/fixtures/flyte1/`, from `scripts/make-flyte1-fixtures.py`),
//! what the tests change in them, and what they read back.

use prost::Message;
use slurm_connector::proto::flyte1::admin::{CreateTaskRequest, Resource};
use slurm_connector::proto::flyte1::core::{literal, scalar};
use slurm_connector::proto::flyte1::service::async_agent_service_client::AsyncAgentServiceClient;
use tonic::transport::Channel;

/// A client of the connector's Flyte 1 service.
pub type Agent = AsyncAgentServiceClient<Channel>;

/// CreateTask, answered: its resource_meta.
pub async fn create(c: &mut Agent, req: CreateTaskRequest) -> Vec<u8> {
    c.create_task(req)
        .await
        .expect("CreateTask")
        .into_inner()
        .resource_meta
}

/// The fixture `name` (`tests/fixtures/flyte1/<name>.pb`).
pub fn fixture(name: &str) -> CreateTaskRequest {
    let path = super::fixture_dir().join(format!("flyte1/{name}.pb"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    CreateTaskRequest::decode(bytes.as_slice()).expect("a flyteidl.admin.CreateTaskRequest")
}

/// The request as another execution (its name `run`): a new key, a new job.
pub fn rename(req: &mut CreateTaskRequest, run: &str) {
    let tid = req
        .task_execution_metadata
        .as_mut()
        .unwrap()
        .task_execution_id
        .as_mut()
        .unwrap();
    let node = tid.node_execution_id.as_mut().unwrap();
    node.execution_id.as_mut().unwrap().name = run.to_string();
}

/// The shell task fixture's output locations moved from `/home/alice/results` to `to`.
pub fn relocate_outputs(req: &mut CreateTaskRequest, to: &str) {
    let t = req.template.as_mut().unwrap();
    let mut custom = slurm_connector::proto::struct_to_json(t.custom.as_ref().unwrap());
    for loc in custom["output_locs"].as_array_mut().unwrap() {
        let l = loc["location"]
            .as_str()
            .unwrap()
            .replace("/home/alice/results", to);
        loc["location"] = l.into();
    }
    t.custom = Some(slurm_connector::proto::json_to_struct(&custom));
}

/// The blob URI of output `name` in a SUCCEEDED Resource.
pub fn blob_uri(r: &Resource, name: &str) -> String {
    let l = &r.outputs.as_ref().expect("outputs").literals[name];
    match l.value.as_ref() {
        Some(literal::Value::Scalar(s)) => match s.value.as_ref() {
            Some(scalar::Value::Blob(b)) => b.uri.clone(),
            other => panic!("{name}: not a blob: {other:?}"),
        },
        other => panic!("{name}: not a scalar: {other:?}"),
    }
}

/// What the shell task fixture (`slurm_shell`, inputs `greeting="hello world"`, `n=3`) leaves
/// when it SUCCEEDED with its locations under `results` (as this process sees them) and its
/// output prefix the file:// store `store`: its report where the filled-in script wrote it (the
/// input's space kept whole in the path), both outputs uploaded under the prefix, and File and
/// Directory literals of the uploaded copies in `r`.
pub fn assert_shell_outputs(r: &Resource, results: &std::path::Path, store: &std::path::Path) {
    let read = |p: std::path::PathBuf| {
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    assert_eq!(read(results.join("hello world.txt")), "hello world x3\n");
    for name in ["report", "shards"] {
        assert_eq!(
            blob_uri(r, name),
            format!("file://{}/{name}", store.display())
        );
    }
    assert_eq!(read(store.join("report")), "hello world x3\n");
    for i in 1..=3 {
        assert_eq!(
            read(store.join(format!("shards/part-{i}.txt"))),
            format!("shard {i}\n")
        );
    }
}
