//! The slurmrestd transport: a client generated from slurmrestd's OpenAPI spec at build time
//! (progenitor, `build.rs`), JWT auth, and a typed facade over our own domain types.
//!
//! - [`client`]: the facade the rest of the crate calls (submit, batched states, cancel, ...).
//! - [`auth`]: static, file and minted (HS256) tokens; secrets that never print.
//! - [`types`] and [`JobDescription`]: the domain types, independent of API versions.
//! - [`convert`]: the one seam where generated types become domain types and back.
//! - [`transport`], [`retry`], [`error`], `classify`: per-request plumbing, backoff, errors and
//!   how every kind of answer becomes one.
//! - [`generated`]: the generated code; nothing outside this module touches it.

pub mod auth;
mod classify;
pub mod client;
pub mod convert;
pub mod error;
pub mod generated;
pub mod job_description;
pub mod retry;
pub mod transport;
pub mod types;
pub mod version;

pub use auth::{Auth, AuthError, DEFAULT_TOKEN_LIFETIME, Secret};
pub use client::{Client, ClientConfig, RequestObserver};
pub use error::ClientError;
pub use job_description::JobDescription;
pub use retry::RetryPolicy;
pub use version::ApiVersion;
pub use types::{
    BaseState, CancelOutcome, Diag, ExitCode, JobId, JobInfo, JobState, JobUsage, Partition, Ping,
    ServerInfo, SlurmError, Tres,
};
