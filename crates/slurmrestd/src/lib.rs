//! The slurmrestd transport: a client generated from slurmrestd's OpenAPI spec at build time
//! (progenitor, `build.rs`), JWT auth, and a typed facade over our own domain types. A crate of
//! its own, re-exported by slurm-connector as `slurm_connector::slurmrestd`.
//!
//! - [`client`]: the facade the connector calls (submit, batched states, cancel, ...).
//! - [`auth`]: static, file and minted (HS256) tokens; secrets that never print.
//! - [`types`] and [`JobDescription`]: the domain types, independent of API versions.
//! - [`convert`]: the one seam where generated types become domain types and back.
//! - [`transport`], [`retry`], [`error`], `classify`: per-request plumbing, backoff, errors and
//!   how every kind of answer becomes one.
//! - `generated`: the generated code, one module per API version; private, so nothing outside
//!   this crate can touch it.
//! - [`exchange`]: which daemon a request was for and how it ended, as metrics and alerts see it.
//! - [`version`]: the versions spoken, and [`errno`]: the Slurm error numbers acted on.

pub mod auth;
mod caller;
mod classify;
pub mod client;
pub mod convert;
mod dialect;
pub mod errno;
pub mod error;
pub mod exchange;
mod generated;
pub mod job_description;
pub mod retry;
pub mod transport;
pub mod types;
pub mod users;
pub mod version;

pub use auth::{Auth, AuthError, Secret};
pub use client::{Client, ClientConfig, Negotiated, RequestObserver};
pub use error::ClientError;
pub use exchange::{Daemon, Exchange, Reply};
pub use job_description::JobDescription;
pub use retry::RetryPolicy;
pub use types::{
    ArrayMembership, BaseState, CancelOutcome, ClusterConf, Diag, ElementState, ExitCode, JobId,
    JobInfo, JobRef, JobState, JobUsage, Partition, Ping, ServerInfo, SlurmError, States, Tres,
};
pub use version::ApiVersion;

/// The data_parser versions this crate has a client for, comma-separated, oldest first (build.rs's
/// list, which a test in `convert/tests` checks names every [`ApiVersion`]).
pub const API_VERSIONS: &str = env!("SLURMRESTD_API_VERSIONS");
