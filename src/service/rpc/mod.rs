//! The RPC edge: the gRPC services over [`Connector`](super::Connector), the listeners and their
//! TLS, health and metrics endpoints, and the Prometheus metrics themselves.
//!
//! - `handler`: the task RPCs of both protocols, written once over a protocol's `Wire`
//!   (`handler::Wire`): each a call into the `Connector`, timed and counted, its error mapped to a
//!   `Status` once.
//! - `grpc`: Flyte 2's wire (`flyteidl2.connector`), served as `AsyncConnectorService`, and its
//!   `ConnectorMetadataService`.
//! - `flyte1`: Flyte 1's wire (`flyteidl.admin`), served as `AsyncAgentService` on the same port,
//!   and its `AgentMetadataService`.
//! - `serve`: the listeners (gRPC, `/metrics`, `/healthz`), the per-cluster background tasks,
//!   the drain on SIGTERM.
//! - `tasks`: serve's long-running tasks by name, stopped together by one token.
//! - `tls`: the server's certificate, reloaded when its files change.
//! - `metrics`: the Prometheus registry.
//!
//! May import everything in `service`; nothing in `service` but `mod.rs` imports it.

pub(crate) mod flyte1;
pub(crate) mod grpc;
pub(crate) mod handler;
pub mod metrics;
pub(crate) mod serve;
mod tasks;
pub(crate) mod tls;
