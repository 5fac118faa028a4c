//! An array whose id slurmctld gave away in a restart from an older state save
//! (`tracker/array_given_away.rs`): when its elements are lost, and when the job under the id is
//! the array's own record or one of its elements' own executions.

use super::*;

#[tokio::test]
async fn an_array_whose_id_slurmctld_gave_away_is_lost_at_once() {
    let (api, t) = tracker();
    t.track_array(JobId(2762), &[0, 1, 2, 3], None);
    set_records(
        &api,
        &[
            record(2763, 2762, 2, "RUNNING", 0),
            record(2764, 2762, 3, "RUNNING", 0),
        ],
    );
    api.answer(&[
        (2762, 0, "PENDING"),
        (2762, 1, "PENDING"),
        (2763, 2, "RUNNING"),
        (2764, 3, "RUNNING"),
    ]);
    t.tick().await;
    assert_eq!(phase_of(&t.status(JobId(2762)).await), Phase::Running);
    // The restarted slurmctld: 2762 is another execution's plain job; 2763 (started before
    // its last state save) still runs; 2764 went with the crash.
    api.answer(&[(2763, 2, "RUNNING")]);
    let other = JobState::from_strings(["RUNNING"]);
    api.plain.lock().unwrap().insert(JobId(2762), other.clone());
    set_records(
        &api,
        &[JobInfo::new(
            JobId(2762),
            "flyte-other-0123456789abcdef",
            other,
        )],
    );
    t.tick().await;
    // A task of the other job asks by the id alone: that job, not the array.
    let theirs = t.status(JobId(2762)).await;
    assert!(theirs.elements.is_empty(), "{theirs:?}");
    assert_eq!(theirs.key.as_deref(), Some("0123456789abcdef"));
    assert_eq!(phase_of(&theirs), Phase::Running);
    let s = t
        .status_of(JobId(2762), Some(&[0, 1, 2, 3]), None, None)
        .await;
    let by_index: Vec<(u32, Option<&str>, bool)> = s
        .elements
        .iter()
        .map(|e| {
            (
                e.index,
                e.snapshot.key.as_deref(),
                phase_of(&e.snapshot).is_terminal(),
            )
        })
        .collect();
    assert_eq!(
        by_index,
        [
            (0, Some("0123456789abcdef"), true),
            (1, Some("0123456789abcdef"), true),
            (2, None, false),
            (3, Some("0123456789abcdef"), true)
        ]
    );
    // Asked once: the lost elements are not looked up again.
    api.job_calls.lock().unwrap().clear();
    t.tick().await;
    assert!(!api.job_calls.lock().unwrap().contains(&JobId(2762)));
}

#[tokio::test]
async fn an_array_listed_as_a_plain_job_with_its_own_record_is_not_given_away() {
    let (api, t) = tracker();
    let own = "5594ab6c4ca7a556";
    t.track_array(JobId(1182), &[0, 1], Some(own));
    api.answer(&[(1182, 0, "PENDING"), (1182, 1, "PENDING")]);
    t.tick().await;
    api.answer(&[]);
    let plain = JobState::from_strings(["RUNNING"]);
    api.plain.lock().unwrap().insert(JobId(1182), plain.clone());
    set_records(
        &api,
        &[JobInfo::new(
            JobId(1182),
            format!("flyte-r1-nightly-{own}"),
            plain,
        )],
    );
    t.tick().await;
    let s = t.status(JobId(1182)).await;
    assert!(
        s.elements
            .iter()
            .all(|e| !phase_of(&e.snapshot).is_terminal()),
        "no element lost: {:?}",
        s.elements
    );
    api.job_calls.lock().unwrap().clear();
    t.tick().await;
    assert!(
        !api.job_calls.lock().unwrap().contains(&JobId(1182)),
        "its own record is not looked up every tick"
    );
}

