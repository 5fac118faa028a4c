//! A job's Slurm state packed into four bytes, what it says in Slurm's terms (requeued, still
//! completing, running, over), the failure class of each terminal state (`docs/operations.md`,
//! "Failure classes"), read from v0.0.42 state arrays (base state + flags), and [`Slurm`]: what
//! the tracker knows of a job's state. The phase a task is given of these facts is decided by
//! the service, not here.

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

    /// Slurm put the job back in the queue, or holds it there to be requeued.
    pub fn requeued(&self) -> bool {
        self.has("REQUEUED") || self.has("REQUEUE_HOLD") || self.has("REQUEUE_FED")
    }

    /// Still ending: its epilog or its stage-out runs.
    pub fn completing(&self) -> bool {
        self.has("COMPLETING") || self.has("STAGE_OUT")
    }

    /// Running or still ending, neither failed nor put back: a RUNNING job that is still
    /// CONFIGURING (its nodes boot) or STOPPED has not started.
    pub fn running(&self) -> bool {
        self.class().is_none()
            && !self.requeued()
            && (self.completing()
                || (self.base == Base::Running && !self.has("CONFIGURING") && !self.has("STOPPED")))
    }

    /// Ended well: COMPLETED, its epilog done, not put back.
    pub fn completed(&self) -> bool {
        self.class().is_none()
            && !self.requeued()
            && !self.completing()
            && self.base == Base::Completed
    }

    /// Whether this connector knows the state: an unknown base state is never guessed, unless a
    /// flag says what it is.
    pub fn is_known(&self) -> bool {
        self.base != Base::Other || self.class().is_some() || self.requeued() || self.completing()
    }

    /// The failure class, `None` unless the job ended without success (or Slurm will not run it
    /// again: REVOKED, SPECIAL_EXIT). A requeued or still completing job has none yet.
    pub fn class(&self) -> Option<FailureClass> {
        // Slurm holds a SPECIAL_EXIT job and revokes a federated sibling: neither runs again
        // whatever the task does.
        if self.has("REVOKED") || self.has("SPECIAL_EXIT") {
            return Some(FailureClass::Permanent);
        }
        if self.requeued() || self.completing() {
            return None;
        }
        self.base.failure_class()
    }

    /// Will not change again (the record is worth fetching, the entry may age out): a failure,
    /// or completed or cancelled with nothing left to run.
    pub fn is_terminal(&self) -> bool {
        self.class().is_some()
            || (!self.requeued()
                && !self.completing()
                && matches!(self.base, Base::Completed | Base::Cancelled))
    }
}

/// What the tracker knows of a job's state, with its failure class: the facts a task's phase is
/// decided of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slurm {
    /// No answer for the job yet (it is being adopted), or neither slurmctld nor (yet) slurmdbd
    /// knows it.
    NotYet,
    /// Slurm's state: slurmctld's listing or slurmdbd's record (the last one known while neither
    /// lists the job).
    State(Packed),
    /// The state the job's exit-status marker gives: neither a listing nor a record says it.
    Marker(Packed),
    /// A state this connector does not know; `for_long`: for `unknown_state_after` or longer.
    Unknown { for_long: bool },
    /// Neither slurmctld nor slurmdbd has known the job for `lost_after`, and it left no marker.
    Lost,
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

    fn packed(items: &[&str]) -> Packed {
        Packed::pack(&JobState::from_strings(items.iter().copied())).0
    }

    /// What a state says in Slurm's terms (the phase of each is `service/phase.rs`'s table).
    #[test]
    fn what_a_state_says() {
        let says = |items: &[&str]| {
            let p = packed(items);
            (p.running(), p.completed(), p.is_terminal(), p.is_known())
        };
        // (running, completed, terminal, known)
        type Says = (bool, bool, bool, bool);
        let table: &[(&[&str], Says)] = &[
            (&["PENDING"], (false, false, false, true)),
            (&["PENDING", "REQUEUE_HOLD"], (false, false, false, true)),
            (&["RUNNING", "CONFIGURING"], (false, false, false, true)),
            (&["RUNNING", "STOPPED"], (false, false, false, true)),
            (&["RUNNING"], (true, false, false, true)),
            (&["RUNNING", "SIGNALING"], (true, false, false, true)),
            (&["COMPLETED", "COMPLETING"], (true, false, false, true)),
            (&["COMPLETED", "STAGE_OUT"], (true, false, false, true)),
            (&["COMPLETED"], (false, true, true, true)),
            (&["CANCELLED"], (false, false, true, true)),
            (&["FAILED"], (false, false, true, true)),
            (&["FAILED", "REQUEUED"], (false, false, false, true)),
            (&["PENDING", "REVOKED"], (false, false, true, true)),
            (&["LAUNCH_FAILED_SOMEHOW"], (false, false, false, false)),
            (
                &["LAUNCH_FAILED_SOMEHOW", "REQUEUED"],
                (false, false, false, true),
            ),
        ];
        for (state, want) in table {
            assert_eq!(says(state), *want, "{state:?}");
        }
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
        }
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
