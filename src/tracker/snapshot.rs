//! What GetTask reads of a tracked job: its cached entry as a [`JobSnapshot`] (what is known of
//! its state, its failure class), with the note explaining what Slurm did not state directly
//! (lost, an unknown state, read from a marker).

use crate::slurmrestd::JobId;

use super::accounting::rolled_up;
use super::{Entry, FailureClass, JobSnapshot, Known, Slurm, Tracker};

impl Tracker {
    pub(super) fn snapshot_unknown(&self, id: JobId) -> JobSnapshot {
        JobSnapshot {
            note: Some("state not known yet".into()),
            unreachable: self.health.lock().unwrap().unreachable.clone(),
            held_for_check: self.held_for_check(id),
            ..JobSnapshot::bare(id)
        }
    }

    pub(super) fn snapshot(&self, id: JobId, e: &Entry) -> JobSnapshot {
        let extra = e.extra.as_deref();
        let other = extra.and_then(|x| x.other_state.as_deref());
        // Only a job Slurm (or its marker) reports failed has a class; the exceptions below say
        // theirs.
        let mut class = match e.known {
            Known::Seen | Known::Missing | Known::Marker => e.state.class(),
            _ => None,
        };
        let (slurm, state, note) = match e.known {
            Known::NotYet => (Slurm::NotYet, None, Some("state not known yet".to_string())),
            // No record and no marker: nothing says the task's code failed, so it is the
            // cluster's (lost) job, and the service puts it back.
            Known::Lost => (
                {
                    class = Some(FailureClass::Infrastructure);
                    Slurm::Lost
                },
                Some(e.state.text(other)),
                Some(format!(
                    "Slurm job {id} is not known to slurmctld, and slurmdbd has had no record of \
                     it for {}s{}: its outcome cannot be determined (enable accounting, or raise \
                     MinJobAge, so finished jobs stay visible)",
                    self.cfg.lost_after.as_secs(),
                    self.accounting_note()
                )),
            ),
            Known::MissingUnseen => (
                Slurm::NotYet,
                None,
                Some(format!(
                    "Slurm job {id} is not known to slurmctld, nor (yet) to slurmdbd{}",
                    self.accounting_note()
                )),
            ),
            Known::Marker => (
                Slurm::Marker(e.state),
                Some(e.state.text(other)),
                Some(format!(
                    "Slurm job {id} is no longer known to slurmctld and not in slurmdbd{}; its \
                     outcome was read from the exit-status marker the job left",
                    self.accounting_note()
                )),
            ),
            Known::Seen | Known::Missing => {
                let text = e.state.text(other);
                let missing = (e.known == Known::Missing).then(|| {
                    format!(
                        "no longer listed by slurmctld and not yet in slurmdbd{}; last known state {text}",
                        self.accounting_note()
                    )
                });
                match e.state.is_known() {
                    true => (Slurm::State(e.state), Some(text), missing),
                    false if self.age(e.since) >= self.cfg.unknown_state_after => (
                        {
                            // Not knowing the state again would not help: a retry cannot either.
                            class = Some(FailureClass::Permanent);
                            Slurm::Unknown { for_long: true }
                        },
                        Some(text.clone()),
                        Some(format!(
                            "Slurm reports state {text}, which this connector does not know, for \
                             more than {}s; reporting the task as failed rather than running forever",
                            self.cfg.unknown_state_after.as_secs()
                        )),
                    ),
                    false => (
                        // Not a guess at RUNNING: the job is somewhere between queued and done.
                        Slurm::Unknown { for_long: false },
                        Some(text.clone()),
                        Some(format!(
                            "Slurm reports state {text}, which this connector does not know"
                        )),
                    ),
                }
            }
        };
        // Before the health lock below: that guard lives to the end of the literal, and every
        // element's snapshot takes it too.
        let elements = self.element_snapshots(id, e);
        let accounting = if super::array::is_array(e) {
            rolled_up(e.state.is_terminal(), &elements)
        } else {
            self.accounting_of(e)
        };
        JobSnapshot {
            job_id: id,
            slurm,
            state,
            exit_code: extra.and_then(|x| x.exit_code.clone()),
            reason: extra.and_then(|x| x.reason.clone()),
            note,
            class,
            signal: extra.and_then(|x| x.signal.clone()),
            nodes: extra.and_then(|x| x.nodes.clone()),
            restart_count: extra.and_then(|x| x.restart_count),
            requeues: extra.and_then(|x| x.requeues),
            time_limit_minutes: extra.and_then(|x| x.time_limit_minutes),
            memory_per_node_mib: extra.and_then(|x| x.memory_per_node_mib),
            unreachable: self.health.lock().unwrap().unreachable.clone(),
            elements,
            key: extra.and_then(|x| x.key.as_deref().map(String::from)),
            accounting,
            held_for_check: self.held_for_check(id),
        }
    }

    pub(super) fn accounting_note(&self) -> String {
        match &self.health.lock().unwrap().accounting_error {
            Some(e) => format!(" (slurmdbd: {e})"),
            None => String::new(),
        }
    }
}
