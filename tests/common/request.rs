//! The real CreateTaskRequests of the published plugin (`tests/fixtures/requests/*.pb`), the
//! changes tests make to them, and the GetTask request Flyte sends for one.

use std::path::PathBuf;

use prost::Message;
use prost_types::value::Kind;
use slurm_connector::proto::connector::{CreateTaskRequest, GetTaskRequest, TaskCategory};
use slurm_connector::proto::core::WorkflowExecutionIdentifier;

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
    /// With `project` as the run's Flyte project (what identity rules match on).
    fn project(self, project: &str) -> Self;
    /// With `custom.connection.host`: the SSH login host the published plugin writes.
    fn connection_host(self, host: &str) -> Self;
    /// `custom.connection.cluster`: the configured cluster the task selects.
    fn connection_cluster(self, cluster: &str) -> Self;
}

/// The run's id inside a request (project, domain, name).
pub fn execution_id(req: &mut CreateTaskRequest) -> &mut WorkflowExecutionIdentifier {
    req.task_execution_metadata
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
        execution_id(&mut self).name = name.to_string();
        self
    }

    fn project(mut self, project: &str) -> Self {
        execution_id(&mut self).project = project.to_string();
        self
    }

    fn connection_cluster(mut self, cluster: &str) -> Self {
        let custom = self.template.as_mut().unwrap().custom.as_mut().unwrap();
        let conn = custom
            .fields
            .entry("connection".into())
            .or_insert_with(|| prost_types::Value {
                kind: Some(Kind::StructValue(Default::default())),
            });
        let Some(Kind::StructValue(conn)) = &mut conn.kind else {
            panic!("custom.connection is not a struct")
        };
        conn.fields.insert(
            "cluster".into(),
            prost_types::Value {
                kind: Some(Kind::StringValue(cluster.into())),
            },
        );
        self
    }

    fn connection_host(mut self, host: &str) -> Self {
        let custom = self.template.as_mut().unwrap().custom.as_mut().unwrap();
        let conn = custom
            .fields
            .entry("connection".into())
            .or_insert_with(|| prost_types::Value {
                kind: Some(Kind::StructValue(Default::default())),
            });
        let Some(Kind::StructValue(conn)) = &mut conn.kind else {
            panic!("custom.connection is not a struct")
        };
        conn.fields.insert(
            "host".into(),
            prost_types::Value {
                kind: Some(Kind::StringValue(host.into())),
            },
        );
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

/// `meta` as CreateTask answers it when the submit is done within its wait: naming job `id`,
/// without `deferred`. For the no-accounting test of job arrays that hands a stopped connector's
/// meta to a new one after the array left slurmctld: a deferred array's meta cannot be resolved
/// there (its markers are per element: docs/operations.md, "Throttled clusters and deferred
/// submits"), and that limit is not what it tests.
pub fn answered_with(meta: &[u8], id: u64) -> Vec<u8> {
    let mut m: serde_json::Value = serde_json::from_slice(meta).unwrap();
    let o = m.as_object_mut().unwrap();
    o.insert("job_id".into(), id.into());
    o.remove("deferred");
    serde_json::to_vec(&m).unwrap()
}

/// The Slurm job of the task `get` asks about (a GetTask request for its meta). A CreateTask
/// whose submit outlives the submit wait (5 s; a loaded machine) answers, by design, a deferred
/// meta with `job_id` 0, and GetTask resolves it by its key and names the job in
/// `custom_info.job_id`: a test that asks Slurm about the job needs that id, not the meta's.
pub async fn job_of(c: &mut super::server::Grpc, get: GetTaskRequest) -> u64 {
    let meta: serde_json::Value = serde_json::from_slice(&get.resource_meta).unwrap();
    if let Some(id) = meta["job_id"].as_u64().filter(|id| *id != 0) {
        return id;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        // With Flyte's 10 s deadline, so `until` bounds the loop even if a call never returns.
        let mut req = tonic::Request::new(get.clone());
        req.set_timeout(std::time::Duration::from_secs(10));
        let r = c
            .get_task(req)
            .await
            .expect("GetTask of a deferred meta")
            .into_inner()
            .resource
            .unwrap_or_default();
        let id = r
            .custom_info
            .as_ref()
            .and_then(|s| s.fields.get("job_id"))
            .and_then(|v| match v.kind {
                Some(Kind::NumberValue(n)) => Some(n as u64),
                _ => None,
            })
            .filter(|id| *id != 0);
        if let Some(id) = id {
            return id;
        }
        assert!(
            std::time::Instant::now() < until,
            "the deferred meta {meta} never resolved to a job: {}",
            r.message
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// An exit-status marker's line without its last field, once that field is checked to name
/// `r`'s job (`custom_info.job_id`; an array element's marker names the array): the id by which
/// a job that left slurmctld is found on a cluster without accounting.
pub fn marker_without_job(line: &str, r: &slurm_connector::proto::connector::Resource) -> String {
    let job = match r
        .custom_info
        .as_ref()
        .and_then(|c| c.fields.get("job_id"))
        .and_then(|v| v.kind.as_ref())
    {
        Some(Kind::NumberValue(n)) => *n as u64,
        other => panic!("custom_info.job_id: {other:?}"),
    };
    let (rest, id) = line
        .trim_end()
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("marker {line:?} has no job id"));
    assert_eq!(id, job.to_string(), "marker {line:?} of job {job}");
    format!("{rest}\n")
}
