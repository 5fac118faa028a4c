//! The once-only protocol over a claim and Slurm, as one state machine: which job runs an
//! execution is what its claim records, and a job becomes runnable only after its claim records
//! it.
//!
//! Every call reads the claim and [`decide`]s one [`Step`] from it alone, as kube-runtime's
//! `finalizer.rs` decides its action from the object's state; the drivers ([`create`],
//! [`create_batch`], [`delete`]) carry the step out and read again when another writer was
//! first. The walk of a fresh CreateTask:
//!
//! 1. **hold**: the claim says *submitting* by this replica under a lease (create-if-absent);
//! 2. **submit held**: the job (or the batch's array) is submitted with `hold` and the claim's
//!    marker in its comment;
//! 3. **record**: the claim says *recorded*, naming the job (or array and index);
//! 4. **release**: only now may it run.
//!
//! Why it holds, step by step:
//! - A replica that dies after 1 leaves a holding that another replica takes over once its lease
//!   ran out. One that dies after 2 leaves a held job, which never runs and never leaves
//!   slurmctld: the replica taking over finds it by the marker in slurmctld's listing of held
//!   jobs (never slurmdbd) and cancels it before it submits its own.
//! - A holder paused past its lease whose record then comes late finds the claim taken over (or
//!   deleted): its record is refused ([`Record::may_follow`]) and it cancels its own held job,
//!   which was never released.
//! - One that dies after 3 leaves a recorded, held job: the next CreateTask reads *recorded* and
//!   releases it ([`Step::Answer`]). slurmrestd releases an array only as a whole (it refuses
//!   an update of one element), and the array may hold elements whose records never landed: so
//!   a recorded element left held is instead cancelled, once its record is older than a lease,
//!   and its execution submitted anew under a holding that names it as replaced. After 4 the
//!   next CreateTask only answers with the job.
//! - DeleteTask writes the tombstone first, then cancels: a holder's record after it is refused.
//!
//! The protocol talks to Slurm only through [`Slurm`], so a test drives it against a fake
//! cluster that crashes at any step boundary, and the service against slurmrestd.

use std::future::Future;
use std::time::{Duration, SystemTime};

use super::ClaimError;
use super::format::{JobRef, Record, State};
use super::store::{ClaimStore, Current};

/// What the protocol needs of Slurm.
pub trait Slurm: Sync {
    /// What is submitted: the service's job description; a test's own.
    type Job: Sync;
    type Error: std::error::Error + Send + Sync + 'static;

    /// Submits `job` held, `marker` in its comment: a job of its own (`indices: None`) or an
    /// array of exactly `indices`. Its job id.
    fn submit_held(
        &self,
        job: &Self::Job,
        marker: &str,
        indices: Option<&[u32]>,
    ) -> impl Future<Output = Result<u32, Self::Error>> + Send;

    /// The held jobs, and held elements of arrays, whose comment carries `marker`: what a
    /// holding left (a takeover, a renewal, a tombstone; rare, so a listing may serve it).
    fn held(&self, marker: &str) -> impl Future<Output = Result<Vec<JobRef>, Self::Error>> + Send;

