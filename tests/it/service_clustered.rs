//! `clustered-task` at the service level, against mock-slurmrestd: advertised in ListConnectors
//! only when the deployment enables it, refused with the switch to flip when it does not, and
//! accepted (one job, a meta that marks it multi-rank) when it does. The requests are the SDK's
//! own (`tests/fixtures/multinode/`, flyte 2.12.1). What runs on a real cluster:
//! tests/real_multinode.rs.

use crate::common;
use common::mock::Mock;
use common::server::Server;

use std::time::Duration;

use mock_slurmrestd::FaultConfig;
use prost::Message;
use slurm_connector::proto::connector::connector_metadata_service_client::ConnectorMetadataServiceClient;
use slurm_connector::proto::connector::{CreateTaskRequest, ListConnectorsRequest, TaskCategory};

fn fixture(name: &str) -> CreateTaskRequest {
    let p = format!(
        "{}/tests/fixtures/multinode/{name}.pb",
        env!("CARGO_MANIFEST_DIR")
    );
    CreateTaskRequest::decode(std::fs::read(p).unwrap().as_slice()).unwrap()
}

async fn categories(server: &Server) -> Vec<(String, i32)> {
    let mut md = ConnectorMetadataServiceClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let list = md
        .list_connectors(ListConnectorsRequest {})
        .await
        .unwrap()
        .into_inner();
    list.connectors[0]
        .supported_task_categories
        .iter()
        .map(|TaskCategory { name, version }| (name.clone(), *version))
        .collect()
}

#[tokio::test]
async fn not_served_unless_the_deployment_enables_it() {
    let env = Mock::start(
        "clustered-off",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let server = Server::start(env.deployment(Duration::from_millis(200))).await;
    assert_eq!(
        categories(&server).await,
        vec![("slurm".into(), 0), ("slurm_script".into(), 0)]
    );
    let e = server
        .client()
        .await
        .create_task(fixture("multinode_rank_sum"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("FLYTE_SLURM_CLUSTERED_TASKS=true"),
        "{}",
        e.message()
    );
    server.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn served_and_advertised_when_enabled() {
    let env = Mock::start(
        "clustered-on",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let mut d = env.deployment(Duration::from_millis(200));
    d.clustered.enabled = true;
    d.clustered.runtime = "apptainer".into();
    let server = Server::start(d).await;
    assert!(
        categories(&server)
            .await
            .contains(&("clustered-task".into(), 1)),
        "clustered-task v1 is listed"
    );
    let meta = server
        .client()
        .await
        .create_task(fixture("multinode_rank_sum"))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let m: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(m["ranks"], true, "{m}");
    assert_eq!(m["native_prefix"], "file:///shared/flyte/multinode/out");
    // torchrun's in-job restarts cannot be honoured: refused, naming the field.
    let mut req = fixture("multinode_rank_sum");
    let t = req.template.as_mut().unwrap();
    let mut custom = slurm_connector::proto::struct_to_json(t.custom.as_ref().unwrap());
    custom["runtime"]["torchrun"]["maxRestarts"] = serde_json::json!(2.0);
    t.custom = Some(slurm_connector::proto::json_to_struct(&custom));
    let e = server.client().await.create_task(req).await.unwrap_err();
    assert!(
        e.message().contains("runtime.torchrun.maxRestarts"),
        "{}",
        e.message()
    );
    server.stop().await;
    env.stop().await;
}
