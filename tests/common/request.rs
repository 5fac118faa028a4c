//! The real CreateTaskRequests of the published plugin (`tests/fixtures/requests/*.pb`), the
//! changes tests make to them, and the GetTask request Flyte sends for one.

use std::path::PathBuf;

use prost::Message;
use prost_types::value::Kind;
use slurm_connector::proto::connector::{CreateTaskRequest, GetTaskRequest, TaskCategory};

pub fn requests_dir() -> PathBuf {
    super::fixture_dir().join("requests")
}

/// The names of every `.pb` fixture, sorted.
pub fn request_names() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(requests_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".pb"))
        .collect();
    v.sort();
    v
}

/// A fixture as the SDK wrote it.
pub fn request(name: &str) -> CreateTaskRequest {
    let p = requests_dir().join(name);
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    CreateTaskRequest::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// What tests change in a fixture.
pub trait RequestExt: Sized {
    /// Without its `sbatch.partition`: the mock has one partition, and the dev cluster's default
    /// is Slurm's to choose.
    fn without_partition(self) -> Self;
    /// With `script` as the task's batch script.
    fn script(self, script: &str) -> Self;
    /// With retry attempt `attempt`: each attempt is a distinct execution (its own idempotency
    /// key).
    fn attempt(self, attempt: u32) -> Self;
    /// With `name` as the run's name: a run of its own (the cluster keeps earlier runs' jobs,
    /// which the same execution would adopt instead of submitting).
    fn run_name(self, name: &str) -> Self;
}

impl RequestExt for CreateTaskRequest {
    fn without_partition(mut self) -> Self {
        let custom = self.template.as_mut().unwrap().custom.as_mut().unwrap();
        if let Some(prost_types::Value {
            kind: Some(Kind::StructValue(sb)),
        }) = custom.fields.get_mut("sbatch")
        {
            sb.fields.remove("partition");
        }
        self
    }

    fn script(mut self, script: &str) -> Self {
        let custom = self.template.as_mut().unwrap().custom.as_mut().unwrap();
        custom.fields.insert(
            "script".into(),
            prost_types::Value {
                kind: Some(Kind::StringValue(script.into())),
            },
        );
        self
    }

    fn run_name(mut self, name: &str) -> Self {
        self.task_execution_metadata
            .as_mut()
            .unwrap()
            .task_execution_id
            .as_mut()
            .unwrap()
            .node_execution_id
            .as_mut()
            .unwrap()
            .execution_id
            .as_mut()
            .unwrap()
            .name = name.to_string();
        self
    }

    fn attempt(mut self, attempt: u32) -> Self {
        self.task_execution_metadata
            .as_mut()
            .unwrap()
            .task_execution_id
            .as_mut()
            .unwrap()
            .retry_attempt = attempt;
        self
    }
}

/// A fixture for the mock cluster: [`request`] without its partition.
pub fn mock_request(name: &str) -> CreateTaskRequest {
    request(name).without_partition()
}

/// The task category every fixture is (`slurm_script`, version 0).
pub fn task_category() -> TaskCategory {
    TaskCategory {
        name: "slurm_script".into(),
        version: 0,
    }
}

/// GetTask for the task `meta` (a CreateTask's resource_meta).
pub fn get_req(meta: &[u8]) -> GetTaskRequest {
    GetTaskRequest {
        resource_meta: meta.to_vec(),
        task_category: Some(task_category()),
        ..Default::default()
    }
}
