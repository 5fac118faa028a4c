//! Real tier: faults of the cluster itself, on real Slurm, through two `slurm-connector serve`
//! processes and a backend-like client (tests/common/fleet.rs) while tasks are created, running
//! and ending:
//! - `an_upgrade_restart_of_slurmctld_then_restd_and_dbd_outages_lose_nothing`: slurmctld stopped
//!   for 20 s and started again (SIGTERM: it saves its state, as in an upgrade), then slurmrestd
//!   down 15 s, then slurmdbd down 15 s (`dev-cluster daemon stop|start`). Every task SUCCEEDED,
//!   one job each, no CreateTask lost, 0 GetTask errors (Flyte fails a task past 5 in a row).
//! - `a_crashed_slurmctld_duplicates_nothing_and_misreports_nothing`: slurmctld SIGKILLed while
//!   jobs run and started again 5 s later: it recovers from its last periodic save, and jobs that
//!   ended meanwhile are reported late (slurmd retries). Each execution has one live job, each
//!   task's terminal phase is what Slurm's own final record says (COMPLETED = SUCCEEDED), and
//!   where Slurm requeued or held a job, its task's message gave Slurm's reason. Run twice: on the
//!   keys (the default) and on claims (`FLYTE_SLURM_ONCE_ONLY=claims`, `--ignored`: not yet in
//!   CI), where an execution's jobs are the ones its script says ran it (a claim's jobs carry no
//!   key).
//!
//! `SLURM_DEV_CLUSTER_DRILLS=1 deploy/dev-cluster/dev-cluster --release 26.05 --min-job-age 5 run cargo test --test real_controller_drill`
//! (needs accounting: slurmdbd is drilled, and jobs that aged out are looked up there). The drills
//! stop and kill the cluster's daemons, so they run only on a cluster said to be theirs alone
//! (`SLURM_DEV_CLUSTER_DRILLS=1`; the README's `cargo test` on a shared dev cluster skips them),
//! and one at a time.

mod common;

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::RequestExt;
use common::fleet::{Counts, Fleet, create, follow};
use common::skip::{Tier, skip};
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::slurmrestd::{ApiVersion, BaseState, JobInfo};
use tokio::sync::Mutex;

const REPLICAS: usize = 2;
/// Each drill's bound (they take ~2 min): every wait of it ends by then.
const DRILL_DEADLINE: Duration = Duration::from_secs(8 * 60);

/// Each drill stops and kills slurmctld: one at a time, whatever the harness's threads.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn cluster_with_accounting() -> Option<support::Cluster> {
    let c = support::cluster()?;
    if std::env::var("SLURM_DEV_CLUSTER_DRILLS").as_deref() != Ok("1") {
        skip(
            Tier::ControllerDrills,
            "the drill stops and kills the cluster's daemons: it runs on a dev cluster of its own, \
             said so by SLURM_DEV_CLUSTER_DRILLS=1",
        );
        return None;
    }
    if !c.accounting {
        skip(
            Tier::Accounting,
            "the drill stops slurmdbd and reads finished jobs from it: bring the dev cluster up \
             with accounting (the default)",
        );
        return None;
    }
    Some(c)
}

/// On a drill's panic, what its end would have done: the cluster back in service for the next
/// drill. A crash drill that failed before its clean-up left node1 drained ("Duplicate jobid")
/// and ghost jobs on it, and the upgrade drill after it timed out waiting for the node (CI,
/// 2026-12-06). Synchronous: it runs while the panic unwinds.
struct Restore<'a>(&'a support::Cluster);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let c = self.0;
        for args in [
            &["exec", "scancel", "--user", c.user.as_str()][..],
            &[
                "exec",
                "scontrol",
                "update",
                "nodename=node1",
                "state=resume",
            ][..],
        ] {
            let _ = std::process::Command::new(&c.script)
                .args(["--release", &c.release, "--cache", &c.cache])
                .args(args)
                .output();
        }
    }
}

