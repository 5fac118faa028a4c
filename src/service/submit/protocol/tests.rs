//! The once-only protocol driven directly (no gRPC, no service) against the mock slurmrestd:
//! each mode, a replica racing it, the loser cancelled.

use std::time::Duration;

use super::*;
use crate::render::keys_name;
use crate::service::submit::pacing::Pace;
use crate::slurmrestd::{Auth, BaseState, ClientConfig, Secret};

/// A mock cluster, a client of it, and a `Submitter` (this replica's state).
struct Bench {
    _mock: mock_slurmrestd::MockHandle,
    client: Client,
    submitter: Submitter,
}

impl Bench {
    async fn new() -> Bench {
        let (mock, client) = crate::service::submit::idempotency::tests::mock_cluster_with(
            mock_slurmrestd::MockConfig::default(),
        )
        .await;
        let submitter = Submitter::new(Duration::from_secs(60));
        submitter.set_check_every(CHECK_EVERY);
        Bench {
            _mock: mock,
            client,
            submitter,
        }
    }

    fn cluster(&self) -> Cluster<'_> {
        Cluster {
            name: "mock",
            submitter: &self.submitter,
            checks: &self.client,
            user: None,
            check_by: None,
            permit: None,
            arrived: None,
        }
    }

    /// This replica's index taken now (empty or not): what it knows before a race begins.
    async fn take_index(&self) {
        let cl = self.cluster();
        self.submitter
            .index
            .lookup(cl.checks, cl.name, cl.user, "ffffffffffffffff", false)
            .await
            .unwrap();
    }

    /// Another replica's held, marked job for `key`, made after this replica took its index
    /// (so its lookup misses it) and before this replica's submit (so it has the lower id).
    async fn racing_job(&self, key: &str) -> JobId {
        let mut held = job(key, Some("theirs"));
        held.hold = Some(true);
        held.comment = Some(awaiting_comment(held.comment.as_deref()));
        self.client.submit(&held).await.unwrap()
    }

    async fn record(&self, id: JobId) -> Option<crate::slurmrestd::JobInfo> {
        self.client.job(id).await.unwrap()
    }

    /// The elements of array `id` still in slurmctld (`jobs/state` lists each, pending or not).
    async fn elements(&self, id: JobId) -> Vec<u32> {
        let states = self.client.states_and_elements(&[id]).await.unwrap();
        let mut es: Vec<u32> = states.elements.iter().map(|e| e.index).collect();
        es.sort();
        es
    }
}

fn job(key: &str, comment: Option<&str>) -> JobDescription {
    JobDescription {
        name: format!("flyte-t-{key}"),
        script: "#!/bin/bash\nsleep 600\n".into(),
        current_working_directory: "/tmp".into(),
        environment: vec![("PATH".into(), "/usr/bin:/bin".into())],
        comment: comment.map(String::from),
        ..Default::default()
    }
}

/// A batch's array with its keys in its name (as on a site without `job_comment`).
fn array(keys: &[&str]) -> JobDescription {
    JobDescription {
        name: keys_name(keys),
        array: Some(format!("0-{}", keys.len() - 1)),
        comment: Some("the tasks' comment".into()),
        ..job(keys[0], None)
    }
}

async fn none_ran() -> Result<Option<JobId>, SubmitError> {
    Ok(None)
}

const A: &str = "0123456789abcdef";
const B: &str = "1123456789abcdef";
const C: &str = "2123456789abcdef";
const D: &str = "3123456789abcdef";
/// The turn of checks the tests set (the deployment's `FLYTE_SLURM_CHECK_EVERY`).
const CHECK_EVERY: Duration = Duration::from_secs(1);

fn released(j: &crate::slurmrestd::JobInfo) -> bool {
    !awaiting_check(j) && j.state.base != BaseState::Cancelled
}

#[tokio::test]
async fn a_job_is_submitted_held_checked_and_released_with_its_own_comment() {
    let b = Bench::new().await;
    let s = submit_once(b.cluster(), &b.client, A, &job(A, Some("mine")), none_ran())
        .await
        .unwrap();
    let Submitted::Fresh(p) = s else {
        panic!("{s:?}")
    };
    let r = b.record(p.job_id).await.unwrap();
    assert!(released(&r), "{r:?}");
    assert_eq!(r.comment.as_deref(), Some("mine"), "the mark removed");
    // Again (a retried CreateTask): the same job, adopted.
    let again = submit_once(b.cluster(), &b.client, A, &job(A, Some("mine")), none_ran())
        .await
        .unwrap();
    assert_eq!(again, Submitted::Adopted(p));
}