#[tokio::test]
async fn a_job_under_a_lost_arrays_id_with_an_elements_key_is_that_element() {
    let (api, t) = tracker();
    let (k0, k1) = ("00000000000000a0", "00000000000000a1");
    t.track_array(JobId(3000), &[0, 1], Some(k0));
    t.element_key(JobId(3000), 0, k0);
    t.element_key(JobId(3000), 1, k1);
    api.answer(&[(3000, 0, "PENDING"), (3000, 1, "PENDING")]);
    t.tick().await;
    api.answer(&[]);
    let done = JobState::from_strings(["COMPLETED"]);
    api.plain.lock().unwrap().insert(JobId(3000), done.clone());
    set_records(
        &api,
        &[JobInfo::new(JobId(3000), format!("flyte-r1-t-{k1}"), done)],
    );
    t.tick().await;
    let s = t.status(JobId(3000)).await;
    let by_index: Vec<_> = s
        .elements
        .iter()
        .map(|e| {
            (
                e.index,
                phase_of(&e.snapshot),
                e.snapshot.key.as_deref().map(String::from),
            )
        })
        .collect();
    assert_eq!(
        by_index,
        [
            (0, Phase::RetryableFailed, Some(k1.to_string())),
            (1, Phase::Succeeded, Some(k1.to_string())),
        ],
        "{s:?}"
    );
}

#[tokio::test]
async fn a_job_under_a_lost_arrays_id_with_its_own_key_is_that_element_not_the_array() {
    let (api, t) = tracker();
    let (k0, k1) = ("00000000000000b0", "00000000000000b1");
    t.track_array(JobId(3100), &[0, 1], Some(k0));
    t.element_key(JobId(3100), 0, k0);
    t.element_key(JobId(3100), 1, k1);
    api.answer(&[(3100, 0, "PENDING"), (3100, 1, "PENDING")]);
    t.tick().await;
    api.answer(&[]);
    let done = JobState::from_strings(["COMPLETED"]);
    api.plain.lock().unwrap().insert(JobId(3100), done.clone());
    set_records(
        &api,
        &[JobInfo::new(JobId(3100), format!("flyte-r1-t-{k0}"), done)],
    );
    t.tick().await;
    let s = t.status(JobId(3100)).await;
    let phases: Vec<_> = s.elements.iter().map(|e| phase_of(&e.snapshot)).collect();
    assert_eq!(phases, [Phase::Succeeded, Phase::RetryableFailed], "{s:?}");
}

#[tokio::test]
async fn an_array_whose_id_only_slurmdbd_shows_given_away_is_lost() {
    let (api, t) = tracker();
    t.track_array(JobId(2762), &[0, 1], None);
    api.answer(&[(2762, 0, "PENDING"), (2762, 1, "PENDING")]);
    t.tick().await;
    api.answer(&[]);
    api.accounting.lock().unwrap().insert(
        JobId(2762),
        JobInfo::new(
            JobId(2762),
            "flyte-other-0123456789abcdef",
            JobState::from_strings(["COMPLETED"]),
        ),
    );
    t.tick().await;
    let s = t.status(JobId(2762)).await;
    assert!(phase_of(&s).is_terminal(), "{s:?}");
    assert!(
        s.elements
            .iter()
            .all(|e| e.snapshot.key.as_deref() == Some("0123456789abcdef")),
        "{s:?}"
    );
}

#[tokio::test]
async fn an_adopted_lost_array_whose_id_has_an_elements_execution_follows_it() {
    let (api, t) = tracker();
    let k1 = "00000000000000c1";
    let done = JobState::from_strings(["COMPLETED"]);
    api.plain.lock().unwrap().insert(JobId(3200), done.clone());
    set_records(
        &api,
        &[JobInfo::new(JobId(3200), format!("flyte-r1-t-{k1}"), done)],
    );
    api.answer(&[]);
    let (_adopted, ()) = tokio::join!(
        t.status_of(JobId(3200), Some(&[0, 1]), Some(k1), Some(1)),
        async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            t.adopt_round().await
        }
    );
    t.tick().await;
    let s = t.status(JobId(3200)).await;
    let one = s.elements.iter().find(|e| e.index == 1).unwrap();
    assert_eq!(phase_of(&one.snapshot), Phase::Succeeded, "{s:?}");
}

