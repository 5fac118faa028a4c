//! The RPC edge: the gRPC services over [`Connector`](super::Connector), the listeners and their
//! TLS, health and metrics endpoints, and the Prometheus metrics themselves.
//!
//! - `grpc`: `flyteidl2.connector.AsyncConnectorService` and `ConnectorMetadataService`, each
//!   handler a call into the `Connector` and its error mapped to a `Status` once.
//! - `flyte1`: Flyte 1's `flyteidl.service.AsyncAgentService` and `AgentMetadataService` on the
//!   same port, over the same `Connector` (its messages converted in `wire/flyte1.rs`).
//! - `serve`: the listeners (gRPC, `/metrics`, `/healthz`), the per-cluster background tasks,
//!   the drain on SIGTERM.
//! - `tasks`: serve's long-running tasks by name, stopped together by one token.
//! - `tls`: the server's certificate, reloaded when its files change.
//! - `metrics`: the Prometheus registry.
//!
//! May import everything in `service`; nothing in `service` but `mod.rs` imports it.

pub(crate) mod flyte1;
pub(crate) mod grpc;
pub mod metrics;
pub(crate) mod serve;
mod tasks;
pub(crate) mod tls;
