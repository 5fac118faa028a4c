//! The message's forms and the requeue budget's rule, on hand-built snapshots.

use super::message::*;
use super::*;
use crate::slurmrestd::{ExitCode, JobId};

fn meta() -> ResourceMeta {
    ResourceMeta::new("hpc1", JobId(123), "flyte-t-1", "", "")
}

/// A snapshot of Slurm's state `state` (base state and flags, `+` between them).
fn snap(state: &str, class: Option<FailureClass>) -> JobSnapshot {
    let packed =
        crate::tracker::Packed::pack(&crate::slurmrestd::JobState::from_strings(state.split('+')))
            .0;
    JobSnapshot {
        slurm: crate::tracker::Slurm::State(packed),
        state: Some(state.into()),
        class,
        ..JobSnapshot::bare(JobId(123))
    }
}

/// The requeue budget's verdict on a snapshot (`deployment`: the deployment's budget).
fn over_budget(m: &ResourceMeta, s: &JobSnapshot, deployment: u32) -> Option<(u32, u32)> {
    phase::over_budget(&facts_of(m, s, deployment))
}

/// GetTask's answer of a snapshot that needs no read (no native result, no outputs, no
/// staging), with a deployment budget of 3.
async fn answered(m: &ResourceMeta, s: &JobSnapshot) -> TaskStatus {
    let no_native = std::future::ready((None, None));
    let no_outputs = std::future::ready((None, None));
    let decided = phase::decide_reading(facts_of(m, s, 3), no_native, no_outputs).await;
    answer::answer(m, s, decided, None, &[]).await
}

fn code(rc: u32, signal: Option<(u32, &str)>) -> Option<ExitCode> {
    Some(ExitCode {
        status: vec![
            if signal.is_some() {
                "SIGNALED"
            } else {
                "ERROR"
            }
            .into(),
        ],
        return_code: Some(rc),
        signal: signal.map(|s| s.0),
        signal_name: signal.map(|s| s.1.to_string()),
    })
}

/// The stable first lines, one per failure kind (docs/operations.md shows them).
#[test]
fn headlines() {
    use FailureClass::*;
    let m = meta();
    let mut s = snap("TIMEOUT", Some(User));
    s.time_limit_minutes = Some(10);
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[TIMEOUT] after 00:10:00 (job 123)"
    );
    s.time_limit_minutes = Some(1500);
    s.nodes = Some("node1".into());
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[TIMEOUT] after 1-01:00:00 (job 123 on node1)"
    );
    s.time_limit_minutes = None;
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[TIMEOUT] job 123 reached its time limit on node1"
    );

    let mut s = snap("OUT_OF_MEMORY", Some(User));
    s.memory_per_node_mib = Some(4096);
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[OUT_OF_MEMORY] job 123 used more than its 4G"
    );
    s.memory_per_node_mib = Some(100);
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[OUT_OF_MEMORY] job 123 used more than its 100M"
    );

    let mut s = snap("NODE_FAIL", Some(Infrastructure));
    s.nodes = Some("node3".into());
    assert_eq!(headline(&m, &s).unwrap(), "[NODE_FAIL] node3 (job 123)");

    let mut s = snap("FAILED", Some(User));
    s.exit_code = code(3, None);
    s.nodes = Some("node1".into());
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[FAILED] job 123 exited with code 3 on node1"
    );
    s.exit_code = code(0, Some((9, "KILL")));
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[FAILED] job 123 was killed by signal KILL on node1"
    );
    s.exit_code = code(137, None);
    assert_eq!(
        headline(&m, &s).unwrap(),
        "[FAILED] job 123 exited with code 137 (128+9: killed by a signal?) on node1"
    );

    assert_eq!(
        headline(&m, &snap("PREEMPTED", Some(Infrastructure))).unwrap(),
        "[PREEMPTED] job 123 was preempted"
    );
    assert_eq!(
        headline(&m, &snap("PENDING+SPECIAL_EXIT", Some(Permanent))).unwrap(),
        "[SPECIAL_EXIT] job 123 is held by Slurm after a special exit"
    );
    let mut lost = snap("RUNNING", Some(Infrastructure));
    lost.note = Some("not known to slurmctld".into());
    assert_eq!(headline(&m, &lost).unwrap(), "[LOST] job 123");
    let mut unknown = snap("WEIRD", Some(Permanent));
    unknown.note = Some("does not know".into());
    assert_eq!(headline(&m, &unknown).unwrap(), "[UNKNOWN_STATE] job 123");

    // Not failed: no tag, the message starts with the state as before.
    assert_eq!(headline(&m, &snap("RUNNING", None)), None);
    assert!(message(&m, &snap("RUNNING", None)).starts_with("Slurm job 123 is RUNNING"));
}