    /// Whether `job` is still held by this protocol (held, `marker` in its comment; any claim's
    /// marker when the record kept none): a recorded job its recorder died before releasing.
    /// Asked by every CreateTask that finds its job recorded, so of one job alone.
    fn awaits_release(
        &self,
        job: JobRef,
        marker: Option<&str>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Lets a recorded job, or a whole array, run: its hold and its marker removed. Releasing
    /// one already released succeeds. Never asked of one element: slurmrestd refuses to update
    /// an array's element alone (`tests/fixtures/slurmrestd/24.11_v0.0.42_update-array-element-refused.json`).
    fn release(&self, job: JobRef) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Cancels a job (or element). Cancelling one already ended succeeds.
    fn cancel(&self, job: JobRef) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// This replica, as claims name their holder.
#[derive(Debug, Clone)]
pub struct Holder {
    /// Unique per process (a restarted replica is another holder: it waits out its former
    /// self's lease rather than mistaking that holding for its own).
    pub name: String,
    /// How long a holding stands without a record: longer than a held submit and a record take
    /// (both are bounded by their clients' timeouts), short enough that a crashed replica's
    /// executions are taken over by a retried CreateTask soon.
    pub lease: Duration,
}

impl Holder {
    /// This process as the deployment's settings name it: the replica's name, then `~` and a
    /// random suffix of this process, so a restarted replica is another holder; the lease.
    pub fn of_process(settings: &crate::config::claims::ClaimSettings) -> Holder {
        Holder {
            name: format!("{}~{:08x}", settings.replica_name(), rand::random::<u32>()),
            lease: settings.lease,
        }
    }
}

/// The array's indices a record of an element gives (`None` for a job of its own).
fn array_of(r: Option<&Record>) -> Option<String> {
    match &r?.state {
        State::Recorded { array, .. } => array.clone(),
        _ => None,
    }
}

/// What a CreateTask's execution comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// This call submitted the job, recorded it and released it.
    Submitted(JobRef),
    /// The claim already recorded this job (a retried CreateTask, or another replica's); for an
    /// array's element, the array's indices as its record gives them.
    Existing(JobRef, Option<String>),
    /// DeleteTask came first: nothing runs the execution.
    Deleted,
    /// Another replica holds it under a lease that runs until `until`: ask again later.
    InProgress { by: String, until: SystemTime },
}

/// A step failed, leaving what [`ProtocolError::what`] says (nothing runnable unrecorded).
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("{what}: {source}")]
    Claim {
        what: &'static str,
        #[source]
        source: ClaimError,
    },
    #[error("{what}: {source}")]
    Slurm {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Other writers changed the claim at every read: they are deciding it; ask again later.
    #[error(
        "claim {uri}: changed by other writers {ROUNDS} times in a row while deciding it (other \
         replicas are submitting or deleting this task right now): retry the CreateTask; if it \
         persists, look for several connectors sharing a replica name"
    )]
    Contended { uri: String },
}

/// How many times a driver reads the claim again after losing a race before it gives up: each
/// lost race means another writer decided something, and the claim's states only move forward
/// (held, recorded, deleted), so a few reads always settle.
const ROUNDS: usize = 8;

/// What the claim's current record asks of this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing claimed it: hold it, then submit.
    Hold,
    /// Another replica's holding whose lease ran out: take it over, cancel what it left held,
    /// then submit.
    TakeOver { marker: String, index: Option<u32> },
    /// This replica's own holding (an earlier attempt whose answer was lost): renew it, cancel
    /// what that attempt left held, then submit.
    Renew { marker: String, index: Option<u32> },
    /// The claim records its job: answer with it (released first if its recorder died before).
    Answer(JobRef),
    /// The tombstone: aborted.
    Deleted,
    /// Another replica holds it under a live lease.
    Wait { by: String, until: SystemTime },
}

/// The one decision: what to do given the claim's current record, as `me`, at `now`.
pub fn decide(current: Option<&Record>, me: &str, now: SystemTime) -> Step {
    let Some(r) = current else {
        return Step::Hold;
    };
    match &r.state {
        State::Deleted => Step::Deleted,
        State::Recorded { job, .. } => Step::Answer(*job),
        State::Submitting { marker, index, .. } if r.by == me => Step::Renew {
            marker: marker.clone(),
            index: *index,
        },
        State::Submitting { marker, index, .. } if r.expired(now) => Step::TakeOver {
            marker: marker.clone(),
            index: *index,
        },
        State::Submitting { .. } => Step::Wait {
            by: r.by.clone(),
            until: r.lease_end().unwrap_or(now),
        },
    }
}

fn holding(me: &Holder, marker: &str, index: Option<u32>, replaces: Option<JobRef>) -> Record {
    Record::new(
        &me.name,
        State::Submitting {
            lease_secs: me.lease.as_secs(),
            marker: marker.into(),
            index,
            replaces,
        },
    )
}