#[tokio::test]
async fn a_job_under_a_lost_arrays_id_loses_no_element_this_replica_cannot_name() {
    let (api, t) = tracker();
    let (k0, k1) = ("00000000000000c0", "00000000000000c1");
    t.track_array(JobId(3200), &[0, 1], Some(k1));
    t.element_key(JobId(3200), 1, k1);
    api.answer(&[(3200, 0, "PENDING"), (3200, 1, "PENDING")]);
    t.tick().await;
    api.answer(&[]);
    let done = JobState::from_strings(["COMPLETED"]);
    api.plain.lock().unwrap().insert(JobId(3200), done.clone());
    set_records(
        &api,
        &[JobInfo::new(JobId(3200), format!("flyte-r1-t-{k0}"), done)],
    );
    t.tick().await;
    let phases = |s: &crate::tracker::JobSnapshot| -> Vec<Phase> {
        s.elements.iter().map(|e| phase_of(&e.snapshot)).collect()
    };
    let s = t
        .status_of(JobId(3200), Some(&[0, 1]), Some(k1), None)
        .await;
    assert_ne!(
        phases(&s)[0],
        Phase::RetryableFailed,
        "element 0 not lost: {s:?}"
    );
    assert_eq!(
        phases(&s)[1],
        Phase::RetryableFailed,
        "element 1 lost: {s:?}"
    );
    // Element 0's GetTask reaches this replica: its key places the job.
    t.element_key(JobId(3200), 0, k0);
    t.tick().await;
    let s = t
        .status_of(JobId(3200), Some(&[0, 1]), Some(k1), None)
        .await;
    assert_eq!(
        phases(&s),
        [Phase::Succeeded, Phase::RetryableFailed],
        "{s:?}"
    );
}

/// The crash drill on claims: an array of two elements lost with slurmctld's crash, and a job of
/// another execution of its own given the array's id. Its task, asking by the id alone, is
/// answered with its own job, while and after the array's elements are lost; their tasks with
/// the array's lost elements.
#[tokio::test]
async fn a_job_of_its_own_under_a_lost_arrays_id_is_answered_as_itself() {
    let (api, t) = tracker();
    let (k0, k1, theirs) = ("00000000000000c0", "00000000000000c1", "00000000000000d2");
    t.track_array(JobId(63), &[0, 1], Some(k0));
    t.element_key(JobId(63), 0, k0);
    t.element_key(JobId(63), 1, k1);
    api.answer(&[(63, 0, "PENDING"), (63, 1, "PENDING")]);
    t.tick().await;
    // The restarted slurmctld lost the array and gave 63 to the other execution's job.
    api.answer(&[]);
    let running = JobState::from_strings(["RUNNING"]);
    api.plain.lock().unwrap().insert(JobId(63), running.clone());
    set_records(
        &api,
        &[JobInfo::new(
            JobId(63),
            format!("flyte-r2-t-{theirs}"),
            running,
        )],
    );
    t.tick().await;
    let elements = |s: &crate::tracker::JobSnapshot| -> Vec<Phase> {
        s.elements.iter().map(|e| phase_of(&e.snapshot)).collect()
    };
    let s = t
        .status_of(JobId(63), Some(&[0, 1]), Some(k0), Some(0))
        .await;
    assert_eq!(
        elements(&s),
        [Phase::RetryableFailed, Phase::RetryableFailed],
        "{s:?}"
    );
    let own = t.status(JobId(63)).await;
    assert_eq!(phase_of(&own), Phase::Running, "{own:?}");
    assert_eq!(own.key.as_deref(), Some(theirs));
    // It ends: followed as the job it is.
    let done = JobState::from_strings(["COMPLETED"]);
    api.plain.lock().unwrap().insert(JobId(63), done.clone());
    set_records(
        &api,
        &[JobInfo::new(
            JobId(63),
            format!("flyte-r2-t-{theirs}"),
            done,
        )],
    );
    t.tick().await;
    t.tick().await;
    let own = t.status(JobId(63)).await;
    assert_eq!(phase_of(&own), Phase::Succeeded, "{own:?}");
    let s = t
        .status_of(JobId(63), Some(&[0, 1]), Some(k1), Some(1))
        .await;
    assert_eq!(
        elements(&s),
        [Phase::RetryableFailed, Phase::RetryableFailed],
        "{s:?}"
    );
}
