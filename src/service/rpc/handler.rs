//! The task RPCs of both Flyte protocols, written once. Each handler (`Grpc::serve_*`) takes
//! the connector's types and calls its [`Connector`] operation within [`Grpc::handle`] (timed,
//! counted, its error mapped to a `Status` once). A protocol's [`Wire`] holds its conversions
//! (implemented in `grpc.rs` for Flyte 2 and `flyte1.rs` for Flyte 1, mostly by
//! [`wire_messages!`]); [`async_service!`] makes its tonic service: each RPC reads its request,
//! calls the handler and converts the answer once, so a call goes down and comes back once.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Status};

use crate::service::report::logs::LogPage;
use crate::service::wire::TaskRequest;
use crate::service::wire::status::{MetricResult, MetricsQuery, TaskStatus};
use crate::service::{Connector, ServiceError};

/// The name this server answers to, as a Flyte 2 connector and as a Flyte 1 agent.
pub const CONNECTOR_NAME: &str = "Slurm Connector";

/// Both protocols' gRPC services, over one [`Connector`].
#[derive(Clone)]
pub struct Grpc(pub Arc<Connector>);

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
        work: impl Future<Output = Result<T, ServiceError>>,
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

/// The stream GetTaskLogs answers: the page's header (the next token), then its lines.
pub(super) type LogStream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

/// One Flyte protocol's conversions between its messages and the connector's types.
pub(super) trait Wire {
    const PROTOCOL: Protocol;
    type CreateTaskRequest: Send;
    type CreateTaskResponse;
    type GetTaskRequest;
    type GetTaskResponse;
    type DeleteTaskRequest;
    type DeleteTaskResponse;
    type GetTaskMetricsRequest;
    type GetTaskMetricsResponse;
    type GetTaskLogsRequest;
    type GetTaskLogsResponse;

    /// CreateTask's template's task type (for the metrics), and the request in the connector's
    /// terms (an error is the caller's: INVALID_ARGUMENT). This and the rest but `secrets` are
    /// [`wire_messages!`]'s.
    fn task_request(r: &Self::CreateTaskRequest) -> (String, Result<TaskRequest, String>);
    fn created(resource_meta: Vec<u8>) -> Self::CreateTaskResponse;
    fn status(s: TaskStatus) -> Self::GetTaskResponse;
    /// DeleteTask's credentials, when its wire carries any.
    fn secrets(r: &Self::DeleteTaskRequest) -> HashMap<String, String>;
    fn metrics(results: Vec<MetricResult>) -> Self::GetTaskMetricsResponse;
    /// A page of logs as the wire's two messages: the header, then the body.
    fn log_page(page: LogPage) -> [Self::GetTaskLogsResponse; 2];
}

/// What every call after CreateTask names, read from its wire: the protocol, the task type (the
/// request's category: the per-RPC metrics count the call under it) and the `resource_meta`.
pub(super) struct Call<'a> {
    pub protocol: Protocol,
    pub task_type: String,
    pub resource_meta: &'a [u8],
}