/// A task whose job sleeps `secs` and succeeds, its run name `run`; its script records its run
/// in `runs` when given.
fn task(run: &str, secs: u32, runs: Option<&support::Runs>) -> CreateTaskRequest {
    let mut r = common::request("script_no_io.pb");
    r.template
        .as_mut()
        .unwrap()
        .custom
        .as_mut()
        .unwrap()
        .fields
        .remove("sbatch");
    let ran = runs.map(support::Runs::line).unwrap_or_default();
    r.script(&format!("#!/bin/bash\n{ran}sleep {secs}\n"))
        .run_name(run)
}

/// The execution's idempotency key, as the connector renders it.
fn key_of(c: &support::Cluster, v: ApiVersion, r: &CreateTaskRequest) -> String {
    let cfg = slurm_connector::render::RenderConfig {
        api_version: v,
        working_dir: Some(c.workdir.clone()),
        ..Default::default()
    };
    slurm_connector::render::render(&slurm_connector::service::task_spec(r).unwrap(), &cfg)
        .unwrap()
        .key
}

/// Every job Slurm has on record since `since_unix` (slurmctld, and slurmdbd for those that
/// aged out), the newest record of each id: slurmctld's first.
async fn records(c: &support::Cluster, since_unix: i64) -> Vec<JobInfo> {
    let client = c.user_client();
    let mut records = client.jobs().await.expect("slurmctld's jobs");
    records.extend(
        client
            .accounting_jobs_since(since_unix, Some(&c.user))
            .await
            .expect("slurmdbd's jobs"),
    );
    let mut seen = HashSet::new();
    records.retain(|j| {
        let element = j.array.as_ref().and_then(|a| a.task_id);
        seen.insert((j.job_id, element))
    });
    records
}

/// The jobs of `keys` among `records`, by key, and how many were cancelled (held duplicates).
fn records_by_key(
    records: Vec<JobInfo>,
    keys: &HashSet<String>,
) -> (HashMap<String, Vec<JobInfo>>, usize) {
    let (mut live, mut cancelled) = (HashMap::new(), 0);
    for j in records {
        let Some(k) =
            slurm_connector::render::key_of_record(&j, j.array.as_ref().and_then(|a| a.task_id))
        else {
            continue;
        };
        if !keys.contains(&k) {
            continue;
        }
        if j.state.base == BaseState::Cancelled {
            cancelled += 1;
        } else {
            live.entry(k.to_string()).or_insert_with(Vec::new).push(j);
        }
    }
    (live, cancelled)
}

/// The record of the job a task's meta names (its element of an array), among `records`.
fn record_of_meta<'a>(records: &'a [JobInfo], meta: &[u8]) -> Option<&'a JobInfo> {
    let m: serde_json::Value = serde_json::from_slice(meta).expect("a meta");
    let id = m["job_id"].as_u64()? as u32;
    let element = m["element"].as_u64().map(|e| e as u32);
    records.iter().find(|j| match (element, &j.array) {
        (Some(i), Some(a)) => a.array_job_id.0 == id && a.task_id == Some(i),
        (None, _) => j.job_id.0 == id,
        _ => false,
    })
}

/// slurmctld recovers from a crash with its last state save; a cluster too new to have saved its
/// associations' usage cannot (26.05: `fatal: No Assoc usage file
/// (/var/lib/slurm/slurmctld/assoc_usage) to recover`, and slurmctld stays down). A stop, which
/// saves it, and a start first, as on any cluster that has run a while.
async fn state_saved(c: &support::Cluster) {
    let usage = std::path::Path::new(&c.cache)
        .join(&c.release)
        .join("root/var/lib/slurm/slurmctld/assoc_usage");
    if !usage.exists() {
        c.dev_cluster(&["daemon", "stop", "slurmctld"]).await;
        c.dev_cluster(&["daemon", "start", "slurmctld"]).await;
        assert!(usage.exists(), "{} after a stop", usage.display());
    }
}

