//! The one place a task's phase is decided: [`decide`] reads the [`Facts`] GetTask gathered (the
//! tracker's Slurm state, the requeues against the task's budget, the connector's own reads) and
//! answers the phase, the failure class and the [`Reason`] that decided it. GetTask's report
//! (`report/mod.rs`) calls [`decide_reading`] once, with the facts that cost a read as futures
//! it awaits only when a rule needs them; a deferred submit (`submit/deferred.rs`) calls
//! [`decide`]. Neither sets a phase: they gather facts and write the message of the decision.
//!
//! The map of Slurm's account of a job to a phase is here too ([`of_slurm`]): the tracker keeps
//! what Slurm says (the state, its failure class, a job lost), this decides what it means.
//! Flyte's backend retries a RETRYABLE_FAILED task until its `max_attempts` are spent and never
//! retries a FAILED one (`flyte-backend.md`), and a connector cannot mark a failure SYSTEM. So
//! the class decides the phase of a failure: what the user's code did is RETRYABLE_FAILED (the
//! user's own `retries` apply, as for container tasks); what a retry cannot change is FAILED;
//! what the cluster did is put back on the cluster by Slurm or the connector, and only a spent
//! requeue budget reaches Flyte (as RETRYABLE_FAILED).
//!
//! A leaf: imports the tracker's and `domain`'s types only.

use crate::domain::Phase;
use crate::tracker::{Base, FailureClass, JobSnapshot, Packed, Slurm};

/// Where the submit of a task answered with a deferred meta stands, while it has no job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submit {
    /// Still being made (by this replica or another), or waiting for room or the cluster.
    Going,
    /// Refused for good: Flyte's retry submits the task again.
    Failed,
    /// Deleted (DeleteTask) before its job was submitted.
    Withdrawn,
}

/// A native task's result at its output prefix (`report/native_result.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Native {
    /// Not read yet: the answer waits for it.
    Reading,
    /// Read: the phase it says, and whether it came from an error document (error.pb).
    Read { phase: Phase, from_error_doc: bool },
}

/// The upload of a succeeded task's declared outputs (`report/outputs.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outputs {
    /// The connector must upload them and has no staging backend.
    NoStaging,
    Uploading,
    Uploaded,
    /// An output is missing or cannot be stored: the job finished, so it never will be.
    Failed,
    /// Cancelled by a DeleteTask.
    Cancelled,
}

/// Everything a phase depends on. `Default` is a task known to nobody yet (QUEUED).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// A deferred task's submit, while no job is known.
    pub submit: Option<Submit>,
    /// What the tracker knows of the job's state (Slurm's, a marker's, a job lost) and its
    /// failure class.
    pub slurm: Option<(Slurm, Option<FailureClass>)>,
    /// The task's job id names another execution's job: slurmctld lost its own.
    pub job_lost: bool,
    /// The job ended and its accounting record is still awaited.
    pub accounting_awaited: bool,
    /// How often Slurm requeued the job, and how often the task allows.
    pub requeues: u32,
    pub requeue_budget: u32,
    /// The task runs on several ranks (a gang: its rank 0 may have written an error document).
    pub ranks: bool,
    pub native: Option<Native>,
    pub outputs: Option<Outputs>,
}

/// Which rule decided the phase (the stages write their message by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No job yet: the deferred submit's state.
    Submit,
    /// The tracker's reading of Slurm stands.
    Slurm,
    JobLost,
    /// A finished job is held RUNNING until its accounting is read: Flyte's backend stops asking
    /// at the first terminal answer, and a figure that came later would never reach it.
    AwaitingAccounting,
    /// Slurm requeued the job more often than the task's budget.
    RequeueBudget,
    ReadingNativeResult,
    NativeResult,
    NoStaging,
    UploadingOutputs,
    OutputsFailed,
    OutputsCancelled,
}

/// The phase, whose failure it is, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub phase: Phase,
    pub class: Option<FailureClass>,
    pub reason: Reason,
}

impl Decision {
    fn new(phase: Phase, class: Option<FailureClass>, reason: Reason) -> Decision {
        Decision {
            phase,
            class,
            reason,
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self.phase, Phase::Failed | Phase::RetryableFailed)
    }
}