#[test]
fn the_message_puts_the_tag_first_then_the_state_and_how_to_look_inside() {
    let m = meta();
    let mut s = snap("TIMEOUT", Some(FailureClass::User));
    s.time_limit_minutes = Some(1);
    s.signal = Some("TERM".into());
    let text = message(&m, &s);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "[TIMEOUT] after 00:01:00 (job 123)");
    assert_eq!(lines[1], "Slurm job 123 is TIMEOUT, signal TERM");
    let running = message(&m, &snap("RUNNING", None));
    assert!(
        running.ends_with("\nattach: srun --jobid=123 --overlap --pty bash"),
        "{running}"
    );
}

/// A job array's message: the worst element's tag line under its own id naming its index,
/// the counts, the failed indices and a line for each (at most FAILED_LISTED).
#[test]
fn an_arrays_message_names_its_worst_element_and_counts_the_others() {
    use crate::tracker::ElementSnapshot;
    let m = ResourceMeta {
        array: Some("0-14".into()),
        ..meta()
    };
    let element = |i: u32, state: &str, class: Option<FailureClass>, rc: Option<u32>| {
        let mut s = snap(state, class);
        s.job_id = JobId(200 + i);
        s.exit_code = rc.and_then(|rc| code(rc, None));
        ElementSnapshot {
            index: i,
            snapshot: s,
        }
    };
    let mut s = snap("FAILED", Some(FailureClass::User));
    s.elements = (0..15)
        .map(|i| match i {
            // Twelve user failures, one node failure: the user's is worse, lowest index.
            2..=13 => element(i, "FAILED", Some(FailureClass::User), Some(i)),
            14 => element(i, "NODE_FAIL", Some(FailureClass::Infrastructure), None),
            _ => element(i, "COMPLETED", None, Some(0)),
        })
        .collect();
    let text = message(&m, &s);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "[FAILED] job 202 exited with code 2 (element 2 of job array 123)"
    );
    assert!(
        text.contains(
            "job array 123: 15 of 15 elements done (2 COMPLETED, 12 FAILED, 1 NODE_FAIL)"
        ),
        "{text}"
    );
    assert!(
        text.contains("\nfailed elements: 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14\n"),
        "{text}"
    );
    assert!(
        text.contains("\nelement 2 (job 202) is FAILED, exit code 2:0"),
        "{text}"
    );
    assert!(
        !text.contains("element 12 (job"),
        "only the first ten: {text}"
    );
    assert!(text.contains("\n... and 3 more"), "{text}");
    // Running: how to attach to an element that runs, not to the array's id.
    let mut s = snap("RUNNING", None);
    s.elements = vec![
        element(0, "COMPLETED", None, Some(0)),
        ElementSnapshot {
            index: 1,
            snapshot: {
                let mut r = snap("RUNNING", None);
                r.job_id = JobId(201);
                r
            },
        },
    ];
    let text = message(&m, &s);
    assert!(
        text.ends_with("\nattach: srun --jobid=201 --overlap --pty bash (element 1)"),
        "{text}"
    );
    assert!(text.contains("job array 123: 1 of 2 elements done (1 COMPLETED, 1 RUNNING)"));
}