#[tokio::test]
async fn a_job_racing_another_replicas_steps_back_and_releases_the_winner() {
    let b = Bench::new().await;
    b.take_index().await;
    let theirs = b.racing_job(A).await;
    let s = submit_once(b.cluster(), &b.client, A, &job(A, Some("mine")), none_ran())
        .await
        .unwrap();
    let Submitted::LostRace { winner, cancelled } = s else {
        panic!("{s:?}")
    };
    assert_eq!(winner, Placement::job(theirs));
    assert!(cancelled.id > theirs, "ours came second");
    assert_eq!(
        b.record(cancelled.id).await.unwrap().state.base,
        BaseState::Cancelled,
        "the loser cancelled (held: it never ran)"
    );
    // The winner's replica is gone (it never released it): the loser's answer releases it.
    assert!(released(&b.record(theirs).await.unwrap()));
}

#[tokio::test]
async fn an_array_settles_each_element_against_its_key_and_cancels_the_lost_one() {
    let b = Bench::new().await;
    b.take_index().await;
    let theirs = b.racing_job(B).await;
    let keys = [A, B, C];
    let out = submit_array(b.cluster(), &b.client, &array(&keys), &keys)
        .await
        .unwrap();
    let mine = out[0].placement().job_id;
    assert!(mine > theirs);
    let element = |index| Placement {
        job_id: mine,
        element: Some(Element::of(index, 3)),
    };
    assert_eq!(out[0], Submitted::Fresh(element(0)));
    assert_eq!(
        out[1],
        Submitted::LostRace {
            winner: Placement::job(theirs),
            cancelled: JobRef {
                id: mine,
                element: Some(1)
            },
        }
    );
    assert_eq!(out[2], Submitted::Fresh(element(2)));
    assert_eq!(b.elements(mine).await, [0, 2], "element 1 cancelled");
    let r = b.record(mine).await.unwrap();
    assert!(released(&r), "{r:?}");
    assert_eq!(r.comment.as_deref(), Some("the tasks' comment"));
    // B's task is answered with the winner, which its replica never released: released here.
    let w = b.record(theirs).await.unwrap();
    assert!(released(&w), "{w:?}");
    assert_eq!(w.comment.as_deref(), Some("theirs"));
}

#[tokio::test]
async fn an_array_losing_every_key_to_an_array_left_held_releases_that_one() {
    // The replica drill's case: two replicas made an array of the same two tasks; the one with
    // the lower id was rolled between its submit and its release. Ours steps back whole, and
    // its tasks are answered with the other's elements, which must not stay held for good.
    let b = Bench::new().await;
    b.take_index().await;
    let mut held = array(&[B, A]);
    held.hold = Some(true);
    held.comment = Some(awaiting_comment(held.comment.as_deref()));
    let theirs = b.client.submit(&held).await.unwrap();
    let keys = [A, B];
    let out = submit_array(b.cluster(), &b.client, &array(&keys), &keys)
        .await
        .unwrap();
    let element = |index| Placement {
        job_id: theirs,
        element: Some(Element::of(index, 2)),
    };
    let mine = out[0].placement();
    assert_eq!(mine, element(1), "{out:?}");
    assert_eq!(out[1].placement(), element(0));
    assert!(matches!(out[0], Submitted::LostRace { .. }));
    let Submitted::LostRace { cancelled, .. } = out[1] else {
        panic!("{out:?}")
    };
    assert!(b.elements(cancelled.id).await.is_empty(), "ours cancelled");
    assert_eq!(b.elements(theirs).await, [0, 1]);
    let jobs = b.client.jobs().await.unwrap();
    let r = jobs
        .iter()
        .find(|j| j.array.as_ref().is_some_and(|a| a.array_job_id == theirs))
        .expect("their array");
    assert!(released(r), "{r:?}");
    assert_eq!(r.comment.as_deref(), Some("the tasks' comment"));
}

