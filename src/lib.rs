//! slurm-connector: runs Flyte 2 tasks on Slurm through slurmrestd (REST + JWT), no SSH.
//!
//! One folder per concern:
//! - [`slurmrestd`]: the transport — the client generated from slurmrestd's OpenAPI spec, JWT auth,
//!   and the typed facade over our own domain types (the only module that sees generated types).
//! - [`render`]: job rendering — a Flyte task becomes a slurmrestd JSON job description (pure, no I/O).
//! - [`tracker`]: state tracking — one batched `jobs/state` request per poll tick per cluster.
//! - [`service`]: the gRPC service Flyte's backend talks to.
//! - [`staging`]: outputs and logs from the cluster's shared storage to object storage.
//! - [`config`]: deployment configuration (environment and config file).
//! - [`proto`]: the flyteidl2 connector protocol subset, compiled from `proto/`.

pub mod cli;
pub mod config;
pub mod proto;
pub mod render;
pub mod service;
pub mod slurmrestd;
pub mod staging;
pub mod tracker;
