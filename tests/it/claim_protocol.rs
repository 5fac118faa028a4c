//! The once-only protocol over a claim (`service::claim::{create, create_batch, delete}`), driven
//! against a fake cluster that can crash a replica at every step boundary and a store that can
//! die mid-batch. Each scenario ends by checking the invariants: every job or element that may
//! run is the one its execution's claim records, no execution has two, and none is lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use slurm_connector::service::claim::{
    self, ClaimStore, Holder, JobRef, Outcome, Record, Slurm, State, Step,
};
use tokio::sync::Notify;

use crate::common::hooked::{Hook, Hooked, Op};

// ---------------------------------------------------------------------------------------------
// The fake cluster

/// Where a replica's cluster calls crash it: the call fails and the replica does nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    /// Its held submit never reaches slurmctld (it died after holding the claim).
    BeforeSubmit,
    /// Its held job is made, and it dies before hearing of it.
    AfterSubmit,
    /// Its store dies after the holding: its held job is made, its record never lands (a
    /// replica's store, not its cluster: see `Bucket::dying_claims`).
    AtRecord,
    /// Its release never reaches slurmctld (it died after recording the job).
    AtRelease,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    Held,
    Released,
    Cancelled,
}

#[derive(Debug)]
struct Job {
    marker: String,
    /// `None`: a job of its own.
    elements: BTreeMap<Option<u32>, Element>,
}

#[derive(Default)]
struct ClusterState {
    next_id: u32,
    jobs: BTreeMap<u32, Job>,
    submits: usize,
    releases: usize,
    listings: usize,
}

/// The cluster every replica shares.
#[derive(Clone, Default)]
struct Cluster(Arc<Mutex<ClusterState>>);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct FakeError(String);

/// One replica's view of the cluster: its crash point, and a gate its held submit waits at
/// after the job is made (a replica paused mid-submit).
struct Replica {
    cluster: Cluster,
    crash: Option<Crash>,
    pause: Option<Arc<Notify>>,
}

impl Cluster {
    fn replica(&self) -> Replica {
        Replica {
            cluster: self.clone(),
            crash: None,
            pause: None,
        }
    }

