//! A job's Slurm state packed into four bytes, the Slurm → Flyte phase map, and the failure class
//! of each terminal state (`docs/operations.md`, "Failure classes"), read from v0.0.42 state
//! arrays (base state + flags).
//!
//! Flyte's backend retries a RETRYABLE_FAILED task until its `max_attempts` are spent and never
//! retries a FAILED one (`flyte-backend.md`), and a connector cannot mark a failure SYSTEM. So the
//! class decides the phase: what the user's code did is RETRYABLE_FAILED (the user's own
//! `retries` apply, as for container tasks); what a retry cannot change is FAILED; what the
//! cluster did is put back on the cluster by the connector, and only a spent budget reaches Flyte
//! (as RETRYABLE_FAILED).

use crate::proto::core::task_execution::Phase;
use crate::slurmrestd::{BaseState, JobState};

/// Base state as a small code; `Other` keeps its text elsewhere (rare, so not in every entry).
///
/// A deliberate mirror of [`BaseState`] without its `Other(String)`: the tracker keeps one packed
/// entry per tracked job (tens of thousands), and a `String` would make each 24 bytes larger and
/// a heap allocation. [`Packed::pack`] is the only bridge between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Base {
    Pending,
    Running,
    Suspended,
    Completed,
    Cancelled,
    Failed,
    Timeout,
    NodeFail,
    Preempted,
    BootFail,
    Deadline,
    OutOfMemory,
    Other,
}

/// Why a job ended without success, as Flyte should treat it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// The task's code failed: non-zero exit, its time limit, its memory, its deadline. Flyte
    /// retries it within the task's own `retries`.
    User,
    /// A retry cannot help: the same job would end the same way (Slurm revoked or held it for good,
    /// a declared output that can never appear, a NON_RECOVERABLE error.pb). FAILED.
    Permanent,
    /// The cluster failed the job (node failure, boot failure, preemption, lost with no trace):
    /// the connector puts it back on the cluster, within its requeue budget.
    Infrastructure,
}

impl FailureClass {
    /// The phase Flyte is given once the connector stops absorbing a failure of this class.
    pub fn phase(self) -> Phase {
        match self {
            FailureClass::User | FailureClass::Infrastructure => Phase::RetryableFailed,
            FailureClass::Permanent => Phase::Failed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::User => "user",
            FailureClass::Permanent => "permanent",
            FailureClass::Infrastructure => "infrastructure",
        }
    }
}

impl Base {
    /// The failure class of a terminal base state; `None` for success, cancellation, states that
    /// are not terminal and states this connector does not know.
    pub fn failure_class(self) -> Option<FailureClass> {
        match self {
            Base::Failed | Base::Timeout | Base::OutOfMemory | Base::Deadline => {
                Some(FailureClass::User)
            }
            Base::NodeFail | Base::BootFail | Base::Preempted => Some(FailureClass::Infrastructure),
            Base::Pending
            | Base::Running
            | Base::Suspended
            | Base::Completed
            | Base::Cancelled
            | Base::Other => None,
        }
    }
}

/// Flags that change the phase (others are ignored for the map but kept as text in messages).
const FLAGS: &[&str] = &[
    "COMPLETING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "STOPPED",
    "STAGE_OUT",
    "SIGNALING",
    "RESIZING",
    "SPECIAL_EXIT",
    "REVOKED",
];

fn flag_bit(name: &str) -> u16 {
    FLAGS
        .iter()
        .position(|f| *f == name)
        .map(|i| 1 << i)
        .unwrap_or(0)
}

/// Four bytes per job instead of a `JobState`'s ~56 plus heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub base: Base,
    pub flags: u16,
}

impl Packed {
    pub fn pack(s: &JobState) -> (Packed, Option<Box<str>>) {
        let (base, other) = match &s.base {
            BaseState::Pending => (Base::Pending, None),
            BaseState::Running => (Base::Running, None),
            BaseState::Suspended => (Base::Suspended, None),
            BaseState::Completed => (Base::Completed, None),
            BaseState::Cancelled => (Base::Cancelled, None),
            BaseState::Failed => (Base::Failed, None),
            BaseState::Timeout => (Base::Timeout, None),
            BaseState::NodeFail => (Base::NodeFail, None),
            BaseState::Preempted => (Base::Preempted, None),
            BaseState::BootFail => (Base::BootFail, None),
            BaseState::Deadline => (Base::Deadline, None),
            BaseState::OutOfMemory => (Base::OutOfMemory, None),
            BaseState::Other(t) => (Base::Other, Some(t.as_str().into())),
        };
        let flags = s.flags.iter().fold(0u16, |acc, f| acc | flag_bit(f));
        (Packed { base, flags }, other)
    }