/// `dev-cluster daemon ACTION NAME` on the test's cluster, timed.
async fn daemon(
    c: &support::Cluster,
    action: &str,
    name: &str,
    began: Instant,
    log: &Mutex<Vec<String>>,
) {
    let t = Instant::now();
    c.dev_cluster(&["daemon", action, name]).await;
    log.lock().await.push(format!(
        "{:.0}s: {action} {name} ({:.1}s)",
        began.elapsed().as_secs_f64(),
        t.elapsed().as_secs_f64()
    ));
}

/// A task that ended: its meta, phase and message.
type Ended = (Vec<u8>, Phase, String);

/// What the drill's workers are doing: the tasks that ended and the jobs (as squeue names them)
/// of the tasks still being followed, by task index.
#[derive(Default)]
struct Progress {
    ended: Mutex<HashMap<usize, Ended>>,
    following: std::sync::Mutex<HashMap<usize, String>>,
}

/// `creators` workers create the tasks, `pause` apart, following each to its end on random
/// replicas.
fn run_tasks(
    fleet: &Arc<Fleet>,
    counts: &Arc<Counts>,
    reqs: &Arc<Vec<CreateTaskRequest>>,
    creators: usize,
    pause: Duration,
    until: Instant,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<Progress>) {
    let next = Arc::new(AtomicUsize::new(0));
    let progress = Arc::new(Progress::default());
    let workers = (0..creators)
        .map(|_| {
            let (fleet, counts, next, progress, reqs) = (
                fleet.clone(),
                counts.clone(),
                next.clone(),
                progress.clone(),
                reqs.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= reqs.len() {
                        return;
                    }
                    let meta = create(&fleet, &counts, &reqs[i]).await;
                    progress
                        .following
                        .lock()
                        .unwrap()
                        .insert(i, job_of_meta(&meta));
                    let (p, m) = follow(&fleet, &counts, &meta, until).await;
                    progress.ended.lock().await.insert(i, (meta, p, m));
                    progress.following.lock().unwrap().remove(&i);
                    tokio::time::sleep(pause).await;
                }
            })
        })
        .collect();
    (workers, progress)
}

async fn join(workers: Vec<tokio::task::JoinHandle<()>>, until: Instant) {
    for w in workers {
        tokio::time::timeout(until.saturating_duration_since(Instant::now()), w)
            .await
            .unwrap_or_else(|_| {
                panic!("the drill's workers still busy at its deadline ({DRILL_DEADLINE:?})")
            })
            .unwrap();
    }
}

/// A task's job as squeue names it (`<id>` or `<array>_<index>`), from its meta.
fn job_of_meta(meta: &[u8]) -> String {
    let m: serde_json::Value = serde_json::from_slice(meta).expect("a meta");
    match m["element"].as_u64() {
        Some(i) => format!("{}_{i}", m["job_id"]),
        None => m["job_id"].to_string(),
    }
}

/// What waits for an admin after slurmctld's recovery: drained nodes (by name), held jobs and
/// jobs waiting out Slurm's requeue delay (reason BeginTime, about two minutes), by id. The
/// drill's admin starts the delayed ones now (`starttime=now`) instead of the drill waiting on
/// a timer of Slurm's.
struct Blocked {
    drained: Vec<String>,
    held: Vec<String>,
    delayed: Vec<String>,
}

