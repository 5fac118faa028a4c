//! Staging: job files on the cluster's shared filesystem → object storage, without SSH.
//!
//! - [`backend::Staging`]: the interface (stat, tail, walk, read, remove, upload a file), with
//!   two backends: [`local::LocalStaging`] (the filesystem is mounted here, mapped by
//!   `FLYTE_SLURM_SHARED_MOUNTS`) and [`stager::client::SidecarStaging`] (a `slurm-connector
//!   stager` has it; [`stager::serve`] is that subcommand). `settings` picks one from the env.
//! - [`confine`]: cluster→local path mapping and confinement to the configured roots.
//! - [`objstore`]: output URIs → object stores; bounded-memory multipart upload.
//! - [`outputs`]: declared outputs after a job COMPLETED → Blob results, in the background
//!   ([`transfer::Transfer`]: progress, outcome, cancel).
//! - [`logs`]: stderr tail for failure messages, GetTaskLogs text, log-link templates.
//! - [`retention`]: removing finished jobs' files after a while.
//! - [`job_files`]: where a job's logs, marker and outputs folder are (`<working_dir>/<job>.*`).
//! - [`exit_marker`]: a job's exit code from `<working_dir>/<job>.exit` (no slurmdbd).
//! - [`size`]: the upload ceiling.

pub mod backend;
pub mod confine;
pub mod error;
pub mod exit_marker;
pub mod job_files;
pub mod local;
mod local_copy;
pub mod logs;
pub mod objstore;
pub mod outputs;
pub mod retention;
pub(crate) mod settings;
pub mod size;
pub mod stager;
pub mod transfer;

pub use backend::{ByteStream, Chunk, EntryKind, ReadFrom, Staging, Stat, WalkEntry};
pub use confine::{Mount, Roots};
pub use error::StagingError;
pub use job_files::{JobFiles, element_path};
pub use local::LocalStaging;
pub use outputs::{DeclaredOutput, Dimensionality, OutputBlob, OutputKind, UploadMode};
pub use size::Ceiling;
pub use stager::client::SidecarStaging;
pub use stager::{StagerOptions, serve};
pub use transfer::{Transfer, TransferOutcome};
