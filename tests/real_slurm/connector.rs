//! The connector itself on the dev cluster, for the real tiers that drive it through gRPC
//! (`real_failures`, `real_replicas`): its deployment and the published plugin's request.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prost::Message;
use slurm_connector::config::{AuthConfig, ClusterConfig, DeploymentConfig};
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::{
    CreateTaskRequest, GetTaskRequest, Resource, TaskCategory,
};

use slurm_connector::proto::core::task_execution::Phase;

use super::support;

/// The dev cluster as the connector's one cluster: the minted-token identity of `dev-cluster
/// env`, its shared mounts, polled every second, a requeue budget of `requeue_budget`.
pub fn deployment(c: &support::Cluster, requeue_budget: u32) -> DeploymentConfig {
    let mut d = DeploymentConfig::empty();
    d.poll_interval = Duration::from_secs(1);
    d.job_files_retention = None;
    d.requeue_budget = requeue_budget;
    let mounts = support::var("FLYTE_SLURM_SHARED_MOUNTS").expect("dev-cluster env");
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
            shared_mounts: mounts
                .split(',')
                .map(|e| {
                    let (c, l) = e.split_once('=').unwrap();
                    (c.to_string(), PathBuf::from(l))
                })
                .collect(),
            default_partition: None,
            ssh_hosts: Vec::new(),
            stager_url: None,
            stager_token_file: None,
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

/// The published plugin's `script_no_io` request with `script`, a run name unique to this test
/// run, no sbatch options of the fixture (the dev cluster has its own partitions), and
/// `max_attempts` as Flyte sends it for `retries=2`.
pub fn request(tag: &str, script: &str) -> CreateTaskRequest {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requests/script_no_io.pb");
    let mut req = CreateTaskRequest::decode(std::fs::read(&p).unwrap().as_slice()).unwrap();
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    custom.fields.remove("sbatch");
    custom.fields.insert(
        "script".into(),
        prost_types::Value {
            kind: Some(prost_types::value::Kind::StringValue(script.into())),
        },
    );
    req.task_execution_metadata.as_mut().unwrap().max_attempts = 3;
    crate::common::request::execution_id(&mut req).name = support::unique(&format!("rf-{tag}"));
    req
}

/// The GetTask request of a `slurm_script` task.
fn get_request(meta: &[u8]) -> GetTaskRequest {
    GetTaskRequest {
        resource_meta: meta.to_vec(),
        task_category: Some(TaskCategory {
            name: "slurm_script".into(),
            version: 0,
        }),
        ..Default::default()
    }
}

/// The Slurm job of `meta`, also when CreateTask answered deferred (`common::request::job_of`).
// Not every real tier that includes this file asks Slurm about a job by its id.
#[allow(dead_code)]
pub async fn job_of(
    c: &mut AsyncConnectorServiceClient<tonic::transport::Channel>,
    meta: &[u8],
) -> slurm_connector::slurmrestd::JobId {
    let id = crate::common::request::job_of(c, get_request(meta)).await;
    slurm_connector::slurmrestd::JobId(id as u32)
}

/// GetTask of a `slurm_script` task, which never fails.
pub async fn get(
    c: &mut AsyncConnectorServiceClient<tonic::transport::Channel>,
    meta: &[u8],
) -> Resource {
    c.get_task(get_request(meta))
        .await
        .expect("GetTask never fails")
        .into_inner()
        .resource
        .unwrap()
}

/// A phase after which GetTask never changes its answer.
// Not every real tier that includes this file polls to an end (real_replicas does not).
#[allow(dead_code)]
pub fn terminal(r: &Resource) -> bool {
    [
        Phase::Succeeded,
        Phase::Failed,
        Phase::Aborted,
        Phase::RetryableFailed,
    ]
    .iter()
    .any(|p| *p as i32 == r.phase)
}

/// GetTask until `done`, at most `secs`; `each` sees every answer.
#[allow(dead_code)]
pub async fn poll_until(
    c: &mut AsyncConnectorServiceClient<tonic::transport::Channel>,
    meta: &[u8],
    secs: u64,
    done: impl Fn(&Resource) -> bool,
    mut each: impl FnMut(&Resource),
) -> Resource {
    let start = Instant::now();
    loop {
        let r = get(c, meta).await;
        each(&r);
        if done(&r) {
            return r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "not done in {secs} s: phase {:?}\n{}",
            Phase::try_from(r.phase),
            r.message
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
