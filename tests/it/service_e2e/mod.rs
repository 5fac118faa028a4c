//! The connector end to end: a real gRPC client against `serve_with`, in front of
//! mock-slurmrestd (which really runs the batch scripts). Every fixture is created and tracked
//! to a terminal phase; a repeated CreateTask (also after a restart) submits nothing new; a
//! slurmrestd outage produces no GetTask error and no wrong terminal phase; the tracker makes
//! one `jobs/state` request per tick however many GetTasks arrive.

use crate::common;
mod faults;
mod lifecycle;
mod reports;
use common::mock::Mock;
use common::request::request_names;
use common::server::Server;
use common::{RequestExt, get_req, mock_request};

use std::time::Duration;

use mock_slurmrestd::{FaultConfig, MockConfig};
use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::connector_metadata_service_client::ConnectorMetadataServiceClient;
use slurm_connector::proto::connector::{
    DeleteTaskRequest, GetTaskLogsRequest, GetTaskMetricsRequest, GetTaskRequest,
    ListConnectorsRequest, Resource, get_task_logs_response,
};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::serve_with;
use tonic::transport::Channel;

async fn mock() -> Mock {
    Mock::start("e2e", Duration::from_secs(600), FaultConfig::default()).await
}

/// The mock cluster polled every 200 ms, with a login node for the log links.
fn deployment(env: &Mock) -> DeploymentConfig {
    let mut c = env.cluster(env.static_auth(), None);
    c.ssh_hosts = vec!["login1".into()];
    common::mock::deployment(c, Duration::from_millis(200))
}

/// GetTask's resource; these tests expect GetTask never to fail.
async fn resource(c: &mut AsyncConnectorServiceClient<Channel>, meta: &[u8]) -> Resource {
    c.get_task(get_req(meta))
        .await
        .expect("GetTask never fails")
        .into_inner()
        .resource
        .expect("GetTask answers a resource")
}

async fn wait_terminal(c: &mut AsyncConnectorServiceClient<Channel>, meta: &[u8]) -> (i32, String) {
    for _ in 0..300 {
        let res = resource(c, meta).await;
        if Phase::of(res.phase).is_terminal() {
            return (res.phase, res.message);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no terminal phase within 30 s");
}

/// Not a test: runs mock-slurmrestd and the connector on `SERVICE_CONFORMANCE_ADDR` (default
/// 127.0.0.1:18000) for `SERVICE_CONFORMANCE_SECS` (default 300), so
/// `tests/conformance/conformance.py --partition '' --address ...` can drive it.
/// `cargo test --test it -- --ignored --nocapture serve_for_conformance`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn serve_for_conformance() {
    let env = mock().await;
    let addr: std::net::SocketAddr = std::env::var("SERVICE_CONFORMANCE_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:18000".into())
        .parse()
        .unwrap();
    let secs: u64 = std::env::var("SERVICE_CONFORMANCE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let g = tokio::net::TcpListener::bind(addr).await.unwrap();
    let m = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!(
        "connector on {addr}, mock-slurmrestd on {}",
        env.handle.url()
    );
    serve_with(
        deployment(&env),
        g,
        m,
        tokio::time::sleep(Duration::from_secs(secs)),
    )
    .await
    .unwrap();
    env.handle.shutdown().await;
}
