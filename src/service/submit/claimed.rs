//! Jobs made once through their claims (`FLYTE_SLURM_ONCE_ONLY=claims`): the service's side of
//! `claim::create`, `claim::create_batch` and `claim::delete`, and a deferred task's job read
//! from its claim.
//!
//! The execution's claim is opened by CreateTask (`Claims::of`, which probes a store met for the
//! first time) and named in its `resource_meta` (`claim`), so every later call, on any replica,
//! finds it there: the paced submit (`paced.rs`) makes one try of [`submit`] where the keys'
//! protocol would try `protocol::submit_once`; a batch is one held array through its members'
//! claims ([`create_batch`], each outcome settled by `coalesce.rs`); GetTask of a deferred meta
//! reads the job the claim records ([`resolve`]); DeleteTask writes the tombstone first
//! ([`delete`]); a recorded job left held is released by the takeover task
//! ([`release_left_held`]).
//!
//! The marker a held job carries in its comment is the execution's key (a batch's: one of its
//! own): a replica taking over a holding finds what the former holder left held by it.

use std::time::SystemTime;

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::{Client, ClientError, JobDescription, JobId};

use super::batches::Member;
use super::claim::{self, ClaimStore, JobRef, Outcome, ProtocolError, Slurmrestd, State};
use super::execution::Submitted;
use super::idempotency::{ArrayIndices, Element, Placement};
use super::protocol::{SubmitError, SubmitFailure};
use crate::render::coalesce::{self as shape_of, Member as ArrayMember};
use crate::render::naming::array_name;

/// Where a job the claim records runs, as the rest of the service names it: an element with its
/// array's indices as submitted (`array`), which its meta names and the tracker follows. A
/// record without them names the element alone.
pub(super) fn placement(job: JobRef, array: Option<&str>) -> Placement {
    match job {
        JobRef::Job { job_id } => Placement::job(JobId(job_id)),
        JobRef::Element {
            array_job_id,
            index,
        } => Placement {
            job_id: JobId(array_job_id),
            element: Some(Element {
                index,
                array: match array {
                    Some(a) => ArrayIndices::from_expr(a),
                    None => ArrayIndices::exact(&[index]),
                },
            }),
        },
    }
}

/// The claim a meta names, in this process's stores.
pub(super) fn claim_at(rt: &ClusterRuntime, uri: &str) -> Result<ClaimStore, claim::ClaimError> {
    rt.submitter.claims().at(uri)
}

/// The protocol's Slurm for `job`, through `client`: the release restores the job's own comment,
/// and keeps a job held that asked for `--hold` itself.
fn slurm<'a>(client: &'a Client, job: &'a JobDescription) -> Slurmrestd<'a> {
    Slurmrestd {
        client,
        comment: job.comment.as_deref(),
        keep_held: job.hold == Some(true),
    }
}

/// One try of the execution's job through its claim at `uri`. `Ok(None)`: the claim holds the
/// tombstone (DeleteTask came first). Another replica's live holding is a transient failure: the
/// paced loop asks again, and takes it over once its lease ran out.
pub(super) async fn submit(
    rt: &ClusterRuntime,
    m: &Member,
    uri: &str,
) -> Result<Option<Submitted>, SubmitFailure> {
    let failure = |what: String, error: SubmitError| SubmitFailure { what, error };
    let claim = claim_at(rt, uri).map_err(|e| {
        failure(
            "opening the execution's claim".into(),
            SubmitError::Claim(e.to_string()),
        )
    })?;
    let holder = rt.submitter.claims().holder();
    let outcome = claim::create(&claim, &slurm(&m.client, &m.job), holder, &m.job, &m.key).await;
    match outcome {
        Ok(Outcome::Submitted(job)) => Ok(Some(Submitted::Fresh(placement(job, None)))),
        Ok(Outcome::Existing(job, array)) => {
            Ok(Some(Submitted::Adopted(placement(job, array.as_deref()))))
        }
        Ok(Outcome::Deleted) => Ok(None),
        Ok(Outcome::InProgress { by, until }) => Err(failure(
            format!(
                "another connector replica ({by}) is submitting this task; its holding lapses \
                 in {} s",
                until
                    .duration_since(SystemTime::now())
                    .map_or(0, |d| d.as_secs())
            ),
            SubmitError::Claim("held by another replica".into()),
        )),
        Err(e) => Err(protocol_failure(e)),
    }
}

/// A protocol error as the paced loop judges it: Slurm's errors as the client's (so a full or
/// throttling cluster paces the loop), the claim's and contention as transient.
fn protocol_failure(e: ProtocolError) -> SubmitFailure {
    match e {
        ProtocolError::Slurm { what, source } => SubmitFailure {
            what,
            error: match source.downcast::<ClientError>() {
                Ok(client) => SubmitError::Slurm(*client),
                Err(other) => SubmitError::Claim(other.to_string()),
            },
        },
        ProtocolError::Claim { what, source } => SubmitFailure {
            what: what.to_string(),
            error: SubmitError::Claim(source.to_string()),
        },
        e @ ProtocolError::Contended { .. } => SubmitFailure {
            what: "deciding the execution's claim".into(),
            error: SubmitError::Claim(e.to_string()),
        },
    }
}

/// What the claim of a deferred task says of its job.
pub enum Found {
    /// The job it records.
    Job(Placement),
    /// The tombstone.
    Deleted,
    /// Nothing recorded yet: `None` when nobody claimed it, else who holds it and whether the
    /// holding lapsed.
    Unrecorded { by: Option<String>, lapsed: bool },
}

