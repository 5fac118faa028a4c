//! The phase table: every rule of `phase.rs`, row by row.

use super::*;
use crate::slurmrestd::JobState;
use FailureClass::*;
use Phase::*;

fn packed(state: &[&str]) -> Packed {
    Packed::pack(&JobState::from_strings(state.iter().copied())).0
}

/// Slurm's state `state` (base state and flags) as the tracker gives it, with its class.
fn slurm(state: &[&str]) -> Facts {
    known(Slurm::State(packed(state)), packed(state).class())
}

fn known(slurm: Slurm, class: Option<FailureClass>) -> Facts {
    Facts {
        slurm: Some((slurm, class)),
        requeue_budget: 2,
        ..Facts::default()
    }
}

/// Every rule of [`decide`], one row each: facts → phase, class, reason.
#[test]
fn the_phase_table() {
    let ok = slurm(&["COMPLETED"]);
    let user = slurm(&["FAILED"]);
    let infra = slurm(&["NODE_FAIL"]);
    let rows: &[(&str, Facts, Phase, Option<FailureClass>, Reason)] = &[
        (
            "nothing known",
            Facts::default(),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "deferred submit going",
            Facts {
                submit: Some(Submit::Going),
                ..Facts::default()
            },
            Queued,
            None,
            Reason::Submit,
        ),
        (
            "deferred submit failed",
            Facts {
                submit: Some(Submit::Failed),
                ..Facts::default()
            },
            RetryableFailed,
            None,
            Reason::Submit,
        ),
        (
            "deleted before its submit",
            Facts {
                submit: Some(Submit::Withdrawn),
                ..Facts::default()
            },
            Aborted,
            None,
            Reason::Submit,
        ),
        ("pending", slurm(&["PENDING"]), Queued, None, Reason::Slurm),
        ("running", slurm(&["RUNNING"]), Running, None, Reason::Slurm),
        ("completed", ok, Succeeded, None, Reason::Slurm),
        (
            "cancelled",
            slurm(&["CANCELLED"]),
            Aborted,
            None,
            Reason::Slurm,
        ),
        (
            "non-zero exit",
            user,
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "revoked",
            slurm(&["PENDING", "REVOKED"]),
            Failed,
            Some(Permanent),
            Reason::Slurm,
        ),
        (
            "node failure, not requeued",
            infra,
            RetryableFailed,
            Some(Infrastructure),
            Reason::Slurm,
        ),
        (
            "job id given away",
            Facts {
                job_lost: true,
                ..ok
            },
            RetryableFailed,
            Some(Infrastructure),
            Reason::JobLost,
        ),
        (
            "ended, accounting awaited",
            Facts {
                accounting_awaited: true,
                ..user
            },
            Running,
            None,
            Reason::AwaitingAccounting,
        ),
        (
            "running, accounting awaited is no hold",
            Facts {
                accounting_awaited: true,
                ..slurm(&["RUNNING"])
            },
            Running,
            None,
            Reason::Slurm,
        ),
        (
            "requeued within budget",
            Facts {
                requeues: 2,
                ..slurm(&["PENDING"])
            },
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "requeued past budget (preemption)",
            Facts {
                requeues: 3,
                ..slurm(&["RUNNING"])
            },
            RetryableFailed,
            Some(Infrastructure),
            Reason::RequeueBudget,
        ),
        (
            "past budget but succeeded",
            Facts { requeues: 3, ..ok },
            Succeeded,
            None,
            Reason::Slurm,
        ),
        (
            "past budget but the code failed",
            Facts {
                requeues: 3,
                ..user
            },
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "native result being read",
            Facts {
                native: Some(Native::Reading),
                ..ok
            },
            Running,
            None,
            Reason::ReadingNativeResult,
        ),
        (
            "native result: recoverable error",
            Facts {
                native: Some(Native::Read {
                    phase: RetryableFailed,
                    from_error_doc: true,
                }),
                ..ok
            },
            RetryableFailed,
            Some(User),
            Reason::NativeResult,
        ),
        (
            "native result: non-recoverable error",
            Facts {
                native: Some(Native::Read {
                    phase: Failed,
                    from_error_doc: true,
                }),
                ..ok
            },
            Failed,
            Some(Permanent),
            Reason::NativeResult,
        ),
        (
            "gang failed, rank 0 wrote error.pb",
            Facts {
                ranks: true,
                native: Some(Native::Read {
                    phase: Failed,
                    from_error_doc: true,
                }),
                ..user
            },
            Failed,
            Some(Permanent),
            Reason::NativeResult,
        ),
        (
            "gang failed, no error.pb: srun's account stands",
            Facts {
                ranks: true,
                native: Some(Native::Read {
                    phase: Failed,
                    from_error_doc: false,
                }),
                ..user
            },
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "gang lost a node: no native result decides",
            Facts {
                ranks: true,
                native: Some(Native::Reading),
                ..infra
            },
            RetryableFailed,
            Some(Infrastructure),
            Reason::Slurm,
        ),
        (
            "single rank failed: no native result decides",
            Facts {
                native: Some(Native::Reading),
                ..user
            },
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "outputs uploading",
            Facts {
                outputs: Some(Outputs::Uploading),
                ..ok
            },
            Running,
            None,
            Reason::UploadingOutputs,
        ),
        (
            "outputs uploaded",
            Facts {
                outputs: Some(Outputs::Uploaded),
                ..ok
            },
            Succeeded,
            None,
            Reason::Slurm,
        ),
        (
            "an output missing",
            Facts {
                outputs: Some(Outputs::Failed),
                ..ok
            },
            Failed,
            Some(Permanent),
            Reason::OutputsFailed,
        ),
        (
            "outputs need staging, none configured",
            Facts {
                outputs: Some(Outputs::NoStaging),
                ..ok
            },
            Failed,
            Some(Permanent),
            Reason::NoStaging,
        ),
        (
            "upload cancelled",
            Facts {
                outputs: Some(Outputs::Cancelled),
                ..ok
            },
            Aborted,
            None,
            Reason::OutputsCancelled,
        ),
        (
            "outputs of a failed job are not read",
            Facts {
                outputs: Some(Outputs::Uploading),
                ..user
            },
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "native success, then outputs uploading",
            Facts {
                native: Some(Native::Read {
                    phase: Succeeded,
                    from_error_doc: false,
                }),
                outputs: Some(Outputs::Uploading),
                ..ok
            },
            Running,
            None,
            Reason::UploadingOutputs,
        ),
        // Slurm's states, as the tracker gives them.
        (
            "held for requeue",
            slurm(&["PENDING", "REQUEUE_HOLD"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "held by a reservation's deletion",
            slurm(&["PENDING", "RESV_DEL_HOLD"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "suspended",
            slurm(&["SUSPENDED"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "nodes booting",
            slurm(&["RUNNING", "CONFIGURING"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "stopped",
            slurm(&["RUNNING", "STOPPED"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "signalled",
            slurm(&["RUNNING", "SIGNALING"]),
            Running,
            None,
            Reason::Slurm,
        ),
        (
            "resizing",
            slurm(&["RUNNING", "RESIZING"]),
            Running,
            None,
            Reason::Slurm,
        ),
        (
            "epilog running",
            slurm(&["COMPLETED", "COMPLETING"]),
            Running,
            None,
            Reason::Slurm,
        ),
        (
            "staging out",
            slurm(&["COMPLETED", "STAGE_OUT"]),
            Running,
            None,
            Reason::Slurm,
        ),
        (
            "timeout",
            slurm(&["TIMEOUT"]),
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "out of memory",
            slurm(&["OUT_OF_MEMORY"]),
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "deadline",
            slurm(&["DEADLINE"]),
            RetryableFailed,
            Some(User),
            Reason::Slurm,
        ),
        (
            "boot failure",
            slurm(&["BOOT_FAIL"]),
            RetryableFailed,
            Some(Infrastructure),
            Reason::Slurm,
        ),
        (
            "preempted",
            slurm(&["PREEMPTED"]),
            RetryableFailed,
            Some(Infrastructure),
            Reason::Slurm,
        ),
        (
            "special exit",
            slurm(&["PENDING", "SPECIAL_EXIT"]),
            Failed,
            Some(Permanent),
            Reason::Slurm,
        ),
        (
            "failed, requeued by Slurm",
            slurm(&["FAILED", "REQUEUED"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "node failure, requeued by Slurm",
            slurm(&["NODE_FAIL", "REQUEUED"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "a state not known",
            slurm(&["LAUNCH_FAILED_SOMEHOW"]),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "a state not known for long",
            known(Slurm::Unknown { for_long: true }, Some(Permanent)),
            Failed,
            Some(Permanent),
            Reason::Slurm,
        ),
        (
            "a state not known, briefly",
            known(Slurm::Unknown { for_long: false }, None),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "not answered for yet",
            known(Slurm::NotYet, None),
            Queued,
            None,
            Reason::Slurm,
        ),
        (
            "lost: no listing, record or marker",
            known(Slurm::Lost, Some(Infrastructure)),
            RetryableFailed,
            Some(Infrastructure),
            Reason::Slurm,
        ),
        (
            "a marker's state",
            known(Slurm::Marker(packed(&["COMPLETED"])), None),
            Succeeded,
            None,
            Reason::Slurm,
        ),
        (
            "a marker's state not known",
            known(Slurm::Marker(packed(&["WEIRD"])), None),
            Failed,
            None,
            Reason::Slurm,
        ),
    ];
    for (name, facts, phase, class, reason) in rows {
        let d = decide(facts);
        assert_eq!(
            (d.phase, d.class, d.reason),
            (*phase, *class, *reason),
            "{name}: {facts:?}"
        );
    }
    // The tracker's own reading of a state (over, running) agrees with its phase.
    for (name, facts, ..) in rows {
        let Some((slurm, class)) = facts.slurm else {
            continue;
        };
        let s = JobSnapshot {
            slurm,
            class,
            ..JobSnapshot::bare(crate::slurmrestd::JobId(1))
        };
        let phase = of_snapshot(&s);
        assert_eq!(s.is_over(), phase.is_terminal(), "{name}");
        assert_eq!(s.is_running(), phase == Running, "{name}");
    }
}

#[test]
fn the_budget_counts_only_the_clusters_requeues() {
    let f = |state: &[&str], requeues| Facts {
        requeues,
        ..slurm(state)
    };
    assert_eq!(over_budget(&f(&["PENDING"], 3)), Some((3, 2)));
    assert_eq!(over_budget(&f(&["PENDING"], 2)), None);
    assert_eq!(over_budget(&f(&["COMPLETED"], 9)), None);
    assert_eq!(over_budget(&f(&["FAILED"], 9)), None);
    assert_eq!(over_budget(&f(&["NODE_FAIL"], 9)), Some((9, 2)));
}