    pub fn has(&self, flag: &str) -> bool {
        self.flags & flag_bit(flag) != 0
    }

    /// `PENDING`, `RUNNING+COMPLETING`, ... (`other` is the text of an unknown base state).
    pub fn text(&self, other: Option<&str>) -> String {
        let mut s = match self.base {
            Base::Other => other.unwrap_or("UNKNOWN").to_string(),
            b => BaseState::from(b).as_str().to_string(),
        };
        for (i, f) in FLAGS.iter().enumerate() {
            if self.flags & (1 << i) != 0 {
                s.push('+');
                s.push_str(f);
            }
        }
        s
    }

    /// The Flyte phase, `None` for a state this connector does not know (never guessed).
    ///
    /// Flags first, because they override what the base state suggests: a COMPLETING job is
    /// still running its epilog (RUNNING), a REQUEUED one goes back to the queue (Slurm put it
    /// back itself), a REVOKED or SPECIAL_EXIT one will not run again here (FAILED). A terminal
    /// failure gets the phase of its [`FailureClass`]; the service absorbs infrastructure
    /// failures before Flyte sees that phase.
    pub fn phase(&self) -> Option<Phase> {
        if let Some(c) = self.class() {
            return Some(c.phase());
        }
        if self.has("REQUEUED") || self.has("REQUEUE_HOLD") || self.has("REQUEUE_FED") {
            return Some(Phase::Queued);
        }
        if self.has("COMPLETING") || self.has("STAGE_OUT") {
            return Some(Phase::Running);
        }
        Some(match self.base {
            Base::Pending | Base::Suspended => Phase::Queued,
            Base::Running if self.has("CONFIGURING") || self.has("STOPPED") => Phase::Queued,
            Base::Running => Phase::Running,
            Base::Completed => Phase::Succeeded,
            Base::Cancelled => Phase::Aborted,
            Base::Failed
            | Base::Timeout
            | Base::NodeFail
            | Base::BootFail
            | Base::Deadline
            | Base::OutOfMemory
            // Classified above; only reached if the flag checks change, and then the class of
            // the base state is still the answer.
            | Base::Preempted => return self.base.failure_class().map(FailureClass::phase),
            Base::Other => return None,
        })
    }

    /// The failure class, `None` unless the job ended without success (or Slurm will not run it
    /// again: REVOKED, SPECIAL_EXIT). A requeued or still completing job has none yet.
    pub fn class(&self) -> Option<FailureClass> {
        // Slurm holds a SPECIAL_EXIT job and revokes a federated sibling: neither runs again
        // whatever the task does.
        if self.has("REVOKED") || self.has("SPECIAL_EXIT") {
            return Some(FailureClass::Permanent);
        }
        if self.has("REQUEUED")
            || self.has("REQUEUE_HOLD")
            || self.has("REQUEUE_FED")
            || self.has("COMPLETING")
            || self.has("STAGE_OUT")
        {
            return None;
        }
        self.base.failure_class()
    }

    /// Will not change again (the record is worth fetching, the entry may age out).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.phase(),
            Some(Phase::Succeeded | Phase::Failed | Phase::Aborted | Phase::RetryableFailed)
        )
    }
}

