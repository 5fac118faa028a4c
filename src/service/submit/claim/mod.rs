//! The claim: the one record, in the task's own object store, of which job runs an execution,
//! and the once-only protocol over it and Slurm. Tested on every backend and against real Slurm;
//! CreateTask, GetTask and DeleteTask use it with `FLYTE_SLURM_ONCE_ONLY=claims`.
//!
//! - `deployment`: the deployment's claims ([`Claims`]): where each execution's claim is, its
//!   store opened once per bucket and probed once, this process as their holder.
//! - `format`: the document ([`Record`]: *submitting* by a holder under a lease, *recorded* job or
//!   array element, *deleted*), versioned, and which record may follow which.
//! - `protocol`: the once-only protocol over a claim and Slurm, one state machine: hold,
//!   submit held, record, release; takeover past a lease; DeleteTask's tombstone; a batch's
//!   array with an element per member's claim.
//! - `slurmrestd`: the protocol's Slurm through slurmrestd (the marker in a held job's comment).
//! - `store`: where a claim lives ([`ClaimStore`]: under the execution's output prefix, or under a
//!   prefix of the connector's own keyed by a hash of the execution's identity), reading it, and
//!   writing it only with create-if-absent; [`probe`]: whether a store honours that at all.
//!
//! # Why a sequence of records, and only create-if-absent
//!
//! A claim is a folder of immutable records `0000000001.json`, `0000000002.json`, ...; its state
//! is the highest. A writer reads the highest, `n`, checks that its record may follow it, and
//! creates `n + 1` if absent: of writers racing from the same read exactly one creates it, the
//! others get [`ClaimError::Conflict`] and read again. Compare-and-swap on one object
//! (`PutMode::Update`) would do the same on S3, GCS and Azure, but `object_store`'s
//! `LocalFileSystem` refuses `PutMode::Update` (0.14: `NotImplemented`), and file:// is a
//! supported output store; create-if-absent (`PutMode::Create`) is implemented by every backend
//! the connector builds (S3 `If-None-Match: *`, GCS `x-goog-if-generation-match: 0`, Azure
//! `If-None-Match: *`, a hard link on a local filesystem). One primitive everywhere means one
//! proof, one probe, and no per-backend branch.
//!
//! Safety rests on that primitive alone: a listing that lags (an S3-compatible server without
//! read-after-write listing) only makes a writer's `n + 1` exist already, which is a conflict and
//! a re-read, never a second winner.

mod deployment;
mod format;
mod protocol;
mod slurmrestd;
mod store;

pub use deployment::Claims;
pub use format::{FORMAT_VERSION, JobRef, Record, State};
pub use protocol::{
    Holder, Outcome, ProtocolError, Slurm, Step, create, create_batch, decide, delete,
};
pub use slurmrestd::{Slurmrestd, held_with, marker_tag};
pub use store::{CLAIM_DIR, ClaimStore, Current, StartCheck, check_at_start, probe, probe_at};

/// What the claim layer reports. A [`Conflict`](ClaimError::Conflict) (another writer was first:
/// read again) is told apart from a store that failed ([`Store`](ClaimError::Store): retry later)
/// by [`ClaimError::is_conflict`]. Messages name the claim's URI and object, never credentials
/// (a store's own message passes through `staging::error::redact`).
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The claim's location is not a store URI the connector can open.
    #[error("claim location: {0}")]
    Location(#[source] Box<crate::staging::StagingError>),

    /// Another writer created this record first: the claim changed since it was read.
    #[error(
        "claim {uri}: {object} was written by another writer first (the claim changed since it \
         was read): read it again"
    )]
    Conflict { uri: String, object: String },

    /// The record asked for may not follow the claim's current one (a record after a tombstone, a
    /// takeover within a lease, ...).
    #[error("claim {uri}: a {to} record may not follow {object} ({from}): {reason}")]
    Refused {
        uri: String,
        object: String,
        from: &'static str,
        to: &'static str,
        reason: String,
    },

    /// The store failed (unreachable, denied, ...): the claim is unknown, not contested.
    #[error(
        "claim {uri}: {op} {object}: {}",
        crate::staging::error::redact(source)
    )]
    Store {
        uri: String,
        op: &'static str,
        object: String,
        #[source]
        source: Box<object_store::Error>,
    },

    /// A record that is not a claim this connector can read (not JSON of the format, or of a
    /// newer version).
    #[error("claim {uri}: {object} is unreadable: {reason}")]
    Unreadable {
        uri: String,
        object: String,
        reason: String,
    },

    /// The store does not honour conditional writes, so replicas could not agree on a claim.
    #[error(
        "object store {uri} does not honour conditional writes ({reason}), so connector replicas \
         cannot agree on which job runs a task: put claims in a store that does (AWS S3, GCS, \
         Azure Blob Storage, a local filesystem; an S3-compatible server that implements \
         `If-None-Match: *` on PUT, with object_store's `AWS_CONDITIONAL_PUT` not `disabled`), or \
         run a single replica"
    )]
    NotConditional { uri: String, reason: String },
}

impl ClaimError {
    /// Another writer was first: read the claim again and decide from what it says.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ClaimError::Conflict { .. })
    }
}

pub type Result<T, E = ClaimError> = std::result::Result<T, E>;
