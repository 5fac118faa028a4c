//! The claim's conditional-write suite (`service::claim`, issue 52), run the same on every
//! backend: the hermetic tier's local filesystem and in-memory store (tests/it/claim_store.rs)
//! and the emulator tier's S3 and Azure (tests/emulators/claim.rs). Each check uses a claim
//! folder of its own, made by `new(name)`.

use std::sync::Arc;
use std::time::Duration;

use slurm_connector::service::claim::{ClaimError, ClaimStore, Current, JobRef, Record, State};

/// How many claimers race in the concurrency checks.
pub const RACERS: usize = 16;

fn hold(by: &str, lease_secs: u64) -> Record {
    Record::new(
        by,
        State::Submitting {
            lease_secs,
            marker: "fc-test".into(),
            replaces: None,
            index: None,
        },
    )
}

fn recorded(by: &str, job_id: u32) -> Record {
    Record::new(
        by,
        State::Recorded {
            job: JobRef::Job { job_id },
            array: None,
            marker: None,
        },
    )
}

fn conflict(r: Result<Current, ClaimError>, what: &str) -> ClaimError {
    match r {
        Err(e) if e.is_conflict() => e,
        other => panic!("{what}: expected a conflict, got {other:?}"),
    }
}

fn refused(r: Result<Current, ClaimError>, what: &str) -> String {
    match r {
        Err(e @ ClaimError::Refused { .. }) => e.to_string(),
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

/// Every check, in turn; `backend` names it in messages.
pub async fn suite(backend: &str, new: impl Fn(&str) -> ClaimStore) {
    create_once(backend, &new("once")).await;
    stale_read_loses(backend, &new("stale")).await;
    concurrent_creators(backend, &new("race-create")).await;
    concurrent_advancers(backend, &new("race-advance")).await;
    tombstone_beats_late_record(backend, &new("tombstone")).await;
    takeover_after_lease(backend, &new("takeover")).await;
    array_element(backend, &new("element")).await;
    println!("claim suite on {backend}: every check passed ({RACERS} racers, one winner each)");
}

/// Create-if-absent once: the second creator loses with a conflict naming the claim and object.
async fn create_once(backend: &str, claim: &ClaimStore) {
    let t = std::time::Instant::now();
    assert_eq!(
        claim.read().await.unwrap(),
        None,
        "{backend}: a fresh claim"
    );
    let empty_read = t.elapsed();
    let t = std::time::Instant::now();
    let first = claim.create(hold("a", 3600)).await.unwrap();
    let created = t.elapsed();
    assert_eq!(first.seq(), 1);
    let e = conflict(claim.create(hold("b", 3600)).await, backend);
    let msg = e.to_string();
    assert!(
        msg.contains(claim.uri()) && msg.contains("0000000001.json"),
        "{backend}: {msg}"
    );
    let t = std::time::Instant::now();
    assert_eq!(claim.read().await.unwrap(), Some(first), "{backend}");
    // Figures for a reader, not checked: one uncontended run on a shared machine.
    println!(
        "claim on {backend}: read of an empty claim {empty_read:?}, create {created:?}, read \
         (list + get) {:?}",
        t.elapsed()
    );
}

/// Two writers read the same record; the second to write from it loses.
async fn stale_read_loses(backend: &str, claim: &ClaimStore) {
    claim.create(hold("a", 3600)).await.unwrap();
    let r1 = claim.read().await.unwrap().unwrap();
    let r2 = claim.read().await.unwrap().unwrap();
    let won = claim.advance(&r1, recorded("a", 11)).await.unwrap();
    assert_eq!(won.seq(), 2);
    conflict(
        claim.advance(&r2, Record::new("b", State::Deleted)).await,
        backend,
    );
    assert_eq!(claim.read().await.unwrap(), Some(won), "{backend}");
}

/// `RACERS` tasks create the same absent claim at once: exactly one wins, and the claim is its.
async fn concurrent_creators(backend: &str, claim: &ClaimStore) {
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let claim = claim.clone();
            tokio::spawn(async move { claim.create(hold(&format!("r{i}"), 3600)).await })
        })
        .collect();
    let winners = one_winner(backend, tasks).await;
    assert_eq!(claim.read().await.unwrap().as_ref(), winners.first());
}