impl From<Base> for BaseState {
    fn from(b: Base) -> BaseState {
        match b {
            Base::Pending => BaseState::Pending,
            Base::Running => BaseState::Running,
            Base::Suspended => BaseState::Suspended,
            Base::Completed => BaseState::Completed,
            Base::Cancelled => BaseState::Cancelled,
            Base::Failed => BaseState::Failed,
            Base::Timeout => BaseState::Timeout,
            Base::NodeFail => BaseState::NodeFail,
            Base::Preempted => BaseState::Preempted,
            Base::BootFail => BaseState::BootFail,
            Base::Deadline => BaseState::Deadline,
            Base::OutOfMemory => BaseState::OutOfMemory,
            Base::Other => BaseState::Other(String::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(items: &[&str]) -> Option<Phase> {
        Packed::pack(&JobState::from_strings(items.iter().copied()))
            .0
            .phase()
    }

    #[test]
    fn plugin_state_map() {
        assert_eq!(phase(&["PENDING"]), Some(Phase::Queued));
        assert_eq!(phase(&["PENDING", "REQUEUE_HOLD"]), Some(Phase::Queued));
        assert_eq!(phase(&["PENDING", "RESV_DEL_HOLD"]), Some(Phase::Queued));
        assert_eq!(phase(&["SUSPENDED"]), Some(Phase::Queued));
        assert_eq!(phase(&["RUNNING", "CONFIGURING"]), Some(Phase::Queued));
        assert_eq!(phase(&["RUNNING", "STOPPED"]), Some(Phase::Queued));
        assert_eq!(phase(&["RUNNING"]), Some(Phase::Running));
        assert_eq!(phase(&["RUNNING", "SIGNALING"]), Some(Phase::Running));
        assert_eq!(phase(&["RUNNING", "RESIZING"]), Some(Phase::Running));
        assert_eq!(phase(&["COMPLETED", "COMPLETING"]), Some(Phase::Running));
        assert_eq!(phase(&["COMPLETED", "STAGE_OUT"]), Some(Phase::Running));
        assert_eq!(phase(&["COMPLETED"]), Some(Phase::Succeeded));
        assert_eq!(phase(&["CANCELLED"]), Some(Phase::Aborted));
        // Every terminal failure is retryable: the user's code (Flyte's retries apply), or the
        // cluster (absorbed by the service; what reaches Flyte is a spent budget).
        for s in [
            "FAILED",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
            "TIMEOUT",
            "DEADLINE",
            "BOOT_FAIL",
            "PREEMPTED",
        ] {
            assert_eq!(phase(&[s]), Some(Phase::RetryableFailed), "{s}");
        }
        assert_eq!(phase(&["PENDING", "SPECIAL_EXIT"]), Some(Phase::Failed));
        assert_eq!(phase(&["PENDING", "REVOKED"]), Some(Phase::Failed));
        assert_eq!(phase(&["FAILED", "REQUEUED"]), Some(Phase::Queued));
        assert_eq!(phase(&["LAUNCH_FAILED_SOMEHOW"]), None);
        assert_eq!(phase(&[]), None);
    }

    fn class(items: &[&str]) -> Option<FailureClass> {
        Packed::pack(&JobState::from_strings(items.iter().copied()))
            .0
            .class()
    }

    /// The table of `docs/operations.md` ("Failure classes"), row by row.
    #[test]
    fn failure_classes() {
        use FailureClass::*;
        let table: &[(&[&str], Option<FailureClass>)] = &[
            (&["COMPLETED"], None),
            (&["CANCELLED"], None),
            (&["RUNNING"], None),
            (&["PENDING"], None),
            (&["FAILED"], Some(User)),
            (&["TIMEOUT"], Some(User)),
            (&["OUT_OF_MEMORY"], Some(User)),
            (&["DEADLINE"], Some(User)),
            (&["NODE_FAIL"], Some(Infrastructure)),
            (&["BOOT_FAIL"], Some(Infrastructure)),
            (&["PREEMPTED"], Some(Infrastructure)),
            (&["PENDING", "SPECIAL_EXIT"], Some(Permanent)),
            (&["PENDING", "REVOKED"], Some(Permanent)),
            // Requeued by Slurm itself (node failure of a requeueable job): not a failure yet.
            (&["NODE_FAIL", "REQUEUED"], None),
            (&["PENDING", "REQUEUED"], None),
            (&["FAILED", "COMPLETING"], None),
            (&["WEIRD"], None),
        ];
        for (state, want) in table {
            assert_eq!(class(state), *want, "{state:?}");
            if let Some(c) = want {
                assert_eq!(phase(state), Some(c.phase()), "{state:?}");
            }
        }
        assert_eq!(User.phase(), Phase::RetryableFailed);
        assert_eq!(Infrastructure.phase(), Phase::RetryableFailed);
        assert_eq!(Permanent.phase(), Phase::Failed);
    }

    #[test]
    fn text_round_trip() {
        let (p, other) = Packed::pack(&JobState::from_strings(["RUNNING", "COMPLETING", "X"]));
        assert_eq!(p.text(other.as_deref()), "RUNNING+COMPLETING");
        let (p, other) = Packed::pack(&JobState::from_strings(["WEIRD"]));
        assert_eq!(p.text(other.as_deref()), "WEIRD");
        assert_eq!(std::mem::size_of::<Packed>(), 4);
    }
}