    fn crashing(&self, crash: Crash) -> Replica {
        Replica {
            crash: Some(crash),
            ..self.replica()
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ClusterState> {
        self.0.lock().unwrap()
    }

    /// Submits, releases and listings so far (one lock: a guard per field in one expression
    /// would deadlock).
    fn counts(&self) -> (usize, usize, usize) {
        let st = self.state();
        (st.submits, st.releases, st.listings)
    }

    /// Every job or element that may run.
    fn runnable(&self) -> Vec<JobRef> {
        let st = self.state();
        let mut out = Vec::new();
        for (id, job) in &st.jobs {
            for (index, e) in &job.elements {
                if *e == Element::Released {
                    out.push(match index {
                        None => JobRef::Job { job_id: *id },
                        Some(i) => JobRef::Element {
                            array_job_id: *id,
                            index: *i,
                        },
                    });
                }
            }
        }
        out
    }

    fn element(&self, job: JobRef) -> Option<Element> {
        let st = self.state();
        let (id, index) = split(job);
        st.jobs.get(&id)?.elements.get(&index).copied()
    }
}

fn split(job: JobRef) -> (u32, Option<u32>) {
    match job {
        JobRef::Job { job_id } => (job_id, None),
        JobRef::Element {
            array_job_id,
            index,
        } => (array_job_id, Some(index)),
    }
}

impl Slurm for Replica {
    type Job = ();
    type Error = FakeError;

    async fn submit_held(
        &self,
        _job: &(),
        marker: &str,
        indices: Option<&[u32]>,
    ) -> Result<u32, FakeError> {
        if self.crash == Some(Crash::BeforeSubmit) {
            return Err(FakeError("crashed before its submit".into()));
        }
        let id = {
            let mut st = self.cluster.state();
            st.next_id += 1;
            st.submits += 1;
            let id = st.next_id;
            let elements = match indices {
                None => BTreeMap::from([(None, Element::Held)]),
                Some(ix) => ix.iter().map(|i| (Some(*i), Element::Held)).collect(),
            };
            st.jobs.insert(
                id,
                Job {
                    marker: marker.into(),
                    elements,
                },
            );
            id
        };
        if let Some(p) = &self.pause {
            p.notified().await;
        }
        if self.crash == Some(Crash::AfterSubmit) {
            return Err(FakeError("crashed after its submit".into()));
        }
        Ok(id)
    }

    async fn held(&self, marker: &str) -> Result<Vec<JobRef>, FakeError> {
        let mut st = self.cluster.state();
        st.listings += 1;
        let mut out = Vec::new();
        for (id, job) in st.jobs.iter().filter(|(_, j)| j.marker == marker) {
            for (index, e) in &job.elements {
                if *e == Element::Held {
                    out.push(match index {
                        None => JobRef::Job { job_id: *id },
                        Some(i) => JobRef::Element {
                            array_job_id: *id,
                            index: *i,
                        },
                    });
                }
            }
        }
        Ok(out)
    }

    async fn awaits_release(&self, job: JobRef, _: Option<&str>) -> Result<bool, FakeError> {
        Ok(self.cluster.element(job) == Some(Element::Held))
    }

    async fn release(&self, job: JobRef) -> Result<(), FakeError> {
        if self.crash == Some(Crash::AtRelease) {
            return Err(FakeError("crashed at its release".into()));
        }
        let (id, index) = split(job);
        if index.is_some() {
            // As slurmrestd answers (tests/fixtures/slurmrestd/24.11_v0.0.42_update-array-element-refused.json).
            return Err(FakeError(
                "Submit job update against Array Job's JobID instead of array task id.".into(),
            ));
        }
        let mut st = self.cluster.state();
        st.releases += 1;
        let j = st
            .jobs
            .get_mut(&id)
            .ok_or_else(|| FakeError(format!("no job {id}")))?;
        for e in j.elements.values_mut() {
            if *e == Element::Held {
                *e = Element::Released;
            }
        }
        Ok(())
    }

    async fn cancel(&self, job: JobRef) -> Result<(), FakeError> {
        let mut st = self.cluster.state();
        let (id, index) = split(job);
        if let Some(j) = st.jobs.get_mut(&id) {
            for (i, e) in j.elements.iter_mut() {
                if index.is_none() || *i == index {
                    *e = Element::Cancelled;
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Stores

/// A replica's store that dies after `budget` writes: every request after fails, as a crashed
/// replica's would.
#[derive(Debug)]
struct Dying(AtomicI64);

impl Hook for Dying {
    fn before(&self, op: Op) -> object_store::Result<()> {
        if op == Op::Put {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
        if self.0.load(Ordering::SeqCst) < 0 {
            return Err(object_store::Error::Generic {
                store: "dying",
                source: "the replica crashed".into(),
            });
        }
        Ok(())
    }
}

/// The object store every replica shares.
#[derive(Clone, Default)]
struct Bucket(Arc<InMemory>);

impl Bucket {
    fn claim(&self, execution: &str) -> ClaimStore {
        let store: Arc<dyn ObjectStore> = self.0.clone();
        ClaimStore::new(
            store,
            claim_dir(execution),
            format!("memory:///{execution}"),
        )
    }

    /// The same claim, through a store that dies after `writes` writes.
    fn dying_claims(&self, executions: &[String], writes: i64) -> Vec<ClaimStore> {
        let store: Arc<dyn ObjectStore> = Arc::new(Hooked {
            inner: self.0.clone(),
            hook: Dying(AtomicI64::new(writes)),
        });
        executions
            .iter()
            .map(|e| ClaimStore::new(store.clone(), claim_dir(e), format!("memory:///{e}")))
            .collect()
    }

    async fn recorded(&self, execution: &str) -> Option<Record> {
        self.claim(execution)
            .read()
            .await
            .unwrap()
            .map(|c| c.record().clone())
    }
}

fn claim_dir(execution: &str) -> Path {
    Path::from(format!("runs/{execution}/.slurm-connector/claim"))
}

fn holder(name: &str, lease_secs: u64) -> Holder {
    Holder {
        name: name.into(),
        lease: Duration::from_secs(lease_secs),
    }
}

fn marker(execution: &str) -> String {
    format!("fc-{execution}")
}

/// A CreateTask of `execution` on replica `by` (its lease `lease_secs`), against the shared
/// cluster and store.
async fn retry(
    cluster: &Cluster,
    bucket: &Bucket,
    execution: &str,
    by: &str,
    lease_secs: u64,
) -> Outcome {
    let claim = bucket.claim(execution);
    claim::create(
        &claim,
        &cluster.replica(),
        &holder(by, lease_secs),
        &(),
        &marker(execution),
    )
    .await
    .unwrap_or_else(|e| panic!("{execution} on {by}: {e}"))
}

/// The invariants, over every execution the scenario made: each claim records one job (none
/// lost), that job may run (nothing recorded is left held), and nothing else may run.
async fn assert_once(cluster: &Cluster, bucket: &Bucket, executions: &[String], what: &str) {
    let mut recorded = Vec::new();
    for e in executions {
        match bucket.recorded(e).await.map(|r| r.state) {
            Some(State::Recorded { job, array, .. }) => {
                // An element's record names its array's indices, its own among them.
                if let JobRef::Element { index, .. } = job {
                    let indices = array
                        .as_deref()
                        .map(slurm_connector::render::array::indices)
                        .unwrap_or_else(|| panic!("{what}: {e}'s element without its array"));
                    assert!(indices.unwrap().contains(&index), "{what}: {e}: {array:?}");
                }
                assert_eq!(
                    cluster.element(job),
                    Some(Element::Released),
                    "{what}: {e}'s recorded {job} is not released"
                );
                assert!(
                    !recorded.contains(&job),
                    "{what}: {job} is recorded by two executions"
                );
                recorded.push(job);
            }
            other => panic!("{what}: {e}'s claim records no job: {other:?}"),
        }
    }
    let mut runnable = cluster.runnable();
    runnable.sort_by_key(|j| split(*j));
    recorded.sort_by_key(|j| split(*j));
    assert_eq!(
        runnable, recorded,
        "{what}: what may run is exactly what the claims record"
    );
}

// ---------------------------------------------------------------------------------------------
// The decision

#[test]
fn the_decision_table() {
    let now = SystemTime::now();
    let rec = |by: &str, state: State| Record::new(by, state);
    let holding = |lease_secs| State::Submitting {
        lease_secs,
        marker: "fb-1".into(),
        index: Some(4),
        replaces: None,
    };
    let job = JobRef::Job { job_id: 7 };
    let later = now + Duration::from_secs(120);
    for (current, want) in [
        (None, Step::Hold),
        (Some(rec("b", State::Deleted)), Step::Deleted),
        (
            Some(rec(
                "b",
                State::Recorded {
                    job,
                    array: None,
                    marker: None,
                },
            )),
            Step::Answer(job),
        ),
        (
            Some(rec("me", holding(60))),
            Step::Renew {
                marker: "fb-1".into(),
                index: Some(4),
            },
        ),
        (
            Some(rec("b", holding(0))),
            Step::TakeOver {
                marker: "fb-1".into(),
                index: Some(4),
            },
        ),
    ] {
        assert_eq!(claim::decide(current.as_ref(), "me", now), want);
    }
    let live = rec("b", holding(60));
    match claim::decide(Some(&live), "me", now) {
        Step::Wait { by, until } => {
            assert_eq!(by, "b");
            assert!(until > now && until < later, "{until:?}");
        }
        other => panic!("a live lease: {other:?}"),
    }
    // Judged by the reader's clock: past the lease, the same holding is taken over.
    assert!(matches!(
        claim::decide(Some(&live), "me", later),
        Step::TakeOver { .. }
    ));
}

// ---------------------------------------------------------------------------------------------
// A job of its own

#[tokio::test]
async fn a_fresh_execution_is_held_submitted_recorded_released_and_a_retry_answers_it() {
    let (cluster, bucket) = (Cluster::default(), Bucket::default());
    let claim = bucket.claim("e1");
    let me = holder("r0", 60);
    let got = claim::create(&claim, &cluster.replica(), &me, &(), &marker("e1"))
        .await
        .unwrap();
    let Outcome::Submitted(job) = got else {
        panic!("{got:?}")
    };
    assert_eq!(
        cluster.counts(),
        (1, 1, 0),
        "a fresh execution costs one submit and one release, no listing"
    );
    // The claim's records: held, then recorded.
    assert_eq!(claim.read().await.unwrap().unwrap().seq(), 2);
    for other in ["r0", "r1"] {
        let again = claim::create(
            &claim,
            &cluster.replica(),
            &holder(other, 60),
            &(),
            &marker("e1"),
        )
        .await
        .unwrap();
        assert_eq!(again, Outcome::Existing(job, None), "a retry on {other}");
    }
    assert_eq!(cluster.state().submits, 1);
    assert_once(&cluster, &bucket, &["e1".into()], "fresh").await;
}

/// A replica crashes at each step boundary; the CreateTask is retried on another replica once
/// the holding's lease ran out (lease 0), then again on a third. One job runs, recorded.
#[tokio::test]
async fn a_crash_at_every_step_boundary_loses_and_duplicates_nothing() {
    for crash in [
        Some(Crash::BeforeSubmit),
        Some(Crash::AfterSubmit),
        Some(Crash::AtRecord),
        Some(Crash::AtRelease),
        // Released, and its answer lost.
        None,
    ] {
        let (cluster, bucket) = (Cluster::default(), Bucket::default());
        let claim = bucket.claim("e");
        let (first, first_claim) = match crash {
            // Its store dies after the holding: the record never lands.
            Some(Crash::AtRecord) => (
                cluster.replica(),
                bucket.dying_claims(&["e".into()], 1).remove(0),
            ),
            Some(c) => (cluster.crashing(c), claim.clone()),
            None => (cluster.replica(), claim.clone()),
        };
        let r = claim::create(&first_claim, &first, &holder("r0", 0), &(), &marker("e")).await;
        assert_eq!(r.is_err(), crash.is_some(), "{crash:?}: {r:?}");
        let retried = retry(&cluster, &bucket, "e", "r1", 0).await;
        match (crash, &retried) {
            (
                Some(Crash::BeforeSubmit | Crash::AfterSubmit | Crash::AtRecord),
                Outcome::Submitted(_),
            ) => {}
            (Some(Crash::AtRelease) | None, Outcome::Existing(..)) => {}
            _ => panic!("{crash:?}: retried as {retried:?}"),
        }
        let third = retry(&cluster, &bucket, "e", "r2", 0).await;
        let (Outcome::Submitted(j) | Outcome::Existing(j, _)) = retried else {
            unreachable!()
        };
        assert_eq!(third, Outcome::Existing(j, None), "{crash:?}");
        assert_once(&cluster, &bucket, &["e".into()], &format!("{crash:?}")).await;
        if matches!(crash, Some(Crash::AfterSubmit | Crash::AtRecord)) {
            // The crashed replica's held job was cancelled by the takeover, not left queued.
            assert_eq!(
                cluster.element(JobRef::Job { job_id: 1 }),
                Some(Element::Cancelled)
            );
        }
    }
}

/// A holder paused mid-submit past its lease: another replica takes over and runs the
/// execution; the paused one's record comes late, is refused, and its job is cancelled, never
/// released.
#[tokio::test]
async fn a_holder_paused_past_its_lease_has_its_late_job_cancelled() {
    let (cluster, bucket) = (Cluster::default(), Bucket::default());
    let gate = Arc::new(Notify::new());
    let paused = Replica {
        pause: Some(gate.clone()),
        ..cluster.replica()
    };
    let claim = bucket.claim("e");
    let slow = {
        let claim = claim.clone();
        tokio::spawn(async move {
            claim::create(&claim, &paused, &holder("r0", 0), &(), &marker("e")).await
        })
    };
    // r0 holds the claim and its held job exists, its answer not yet back.
    while cluster.state().submits == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let taken = retry(&cluster, &bucket, "e", "r1", 0).await;
    let Outcome::Submitted(winner) = taken else {
        panic!("{taken:?}")
    };
    gate.notify_one();
    let late = slow.await.unwrap().unwrap();
    assert_eq!(
        late,
        Outcome::Existing(winner, None),
        "the paused replica answers with the winner"
    );
    assert_eq!(
        cluster.element(JobRef::Job { job_id: 1 }),
        Some(Element::Cancelled),
        "the paused replica's job never ran"
    );
    assert_once(&cluster, &bucket, &["e".into()], "paused").await;
}

/// Within a live lease another replica does not submit: it is told who holds it until when.
#[tokio::test]
async fn a_live_holding_is_waited_for_not_duplicated() {
    let (cluster, bucket) = (Cluster::default(), Bucket::default());
    let claim = bucket.claim("e");
    let crashed = claim::create(
        &claim,
        &cluster.crashing(Crash::BeforeSubmit),
        &holder("r0", 60),
        &(),
        &marker("e"),
    )
    .await;
    assert!(crashed.is_err());
    let got = retry(&cluster, &bucket, "e", "r1", 60).await;
    match got {
        Outcome::InProgress { by, until } => {
            assert_eq!(by, "r0");
            assert!(until > SystemTime::now());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(cluster.state().submits, 0);
}

/// Replicas racing one execution's CreateTask at once: one job.
#[tokio::test]
async fn racing_replicas_make_one_job() {
    let (cluster, bucket) = (Cluster::default(), Bucket::default());
    let racers = (0..8).map(|i| {
        let (cluster, claim) = (cluster.clone(), bucket.claim("e"));
        tokio::spawn(async move {
            claim::create(
                &claim,
                &cluster.replica(),
                &holder(&format!("r{i}"), 60),
                &(),
                &marker("e"),
            )
            .await
        })
    });
    let outcomes: Vec<Outcome> = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    let submitted = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Submitted(_)))
        .count();
    assert_eq!(submitted, 1, "{outcomes:?}");
    assert_eq!(cluster.state().submits, 1);
    assert_once(&cluster, &bucket, &["e".into()], "race").await;
}

// ---------------------------------------------------------------------------------------------
// DeleteTask

#[tokio::test]
async fn delete_writes_the_tombstone_first_and_cancels() {
    let (cluster, bucket) = (Cluster::default(), Bucket::default());
    let me = holder("r0", 0);
    // Before anything was submitted: a later CreateTask submits nothing.
    let early = bucket.claim("early");
    assert_eq!(
        claim::delete(&early, &cluster.replica(), &me)
            .await
            .unwrap(),
        None
    );
    let late = claim::create(&early, &cluster.replica(), &me, &(), &marker("early"))
        .await
        .unwrap();
    assert_eq!(late, Outcome::Deleted);
    assert_eq!(cluster.state().submits, 0);

    // After its job was recorded: the job is cancelled; deleting again is a no-op.
    let done = bucket.claim("done");
    let Outcome::Submitted(job) =
        claim::create(&done, &cluster.replica(), &me, &(), &marker("done"))
            .await
            .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        claim::delete(&done, &cluster.replica(), &me).await.unwrap(),
        Some(job)
    );
    assert_eq!(cluster.element(job), Some(Element::Cancelled));
    assert_eq!(
        claim::delete(&done, &cluster.replica(), &me).await.unwrap(),
        None
    );

    // While a replica is mid-submit: its late record is refused and its held job never runs.
    let gate = Arc::new(Notify::new());
    let paused = Replica {
        pause: Some(gate.clone()),
        ..cluster.replica()
    };
    let mid = bucket.claim("mid");
    let submits = cluster.state().submits;
    let slow = {
        let mid = mid.clone();
        tokio::spawn(async move {
            claim::create(&mid, &paused, &holder("r1", 60), &(), &marker("mid")).await
        })
    };
    while cluster.state().submits == submits {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    claim::delete(&mid, &cluster.replica(), &me).await.unwrap();
    gate.notify_one();
    assert_eq!(slow.await.unwrap().unwrap(), Outcome::Deleted);
    assert!(cluster.runnable().is_empty(), "{:?}", cluster.runnable());
}

// ---------------------------------------------------------------------------------------------
// A batch as one array

fn executions(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m{i}")).collect()
}

#[tokio::test]
async fn a_batch_is_one_held_array_recorded_per_element_then_released_once() {
    let (cluster, bucket) = (Cluster::default(), Bucket::default());
    let names = executions(6);
    let me = holder("r0", 60);
    // m1 already ran (a retry), m4 was deleted: the array holds the other four, sparse.
    let Outcome::Submitted(m1) = claim::create(
        &bucket.claim("m1"),
        &cluster.replica(),
        &me,
        &(),
        &marker("m1"),
    )
    .await
    .unwrap() else {
        panic!()
    };
    claim::delete(&bucket.claim("m4"), &cluster.replica(), &me)
        .await
        .unwrap();
    let (submits, releases, _) = cluster.counts();
    let claims: Vec<ClaimStore> = names.iter().map(|n| bucket.claim(n)).collect();
    let outcomes = claim::create_batch(&claims, &cluster.replica(), &me, &(), "fb-1").await;
    let outcomes: Vec<Outcome> = outcomes.into_iter().map(Result::unwrap).collect();
    assert_eq!(outcomes[1], Outcome::Existing(m1, None));
    assert_eq!(outcomes[4], Outcome::Deleted);
    let array = cluster.state().next_id;
    for i in [0, 2, 3, 5] {
        assert_eq!(
            outcomes[i],
            Outcome::Submitted(JobRef::Element {
                array_job_id: array,
                index: i as u32
            })
        );
    }
    let (now_submits, now_releases, _) = cluster.counts();
    assert_eq!(
        (now_submits - submits, now_releases - releases),
        (1, 1),
        "one held array submitted and released once"
    );
    let live: Vec<String> = names.iter().filter(|n| *n != "m4").cloned().collect();
    assert_once(&cluster, &bucket, &live, "batch").await;
}

/// The replica's store dies in the middle of its batch's records; each member's CreateTask is
/// retried on another replica. The recorded elements are released, the others taken over and
/// their elements cancelled; every execution runs once.
#[tokio::test]
async fn a_crash_in_the_middle_of_a_batchs_records_loses_and_duplicates_nothing() {
    for dies_after in [6, 8, 10] {
        let (cluster, bucket) = (Cluster::default(), Bucket::default());
        let names = executions(6);
        // 6 holdings, then `dies_after - 6` records land.
        let claims = bucket.dying_claims(&names, dies_after);
        let first =
            claim::create_batch(&claims, &cluster.replica(), &holder("r0", 0), &(), "fb-1").await;
        assert!(
            first.iter().any(Result::is_err),
            "{dies_after}: the store died"
        );
        for n in &names {
            let got = retry(&cluster, &bucket, n, "r1", 0).await;
            assert!(
                matches!(got, Outcome::Submitted(_) | Outcome::Existing(..)),
                "{dies_after}: {n}: {got:?}"
            );
        }
        assert_once(
            &cluster,
            &bucket,
            &names,
            &format!("store died after {dies_after} writes"),
        )
        .await;
    }
}

/// A batch's replica recorded its elements and died before releasing the array (slurmrestd
/// releases only whole arrays): within a lease of the record a retry waits; past it the element
/// is cancelled while held and the execution submitted anew, replacing it.
#[tokio::test]
async fn an_element_left_held_is_waited_for_then_replaced() {
    let (cluster, bucket) = (Cluster::default(), Bucket::default());
    let names = executions(3);
    let claims: Vec<ClaimStore> = names.iter().map(|n| bucket.claim(n)).collect();
    let dead = cluster.crashing(Crash::AtRelease);
    let first = claim::create_batch(&claims, &dead, &holder("r0", 60), &(), "fb-1").await;
    assert!(first.iter().all(Result::is_err), "{first:?}");
    let within = claim::create(
        &claims[0],
        &cluster.replica(),
        &holder("r1", 60),
        &(),
        &marker("m0"),
    )
    .await
    .unwrap();
    assert!(
        matches!(within, Outcome::InProgress { ref by, .. } if by == "r0"),
        "{within:?}"
    );
    assert!(cluster.runnable().is_empty());
    for n in &names {
        let got = retry(&cluster, &bucket, n, "r1", 0).await;
        assert!(
            matches!(got, Outcome::Submitted(JobRef::Job { .. })),
            "{n}: {got:?}"
        );
    }
    for i in 0..3 {
        let element = JobRef::Element {
            array_job_id: 1,
            index: i,
        };
        assert_eq!(
            cluster.element(element),
            Some(Element::Cancelled),
            "{element}"
        );
    }
    assert_once(&cluster, &bucket, &names, "replaced").await;
}

/// A process names itself by the replica's name and a suffix of its own: two processes of one
/// replica (a restart) are two holders, so the second never takes the first's holding for its
/// own; the lease is the settings'.
#[test]
fn each_process_of_a_replica_is_a_holder_of_its_own() {
    use slurm_connector::config::claims::ClaimSettings;
    let settings = ClaimSettings {
        replica: Some("slurm-connector-7d9f-x2k4q".into()),
        lease: Duration::from_secs(90),
        ..ClaimSettings::default()
    };
    let (a, b) = (Holder::of_process(&settings), Holder::of_process(&settings));
    assert_ne!(a.name, b.name);
    for h in [&a, &b] {
        let suffix = h
            .name
            .strip_prefix("slurm-connector-7d9f-x2k4q~")
            .unwrap_or_else(|| panic!("{}", h.name));
        assert_eq!(suffix.len(), 8, "{}", h.name);
        assert!(suffix.bytes().all(|c| c.is_ascii_hexdigit()), "{}", h.name);
        assert_eq!(h.lease, Duration::from_secs(90));
    }
    let unnamed = Holder::of_process(&ClaimSettings::default());
    assert!(
        unnamed.name.contains('~') && !unnamed.name.starts_with('~'),
        "{}",
        unnamed.name
    );
}