/// The phase Flyte is given once the connector stops absorbing a failure of this class.
pub fn of_class(c: FailureClass) -> Phase {
    match c {
        FailureClass::User | FailureClass::Infrastructure => Phase::RetryableFailed,
        FailureClass::Permanent => Phase::Failed,
    }
}

/// The phase of what the tracker knows of a job (`class`: the failure class it gave it). A
/// failure's class decides; then flags, because they override what the base state suggests: a
/// COMPLETING job is still running its epilog (RUNNING), a REQUEUED one goes back to the queue
/// (Slurm put it back itself). A state this connector does not know is never guessed: QUEUED
/// (somewhere between queued and done) until the tracker classes it a failure; a marker's is
/// FAILED (the job ended, and nothing says it succeeded).
pub fn of_slurm(slurm: Slurm, class: Option<FailureClass>) -> Phase {
    if let Some(c) = class {
        return of_class(c);
    }
    let of_state = |p: Packed| {
        if let Some(c) = p.class() {
            return Some(of_class(c));
        }
        if p.requeued() {
            return Some(Phase::Queued);
        }
        if p.running() {
            return Some(Phase::Running);
        }
        Some(match p.base {
            Base::Pending | Base::Suspended | Base::Running => Phase::Queued,
            Base::Completed => Phase::Succeeded,
            Base::Cancelled => Phase::Aborted,
            Base::Failed
            | Base::Timeout
            | Base::NodeFail
            | Base::BootFail
            | Base::Deadline
            | Base::OutOfMemory
            | Base::Preempted => return p.base.failure_class().map(of_class),
            Base::Other => return None,
        })
    };
    match slurm {
        Slurm::NotYet | Slurm::Unknown { .. } => Phase::Queued,
        Slurm::Lost => of_class(FailureClass::Infrastructure),
        Slurm::State(p) => of_state(p).unwrap_or(Phase::Queued),
        Slurm::Marker(p) => of_state(p).unwrap_or(Phase::Failed),
    }
}

/// The phase of a tracker's snapshot as Slurm's account alone gives it (the tracker's own
/// tests and tools read it so; GetTask decides with [`decide_reading`]).
pub fn of_snapshot(s: &JobSnapshot) -> Phase {
    of_slurm(s.slurm, s.class)
}

/// Slurm put the job back in the queue more often than its budget allows: `(restarts, budget)`.
/// A job that ended on its own (succeeded, or the task's code failed in its last run) says so
/// itself; the budget speaks only for a job the cluster keeps putting back.
pub fn over_budget(f: &Facts) -> Option<(u32, u32)> {
    let (slurm, class) = f.slurm?;
    let phase = of_slurm(slurm, class);
    let own_end = phase == Phase::Succeeded || class == Some(FailureClass::User);
    (f.requeues > f.requeue_budget && !own_end).then_some((f.requeues, f.requeue_budget))
}

/// Whether the native result decides this task (so it must be read): a job that completed, or a
/// gang whose ranks failed by the task's code (its rank 0 may have written error.pb; a rank
/// other than 0, or a node failure, writes none).
pub fn reads_native_result(f: &Facts) -> bool {
    let d = decide(&Facts {
        native: None,
        outputs: None,
        ..*f
    });
    let slurm_class = f.slurm.and_then(|(_, c)| c);
    d.phase == Phase::Succeeded
        || (d.failed() && f.ranks && slurm_class != Some(FailureClass::Infrastructure))
}

/// What [`decide_reading`] decided, and on which facts.
#[derive(Debug)]
pub struct Decided<N, O> {
    /// The phase of the facts read before any read: Slurm's account, the requeue budget, the
    /// accounting awaited.
    pub by_slurm: Decision,
    /// The phase once the native result was read (`by_slurm` when it was not).
    pub by_native: Decision,
    /// The answer's phase.
    pub decision: Decision,
    pub facts: Facts,
    /// `(restarts, budget)` when Slurm requeued the job past its budget ([`over_budget`]).
    pub over_budget: Option<(u32, u32)>,
    /// What the native result's read said, when the rules asked for it.
    pub native: Option<N>,
    /// What the outputs' upload said, when the rules asked for it.
    pub outputs: Option<O>,
}

