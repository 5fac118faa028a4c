//! The tonic services of Flyte 2: AsyncConnectorService and ConnectorMetadataService
//! (Flyte 1's, over the same [`Grpc`], are in `flyte1.rs`).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use Protocol::Flyte2 as F2;

use tonic::{Request, Response, Status};

use crate::proto::connector::async_connector_service_server::AsyncConnectorService;
use crate::proto::connector::connector_metadata_service_server::ConnectorMetadataService;
use crate::proto::connector::{
    Connector, CreateTaskRequest, CreateTaskResponse, DeleteTaskRequest, DeleteTaskResponse,
    GetConnectorRequest, GetConnectorResponse, GetTaskLogsRequest, GetTaskLogsResponse,
    GetTaskLogsResponseBody, GetTaskLogsResponseHeader, GetTaskMetricsRequest,
    GetTaskMetricsResponse, GetTaskRequest, GetTaskResponse, ListConnectorsRequest,
    ListConnectorsResponse, TaskCategory, get_task_logs_response,
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

/// The operations of either protocol, as the per-RPC metrics label them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Create,
    Get,
    Delete,
    Metrics,
    Logs,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Get => "get",
            Op::Delete => "delete",
            Op::Metrics => "get_metrics",
            Op::Logs => "get_logs",
        }
    }
}

/// Which front end a call came through, for the log line of a failed CreateTask.
#[derive(Clone, Copy, Debug)]
pub(super) enum Protocol {
    Flyte2,
    Flyte1,
}

impl Grpc {
    /// The one place an operation of either protocol meets the wire: timed, its outcome counted
    /// in the per-RPC metrics (latency, code) under the task type, its error mapped to a `Status`
    /// once. A failed CreateTask is logged too: it is the call a user's run waits on, and its
    /// message is all the backend shows. Each handler is then only its conversions.
    pub(super) async fn handle<T>(
        &self,
        protocol: Protocol,
        task_type: &str,
        op: Op,
        work: impl Future<Output = Result<T, crate::service::ServiceError>>,
    ) -> Result<T, Status> {
        let started = Instant::now();
        let r = work.await.map_err(Status::from);
        self.0.metrics.observe(
            task_type,
            op.label(),
            started.elapsed(),
            r.as_ref().err().map(|s| s.code()),
        );
        if let (Op::Create, Err(s)) = (op, &r) {
            tracing::warn!(task_type, ?protocol, code = ?s.code(), message = s.message(), "CreateTask failed");
        }
        r
    }

    /// CreateTask of either protocol: the request its front end converted (a conversion error
    /// is the caller's: INVALID_ARGUMENT), created within the caller's deadline `by`, through
    /// [`Grpc::handle`]; the task's `resource_meta`.
    pub(super) async fn create<E: std::fmt::Display>(
        &self,
        protocol: Protocol,
        task_type: &str,
        request: Result<crate::service::TaskRequest, E>,
        by: Option<Instant>,
    ) -> Result<Vec<u8>, Status> {
        let create = async {
            let request =
                request.map_err(|e| crate::service::ServiceError::Invalid(e.to_string()))?;
            self.0.create_task(request, by).await
        };
        self.handle(protocol, task_type, Op::Create, create).await
    }
}

/// What CreateTask keeps for the answer's way back from the caller's deadline.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// When a CreateTask must have its answer on the way: the call's `grpc-timeout` (Flyte 1's
/// agent client sets 3 s, Flyte 2's 10 s) from its arrival, less [`ANSWER_MARGIN`]; `None`
/// without one. Read here because tonic enforces the deadline by dropping the handler, which
/// would turn a slow submit into DEADLINE_EXCEEDED instead of a deferred answer.
pub(super) fn answer_by<T>(req: &Request<T>) -> Option<Instant> {
    let timeout = grpc_timeout(req.metadata().get("grpc-timeout")?.to_str().ok()?)?;
    Some(Instant::now() + timeout.saturating_sub(ANSWER_MARGIN))
}

