//! Flyte 1's agent protocol on the same port: `flyteidl.service.AsyncAgentService` and
//! `AgentMetadataService` (flyteidl 1.16), for flytepropeller's agent plugin. Each handler
//! converts at the seam (`wire/flyte1.rs`) and calls the same [`Connector`](crate::service::Connector)
//! operation the Flyte 2 handler calls, so both protocols share the tracker, staging, identity
//! rules, replicas protocol, failure classes and metrics (counted under the task type).

use std::pin::Pin;
use tonic::{Request, Response, Status};

use crate::proto::connector as v2;
use crate::proto::flyte1::admin::{
    CreateTaskRequest, CreateTaskResponse, DeleteTaskRequest, DeleteTaskResponse, GetAgentRequest,
    GetAgentResponse, GetTaskLogsRequest, GetTaskLogsResponse, GetTaskLogsResponseBody,
    GetTaskLogsResponseHeader, GetTaskMetricsRequest, GetTaskMetricsResponse, GetTaskRequest,
    GetTaskResponse, ListAgentsRequest, ListAgentsResponse, LogLine, LogLineOriginator,
    TaskCategory, get_task_logs_response,
};
use crate::proto::flyte1::core::ExecutionMetricResult;
use crate::proto::flyte1::service::agent_metadata_service_server::AgentMetadataService;
use crate::proto::flyte1::service::async_agent_service_server::AsyncAgentService;
use crate::service::wire::flyte1;

use super::grpc::Protocol::Flyte1 as F1;
use super::grpc::{CONNECTOR_NAME, Grpc, Op, answer_by, check_name, task_type_label};

fn category(c: Option<&TaskCategory>) -> String {
    task_type_label(c.map(|c| c.name.as_str()))
}

type LogStream = Pin<Box<dyn futures::Stream<Item = Result<GetTaskLogsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AsyncAgentService for Grpc {
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
        let meta = self
            .create(F1, &task_type, flyte1::request(&req), by)
            .await?;
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
            .handle(F1, &task_type, Op::Get, self.0.get(&req.resource_meta))
            .await?;
        Ok(Response::new(GetTaskResponse {
            resource: Some(flyte1::resource(resource)),
        }))
    }

    async fn delete_task(
        &self,
        req: Request<DeleteTaskRequest>,
    ) -> Result<Response<DeleteTaskResponse>, Status> {
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        // Flyte 1's request has no connection: the job's own user cancels it.
        let no_token = Default::default();
        let delete = self.0.delete(&req.resource_meta, &no_token);
        self.handle(F1, &task_type, Op::Delete, delete).await?;
        Ok(Response::new(DeleteTaskResponse {}))
    }

    async fn get_task_metrics(
        &self,
        req: Request<GetTaskMetricsRequest>,
    ) -> Result<Response<GetTaskMetricsResponse>, Status> {
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let v2_req = v2::GetTaskMetricsRequest {
            resource_meta: req.resource_meta,
            queries: req.queries,
            start_time: req.start_time,
            end_time: req.end_time,
            step: req.step,
            task_category: None,
        };
        let results = self
            .handle(F1, &task_type, Op::Metrics, self.0.task_metrics(&v2_req))
            .await?;
        Ok(Response::new(GetTaskMetricsResponse {
            results: results
                .into_iter()
                .map(|m| ExecutionMetricResult {
                    metric: m.metric,
                    data: m.data,
                })
                .collect(),
        }))
    }

    type GetTaskLogsStream = LogStream;

    async fn get_task_logs(
        &self,
        req: Request<GetTaskLogsRequest>,
    ) -> Result<Response<LogStream>, Status> {
        let req = req.into_inner();
        let task_type = category(req.task_category.as_ref());
        let logs = self.0.logs(&req.resource_meta, req.lines, &req.token);
        let page = self.handle(F1, &task_type, Op::Logs, logs).await?;
        let header = GetTaskLogsResponse {
            part: Some(get_task_logs_response::Part::Header(
                GetTaskLogsResponseHeader { token: page.token },
            )),
        };
        #[allow(deprecated)]
        let body = GetTaskLogsResponse {
            part: Some(get_task_logs_response::Part::Body(
                GetTaskLogsResponseBody {
                    results: page.lines.iter().map(|l| l.plain()).collect(),
                    // Flyte 1's LogLine has no field for the stream: it leads the message.
                    structured_lines: page
                        .lines
                        .into_iter()
                        .map(|l| LogLine {
                            timestamp: None,
                            message: l.plain(),
                            originator: if l.system {
                                LogLineOriginator::System
                            } else {
                                LogLineOriginator::User
                            } as i32,
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
impl AgentMetadataService for Grpc {
    async fn get_agent(
        &self,
        req: Request<GetAgentRequest>,
    ) -> Result<Response<GetAgentResponse>, Status> {
        check_name(&req.get_ref().name, "agent")?;
        Ok(Response::new(GetAgentResponse {
            agent: Some(flyte1::agent(CONNECTOR_NAME)),
        }))
    }

    async fn list_agents(
        &self,
        _req: Request<ListAgentsRequest>,
    ) -> Result<Response<ListAgentsResponse>, Status> {
        Ok(Response::new(ListAgentsResponse {
            agents: vec![flyte1::agent(CONNECTOR_NAME)],
        }))
    }
}

/// Flyte ≥ 1.15's `connector-service` plugin calls `flyteidl.service.AsyncConnectorService`,
/// whose messages are not the agent protocol's: not served. Without this every call would be a
/// bare UNIMPLEMENTED that names nothing to fix; with it, the answer says which plugin to route
/// the task types to instead (`docs/deploy.md`, "Routing Flyte's task types").
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Flyte1ConnectorRefusal;

/// What every call of [`Flyte1ConnectorRefusal`] answers.
pub(crate) const FLYTE1_CONNECTOR_REFUSAL: &str = "this connector serves Flyte 1 through \
    flyteidl.service.AsyncAgentService, not AsyncConnectorService: route the task types (slurm_fn, \
    slurm) to flytepropeller's `agent-service` plugin, not `connector-service` \
    (deploy/flyte/values-flyte1-core.yaml)";

impl tonic::server::NamedService for Flyte1ConnectorRefusal {
    const NAME: &'static str = "flyteidl.service.AsyncConnectorService";
}

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>>
    for Flyte1ConnectorRefusal
{
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        tracing::warn!(path = %req.uri().path(), "Flyte 1 connector-service call refused: route to agent-service");
        std::future::ready(Ok(
            Status::unimplemented(FLYTE1_CONNECTOR_REFUSAL).into_http()
        ))
    }
}
