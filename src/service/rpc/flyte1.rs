//! Flyte 1's agent protocol on the same port: `flyteidl.service.AsyncAgentService` and
//! `AgentMetadataService` (flyteidl 1.16), for flytepropeller's agent plugin. Its [`Wire`] (the
//! messages of `flyteidl.admin`, converted at the seam, `wire/flyte1.rs`) is served by the same
//! handlers as Flyte 2's (`handler.rs`), so both protocols share every operation of the
//! [`Connector`](crate::service::Connector) and the per-RPC metrics (counted under the task
//! type).

use std::collections::HashMap;

use tonic::{Request, Response, Status};

use crate::proto::flyte1::admin::{
    self as v1, GetAgentRequest, GetAgentResponse, ListAgentsRequest, ListAgentsResponse,
    LogLineOriginator,
};
use crate::proto::flyte1::core::ExecutionMetricResult;
use crate::proto::flyte1::service::agent_metadata_service_server::AgentMetadataService;
use crate::proto::flyte1::service::async_agent_service_server::AsyncAgentService;
use crate::service::wire::flyte1;
use crate::staging::logs::PageLine;

use super::handler::{
    CONNECTOR_NAME, Grpc, Protocol, Wire, async_service, check_name, wire_messages,
};

/// Flyte 1's messages.
pub(super) struct Flyte1;

impl Wire for Flyte1 {
    const PROTOCOL: Protocol = Protocol::Flyte1;

    wire_messages! {
        messages: v1,
        request: flyte1::request,
        resource: flyte1::resource,
        metric: ExecutionMetricResult,
        originator: LogLineOriginator,
        lines: structured_lines,
        line: log_line,
    }

    /// None: Flyte 1's request has no connection, so the job's own user cancels it.
    fn secrets(_: &v1::DeleteTaskRequest) -> HashMap<String, String> {
        HashMap::new()
    }
}

/// Flyte 1's LogLine has no field for the stream: it leads the message.
fn log_line(l: PageLine, originator: i32) -> v1::LogLine {
    let message = l.plain();
    v1::LogLine {
        originator,
        message,
        timestamp: None,
    }
}

async_service!(AsyncAgentService, Flyte1, v1);

/// An answer of the metadata service.
type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl AgentMetadataService for Grpc {
    async fn get_agent(&self, req: Request<GetAgentRequest>) -> Answer<GetAgentResponse> {
        check_name(&req.get_ref().name, "agent")?;
        let agent = Some(flyte1::agent(CONNECTOR_NAME));
        Ok(Response::new(GetAgentResponse { agent }))
    }

    async fn list_agents(&self, _: Request<ListAgentsRequest>) -> Answer<ListAgentsResponse> {
        let agents = vec![flyte1::agent(CONNECTOR_NAME)];
        Ok(Response::new(ListAgentsResponse { agents }))
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
