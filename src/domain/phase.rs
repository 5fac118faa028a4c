//! A task's phase: what GetTask answers, decided by the service (`service/phase.rs`) of what the
//! tracker knows; each Flyte wire converts it to its own enum.

/// A task's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Queued,
    Running,
    Succeeded,
    /// Failed for good: Flyte's backend does not retry it.
    Failed,
    /// Failed, and Flyte's backend retries it within the task's `retries`.
    RetryableFailed,
    Aborted,
}

impl Phase {
    /// Whether a task in this phase is done: Flyte stops polling it and never sees it change.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Phase::Succeeded | Phase::Failed | Phase::Aborted | Phase::RetryableFailed
        )
    }
}