/// `RACERS` replicas all read an expired holding, then all take it over at once: one wins.
async fn concurrent_advancers(backend: &str, claim: &ClaimStore) {
    claim.create(hold("gone", 0)).await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let (claim, barrier) = (claim.clone(), barrier.clone());
            tokio::spawn(async move {
                let read = claim.read().await.unwrap().unwrap();
                assert_eq!(read.seq(), 1);
                barrier.wait().await;
                claim.advance(&read, hold(&format!("r{i}"), 3600)).await
            })
        })
        .collect();
    let winners = one_winner(backend, tasks).await;
    let now = claim.read().await.unwrap().unwrap();
    assert_eq!((now.seq(), Some(&now)), (2, winners.first()), "{backend}");
}

/// DeleteTask's tombstone lands while the holder is submitting: the holder's late record fails,
/// and, read again, the tombstone refuses it.
async fn tombstone_beats_late_record(backend: &str, claim: &ClaimStore) {
    let holder = claim.create(hold("a", 3600)).await.unwrap();
    let seen = claim.read().await.unwrap().unwrap();
    claim
        .advance(&seen, Record::new("deleter", State::Deleted))
        .await
        .unwrap();
    conflict(claim.advance(&holder, recorded("a", 12)).await, backend);
    let again = claim.read().await.unwrap().unwrap();
    assert_eq!(again.record().state, State::Deleted, "{backend}");
    let msg = refused(claim.advance(&again, recorded("a", 12)).await, backend);
    assert!(msg.contains("final"), "{backend}: {msg}");
    assert_eq!(claim.read().await.unwrap(), Some(again), "{backend}");
}

/// A holding is taken over only past its lease; the old holder's late record then fails, and
/// read again it may not record over the new holder.
async fn takeover_after_lease(backend: &str, claim: &ClaimStore) {
    let a = claim.create(hold("a", 1)).await.unwrap();
    let msg = refused(claim.advance(&a, hold("b", 3600)).await, backend);
    assert!(msg.contains("lease"), "{backend}: {msg}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let seen = claim.read().await.unwrap().unwrap();
    let b = claim.advance(&seen, hold("b", 3600)).await.unwrap();
    conflict(claim.advance(&a, recorded("a", 13)).await, backend);
    let msg = refused(claim.advance(&b, recorded("a", 13)).await, backend);
    assert!(msg.contains("only the holder"), "{backend}: {msg}");
    let done = claim.advance(&b, recorded("b", 14)).await.unwrap();
    assert_eq!(claim.read().await.unwrap(), Some(done), "{backend}");
}

/// An array element's record reads back as written.
async fn array_element(backend: &str, claim: &ClaimStore) {
    let h = claim.create(hold("a", 3600)).await.unwrap();
    let job = JobRef::Element {
        array_job_id: 4300,
        index: 1000,
    };
    // The array's indices as submitted: a batch's members held elsewhere leave gaps.
    let recorded = State::Recorded {
        job,
        array: Some("0-999,1000,1002".into()),
        marker: Some("fb-1".into()),
    };
    claim
        .advance(&h, Record::new("a", recorded.clone()))
        .await
        .unwrap();
    let read = claim.read().await.unwrap().unwrap();
    assert_eq!(read.record().state, recorded, "{backend}");
}

/// The racers' outcomes: every loser lost to a conflict, and exactly one won (returned).
async fn one_winner(
    backend: &str,
    racers: Vec<tokio::task::JoinHandle<Result<Current, ClaimError>>>,
) -> Vec<Current> {
    let mut winners = Vec::new();
    for t in racers {
        match t.await.unwrap() {
            Ok(c) => winners.push(c),
            Err(e) => assert!(e.is_conflict(), "{backend}: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{backend}: winners {winners:?}");
    winners
}