async fn blocked(c: &support::Cluster) -> Blocked {
    let drained = c
        .dev_cluster(&["exec", "sinfo", "-h", "-R", "-o", "%N"])
        .await
        .split_whitespace()
        .map(String::from)
        .collect();
    let pending = c
        .dev_cluster(&["exec", "squeue", "-h", "-t", "PD", "-o", "%i|%r"])
        .await;
    let ids = |want: &dyn Fn(&str) -> bool| -> Vec<String> {
        pending
            .lines()
            .filter_map(|l| l.split_once('|'))
            .filter(|(_, r)| want(r))
            .map(|(id, _)| id.to_string())
            .collect()
    };
    Blocked {
        drained,
        held: ids(&|r| r.contains("held") || r.starts_with("JobHeld")),
        delayed: ids(&|r| r == "BeginTime"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_restart_of_slurmctld_then_restd_and_dbd_outages_lose_nothing() {
    let Some(c) = cluster_with_accounting() else {
        return;
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    let _restore = Restore(&c);
    const TASKS: usize = 36;
    let dir = common::fresh_dir("ctld-drill");
    let fleet = Arc::new(Fleet::start(
        REPLICAS,
        support::fleet_env(),
        &dir.join("serve.log"),
    ));
    let counts = Arc::new(Counts::default());
    let reqs: Arc<Vec<_>> = Arc::new(
        (0..TASKS)
            .map(|i| task(&support::unique(&format!("upg{i}")), 2, None))
            .collect(),
    );
    let v = c.user_client().version().await.expect("the API version");
    let keys: HashSet<String> = reqs.iter().map(|r| key_of(&c, v, r)).collect();
    let began = Instant::now();
    let since = chrono::Utc::now().timestamp() - 60;
    let until = began + DRILL_DEADLINE;
    // 6 creators, 6 tasks each, 4 s between: tasks are created, run and end through the whole
    // fault timeline below (~75 s), not only before it.
    let (workers, progress) = run_tasks(&fleet, &counts, &reqs, 6, Duration::from_secs(4), until);
    let events = Mutex::new(Vec::new());
    tokio::time::sleep(Duration::from_secs(6)).await;
    // An upgrade's restart: slurmctld saves its state on SIGTERM and is gone for 20 s.
    daemon(&c, "stop", "slurmctld", began, &events).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    daemon(&c, "start", "slurmctld", began, &events).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    daemon(&c, "stop", "slurmrestd", began, &events).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    daemon(&c, "start", "slurmrestd", began, &events).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    daemon(&c, "stop", "slurmdbd", began, &events).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    daemon(&c, "start", "slurmdbd", began, &events).await;
    join(workers, until).await;
    let took = began.elapsed();

    let results = progress.ended.lock().await;
    assert_eq!(
        results.len(),
        TASKS,
        "every CreateTask answered and followed"
    );
    let wrong: Vec<_> = results
        .iter()
        .filter(|(_, (_, p, _))| *p != Phase::Succeeded)
        .map(|(i, (_, p, m))| format!("{i}: {p:?} {m}"))
        .collect();
    // Jobs that ended while slurmdbd was down reach it from slurmctld's queue only after it is
    // back, and may have left slurmctld (MinJobAge) before: seen in a CI dry run, 7 of 36 in
    // neither listing 11 s after slurmdbd's start. A lost job never appears; a late record does.
    let mut waited = Duration::ZERO;
    let (live, cancelled) = loop {
        let (live, cancelled) = records_by_key(records(&c, since).await, &keys);
        if keys.iter().all(|k| live.contains_key(k)) || waited >= Duration::from_secs(90) {
            break (live, cancelled);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        waited += Duration::from_secs(5);
    };
    let missing: Vec<_> = keys.iter().filter(|k| !live.contains_key(*k)).collect();
    let doubled: Vec<_> = live
        .iter()
        .filter(|(_, js)| js.len() > 1)
        .map(|(k, js)| (k, js.iter().map(|j| j.job_id.0).collect::<Vec<_>>()))
        .collect();
    let get_errors = counts.get_errors.load(Ordering::Relaxed);
    eprintln!(
        "DRILL controller upgrade: {TASKS} tasks over {REPLICAS} serve processes in {:.0}s; {}; \
         CreateTask retries {}, GetTask errors {get_errors} (at most {} in a row); {} live jobs \
         (on record after {}s more), {cancelled} cancelled held duplicates; messages seen: {:?}",
        took.as_secs_f64(),
        events.lock().await.join(", "),
        counts.create_retries.load(Ordering::Relaxed),
        counts.max_consecutive_errors.load(Ordering::Relaxed),
        live.values().map(Vec::len).sum::<usize>(),
        waited.as_secs(),
        counts.said.lock().unwrap(),
    );
    assert!(
        wrong.is_empty(),
        "{} tasks did not succeed: {wrong:#?}",
        wrong.len()
    );
    assert!(
        missing.is_empty(),
        "executions with no job on record: {missing:?}"
    );
    assert!(
        doubled.is_empty(),
        "executions with more than one job: {doubled:?}"
    );
    assert_eq!(
        get_errors, 0,
        "GetTask errors (Flyte fails a task past 5 in a row)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_slurmctld_duplicates_nothing_and_misreports_nothing() {
    crash_drill(false).await;
}

/// Not in CI yet: on claims the drill meets two open faults (issue 52). A job of its own whose id
/// the restarted slurmctld gave to an array is not told from that array (a claim's elements
/// carry no key in their records, which `report::own_job` compares), so its task follows the
/// array; and an element held by Slurm's recovery never says Slurm's reason. Run it with
/// `--ignored`.
#[ignore = "on claims, a job whose id slurmctld gave to an array is not yet told from it (issue 52)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_claims_a_crashed_slurmctld_duplicates_nothing_and_misreports_nothing() {
    crash_drill(true).await;
}

/// The crash drill, its once-only on claims or on keys.
async fn crash_drill(claims: bool) {
    let Some(c) = cluster_with_accounting() else {
        return;
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    let _restore = Restore(&c);
    state_saved(&c).await;
    const TASKS: usize = 16;
    let dir = common::fresh_dir("ctld-crash");
    let env = support::fleet_env_on(claims, &dir);
    let fleet = Arc::new(Fleet::start(REPLICAS, env, &dir.join("serve.log")));
    let counts = Arc::new(Counts::default());
    let runs = support::Runs::new(&c);
    let run_names: Vec<String> = (0..TASKS)
        .map(|i| support::unique(&format!("crash{i}")))
        .collect();
    // Some end before the crash, some while slurmctld is gone, some after it is back.
    let reqs: Arc<Vec<_>> = Arc::new(
        run_names
            .iter()
            .enumerate()
            .map(|(i, run)| task(run, 2 + (i % 4) as u32 * 3, Some(&runs)))
            .collect(),
    );
    let v = c.user_client().version().await.expect("the API version");
    let keys_by_task: Vec<String> = reqs.iter().map(|r| key_of(&c, v, r)).collect();
    let keys: HashSet<String> = keys_by_task.iter().cloned().collect();
    let began = Instant::now();
    let since = chrono::Utc::now().timestamp() - 60;
    let until = began + DRILL_DEADLINE;
    let (workers, progress) = run_tasks(&fleet, &counts, &reqs, 8, Duration::from_secs(1), until);
    let events = Mutex::new(Vec::new());
    tokio::time::sleep(Duration::from_secs(8)).await;
    // A crash: no state saved on the way out; it restarts from its last periodic save.
    daemon(&c, "kill", "slurmctld", began, &events).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    daemon(&c, "start", "slurmctld", began, &events).await;
    // Slurm's own recovery, as measured on 26.05: jobs that ended after the last state save
    // come back RUNNING with no process behind them (until their node registers again), a job
    // launched twice is requeued held ("launch failed requeued held"), and the node that
    // reported a duplicate job id is drained ("Duplicate jobid"), so the jobs behind it wait
    // ("Nodes required for job are DOWN, DRAINED ..."). Nothing ends until an admin acts; what
    // the drill checks first is that the tasks said so, in Slurm's words, for the admin to see.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let b = blocked(&c).await;
    events.lock().await.push(format!(
        "{:.0}s: drained {:?}, held {:?}",
        began.elapsed().as_secs_f64(),
        b.drained,
        b.held
    ));
    // Whether tasks were there to give Slurm's reason for the jobs it put back (checked at the
    // end): not when every task of the held jobs had ended before the drill looked.
    let mut reason_due = true;
    if !b.drained.is_empty() || !b.held.is_empty() {
        // The tracker lists the reasons of jobs pending 30 s (pending_detail_after), once. Only
        // a task still following a held job (or any task, behind a drained node) can say it.
        // In Slurm's id-reuse recovery a held job may be no running task's: its tasks ended
        // (one [SLURM_JOB_LOST], one from its own exit marker), or it is the lost job of an
        // execution whose retried CreateTask follows another job now; then none will. Not yet
        // for an array's element held alone (`<array>_<index>`): the listing of long-pending
        // jobs reads no element's reason (an element's reason comes with its record, read when
        // Slurm requeues it and the tracker saw it run before), so a task of an element is not
        // waited for, held or behind a drained node.
        let held: HashSet<String> = b.held.iter().cloned().collect();
        let followed = || -> Vec<String> {
            progress
                .following
                .lock()
                .unwrap()
                .values()
                .filter(|j| !j.contains('_') && (!b.drained.is_empty() || held.contains(*j)))
                .cloned()
                .collect()
        };
        common::drill::wait_for(
            "a task message giving Slurm's reason for a held or blocked job",
            Duration::from_secs(90),
            || {
                let said = counts.said.lock().unwrap().iter().any(|m| {
                    m.contains("reason: JobHeld")
                        || m.contains("launch failed requeued held")
                        || m.contains("DRAINED")
                });
                reason_due = said;
                said || followed().is_empty()
            },
            || {
                format!(
                    "held {:?}, drained {:?}, followed by running tasks {:?}; messages seen: {:?}",
                    b.held,
                    b.drained,
                    followed(),
                    counts.said.lock().unwrap()
                )
            },
        )
        .await;
    }
    // The admin: slurmd restarted once (it registers again, and Slurm requeues the jobs
    // recovered RUNNING that its node no longer has: "missing from batch node ... Requeuing"),
    // then, until every task ended, drained nodes resumed and held jobs released as they appear
    // (a requeue after the restart can hold another job).
    daemon(&c, "restart", "slurmd", began, &events).await;
    let mut all_done = Box::pin(join(workers, until));
    loop {
        tokio::select! {
            _ = &mut all_done => break,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {
                let b = blocked(&c).await;
                for n in &b.drained {
                    let node = format!("nodename={n}");
                    c.dev_cluster(&["exec", "scontrol", "update", &node, "state=resume"]).await;
                }
                for id in &b.held {
                    c.dev_cluster(&["exec", "scontrol", "release", id]).await;
                }
                for id in &b.delayed {
                    let job = format!("jobid={id}");
                    c.dev_cluster(&["exec", "scontrol", "update", &job, "starttime=now"]).await;
                }
                if !b.drained.is_empty() || !b.held.is_empty() || !b.delayed.is_empty() {
                    events.lock().await.push(format!(
                        "{:.0}s: admin resumed {:?}, released {:?}, started {:?}",
                        began.elapsed().as_secs_f64(),
                        b.drained,
                        b.held,
                        b.delayed
                    ));
                }
            }
        }
    }
    let took = began.elapsed();

    let results = progress.ended.lock().await;
    assert_eq!(results.len(), TASKS);
    // Slurm's own final word on each job (slurmdbd has every job that ran; slurmctld the newest).
    let records = records(&c, since).await;
    // Each execution's jobs: on keys, Slurm's records of its key; on claims (no key on a job),
    // the jobs its script says ran it. A job Slurm itself ran again (a requeue) is one job.
    let (live, cancelled) = if claims {
        let live: HashMap<String, Vec<JobInfo>> = results
            .iter()
            .filter_map(|(i, (meta, _, _))| {
                let job = record_of_meta(&records, meta)?;
                Some((keys_by_task[*i].clone(), vec![job.clone()]))
            })
            .collect();
        (live, 0)
    } else {
        records_by_key(records.clone(), &keys)
    };
    let doubled: Vec<(String, Vec<String>)> = if claims {
        run_names
            .iter()
            .map(|run| {
                let mut jobs = runs.of(run);
                jobs.sort();
                jobs.dedup();
                (run.clone(), jobs)
            })
            .filter(|(_, jobs)| jobs.len() > 1)
            .collect()
    } else {
        live.iter()
            .filter(|(_, js)| js.len() > 1)
            .map(|(k, js)| (k.clone(), js.iter().map(|j| j.job_id.to_string()).collect()))
            .collect()
    };
    // The truth of each task is what its own job did: the exit-status marker its script left
    // (`<workdir>/<job name>.exit`, first field the exit code). Slurm's records cannot say it
    // here: the restarted slurmctld recovered jobs that had ended after its last save as
    // RUNNING (measured: they stay so for minutes, no process behind them), and gave the id of a
    // job it lost to the next submit.
    let mut misreported = Vec::new();
    let (mut requeued, mut lost, mut ghosts) = (0, 0, 0);
    for (i, (meta, p, m)) in results.iter() {
        let name = serde_json::from_slice::<serde_json::Value>(meta).unwrap()["job_name"]
            .as_str()
            .expect("the meta names its job")
            .to_string();
        let marker = std::fs::read_to_string(c.workdir_local.join(format!("{name}.exit")));
        let ran_ok = match &marker {
            Ok(text) => text.split_whitespace().next() == Some("0"),
            Err(_) => false,
        };
        let job = live.get(&keys_by_task[*i]).and_then(|js| js.first());
        requeued += usize::from(job.is_some_and(|j| j.restart_count.unwrap_or(0) > 0));
        ghosts += usize::from(job.is_some_and(|j| ran_ok && j.state.base == BaseState::Running));
        let right = if m.contains("[SLURM_JOB_LOST]") {
            // slurmctld gave this task's job id to another execution: the task is the cluster's
            // failure (Flyte retries it), never that job's outcome. Its own job may still have
            // run on the node unseen by slurmctld (the "Duplicate jobid" that drained it) and
            // left a marker later: a retry then recomputes it, which is safe; SUCCEEDED for a
            // job that never ran would not be.
            lost += 1;
            *p == Phase::RetryableFailed
        } else if ran_ok {
            *p == Phase::Succeeded
        } else {
            *p != Phase::Succeeded
        };
        if !right {
            misreported.push(format!(
                "{i}: task {p:?}; its job's marker {marker:?}, Slurm's record {:?}: {m}",
                job.map(|j| (j.job_id, j.state.base.clone(), j.reason.clone()))
            ));
        }
    }
    let said = counts.said.lock().unwrap().clone();
    eprintln!(
        "DRILL controller crash: {TASKS} tasks over {REPLICAS} serve processes in {:.0}s; {}; \
         GetTask errors {} (at most {} in a row); {} live jobs ({requeued} requeued by Slurm, \
         {ghosts} ended yet RUNNING in the restarted slurmctld), {lost} lost by it and reported \
         as the cluster's failure, {cancelled} cancelled held duplicates; messages seen: {said:?}",
        took.as_secs_f64(),
        events.lock().await.join(", "),
        counts.get_errors.load(Ordering::Relaxed),
        counts.max_consecutive_errors.load(Ordering::Relaxed),
        live.values().map(Vec::len).sum::<usize>(),
    );
    assert!(
        doubled.is_empty(),
        "executions with more than one job: {doubled:?}"
    );
    assert!(
        misreported.is_empty(),
        "tasks in another phase than their job's outcome: {misreported:#?}"
    );
    assert_eq!(counts.get_errors.load(Ordering::Relaxed), 0);
    if requeued > 0 && reason_due {
        // Slurm's recovery put jobs back: their tasks said why, in Slurm's words (unless they
        // had all ended before a task could: the admin releases them at once afterwards).
        assert!(
            said.iter().any(|s| s.contains("reason:")),
            "{requeued} jobs requeued by Slurm, and no task message gave Slurm's reason: {said:?}"
        );
    }
    // The ghosts (ended, yet RUNNING in the restarted slurmctld) hold CPUs until Slurm notices:
    // gone, so that the next test has the node.
    for js in live.values() {
        for j in js
            .iter()
            .filter(|j| matches!(j.state.base, BaseState::Running | BaseState::Pending))
        {
            let _ = c.user_client().cancel(j.job_id, None).await;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