/// What slurmstepd wrote to the stderr of a job killed by OverMemoryKill (24.11, recorded
/// on the dev cluster with --failure-modes: `tests/fixtures/slurmrestd/24.11_v0.0.42_oom-*`).
#[test]
fn over_memory_kill_is_read_from_slurmstepds_line() {
    let tail = "slurmstepd-node1: error: StepId=268.batch exceeded memory limit (272166912 > 52428800), being killed\n\
                slurmstepd-node1: error: Exceeded job memory limit\n\
                slurmstepd-node1: error: *** JOB 268 ON node1 CANCELLED AT 2026-12-01T10:00:05 ***\n";
    assert_eq!(over_memory_line(tail), Some((272166912, 52428800)));
    assert_eq!(bytes_text(52428800), "50M");
    assert_eq!(bytes_text(272166912), "259.6M");
    assert_eq!(bytes_text(4 << 30), "4G");
    assert_eq!(over_memory_line("plain failure\nexit 3\n"), None);
    assert_eq!(over_memory_line("exceeded memory limit (x > 1)"), None);
}

#[test]
fn a_requeue_budget_is_spent_only_past_it() {
    let mut m = meta();
    let mut s = snap("RUNNING", None);
    assert_eq!(over_budget(&m, &s, 3), None);
    s.restart_count = Some(3);
    assert_eq!(over_budget(&m, &s, 3), None);
    s.restart_count = Some(4);
    assert_eq!(over_budget(&m, &s, 3), Some((4, 3)));
    // The task's own budget (an interruptible task's threshold) wins over the deployment's.
    m.requeue_budget = Some(5);
    assert_eq!(over_budget(&m, &s, 3), None);
    m.requeue_budget = Some(0);
    s.restart_count = Some(1);
    assert_eq!(over_budget(&m, &s, 3), Some((1, 0)));
    // A job that succeeded in the end succeeded; one whose code failed in its last run
    // failed by itself.
    s.slurm = snap("COMPLETED", None).slurm;
    assert_eq!(over_budget(&m, &s, 3), None);
    let mut failed = snap("FAILED", Some(FailureClass::User));
    failed.restart_count = Some(1);
    assert_eq!(over_budget(&m, &failed, 3), None);
    // Cancelled by the connector for the budget: still reported as the budget's.
    let mut cancelled = snap("CANCELLED", None);
    cancelled.restart_count = Some(1);
    assert_eq!(over_budget(&m, &cancelled, 3), Some((1, 0)));
}

/// A SIGKILLed slurmctld restarted from an older state can give this task's job id to another
/// execution's submit (`tests/real_controller_drill.rs` drives it). That job's COMPLETED is not
/// this task's: the task is the cluster's failure, retried by Flyte.
#[test]
fn a_job_id_that_now_names_another_execution_is_not_this_tasks_end() {
    let mut m = meta();
    m.job_name = "flyte-nightly-c5e5743c58137c41".into();
    let mut s = snap("COMPLETED", None);
    assert_eq!(
        reused_id(&m, &s),
        None,
        "no record read yet: nothing to tell"
    );
    s.key = Some("c5e5743c58137c41".into());
    assert_eq!(reused_id(&m, &s), None, "its own job");
    s.key = Some("73b548290d59f392".into());
    let lost = reused_id(&m, &s).expect("another execution's job");
    assert!(
        lost.starts_with("[SLURM_JOB_LOST] Slurm job 123 now belongs to another execution")
            && lost.contains("73b548290d59f392")
            && lost.contains("c5e5743c58137c41"),
        "{lost}"
    );
    // A task without a key in its name (another plugin's meta) is never judged so.
    m.job_name = "flyte-t-1".into();
    assert_eq!(reused_id(&m, &s), None);
}

/// A job Slurm keeps waiting for an admin (held after a failed launch, or behind drained nodes,
/// as a restarted slurmctld leaves them) says what the admin does; an ordinary wait says nothing.
#[test]
fn a_job_waiting_for_an_admin_says_what_the_admin_does() {
    let m = meta();
    let with_reason = |r: &str| {
        let mut s = snap("PENDING", None);
        s.reason = Some(r.into());
        message(&m, &s)
    };
    let held = with_reason("JobHeldAdmin (launch failed requeued held)");
    assert!(
        held.contains("reason: JobHeldAdmin (launch failed requeued held)"),
        "{held}"
    );
    assert!(held.contains("`scontrol release 123`"), "{held}");
    let drained = with_reason(
        "ReqNodeNotAvail (Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions)",
    );
    assert!(drained.contains("`sinfo -R`"), "{drained}");
    assert!(drained.contains("state=resume"), "{drained}");
    for ordinary in ["Priority", "Resources", "JobHeldUser", "BeginTime"] {
        let text = with_reason(ordinary);
        assert!(
            !text.contains("scontrol") && !text.contains("sinfo"),
            "{text}"
        );
    }
}