/// A `grpc-timeout` value: at most 8 digits and a unit (gRPC over HTTP/2: `H M S m u n`).
/// tonic parses it only privately (`transport::service::grpc_timeout`).
fn grpc_timeout(v: &str) -> Option<Duration> {
    let (n, unit) = v.split_at(v.len().checked_sub(1)?);
    if n.is_empty() || n.len() > 8 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

type LogStream = Pin<Box<dyn futures::Stream<Item = Result<GetTaskLogsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AsyncConnectorService for Grpc {
    async fn create_task(
        &self,
        req: Request<CreateTaskRequest>,
    ) -> Result<Response<CreateTaskResponse>, Status> {
        let by = answer_by(&req);
        let req = req.into_inner();
        let task_type = req
            .template
            .as_ref()
            .map(|t| t.r#type.clone())
            .unwrap_or_default();
        let request = crate::service::flyte2_request(&req);
        let meta = self.create(F2, &task_type, request, by).await?;
        Ok(Response::new(CreateTaskResponse {
            resource_meta: meta,
        }))
    }

    async fn get_task(
        &self,
        req: Request<GetTaskRequest>,
    ) -> Result<Response<GetTaskResponse>, Status> {
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let resource = self
            .handle(F2, &task_type, Op::Get, self.0.get(&req.resource_meta))
            .await?;
        Ok(Response::new(GetTaskResponse {
            resource: Some(resource),
        }))
    }

    async fn delete_task(
        &self,
        req: Request<DeleteTaskRequest>,
    ) -> Result<Response<DeleteTaskResponse>, Status> {
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let token = req
            .connection
            .as_ref()
            .map(|c| c.secrets.clone())
            .unwrap_or_default();
        let delete = self.0.delete(&req.resource_meta, &token);
        self.handle(F2, &task_type, Op::Delete, delete).await?;
        Ok(Response::new(DeleteTaskResponse {}))
    }

    async fn get_task_metrics(
        &self,
        req: Request<GetTaskMetricsRequest>,
    ) -> Result<Response<GetTaskMetricsResponse>, Status> {
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let results = self
            .handle(F2, &task_type, Op::Metrics, self.0.task_metrics(&req))
            .await?;
        Ok(Response::new(GetTaskMetricsResponse { results }))
    }

    type GetTaskLogsStream = LogStream;

    async fn get_task_logs(
        &self,
        req: Request<GetTaskLogsRequest>,
    ) -> Result<Response<LogStream>, Status> {
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let logs = self.0.logs(&req.resource_meta, req.lines, &req.token);
        let page = self.handle(F2, &task_type, Op::Logs, logs).await?;
        // The header first (the token for the next page), then the page's lines.
        let header = GetTaskLogsResponse {
            part: Some(get_task_logs_response::Part::Header(
                GetTaskLogsResponseHeader { token: page.token },
            )),
        };
        let body = GetTaskLogsResponse {
            part: Some(get_task_logs_response::Part::Body(
                GetTaskLogsResponseBody {
                    results: page.lines.iter().map(|l| l.plain()).collect(),
                    lines: page
                        .lines
                        .into_iter()
                        .map(|l| LogLine {
                            timestamp: None,
                            originator: if l.system {
                                LogLineOriginator::System
                            } else {
                                LogLineOriginator::User
                            } as i32,
                            // The stream (`stdout`, `element 3 stderr`, `stdout rank 1`): a
                            // Slurm task has no pod, and this is what tells its lines apart.
                            short_pod_name: l.stream,
                            message: l.text,
                        })
                        .collect(),
                },
            )),
        };
        let stream = futures::stream::iter(vec![Ok(header), Ok(body)]);
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

#[cfg(test)]
mod tests {
    use super::grpc_timeout;
    use std::time::Duration;

    #[test]
    fn grpc_timeout_is_read_as_the_protocol_writes_it() {
        assert_eq!(grpc_timeout("2999m"), Some(Duration::from_millis(2999)));
        assert_eq!(grpc_timeout("10S"), Some(Duration::from_secs(10)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout("5u"), Some(Duration::from_micros(5)));
        for bad in ["", "S", "123456789S", "10s", "1.5S", "-1S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