#[tokio::test]
async fn an_array_its_replica_left_held_is_settled_by_whoever_meets_a_key() {
    let b = Bench::new().await;
    let keys = [A, B];
    // A replica submitted B's job, then another's array for A and B, and died before its check.
    let older_b = b.racing_job(B).await;
    let mut held = array(&keys);
    held.hold = Some(true);
    held.comment = Some(awaiting_comment(held.comment.as_deref()));
    let orphan = b.client.submit(&held).await.unwrap();
    // A's retried CreateTask here meets its element still held (the index reads the array's
    // record of its pending remainder: every key, awaiting its release): it settles the whole
    // array, and answers with its element.
    let s = submit_once(b.cluster(), &b.client, A, &job(A, None), none_ran())
        .await
        .unwrap();
    assert_eq!(
        s,
        Submitted::Adopted(Placement {
            job_id: orphan,
            element: Some(Element::of(0, 2))
        })
    );
    assert_eq!(
        b.elements(orphan).await,
        [0],
        "B's element cancelled: B has an older job"
    );
    let jobs = b.client.jobs().await.unwrap();
    let r = jobs
        .iter()
        .find(|j| j.array.as_ref().is_some_and(|a| a.array_job_id == orphan))
        .expect("A's element");
    assert!(released(r), "{r:?}");
    assert_eq!(r.comment.as_deref(), Some("the tasks' comment"));
    assert!(b.record(older_b).await.is_some());
}

#[tokio::test]
async fn a_tombstone_makes_a_late_submit_of_its_key_step_back() {
    let b = Bench::new().await;
    b.take_index().await;
    tombstone(b.cluster(), &b.client, &b.client, A, &job(A, None))
        .await
        .unwrap();
    // Another replica's submit of the same execution, after the DeleteTask.
    let other = Bench {
        submitter: Submitter::new(Duration::from_secs(60)),
        ..b
    };
    let s = submit_once(other.cluster(), &other.client, A, &job(A, None), none_ran())
        .await
        .unwrap();
    let Submitted::Adopted(p) = s else {
        panic!("{s:?}")
    };
    assert_eq!(
        other.record(p.job_id).await.unwrap().state.base,
        BaseState::Cancelled,
        "answered with the cancelled tombstone: nothing runs"
    );
    let live = other
        .client
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.state.base != BaseState::Cancelled)
        .count();
    assert_eq!(live, 0);
}

#[tokio::test]
async fn a_failed_check_leaves_the_job_held_and_its_key_uncertain() {
    let b = Bench::new().await;
    b.take_index().await;
    let mut held = job(A, None);
    held.hold = Some(true);
    held.comment = Some(awaiting_comment(None));
    let (mine, after) = held_submit(b.cluster(), &b.client, &held, Carries::Job(A))
        .await
        .unwrap();
    // A check through a client of nothing (slurmrestd gone) fails.
    let mut cfg = ClientConfig::new(
        "mock",
        "http://127.0.0.1:9".parse().unwrap(),
        Auth::Static {
            token: Secret::new(String::from("a.b.c")),
        },
    );
    cfg.api_version = Some(crate::slurmrestd::ApiVersion::V0045);
    cfg.retry.max_attempts = 1;
    let gone = Client::new(cfg).unwrap();
    let cl = Cluster {
        checks: &gone,
        ..b.cluster()
    };
    let f = check_and_settle(cl, &b.client, mine, Carries::Job(A), after)
        .await
        .unwrap_err();
    assert!(f.what.contains("stays held"), "{}", f.what);
    assert!(b.submitter.executions.is_uncertain(A));
    assert!(awaiting_check(&b.record(mine).await.unwrap()));
}

#[tokio::test]
async fn a_tombstone_cancels_a_submit_of_its_key_already_on_its_way() {
    let b = Bench::new().await;
    b.take_index().await;
    // Another replica's submit of the execution, inside slurmrestd when the DeleteTask came: it
    // has the lower id, and the tombstone's check finds it.
    let theirs = b.racing_job(A).await;
    tombstone(b.cluster(), &b.client, &b.client, A, &job(A, None))
        .await
        .unwrap();
    let states: Vec<BaseState> = b
        .client
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.state.base)
        .collect();
    assert_eq!(
        states,
        [BaseState::Cancelled, BaseState::Cancelled],
        "{theirs}"
    );
}