/// What a finished task used: summed over its jobs, said in the message and custom_info; a
/// terminal answer held RUNNING while the record is awaited.
mod accounting_stage {
    use std::sync::Arc;

    use super::*;
    use crate::service::report::accounting::{Summary, custom_info};
    use crate::slurmrestd::{JobState, JobUsage, Tres};
    use crate::tracker::Accounting;

    fn tres(kind: &str, name: &str, count: i64) -> Tres {
        Tres {
            kind: kind.into(),
            name: name.into(),
            count,
        }
    }

    /// The figures of `26.05_v0.0.42_slurmdb-job-get-usage.json` (9 s, 1 CPU, 1 node, billing
    /// 1, 5.06 s of CPU, 221 MiB peak), plus a GPU and 2 GiB for the derived figures.
    fn usage(id: u32, elapsed: i64) -> Arc<JobUsage> {
        Arc::new(JobUsage {
            job_id: JobId(id),
            state: JobState::from_strings(["COMPLETED"]),
            start_time: Some(1_796_018_295),
            end_time: Some(1_796_018_295 + elapsed),
            elapsed_secs: Some(elapsed),
            cpu_total_secs: Some(5.062902),
            cpu_user_secs: Some(4.000178),
            cpu_system_secs: Some(1.062724),
            max_rss_bytes: Some(232_185_856),
            energy_joules: Some(1200),
            allocated: vec![
                tres("cpu", "", 1),
                tres("mem", "", 2048),
                tres("node", "", 1),
                tres("billing", "", 1),
                tres("gres", "gpu", 1),
            ],
            source: "slurmdbd",
            array: None,
        })
    }

    fn finished(accounting: Accounting) -> JobSnapshot {
        let mut s = snap("COMPLETED", None);
        s.accounting = accounting;
        s
    }

    #[test]
    fn one_job_gives_sacct_figures_and_the_derived_ones() {
        let s = Summary::of(&[usage(1, 9)]);
        assert_eq!(s.elapsed_seconds, 9);
        assert_eq!(
            (s.cpus, s.nodes, s.gpus, s.billing),
            (Some(1), Some(1), Some(1), Some(1))
        );
        assert_eq!(s.memory_bytes, Some(2 << 30));
        assert_eq!(s.cpu_seconds_allocated, 9.0);
        let eff = s.cpu_efficiency().unwrap();
        assert!((eff - 5.062902 / 9.0).abs() < 1e-9, "{eff}");
        let mem = s.memory_efficiency().unwrap();
        assert!((mem - 232_185_856.0 / f64::from(2u32 << 30)).abs() < 1e-9);
        let j = s.to_json();
        for k in [
            "elapsed_seconds",
            "cpus",
            "nodes",
            "gpus",
            "memory_bytes",
            "billing",
            "cpu_seconds_allocated",
            "cpu_seconds_used",
            "cpu_efficiency",
            "max_rss_bytes",
            "memory_efficiency",
            "node_hours",
            "gpu_hours",
            "billing_seconds",
            "energy_joules",
        ] {
            assert!(j.get(k).is_some_and(|v| !v.is_null()), "{k} in {j}");
        }
        assert_eq!(j["cpu_efficiency"], serde_json::json!(0.5625));
        assert_eq!(
            s.line(),
            "Slurm accounting: 9 s elapsed on 1 node × 1 CPU, 1 GPU; CPU time 5.1 s of 9 s \
             allocated (56 % efficiency); max RSS 221 MiB of 2048 MiB (11 %); 0.003 GPU-hours; \
             billing 9 × s; 1200 J"
        );
    }