/// GetTask of a deferred meta whose claim is at `uri`: what it records (two object-store
/// requests; no Slurm call).
pub async fn resolve(rt: &ClusterRuntime, uri: &str) -> Result<Found, claim::ClaimError> {
    let claim = claim_at(rt, uri)?;
    Ok(match claim.read().await? {
        None => Found::Unrecorded {
            by: None,
            lapsed: false,
        },
        Some(c) => match &c.record().state {
            State::Recorded { job, array, .. } => Found::Job(placement(*job, array.as_deref())),
            State::Deleted => Found::Deleted,
            State::Submitting { .. } => Found::Unrecorded {
                by: Some(c.record().by.clone()),
                lapsed: c.record().expired(SystemTime::now()),
            },
        },
    })
}

/// DeleteTask of a task whose meta names its claim: this process's submit of it withdrawn, the
/// tombstone written (a holder's record after it is refused, and that holder cancels its own held
/// job), then the job it recorded, or what a holding left held, cancelled. The job cancelled, if
/// any.
pub async fn delete(
    rt: &ClusterRuntime,
    m: &ResourceMeta,
    uri: &str,
    client: &Client,
) -> Result<Option<Placement>, ProtocolError> {
    if let Some(d) = &m.deferred {
        rt.submitter.executions.withdraw(&d.key);
    }
    let claim = claim_at(rt, uri).map_err(|source| ProtocolError::Claim {
        what: "opening the execution's claim",
        source,
    })?;
    // Only cancels: the job's own comment and hold are a release's concern.
    let slurm = Slurmrestd {
        client,
        comment: None,
        keep_held: false,
    };
    tracing::debug!(cluster = %rt.cfg.name, job_id = %m.job_id, claim = uri, "DeleteTask: the tombstone first");
    Ok(
        claim::delete(&claim, &slurm, rt.submitter.claims().holder())
            .await?
            .map(|job| placement(job, None)),
    )
}

/// A job its claim records but its recorder left held (it died between its record and its
/// release), found by GetTask through the tracker: released with its own comment back, as a
/// retried CreateTask would. Nothing is done unless the claim records this very job (an
/// unrecorded held job is a holding's, which a takeover cancels) and slurmctld still shows it
/// held for its claim. Whether it was released.
pub async fn release_left_held(
    rt: &ClusterRuntime,
    uri: &str,
    job_id: JobId,
    client: &Client,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    let claim = claim_at(rt, uri)?;
    let recorded = claim.read().await?.map(|c| c.record().state.clone());
    let marker = match recorded {
        Some(State::Recorded {
            job: JobRef::Job { job_id: id },
            marker,
            ..
        }) if id == job_id.0 => marker,
        _ => return Ok(false),
    };
    // Held with this claim's holding's mark: after a slurmctld restart the id may be another
    // execution's job, held for its own claim.
    let ours = |j: &&crate::slurmrestd::JobInfo| claim::held_with(j, marker.as_deref());
    let records = client.job_records(job_id).await?;
    let Some(held) = records.iter().filter(|j| j.job_id == job_id).find(ours) else {
        return Ok(false);
    };
    let own =
        crate::render::naming::without_claim_mark(held.comment.as_deref().unwrap_or_default());
    tracing::info!(cluster = %rt.cfg.name, %job_id, "the claim records this job but its recorder left it held; releasing it");
    client
        .release(crate::slurmrestd::JobRef::from(job_id), Some(own), false)
        .await?;
    Ok(true)
}

/// One outcome per member of a batch, in order.
pub(super) type BatchOutcomes = Vec<Result<Outcome, ProtocolError>>;

/// A batch of CreateTasks made once through their claims (`claim::create_batch`): one held
/// array of the members no job runs yet, each element recorded in its member's claim before
/// the array is released. `Err` (why) when nothing was tried: the claims could not be opened,
/// or the array could not be made (`coalesce.rs` then submits each member alone).
pub(super) async fn create_batch(
    rt: &ClusterRuntime,
    batch: &[Member],
) -> Result<BatchOutcomes, String> {
    let claims = batch
        .iter()
        .map(|m| claim_at(rt, m.template.claim.as_deref().unwrap_or_default()))
        .collect::<Result<Vec<ClaimStore>, _>>()
        .map_err(|e| format!("a batch's claims cannot be opened: {e}"))?;
    let first = &batch[0];
    let members: Vec<ArrayMember> = batch
        .iter()
        .map(|m| ArrayMember {
            key: &m.key,
            job: &m.job,
        })
        .collect();
    let name = array_name(batch.iter().map(|m| m.job.name.as_str()));
    let array = shape_of::array_job(
        &members,
        &name,
        first.job.comment.clone().unwrap_or_default(),
    )
    .map_err(|e| format!("a batch's job array cannot be made: {e}"))?;
    // The batch's marker: what a replica taking over one of its holdings finds the held array by.
    let marker = format!("batch-{:016x}", rand::random::<u64>());
    Ok(claim::create_batch(
        &claims,
        &slurm(&first.client, &first.job),
        rt.submitter.claims().holder(),
        &array,
        &marker,
    )
    .await)
}

/// slurmrestd's error behind a protocol's failure, if that is what failed (for the pacer).
pub(super) fn client_error(e: &ProtocolError) -> Option<&ClientError> {
    match e {
        ProtocolError::Slurm { source, .. } => source.downcast_ref::<ClientError>(),
        _ => None,
    }
}
