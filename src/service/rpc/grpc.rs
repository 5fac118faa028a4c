//! The tonic services of Flyte 2: AsyncConnectorService and ConnectorMetadataService
//! (Flyte 1's, over the same [`Grpc`], are in `flyte1.rs`).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};

use crate::proto::connector::async_connector_service_server::AsyncConnectorService;
use crate::proto::connector::connector_metadata_service_server::ConnectorMetadataService;
use crate::proto::connector::{
    Connector, CreateTaskRequest, CreateTaskResponse, DeleteTaskRequest, DeleteTaskResponse,
    GetConnectorRequest, GetConnectorResponse, GetTaskLogsRequest, GetTaskLogsResponse,
    GetTaskLogsResponseBody, GetTaskMetricsRequest, GetTaskMetricsResponse, GetTaskRequest,
    GetTaskResponse, ListConnectorsRequest, ListConnectorsResponse, TaskCategory,
    get_task_logs_response,
};
use crate::proto::logs::dataplane::{LogLine, LogLineOriginator};

use crate::service::Connector as State;

pub const CONNECTOR_NAME: &str = "Slurm Connector";
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

#[derive(Clone)]
pub struct Grpc(pub Arc<State>);

fn category(c: Option<&TaskCategory>) -> String {
    task_type_label(c.map(|c| c.name.as_str()))
}

/// The task type a request's category names, as the per-RPC metrics label it (both protocols).
pub(super) fn task_type_label(name: Option<&str>) -> String {
    name.filter(|n| !n.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// GetConnector / GetAgent: this server has one, [`CONNECTOR_NAME`]; another name is NOT_FOUND.
pub(super) fn check_name(asked: &str, what: &str) -> Result<(), Status> {
    if asked == CONNECTOR_NAME {
        return Ok(());
    }
    Err(Status::not_found(format!(
        "no {what} named `{asked}`; this server has `{CONNECTOR_NAME}`"
    )))
}

impl Grpc {
    /// The one place an operation's outcome becomes the wire's: its `Status`, counted in the
    /// per-RPC metrics (latency, code) under the task type.
    pub(super) fn finish<T>(
        &self,
        task_type: &str,
        op: &str,
        started: Instant,
        r: Result<T, crate::service::ServiceError>,
    ) -> Result<T, Status> {
        let r = r.map_err(Status::from);
        self.0.metrics.observe(
            task_type,
            op,
            started.elapsed(),
            r.as_ref().err().map(|s| s.code()),
        );
        r
    }
}

type LogStream = Pin<Box<dyn futures::Stream<Item = Result<GetTaskLogsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AsyncConnectorService for Grpc {
    async fn create_task(
        &self,
        req: Request<CreateTaskRequest>,
    ) -> Result<Response<CreateTaskResponse>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
        let task_type = req
            .template
            .as_ref()
            .map(|t| t.r#type.clone())
            .unwrap_or_default();
        let r = self.finish(&task_type, "create", started, self.0.create(&req).await);
        if let Err(s) = &r {
            tracing::warn!(task_type, code = ?s.code(), message = s.message(), "CreateTask failed");
        }
        r.map(|meta| {
            Response::new(CreateTaskResponse {
                resource_meta: meta,
            })
        })
    }

    async fn get_task(
        &self,
        req: Request<GetTaskRequest>,
    ) -> Result<Response<GetTaskResponse>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let r = self.finish(
            &task_type,
            "get",
            started,
            self.0.get(&req.resource_meta).await,
        );
        r.map(|resource| {
            Response::new(GetTaskResponse {
                resource: Some(resource),
            })
        })
    }

    async fn delete_task(
        &self,
        req: Request<DeleteTaskRequest>,
    ) -> Result<Response<DeleteTaskResponse>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let token = req
            .connection
            .as_ref()
            .map(|c| c.secrets.clone())
            .unwrap_or_default();
        let r = self.0.delete(&req.resource_meta, &token).await;
        let r = self.finish(&task_type, "delete", started, r);
        r.map(|()| Response::new(DeleteTaskResponse {}))
    }

    async fn get_task_metrics(
        &self,
        req: Request<GetTaskMetricsRequest>,
    ) -> Result<Response<GetTaskMetricsResponse>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let r = self.0.task_metrics(&req).await;
        let r = self.finish(&task_type, "get_metrics", started, r);
        r.map(|results| Response::new(GetTaskMetricsResponse { results }))
    }

    type GetTaskLogsStream = LogStream;

    async fn get_task_logs(
        &self,
        req: Request<GetTaskLogsRequest>,
    ) -> Result<Response<LogStream>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let r = self.0.logs(&req.resource_meta, req.lines).await;
        let r = self.finish(&task_type, "get_logs", started, r);
        let lines = r?;
        let body = GetTaskLogsResponse {
            part: Some(get_task_logs_response::Part::Body(
                GetTaskLogsResponseBody {
                    results: lines.clone(),
                    lines: lines
                        .into_iter()
                        .map(|message| LogLine {
                            timestamp: None,
                            message,
                            originator: LogLineOriginator::User as i32,
                            short_pod_name: String::new(),
                        })
                        .collect(),
                },
            )),
        };
        let stream = futures::stream::iter(vec![Ok(body)]);
        Ok(Response::new(Box::pin(stream) as LogStream))
    }
}

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