/// What a recorded job needs before its CreateTask is answered with it.
enum Recorded {
    /// Released (or released now): answer with it.
    Runs,
    /// An element recorded within a lease and still held: its recorder may be releasing its
    /// array right now.
    Wait { by: String, until: SystemTime },
    /// An element its recorder left held past a lease, now cancelled: submit the execution
    /// anew, replacing it.
    Replace(JobRef),
}

/// A recorded job whose recorder may have died before releasing it: a job of its own is
/// released; an element (slurmrestd releases only whole arrays, which may hold unrecorded
/// elements) is cancelled once its record is older than a lease.
async fn settle_recorded<S: Slurm>(
    slurm: &S,
    me: &Holder,
    record: &Record,
    job: JobRef,
) -> Result<Recorded, ProtocolError> {
    let marker = match &record.state {
        State::Recorded { marker, .. } => marker.as_deref(),
        _ => None,
    };
    let held = slurm
        .awaits_release(job, marker)
        .await
        .map_err(slurm_err(format!(
            "reading whether {job} awaits its release"
        )))?;
    if !held {
        return Ok(Recorded::Runs);
    }
    match job {
        JobRef::Job { .. } => {
            tracing::info!(%job, "the claim records this job but its recorder left it held; releasing it");
            slurm.release(job).await.map_err(slurm_err(format!(
                "releasing {job}, recorded but left held"
            )))?;
            Ok(Recorded::Runs)
        }
        JobRef::Element { .. } => {
            let until = record.at + me.lease;
            if SystemTime::now() < until {
                return Ok(Recorded::Wait {
                    by: record.by.clone(),
                    until,
                });
            }
            tracing::info!(%job, "the claim records this array element but its recorder left the array held; cancelling the element and submitting the execution anew");
            slurm.cancel(job).await.map_err(slurm_err(format!(
                "cancelling {job}, recorded but left held"
            )))?;
            Ok(Recorded::Replace(job))
        }
    }
}

fn slurm_err<E: std::error::Error + Send + Sync + 'static>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> ProtocolError {
    let what = what.into();
    move |e| ProtocolError::Slurm {
        what,
        source: Box::new(e),
    }
}

fn claim_err(what: &'static str) -> impl FnOnce(ClaimError) -> ProtocolError {
    move |source| ProtocolError::Claim { what, source }
}

