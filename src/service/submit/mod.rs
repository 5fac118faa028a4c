//! The write path: from a CreateTask's request to the execution's one job on the cluster.
//!
//! - `prepare`: everything before the cluster sees the task: a Flyte 1 script read from the
//!   shared filesystem → identity → working directory → render → admission (shared with
//!   `slurm-connector render`, which prints what would be submitted) → a pre-staged image and a
//!   shell task's output locations checked there.
//! - `claim/`: the claim in the task's object store (which job runs an execution, written only
//!   with create-if-absent; its format, store, start-up probe, and the protocol over it and
//!   Slurm). On this walk only with `FLYTE_SLURM_ONCE_ONLY=claims` (experimental), through
//!   `claimed` (one try of a job through its claim in `paced.rs`, a batch's array through its
//!   members' claims in `coalesce.rs`, a deferred meta's job read from its claim in
//!   `deferred.rs`, DeleteTask's tombstone).
//! - `identity`: whom a task runs as (the deployment's rules; a task never chooses).
//! - `execution`: the one state of each execution in this process (its lock, its submit's
//!   progress, its job, withdrawn, uncertain), with one expiry.
//! - `protocol`: the once-only protocol (held submit, check, settle, release) in its four modes
//!   (a job, an array, an orphaned job or array, a tombstone): one job per execution across retries,
//!   restarts and replicas; `idempotency/`: the cluster's jobs by key it reads.
//! - `coalesce`: CreateTasks of one shape within the window as one job array, each an element
//!   (`batches`: the open batches, state `cluster` keeps; `coalesce_settings`: whether a cluster
//!   coalesces and how large its arrays may be, decided once from the setting and slurm.conf).
//! - `paced`: a job's submit in its own task, paced and retried while the cluster hiccups, and
//!   what any submit's outcome makes of the execution. `pacing`: how many submits run at once.
//!   `deferred`: submits that outlive their CreateTask (the deferred meta, GetTask's lookup of
//!   its job, the hand-off while shutting down), and DeleteTask's tombstones; `takeover`: the
//!   deferred submits GetTask found unmade, and the jobs it found left held, queued for the
//!   cluster's background task (GetTask only reads). `gate`: admission while draining.
//!
//! # A CreateTask, file by file
//!
//! The steps, each entered once and never called back (Flyte 1's differ only in the first two):
//!
//! 1. `rpc/handler.rs` `serve_create`, over the protocol's `Wire` (`rpc/grpc.rs`, Flyte 1:
//!    `rpc/flyte1.rs`), through `Grpc::handle`: timed, counted (`rpc/metrics.rs`), its error
//!    mapped to a `Status` once;
//! 2. `wire/convert.rs` `request` (Flyte 1: `wire/flyte1.rs`): the wire message as the domain
//!    `TaskRequest`, the plugin's `custom` parsed once (`render::TaskConfig`);
//! 3. `service/mod.rs` `Connector::create_task`: the cluster and credential (`config`), then
//! 4. `submit/prepare.rs` `prepare_on`: script, API version, identity (`submit/identity.rs`),
//!    `render::render`, admission, the image and output paths checked;
//! 5. `submit/coalesce.rs` `submit_coalesced` (its batch, rendered as an array by
//!    `render::coalesce`), or `submit/paced.rs` `submit_paced` for a job of its own;
//! 6. `submit/protocol.rs` `submit_array` / `submit_once`: held submit, check, settle, release;
//! 7. `submit/paced.rs` `settle`: what the outcome makes of the execution (tracked, counted;
//!    for a job of its own, steps 5 and 7 are one function of `paced.rs` around step 6);
//! 8. `submit/deferred.rs` `settled_within`, then `answer` or `deferred_meta`;
//! 9. `wire/meta.rs`: the `resource_meta`'s bytes, back to the handler.
//!
//! The state asked on the way, through [`submitter::Submitter`] and `ClusterRuntime`
//! (`cluster/mod.rs`, its clients in `cluster/clients.rs`): `execution` (the lock, a job already
//! made), `gate`, `coalesce_settings`, `batches`, `pacing` and `idempotency/`.
//!
//! Imports `cluster`, `wire` and `background`; never `report` or `rpc`. `execution`,
//! `idempotency`, `pacing`, `gate`, `batches` and `coalesce_settings` are state `cluster` keeps,
//! so they import no `cluster`; nor does `protocol`, which works on the `Submitter` alone.

pub(crate) mod batches;
pub mod claim;
pub(crate) mod claimed;
pub(crate) mod coalesce;
pub(crate) mod coalesce_settings;
pub(crate) mod deferred;
pub(crate) mod execution;
pub(crate) mod gate;
pub(crate) mod idempotency;
pub mod identity;
pub(crate) mod paced;
pub(crate) mod pacing;
pub mod prepare;
pub(crate) mod protocol;
pub(crate) mod submitter;
pub(crate) mod takeover;