/// The phase of a task from `facts` and the two facts that cost a read, a native task's result
/// and the upload of its declared outputs. Each comes as a future with what the answer says of
/// it, awaited only when a rule needs the fact: an unawaited future reads nothing, so a job the
/// native result cannot decide has it not read, and a task that has not succeeded has no
/// outputs uploaded.
pub async fn decide_reading<N, O>(
    mut facts: Facts,
    native: impl Future<Output = (Option<Native>, N)>,
    outputs: impl Future<Output = (Option<Outputs>, O)>,
) -> Decided<N, O> {
    let by_slurm = decide(&facts);
    let native = if reads_native_result(&facts) {
        let (fact, said) = native.await;
        facts.native = fact;
        Some(said)
    } else {
        None
    };
    let by_native = decide(&facts);
    let outputs = if by_native.phase == Phase::Succeeded {
        let (fact, said) = outputs.await;
        facts.outputs = fact;
        Some(said)
    } else {
        None
    };
    Decided {
        by_slurm,
        by_native,
        decision: decide(&facts),
        over_budget: over_budget(&facts),
        facts,
        native,
        outputs,
    }
}

/// The task's phase from its facts; the rules apply in this order, each on the answer so far.
pub fn decide(f: &Facts) -> Decision {
    if let Some(s) = f.submit {
        let phase = match s {
            Submit::Going => Phase::Queued,
            Submit::Failed => Phase::RetryableFailed,
            Submit::Withdrawn => Phase::Aborted,
        };
        return Decision::new(phase, None, Reason::Submit);
    }
    if f.job_lost {
        // Nothing of the other execution's job is this task's; its own was lost with the
        // cluster's crash.
        let class = FailureClass::Infrastructure;
        return Decision::new(of_class(class), Some(class), Reason::JobLost);
    }
    let Some((slurm, class)) = f.slurm else {
        return Decision::new(Phase::Queued, None, Reason::Slurm);
    };
    let phase = of_slurm(slurm, class);
    if phase.is_terminal() && f.accounting_awaited {
        return Decision::new(Phase::Running, None, Reason::AwaitingAccounting);
    }
    let mut d = Decision::new(phase, class, Reason::Slurm);
    if over_budget(f).is_some() {
        // The cluster's failures, not the task's: only a spent budget reaches Flyte, as a
        // retryable failure (Flyte's own retries then start a new attempt).
        d = Decision::new(
            Phase::RetryableFailed,
            Some(FailureClass::Infrastructure),
            Reason::RequeueBudget,
        );
    }
    let completed = d.phase == Phase::Succeeded;
    match f.native {
        Some(Native::Reading) if reads_native_result(f) => {
            d = Decision::new(Phase::Running, d.class, Reason::ReadingNativeResult);
        }
        // A completed job's result decides; a failed gang's only when rank 0 wrote error.pb
        // (else srun's account of the ranks stands).
        Some(Native::Read {
            phase,
            from_error_doc,
        }) if reads_native_result(f) && (completed || from_error_doc) => {
            let class = match phase {
                Phase::Failed => Some(FailureClass::Permanent),
                Phase::RetryableFailed => Some(FailureClass::User),
                _ => None,
            };
            d = Decision::new(phase, class, Reason::NativeResult);
        }
        _ => {}
    }
    if d.phase != Phase::Succeeded {
        return d;
    }
    match f.outputs {
        Some(Outputs::NoStaging) => Decision::new(
            Phase::Failed,
            Some(FailureClass::Permanent),
            Reason::NoStaging,
        ),
        Some(Outputs::Uploading) => {
            Decision::new(Phase::Running, d.class, Reason::UploadingOutputs)
        }
        Some(Outputs::Failed) => Decision::new(
            Phase::Failed,
            Some(FailureClass::Permanent),
            Reason::OutputsFailed,
        ),
        Some(Outputs::Cancelled) => {
            Decision::new(Phase::Aborted, d.class, Reason::OutputsCancelled)
        }
        Some(Outputs::Uploaded) | None => d,
    }
}

#[cfg(test)]
mod tests;