/// Writes `record` after `from` (or as the claim's first): `Ok(None)` when another writer was
/// first or the claim no longer allows it (read again).
async fn write(
    claim: &ClaimStore,
    from: Option<&Current>,
    record: Record,
) -> Result<Option<Current>, ClaimError> {
    let written = match from {
        None => claim.create(record).await,
        Some(from) => claim.advance(from, record).await,
    };
    match written {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.is_conflict() || matches!(e, ClaimError::Refused { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `record` is the claim's current record after a write whose outcome is unknown (a
/// store that timed out may have stored it).
async fn landed(claim: &ClaimStore, record: &Record) -> Result<bool, ClaimError> {
    Ok(claim.read().await?.is_some_and(|c| c.record() == record))
}

/// The held jobs a holding left with `marker` (only its element `index` of an array), each
/// cancelled: a held job was never released, so cancelling it loses nothing.
async fn cancel_left<S: Slurm>(
    slurm: &S,
    marker: &str,
    index: Option<u32>,
) -> Result<(), ProtocolError> {
    let left = slurm
        .held(marker)
        .await
        .map_err(slurm_err("listing the held jobs a former holding left"))?;
    for listed in left {
        let job = match (listed, index) {
            (JobRef::Element { index: i, .. }, Some(want)) if i != want => continue,
            // An array's own record stands for its held remainder, which may hold the element:
            // only that element is cancelled (the others belong to other executions' claims).
            (JobRef::Job { job_id }, Some(want)) => JobRef::Element {
                array_job_id: job_id,
                index: want,
            },
            _ => listed,
        };
        tracing::info!(%job, marker, "cancelling a held job a former holding of this execution left unrecorded");
        slurm
            .cancel(job)
            .await
            .map_err(slurm_err(format!("cancelling {job}, left held unrecorded")))?;
    }
    Ok(())
}

/// A job of ours that lost its record: cancelled. It was never released, so a failure leaves it
/// held for good (it never runs) and is logged for the admin rather than failing the call.
async fn withdraw<S: Slurm>(slurm: &S, job: JobRef) {
    tracing::info!(%job, "another writer decided this execution first; cancelling our held job");
    if let Err(e) = slurm.cancel(job).await {
        tracing::error!(%job, error = %e, "cannot cancel our held, unrecorded job; it never runs (held) but stays queued: `scancel {job}`");
    }
}

/// A CreateTask's execution, once: its claim decides, and `job` is submitted only when no job
/// runs it yet. `marker` is the execution's own (a job of its own).
pub async fn create<S: Slurm>(
    claim: &ClaimStore,
    slurm: &S,
    me: &Holder,
    job: &S::Job,
    marker: &str,
) -> Result<Outcome, ProtocolError> {
    for _ in 0..ROUNDS {
        let held = match hold(claim, slurm, me, marker, None).await? {
            Member::Decided(outcome) => return Ok(outcome),
            Member::Held(held) => held,
        };
        let id = slurm
            .submit_held(job, marker, None)
            .await
            .map_err(slurm_err("submitting the job held"))?;
        let job = JobRef::Job { job_id: id };
        if !record(claim, slurm, &held, me, job, None).await? {
            continue;
        }
        slurm.release(job).await.map_err(slurm_err(format!(
            "{job} is recorded in the claim but still held: releasing it failed (a retried \
             CreateTask releases it)"
        )))?;
        return Ok(Outcome::Submitted(job));
    }
    Err(ProtocolError::Contended {
        uri: claim.uri().into(),
    })
}

/// Step 3: `job` recorded after this replica's holding `held`. `Ok(false)`: another writer
/// decided first, and `job` was cancelled. An unknown outcome that cannot be read back leaves
/// `job` held (it never runs) and fails.
async fn record<S: Slurm>(
    claim: &ClaimStore,
    slurm: &S,
    held: &Current,
    me: &Holder,
    job: JobRef,
    array: Option<String>,
) -> Result<bool, ProtocolError> {
    let marker = match &held.record().state {
        State::Submitting { marker, .. } => Some(marker.clone()),
        _ => None,
    };
    let recorded = Record::new(&me.name, State::Recorded { job, array, marker });
    match claim.advance(held, recorded.clone()).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_conflict() || matches!(e, ClaimError::Refused { .. }) => {
            withdraw(slurm, job).await;
            Ok(false)
        }
        Err(e) => match landed(claim, &recorded).await {
            Ok(true) => Ok(true),
            Ok(false) => {
                withdraw(slurm, job).await;
                Ok(false)
            }
            Err(_) => Err(ProtocolError::Claim {
                what: "recording the held job in the claim failed and the claim cannot be read \
                       back; the job stays held (it never runs) until a retried CreateTask \
                       decides",
                source: e,
            }),
        },
    }
}

/// A batch of CreateTasks of one shape, once each: every member's claim decides, and the members
/// no job runs yet are submitted as one held array (`array`, of the indices given), element `i`
/// recorded in member `i`'s claim, the elements that could not be recorded cancelled, and only
/// then the array released. `marker` is the batch's. One outcome per member, in order.
pub async fn create_batch<S: Slurm>(
    claims: &[ClaimStore],
    slurm: &S,
    me: &Holder,
    array: &S::Job,
    marker: &str,
) -> Vec<Result<Outcome, ProtocolError>> {
    // Steps 1: each member held, or answered from its claim.
    let held = futures::future::join_all(
        claims
            .iter()
            .enumerate()
            .map(|(i, claim)| hold(claim, slurm, me, marker, Some(i as u32))),
    )
    .await;
    let mut outcomes: Vec<Option<Result<Outcome, ProtocolError>>> = Vec::new();
    let mut members = Vec::new();
    for (i, h) in held.into_iter().enumerate() {
        match h {
            Ok(Member::Held(current)) => {
                outcomes.push(None);
                members.push((i, current));
            }
            Ok(Member::Decided(o)) => outcomes.push(Some(Ok(o))),
            Err(e) => outcomes.push(Some(Err(e))),
        }
    }
    if !members.is_empty() {
        let indices: Vec<u32> = members.iter().map(|(i, _)| *i as u32).collect();
        match slurm.submit_held(array, marker, Some(&indices)).await {
            Err(e) => {
                let e = std::sync::Arc::new(e);
                for (i, _) in &members {
                    outcomes[*i] = Some(Err(ProtocolError::Slurm {
                        what: "submitting the batch's array held".into(),
                        source: Box::new(Shared(e.clone())),
                    }));
                }
            }
            Ok(array_job_id) => {
                record_members(claims, slurm, me, array_job_id, &members, &mut outcomes).await;
            }
        }
    }
    outcomes
        .into_iter()
        .zip(claims)
        .map(|(o, claim)| {
            o.unwrap_or_else(|| {
                Err(ProtocolError::Contended {
                    uri: claim.uri().into(),
                })
            })
        })
        .collect()
}

enum Member {
    /// Held by this replica at this record, to be submitted.
    Held(Current),
    /// Decided without a submit of ours.
    Decided(Outcome),
}

/// Step 1: the claim held by `me` with `marker` (a job of its own's, or its batch's for element
/// `index`), or the outcome when no submit is needed. What a former holding left held is
/// cancelled first.
async fn hold<S: Slurm>(
    claim: &ClaimStore,
    slurm: &S,
    me: &Holder,
    marker: &str,
    index: Option<u32>,
) -> Result<Member, ProtocolError> {
    for _ in 0..ROUNDS {
        let current = claim.read().await.map_err(claim_err("reading the claim"))?;
        let read = current.as_ref().map(Current::record);
        let (left, replaces) = match decide(read, &me.name, SystemTime::now()) {
            Step::Deleted => return Ok(Member::Decided(Outcome::Deleted)),
            Step::Wait { by, until } => {
                return Ok(Member::Decided(Outcome::InProgress { by, until }));
            }
            Step::Answer(job) => {
                match settle_recorded(slurm, me, read.expect("read"), job).await? {
                    Recorded::Runs => {
                        let array = array_of(read);
                        return Ok(Member::Decided(Outcome::Existing(job, array)));
                    }
                    Recorded::Wait { by, until } => {
                        return Ok(Member::Decided(Outcome::InProgress { by, until }));
                    }
                    Recorded::Replace(job) => (None, Some(job)),
                }
            }
            Step::Hold => (None, None),
            Step::TakeOver { marker, index } | Step::Renew { marker, index } => {
                (Some((marker, index)), None)
            }
        };
        let mine = holding(me, marker, index, replaces);
        let Some(held) = write(claim, current.as_ref(), mine)
            .await
            .map_err(claim_err("holding the claim"))?
        else {
            continue;
        };
        if let Some((marker, index)) = left {
            cancel_left(slurm, &marker, index).await?;
        }
        return Ok(Member::Held(held));
    }
    Err(ProtocolError::Contended {
        uri: claim.uri().into(),
    })
}

/// Steps 3 and 4 for a batch: each held member's element recorded, those that lost cancelled,
/// then the array released at once. When a record's outcome is unknown the array stays held
/// (it may hold an element whose record never landed, and slurmrestd releases only whole
/// arrays): each member's retried CreateTask then decides its own element past the lease.
async fn record_members<S: Slurm>(
    claims: &[ClaimStore],
    slurm: &S,
    me: &Holder,
    array_job_id: u32,
    members: &[(usize, Current)],
    outcomes: &mut [Option<Result<Outcome, ProtocolError>>],
) {
    let element = |i: usize| JobRef::Element {
        array_job_id,
        index: i as u32,
    };
    // The indices the array was submitted with; an element whose record loses is cancelled
    // before the release, so it is at most that many.
    let indices: Vec<u32> = members.iter().map(|(i, _)| *i as u32).collect();
    let array = crate::render::array::expr(&indices);
    let recorded = futures::future::join_all(members.iter().map(|(i, held)| {
        record(
            &claims[*i],
            slurm,
            held,
            me,
            element(*i),
            Some(array.clone()),
        )
    }))
    .await;
    let mut won = Vec::new();
    let mut unknown = false;
    for ((i, _), r) in members.iter().zip(recorded) {
        match r {
            Ok(true) => won.push(*i),
            // Lost: its claim says what runs it; read it once more.
            Ok(false) => {
                outcomes[*i] = Some(answer_lost(&claims[*i], me).await);
            }
            Err(e) => {
                unknown = true;
                outcomes[*i] = Some(Err(e));
            }
        }
    }
    if won.is_empty() {
        return;
    }
    if unknown {
        for i in won {
            outcomes[i] = Some(Err(ProtocolError::Slurm {
                what: format!(
                    "{} is recorded in the claim, but its array stays held: another element's \
                     record is unknown (a retried CreateTask decides once the lease ran out)",
                    element(i)
                ),
                source: "an element's record is unknown".into(),
            }));
        }
        return;
    }
    let released = slurm
        .release(JobRef::Job {
            job_id: array_job_id,
        })
        .await;
    let e = released.err().map(std::sync::Arc::new);
    for i in won {
        outcomes[i] = Some(match &e {
            None => Ok(Outcome::Submitted(element(i))),
            Some(e) => Err(ProtocolError::Slurm {
                what: format!(
                    "{} is recorded in the claim, but releasing its array failed (a retried \
                     CreateTask decides once the lease ran out)",
                    element(i)
                ),
                source: Box::new(Shared(e.clone())),
            }),
        });
    }
}

/// A member whose record lost: what its claim says now (another writer's job, the tombstone, or
/// a holding).
async fn answer_lost(claim: &ClaimStore, me: &Holder) -> Result<Outcome, ProtocolError> {
    let current = claim.read().await.map_err(claim_err("reading the claim"))?;
    let read = current.as_ref().map(Current::record);
    match decide(read, &me.name, SystemTime::now()) {
        Step::Answer(job) => Ok(Outcome::Existing(job, array_of(read))),
        Step::Deleted => Ok(Outcome::Deleted),
        Step::Wait { by, until } => Ok(Outcome::InProgress { by, until }),
        _ => Err(ProtocolError::Contended {
            uri: claim.uri().into(),
        }),
    }
}

/// DeleteTask: the tombstone written first, then the execution's job cancelled (the recorded
/// one, or what a holding left held under its marker). A holder's record after it is refused,
/// and that holder cancels its own held job. The job cancelled, if any.
pub async fn delete<S: Slurm>(
    claim: &ClaimStore,
    slurm: &S,
    me: &Holder,
) -> Result<Option<JobRef>, ProtocolError> {
    for _ in 0..ROUNDS {
        let current = claim.read().await.map_err(claim_err("reading the claim"))?;
        let before = current.as_ref().map(|c| c.record().state.clone());
        if before == Some(State::Deleted) {
            return Ok(None);
        }
        let tombstone = Record::new(&me.name, State::Deleted);
        if write(claim, current.as_ref(), tombstone)
            .await
            .map_err(claim_err("writing the tombstone"))?
            .is_none()
        {
            continue;
        }
        return match before {
            Some(State::Recorded { job, .. }) => {
                slurm
                    .cancel(job)
                    .await
                    .map_err(slurm_err(format!("cancelling {job} after its tombstone")))?;
                Ok(Some(job))
            }
            Some(State::Submitting { marker, index, .. }) => {
                cancel_left(slurm, &marker, index).await?;
                Ok(None)
            }
            _ => Ok(None),
        };
    }
    Err(ProtocolError::Contended {
        uri: claim.uri().into(),
    })
}

/// One Slurm error reported for several members.
#[derive(Debug)]
struct Shared<E>(std::sync::Arc<E>);

impl<E: std::fmt::Display> std::fmt::Display for Shared<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<E: std::error::Error> std::error::Error for Shared<E> {}