impl<'a> Call<'a> {
    pub(super) fn new(protocol: Protocol, category: Option<&str>, meta: &'a [u8]) -> Call<'a> {
        Call {
            protocol,
            task_type: task_type_label(category),
            resource_meta: meta,
        }
    }
}

/// The task type a request's category names, as the per-RPC metrics label it.
fn task_type_label(name: Option<&str>) -> String {
    name.filter(|n| !n.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// The task RPCs over the connector's types, the same for both protocols: each its `Connector`
/// operation within [`Grpc::handle`]. The wire's request is read before, its answer made after,
/// by the protocol's service ([`async_service!`]).
impl Grpc {
    pub(super) async fn serve_create(
        &self,
        protocol: Protocol,
        task_type: &str,
        request: Result<TaskRequest, String>,
        by: Option<Instant>,
    ) -> Result<Vec<u8>, Status> {
        let create = async {
            let request = request.map_err(ServiceError::Invalid)?;
            self.0.create_task(request, by).await
        };
        self.handle(protocol, task_type, Op::Create, create).await
    }

    pub(super) async fn serve_get(&self, call: Call<'_>) -> Result<TaskStatus, Status> {
        let get = self.0.get(call.resource_meta);
        self.handle(call.protocol, &call.task_type, Op::Get, get)
            .await
    }

    pub(super) async fn serve_delete(
        &self,
        call: Call<'_>,
        secrets: &HashMap<String, String>,
    ) -> Result<(), Status> {
        let delete = self.0.delete(call.resource_meta, secrets);
        self.handle(call.protocol, &call.task_type, Op::Delete, delete)
            .await
    }

    pub(super) async fn serve_metrics(
        &self,
        call: Call<'_>,
        query: &MetricsQuery,
    ) -> Result<Vec<MetricResult>, Status> {
        let metrics = self.0.task_metrics(call.resource_meta, query);
        self.handle(call.protocol, &call.task_type, Op::Metrics, metrics)
            .await
    }

    pub(super) async fn serve_logs(
        &self,
        call: Call<'_>,
        lines: u64,
        token: &str,
    ) -> Result<LogPage, Status> {
        let logs = self.0.logs(call.resource_meta, lines, token);
        self.handle(call.protocol, &call.task_type, Op::Logs, logs)
            .await
    }
}

/// The parts of a protocol's [`Wire`] impl that read the same in both: its message types (module
/// `$m`), CreateTask's request and answer (`$request`, `$resource`: its seam's conversions),
/// GetTaskMetrics' results (`$metric`: its `ExecutionMetricResult`), and a page of logs, its
/// lines in the body's field `$lines`, each made by `$line` (a line and its originator, of the
/// wire's enum `$originator`).
macro_rules! wire_messages {
    (
        messages: $m:ident,
        request: $request:path,
        resource: $resource:path,
        metric: $metric:ident,
        originator: $originator:ident,
        lines: $lines:ident,
        line: $line:path $(,)?
    ) => {
        type CreateTaskRequest = $m::CreateTaskRequest;
        type CreateTaskResponse = $m::CreateTaskResponse;
        type GetTaskRequest = $m::GetTaskRequest;
        type GetTaskResponse = $m::GetTaskResponse;
        type DeleteTaskRequest = $m::DeleteTaskRequest;
        type DeleteTaskResponse = $m::DeleteTaskResponse;
        type GetTaskMetricsRequest = $m::GetTaskMetricsRequest;
        type GetTaskMetricsResponse = $m::GetTaskMetricsResponse;
        type GetTaskLogsRequest = $m::GetTaskLogsRequest;
        type GetTaskLogsResponse = $m::GetTaskLogsResponse;

        fn task_request(
            r: &$m::CreateTaskRequest,
        ) -> (String, Result<$crate::service::wire::TaskRequest, String>) {
            let task_type = r.template.as_ref().map(|t| t.r#type.clone());
            let request = $request(r).map_err(|e| e.to_string());
            (task_type.unwrap_or_default(), request)
        }

        fn created(resource_meta: Vec<u8>) -> $m::CreateTaskResponse {
            $m::CreateTaskResponse { resource_meta }
        }

        fn status(s: $crate::service::wire::status::TaskStatus) -> $m::GetTaskResponse {
            $m::GetTaskResponse {
                resource: Some($resource(s)),
            }
        }

        fn metrics(
            results: Vec<$crate::service::wire::status::MetricResult>,
        ) -> $m::GetTaskMetricsResponse {
            let results = results.into_iter().map(|m| $metric {
                metric: m.metric,
                data: Some($crate::proto::json_to_struct(&m.data)),
            });
            $m::GetTaskMetricsResponse {
                results: results.collect(),
            }
        }

        fn log_page(page: $crate::service::report::logs::LogPage) -> [$m::GetTaskLogsResponse; 2] {
            use $m::get_task_logs_response::Part;
            let originator = |system: bool| {
                if system {
                    $originator::System
                } else {
                    $originator::User
                }
            };
            let header = $m::GetTaskLogsResponseHeader { token: page.token };
            // `results`, the lines as text, is deprecated in Flyte 1 and kept for its readers.
            #[allow(deprecated)]
            let body = $m::GetTaskLogsResponseBody {
                results: page.lines.iter().map(|l| l.plain()).collect(),
                $lines: page
                    .lines
                    .into_iter()
                    .map(|l| {
                        let o = originator(l.system) as i32;
                        $line(l, o)
                    })
                    .collect(),
            };
            [Part::Header(header), Part::Body(body)]
                .map(|part| $m::GetTaskLogsResponse { part: Some(part) })
        }
    };
}
pub(super) use wire_messages;

/// A protocol's tonic task service (`$service`) over the handlers above: each reads its request
/// (the messages of module `$m`, the same fields in both protocols), calls the handler, and
/// answers through `$wire`'s conversions, so a call goes down once and comes back once.
macro_rules! async_service {
    ($service:path, $wire:ty, $m:ident) => {
        #[tonic::async_trait]
        impl $service for $crate::service::rpc::handler::Grpc {
            async fn create_task(
                &self,
                req: tonic::Request<$m::CreateTaskRequest>,
            ) -> Result<tonic::Response<$m::CreateTaskResponse>, tonic::Status> {
                let by = $crate::service::rpc::handler::answer_by(&req);
                let (task_type, request) = <$wire as Wire>::task_request(req.get_ref());
                let protocol = <$wire as Wire>::PROTOCOL;
                let meta = self.serve_create(protocol, &task_type, request, by).await?;
                Ok(tonic::Response::new(<$wire as Wire>::created(meta)))
            }

            async fn get_task(
                &self,
                req: tonic::Request<$m::GetTaskRequest>,
            ) -> Result<tonic::Response<$m::GetTaskResponse>, tonic::Status> {
                let req = req.into_inner();
                let status = self.serve_get($crate::service::rpc::handler::async_service!(@call $wire, req)).await?;
                Ok(tonic::Response::new(<$wire as Wire>::status(status)))
            }

            async fn delete_task(
                &self,
                req: tonic::Request<$m::DeleteTaskRequest>,
            ) -> Result<tonic::Response<$m::DeleteTaskResponse>, tonic::Status> {
                let req = req.into_inner();
                let secrets = <$wire as Wire>::secrets(&req);
                let call = $crate::service::rpc::handler::async_service!(@call $wire, req);
                self.serve_delete(call, &secrets).await?;
                Ok(tonic::Response::new($m::DeleteTaskResponse {}))
            }

            async fn get_task_metrics(
                &self,
                req: tonic::Request<$m::GetTaskMetricsRequest>,
            ) -> Result<tonic::Response<$m::GetTaskMetricsResponse>, tonic::Status> {
                let req = req.into_inner();
                let query = $crate::service::wire::status::MetricsQuery {
                    queries: req.queries.clone(),
                    start: req.start_time.as_ref().map(|t| t.seconds),
                    end: req.end_time.as_ref().map(|t| t.seconds),
                };
                let call = $crate::service::rpc::handler::async_service!(@call $wire, req);
                let results = self.serve_metrics(call, &query).await?;
                Ok(tonic::Response::new(<$wire as Wire>::metrics(results)))
            }

            type GetTaskLogsStream =
                $crate::service::rpc::handler::LogStream<$m::GetTaskLogsResponse>;

            async fn get_task_logs(
                &self,
                req: tonic::Request<$m::GetTaskLogsRequest>,
            ) -> Result<tonic::Response<Self::GetTaskLogsStream>, tonic::Status> {
                let req = req.into_inner();
                let call = $crate::service::rpc::handler::async_service!(@call $wire, req);
                let page = self.serve_logs(call, req.lines, &req.token).await?;
                let answer = <$wire as Wire>::log_page(page).map(Ok);
                Ok(tonic::Response::new(Box::pin(futures::stream::iter(answer))))
            }
        }
    };
    (@call $wire:ty, $req:ident) => {
        $crate::service::rpc::handler::Call::new(
            <$wire as Wire>::PROTOCOL,
            $req.task_category.as_ref().map(|c| c.name.as_str()),
            &$req.resource_meta,
        )
    };
}
pub(super) use async_service;

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