#[tokio::test]
async fn submits_streaming_in_share_one_check_a_turn_and_a_caller_due_sooner_is_checked_in_time() {
    let b = Bench::new().await;
    b.take_index().await;
    let listings = || b._mock.stats().count("jobs_state");
    let before = listings();
    let began = std::time::Instant::now();
    // Three submits a fifth of a second apart, each in a slot of the pacer, as a map's arrays
    // come under the backend's pacing (another submit in flight all along: the stream goes
    // on): each waits for the turn after the index's listing, and that one check is theirs.
    let stream = b.submitter.pacer.acquire().await;
    let submit_after = |key: &'static str, ms: u64| {
        let b = &b;
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let permit = b.submitter.pacer.acquire().await;
            let cl = b.cluster().paced(None, &permit, b.submitter.arrived());
            let s = submit_once(cl, &b.client, key, &job(key, None), none_ran()).await;
            permit.done(Pace::Prompt);
            s
        }
    };
    let (a, bb, c) = tokio::join!(
        submit_after(A, 0),
        submit_after(B, 200),
        submit_after(C, 400)
    );
    for s in [a, bb, c] {
        assert!(matches!(s.unwrap(), Submitted::Fresh(_)));
    }
    assert_eq!(listings() - before, 1, "one check for the three");
    assert!(began.elapsed() >= CHECK_EVERY - Duration::from_millis(100));
    // A submit whose CreateTask is due sooner than the next turn is checked before it is due.
    let due = std::time::Instant::now() + Duration::from_millis(800);
    let began = std::time::Instant::now();
    let permit = b.submitter.pacer.acquire().await;
    let cl = b.cluster().paced(Some(due), &permit, b.submitter.arrived());
    let s = submit_once(cl, &b.client, D, &job(D, None), none_ran()).await;
    assert!(matches!(s.unwrap(), Submitted::Fresh(_)));
    assert_eq!(listings() - before, 2, "its own check");
    assert!(
        began.elapsed() < Duration::from_millis(600),
        "checked by its due time less the check's and release's: {:?}",
        began.elapsed()
    );
    permit.done(Pace::Prompt);
    stream.done(Pace::Prompt);
}

#[tokio::test]
async fn a_caller_sending_one_create_task_after_the_other_waits_for_no_turn() {
    let b = Bench::new().await;
    b.take_index().await;
    let listings = || b._mock.stats().count("jobs_state");
    let before = listings();
    let began = std::time::Instant::now();
    // Nothing else in flight, no batch open: nobody could share the check, so none waits.
    for key in [A, B, C] {
        let permit = b.submitter.pacer.acquire().await;
        let cl = b.cluster().paced(None, &permit, b.submitter.arrived());
        let s = submit_once(cl, &b.client, key, &job(key, None), none_ran()).await;
        assert!(matches!(s.unwrap(), Submitted::Fresh(_)));
        permit.done(Pace::Prompt);
    }
    assert_eq!(listings() - before, 3, "a check each");
    assert!(
        began.elapsed() < CHECK_EVERY,
        "three in {:?}, no turn waited",
        began.elapsed()
    );
}

#[tokio::test]
async fn a_check_waits_no_longer_for_its_turn_once_a_submit_waits_for_a_slot() {
    let b = Bench::new().await;
    b.submitter.set_max_in_flight(1);
    b.take_index().await;
    let permit = b.submitter.pacer.acquire().await;
    // Another submit waits for the one slot, which ours holds.
    let pacer = b.submitter.pacer.clone();
    let other = tokio::spawn(async move { pacer.acquire().await.done(Pace::Prompt) });
    while b.submitter.pacer.view().waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let began = std::time::Instant::now();
    let cl = b.cluster().paced(None, &permit, b.submitter.arrived());
    let s = submit_once(cl, &b.client, A, &job(A, None), none_ran()).await;
    assert!(matches!(s.unwrap(), Submitted::Fresh(_)));
    assert!(
        began.elapsed() < CHECK_EVERY / 2,
        "checked at once, not at its turn: {:?}",
        began.elapsed()
    );
    permit.done(Pace::Prompt);
    other.await.unwrap();
}

#[tokio::test]
async fn an_arrays_check_waits_for_its_turn_when_the_next_create_task_comes_just_after_it() {
    let b = Bench::new().await;
    b.take_index().await;
    let began = std::time::Instant::now();
    let permit = b.submitter.pacer.acquire().await;
    let cl = b.cluster().paced(None, &permit, b.submitter.arrived());
    // Nothing else in flight, no batch open: the next element of the stream comes 30 ms on,
    // after this submit returned, as a map's next CreateTask does.
    let next = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        b.submitter.arrived();
    };
    let keys = [A, B];
    let held = array(&keys);
    let (s, ()) = tokio::join!(submit_array(cl, &b.client, &held, &keys), next);
    assert!(s.unwrap().iter().all(|s| matches!(s, Submitted::Fresh(_))));
    assert!(
        began.elapsed() >= CHECK_EVERY - Duration::from_millis(100),
        "waited for its turn: {:?}",
        began.elapsed()
    );
    permit.done(Pace::Prompt);
}