    #[test]
    fn an_array_sums_its_elements_and_keeps_the_largest_peak() {
        let mut other = (*usage(2, 30)).clone();
        other.max_rss_bytes = Some(1 << 30);
        other.allocated[0].count = 4;
        let s = Summary::of(&[usage(1, 10), Arc::new(other)]);
        assert_eq!(s.jobs, 2);
        assert_eq!(s.elapsed_seconds, 40);
        assert_eq!(s.cpu_seconds_allocated, 10.0 + 4.0 * 30.0);
        assert_eq!(s.cpus, None, "elements differ: no one allocation to show");
        assert_eq!(s.nodes, Some(1));
        assert_eq!(s.max_rss_bytes, Some(1 << 30));
        assert_eq!(s.node_seconds, 40.0);
        assert_eq!(s.energy_joules, Some(2400));
        assert!(
            s.line()
                .starts_with("Slurm accounting (2 jobs, summed): 40 s elapsed")
        );
    }

    #[test]
    fn without_usage_gathering_the_line_says_what_was_allocated() {
        let mut u = (*usage(1, 9)).clone();
        u.cpu_total_secs = None;
        u.max_rss_bytes = None;
        u.energy_joules = None;
        let s = Summary::of(&[Arc::new(u)]);
        assert_eq!(s.cpu_efficiency(), None);
        assert!(s.line().contains("9 CPU-seconds allocated"), "{}", s.line());
        assert!(s.to_json().get("cpu_efficiency").is_none());
    }

    #[tokio::test]
    async fn a_terminal_answer_is_held_running_while_the_record_is_awaited() {
        let m = meta();
        let held = |s: &JobSnapshot| {
            crate::service::phase::decide(&facts_of(&meta(), s, 3)).reason
                == crate::service::phase::Reason::AwaitingAccounting
        };
        let s = finished(Accounting::Awaited);
        assert!(held(&s));
        let r = answered(&m, &s).await;
        assert_eq!(r.phase, Phase::Running);
        assert!(r.message.contains("ended (COMPLETED)"), "{}", r.message);
        assert!(r.message.contains("slurmdbd"), "{}", r.message);
        assert_eq!(r.accounting, None);
        // Not held once read, nor when it will not come, nor while the job runs.
        assert!(!held(&finished(Accounting::Read(vec![usage(1, 9)]))));
        assert!(!held(&finished(Accounting::Unavailable("x".into()))));
        let mut running = snap("RUNNING", None);
        running.accounting = Accounting::Awaited;
        assert!(!held(&running));
    }

    #[tokio::test]
    async fn the_terminal_answer_carries_the_line_and_custom_info() {
        let m = meta();
        let s = finished(Accounting::Read(vec![usage(1, 9)]));
        let r = answered(&m, &s).await;
        assert!(
            r.message
                .lines()
                .last()
                .unwrap()
                .starts_with("Slurm accounting: 9 s"),
            "{}",
            r.message
        );
        let info = r.custom_info().unwrap();
        assert_eq!(info["accounting"]["elapsed_seconds"], serde_json::json!(9));
        assert_eq!(info["accounting"]["source"], serde_json::json!("slurmdbd"));

        let s = finished(Accounting::Unavailable(
            "the cluster has no accounting".into(),
        ));
        let r = answered(&m, &s).await;
        assert!(
            r.message
                .ends_with("no Slurm accounting: the cluster has no accounting")
        );
        assert_eq!(
            custom_info(&s).unwrap()["unavailable"],
            serde_json::json!("the cluster has no accounting")
        );
    }
}

/// A requeue says what it was when slurmdbd's records of the earlier runs say it.
#[tokio::test]
async fn a_requeue_names_preemptions_and_node_failures_when_slurmdbd_says() {
    use crate::tracker::Requeues;
    let m = meta();
    let mut s = snap("PENDING", None);
    s.restart_count = Some(2);
    let said = async |s: &JobSnapshot| {
        let r = answered(&m, s).await;
        r.message.lines().last().unwrap().to_string()
    };
    assert_eq!(
        said(&s).await,
        "requeued by Slurm after a node failure or preemption (2 of 3)"
    );
    s.requeues = Some(Requeues {
        preempted: 2,
        node_failures: 0,
    });
    assert_eq!(
        said(&s).await,
        "requeued by Slurm after 2 preemptions (2 of 3)"
    );
    s.requeues = Some(Requeues {
        preempted: 1,
        node_failures: 1,
    });
    assert_eq!(
        said(&s).await,
        "requeued by Slurm after 1 preemption and 1 node failure (2 of 3)"
    );
}
