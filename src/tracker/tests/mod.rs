use super::*;

/// Benchmarks measure bytes per tracked job: an entry stays at 24 bytes (plus the map's 4-byte
/// key and control byte); exit codes and reasons live in the rare boxed extra.
#[test]
fn entry_is_compact() {
    assert_eq!(std::mem::size_of::<Packed>(), 4);
    assert!(
        std::mem::size_of::<Entry>() <= 24,
        "{}",
        std::mem::size_of::<Entry>()
    );
}

mod accounting;
mod arrays;

/// Why a job was requeued: its earlier runs' records in slurmdbd (recorded on 24.11:
/// `24.11_v0.0.42_preempted-slurmdb-job-get-requeued.json`, `..._nodefail-...`).
#[test]
fn requeues_are_counted_from_the_runs_slurmdbd_closed() {
    use crate::slurmrestd::{JobInfo, JobState};
    let run = |s: &str| JobInfo::new(JobId(9), "j", JobState::from_strings([s]));
    let r = super::resolve::requeues_of(&[run("PENDING"), run("PREEMPTED"), run("PREEMPTED")]);
    assert_eq!(
        r,
        Some(Requeues {
            preempted: 2,
            node_failures: 0
        })
    );
    let r = super::resolve::requeues_of(&[run("RUNNING"), run("NODE_FAIL")]);
    assert_eq!(r.map(|r| r.node_failures), Some(1));
    assert_eq!(
        super::resolve::requeues_of(&[run("PENDING"), run("REQUEUED")]),
        None
    );
}
