//! Flyte 2's protocol: its [`Wire`] (the messages of `flyteidl2.connector`), served as
//! AsyncConnectorService by the handlers both protocols share (`handler.rs`), and its
//! ConnectorMetadataService. Flyte 1's is in `flyte1.rs`.

use std::collections::HashMap;

use tonic::{Request, Response, Status};

use crate::proto::connector::async_connector_service_server::AsyncConnectorService;
use crate::proto::connector::connector_metadata_service_server::ConnectorMetadataService;
use crate::proto::connector::{
    self as v2, Connector, GetConnectorRequest, GetConnectorResponse, ListConnectorsRequest,
    ListConnectorsResponse, TaskCategory,
};
use crate::proto::core::ExecutionMetricResult;
use crate::proto::logs::dataplane::{LogLine, LogLineOriginator};
use crate::service::wire::convert;
use crate::staging::logs::PageLine;

use super::handler::{
    CONNECTOR_NAME, Grpc, Protocol, Wire, async_service, check_name, wire_messages,
};

pub const TASK_TYPES: &[&str] = &["slurm", "slurm_script"];

/// What this server serves: `slurm`, `slurm_script`, and `clustered-task` (version 1, as the
/// SDK's ClusteredTaskTemplate writes `task_type_version`) when the deployment enables it.
pub fn connector(clustered: bool) -> Connector {
    let mut categories: Vec<TaskCategory> = TASK_TYPES
        .iter()
        .map(|t| TaskCategory {
            name: t.to_string(),
            version: 0,
        })
        .collect();
    if clustered {
        categories.push(TaskCategory {
            name: crate::render::CLUSTERED_TASK_TYPE.to_string(),
            version: 1,
        });
    }
    Connector {
        name: CONNECTOR_NAME.to_string(),
        supported_task_categories: categories,
    }
}

/// Flyte 2's messages.
pub(super) struct Flyte2;

impl Wire for Flyte2 {
    const PROTOCOL: Protocol = Protocol::Flyte2;

    wire_messages! {
        messages: v2,
        request: convert::request,
        resource: convert::resource,
        metric: ExecutionMetricResult,
        originator: LogLineOriginator,
        lines: lines,
        line: log_line,
    }

    /// The task's own credentials, if its connection carries them.
    fn secrets(r: &v2::DeleteTaskRequest) -> HashMap<String, String> {
        let connection = r.connection.as_ref();
        connection.map(|c| c.secrets.clone()).unwrap_or_default()
    }
}

/// The stream (`stdout`, `element 3 stderr`, `stdout rank 1`) is the line's `short_pod_name`: a
/// Slurm task has no pod, and this is what tells its lines apart.
fn log_line(l: PageLine, originator: i32) -> LogLine {
    LogLine {
        short_pod_name: l.stream,
        message: l.text,
        originator,
        timestamp: None,
    }
}

async_service!(AsyncConnectorService, Flyte2, v2);

#[tonic::async_trait]
impl ConnectorMetadataService for Grpc {
    async fn get_connector(
        &self,
        req: Request<GetConnectorRequest>,
    ) -> Result<Response<GetConnectorResponse>, Status> {
        check_name(&req.get_ref().name, "connector")?;
        Ok(Response::new(GetConnectorResponse {
            connector: Some(connector(self.0.deployment.clustered.enabled)),
        }))
    }

    async fn list_connectors(
        &self,
        _req: Request<ListConnectorsRequest>,
    ) -> Result<Response<ListConnectorsResponse>, Status> {
        Ok(Response::new(ListConnectorsResponse {
            connectors: vec![connector(self.0.deployment.clustered.enabled)],
        }))
    }
}
