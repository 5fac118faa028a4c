//! Fan-out as job arrays: CreateTasks of one array shape that arrive within the coalescing
//! window (`FLYTE_SLURM_COALESCE_WINDOW`) are submitted as one job array, each task one element.
//!
//! A `flyte.map` of N elements is N CreateTasks at once; one job each cost slurmctld a held
//! submit, a share of a check and a release per task. A batch costs those once: one held submit
//! of the array (its comment or its name packs every element's key, where slurmdbd keeps them:
//! `render::naming::KeysIn`), one check, one release. Once-only holds per element, with the protocol of `idempotency/` at the
//! array's granularity: the array is submitted held; the check that follows knows every job
//! below it; for each key, the lowest job carrying it wins (an array's id carries all its
//! keys). An element whose key has a lower job elsewhere (another replica's) is cancelled
//! (`scancel <array>_<index>`, held, so it never started) and its task answered with that job;
//! then the array is released. A replica that dies between submit and release leaves the array
//! held and marked; whoever next meets one of its keys settles it the same way
//! (`protocol::settle_orphan`).
//!
//! The window never waits to fill: a batch goes out when its window ends, when no CreateTask
//! joined it for a tenth of the window (`quiet_gap`: a burst has arrived), or when it is full
//! (snakemake-executor-plugin-slurm #473 deadlocked waiting for more jobs). Full: the keys its
//! comment (`COMMENT_MAX`), or name and logs' file names (`KeysIn::cap`), can hold, slurmctld's
//! `MaxArraySize` and the scripts it can hold
//! (`max_script_size`), both from slurm.conf where slurmrestd shows it, else Slurm's defaults
//! (`coalesce_settings.rs`, which also decides whether the cluster coalesces at all). Not
//! coalesced (`render::coalesce::shape`, and [`coalescible`]): arrays, dependencies, holds,
//! multi-node and clustered tasks, retries (attempt > 0: its own job, as Nextflow does), tasks
//! with their own credentials, tasks that opt out (`sbatch_options: {no-coalesce: true}`),
//! clusters without accounting (a coalesced element that left
//! slurmctld is found in slurmdbd's records only, by its key in the array's comment or name).
//!
//! A batch that fails to submit hands each task to the single path (`paced::run_single`),
//! which retries it as a job of its own; a submit that may have been made is marked uncertain
//! first, so the single path looks for the array before submitting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::render::coalesce::{self as shape_of, Member as ArrayMember};
use crate::render::naming::array_log_names;
use crate::render::{KeysIn, NAME_KEYS_MAX, keys_comment, keys_name};
use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::{Client, JobDescription, JobId};

use super::batches::{Added, Due, Member};
use super::claim::Outcome;
use super::claimed;
use super::coalesce_settings::{Coalescing, MAX_ARRAY_ELEMENTS};
use super::execution::{Progress, Submitted};
use super::paced;
use super::pacing::{Pace, Permit};
use super::protocol::{self, SubmitError, SubmitFailure};

/// Whether a CreateTask may be coalesced beyond its job's shape: not a retry, not clustered,
/// not with its own credentials, not opted out (`sbatch_options: {no-coalesce: true}`); the
/// caller also asks for a cluster with accounting.
pub fn coalescible(attempt: u32, ranks: bool, own_credentials: bool, opted_out: bool) -> bool {
    attempt == 0 && !ranks && !own_credentials && !opted_out
}

/// The batch a job goes into: its shape (with its submitter: one sbatch has one) and how many
/// elements such a batch holds; `None` when the job cannot be an element (it is submitted
/// alone).
pub struct BatchOf {
    shape: String,
    cap: usize,
    script_bytes: usize,
    keys_in: KeysIn,
}

pub fn batch_of(
    job: &JobDescription,
    slurm_user: Option<&str>,
    coalescing: &Coalescing,
) -> Option<BatchOf> {
    let shape = shape_of::shape(job)?;
    let cap = coalescing.cap(cap_for(job.comment.as_deref()));
    // Below 2: the task's own comment (or MaxArraySize) leaves no room for a batch.
    (cap >= 2).then(|| BatchOf {
        // Arrays carrying their keys in their name and in their comment are not one batch.
        shape: format!(
            "{}\n{:?}\n{shape}",
            slurm_user.unwrap_or_default(),
            coalescing.keys_in
        ),
        cap,
        script_bytes: coalescing.limits.script_bytes,
        keys_in: coalescing.keys_in,
    })
}

/// The CreateTask waiting for a submit: its `resource_meta` template (the job filled in once
/// it exists), its Flyte execution (for the log line), and when it must be answered.
pub struct Waiter {
    pub template: ResourceMeta,
    pub flyte: Option<String>,
    pub answer_by: Option<Instant>,
}

/// Puts the execution's submit in its batch (see [`batch_of`]).
pub fn submit_coalesced(
    rt: &Arc<ClusterRuntime>,
    window: Duration,
    key: &str,
    job: &JobDescription,
    batch: BatchOf,
    client: Client,
    waiter: Waiter,
) -> watch::Receiver<Progress> {
    let Waiter {
        template,
        flyte,
        answer_by,
    } = waiter;
    let BatchOf {
        shape,
        cap,
        script_bytes,
        keys_in,
    } = batch;
    rt.submitter.executions.submit_or_join(key, || {
        let (tx, rx) = watch::channel(Progress::start());
        let since = rt.submitter.arrived();
        let member = Member::new((key, since), job, client, template, flyte, answer_by, tx);
        let window_of = |rt: &Arc<ClusterRuntime>| {
            let (rt, shape) = (rt.clone(), shape.clone());
            tokio::spawn(async move {
                let quiet = quiet_gap(window);
                let mut wait = quiet;
                loop {
                    tokio::time::sleep(wait).await;
                    match rt.submitter.batches.due(&shape, window, quiet) {
                        Due::Now(batch) => return run_batch(rt, batch, keys_in).await,
                        Due::After(d) => wait = d,
                        Due::Gone => return,
                    }
                }
            });
        };
        match rt.submitter.batches.add(&shape, member, cap, script_bytes) {
            Added::Opened => window_of(rt),
            Added::Joined => {}
            Added::Full(batch, opened_next) => {
                tokio::spawn(run_batch(rt.clone(), batch, keys_in));
                if opened_next {
                    window_of(rt);
                }
            }
        }
        rx
    })
}

/// A batch goes out once no CreateTask joined it for this long (or its window ended): a tenth
/// of the window, between 5 and 50 ms. A map's CreateTasks arrive within a few milliseconds of
/// each other (as many as the backend has in flight), so waiting out a 200 ms window after the
/// last one only delays the whole map (BENCHMARKS.md, "Coalescing under Flyte's pacing").
fn quiet_gap(window: Duration) -> Duration {
    (window / 10).clamp(Duration::from_millis(5), Duration::from_millis(50))
}

/// How many elements a batch of jobs with the tasks' own `comment` holds: its keys must fit in
/// the array's comment beside it and the mark of the check.
pub fn cap_for(comment: Option<&str>) -> usize {
    crate::render::naming::comment_keys_max(comment).min(MAX_ARRAY_ELEMENTS)
}

/// Submits one batch, and answers each of its tasks.
async fn run_batch(rt: Arc<ClusterRuntime>, members: Vec<Member>, keys_in: KeysIn) {
    let cluster = rt.cfg.name.clone();
    let mut batch = Vec::with_capacity(members.len());
    for m in members {
        if rt.submitter.executions.is_withdrawn(&m.key) {
            let _ = m.tx.send(Progress::Withdrawn);
        } else {
            batch.push(m);
        }
    }
    if batch.first().is_some_and(|m| m.template.claim.is_some()) {
        // Made through their claims, which say who already has a job.
        match turn(&rt, batch.len()).await {
            Turn::Go(permit, _submitting) => run_claimed(&rt, batch, permit).await,
            Turn::Alone => singles(&rt, batch),
            Turn::ShuttingDown => {}
        }
        return;
    }
    // Keys that already have a job (a retried CreateTask, another replica's) take the single
    // path, which adopts (and if need be releases) it.
    let keys: Vec<&str> = batch.iter().map(|m| m.key.as_str()).collect();
    let retake = keys.iter().any(|k| rt.submitter.executions.is_uncertain(k));
    let known = rt
        .submitter
        .index
        .lookup_many(rt.submit_client(), &cluster, rt.index_user(), &keys, retake)
        .await;
    let (batch, alone): (Vec<Member>, Vec<Member>) = match known {
        Ok(found) => {
            let mut found = found.into_iter();
            batch
                .into_iter()
                .partition(|_| found.next().flatten().is_none())
        }
        Err(e) => {
            tracing::info!(cluster, error = %e, "cannot look up a batch's executions; submitting them one by one");
            (Vec::new(), batch)
        }
    };
    singles(&rt, alone);
    let (permit, _submitting) = match turn(&rt, batch.len()).await {
        Turn::Go(permit, submitting) => (permit, submitting),
        Turn::Alone => return singles(&rt, batch),
        Turn::ShuttingDown => return,
    };
    let began = Instant::now();
    let since: Vec<Instant> = batch.iter().map(|m| m.since).collect();
    let answer_by = batch.iter().filter_map(|m| m.answer_by).min();
    let latest = since.iter().max().copied().unwrap_or(began);
    // What the submit reads, apart from the answers (which are not `Sync`).
    let (elements, answers): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|m| ((m.key, m.job, m.client), (m.template, m.flyte, m.tx)))
        .unzip();
    let r = submit_array(&rt, &elements, keys_in, (answer_by, &permit, latest)).await;
    permit.done(paced::pace_of(&r));
    let ok = r.is_ok();
    if ok {
        rt.submitter.batches.submitted(&since);
    }
    match &r {
        Ok(outcomes) => {
            tracing::info!(cluster, elements = elements.len(), job_id = %outcomes.first().map(|s| s.placement().job_id).unwrap_or(JobId(0)), took_ms = began.elapsed().as_millis() as u64, "submitted a batch of tasks as one job array");
        }
        Err(f) => {
            tracing::warn!(cluster, elements = elements.len(), what = %f.what, error = %f.error, "a batch did not settle as one job array; submitting its tasks one by one");
        }
    }
    let outcomes = r.unwrap_or_default();
    for (i, ((key, job, client), (template, flyte, tx))) in
        elements.into_iter().zip(answers).enumerate()
    {
        if ok {
            let s = outcomes[i].clone();
            let progress =
                paced::settle(&rt, &key, &client, template, flyte.as_deref(), Ok(s)).await;
            let _ = tx.send(progress);
        } else {
            // Its CreateTask answers deferred by now, or soon: the single submit owes no answer.
            let m = Member::new(
                (&key, Instant::now()),
                &job,
                client,
                template,
                flyte,
                None,
                tx,
            );
            single(&rt, m);
        }
    }
}

/// A batch made through its members' claims (`claimed::create_batch`), and what each member's
/// outcome makes of its execution. Members another replica holds, or whose claim or record
/// failed, take the single path, which retries through their claims; a member whose claim holds
/// the tombstone is withdrawn.
async fn run_claimed(rt: &Arc<ClusterRuntime>, batch: Vec<Member>, permit: Permit) {
    let began = Instant::now();
    let outcomes = match claimed::create_batch(rt, &batch).await {
        Ok(o) => o,
        Err(why) => {
            permit.done(Pace::Prompt);
            tracing::warn!(cluster = %rt.cfg.name, why, "submitting a batch's tasks one by one");
            return singles(rt, alone(batch));
        }
    };
    permit.done(
        outcomes
            .iter()
            .find_map(|o| o.as_ref().err().and_then(claimed::client_error))
            .map_or(Pace::Prompt, paced::pace_of_error),
    );
    let of = batch.len() as u32;
    let fresh: Vec<Instant> = batch
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| matches!(o, Ok(Outcome::Submitted(_))))
        .map(|(m, _)| m.since)
        .collect();
    // The array holds exactly the elements submitted (one whose record lost was cancelled before
    // its release): what each of their metas names.
    let submitted: Vec<u32> = (0..of)
        .zip(&outcomes)
        .filter(|(_, o)| matches!(o, Ok(Outcome::Submitted(_))))
        .map(|(i, _)| i)
        .collect();
    let array = crate::render::array::expr(&submitted);
    if !fresh.is_empty() {
        rt.submitter.batches.submitted(&fresh);
        tracing::info!(cluster = %rt.cfg.name, elements = fresh.len(), of, took_ms = began.elapsed().as_millis() as u64, "submitted a batch of tasks as one job array, each element recorded in its task's claim");
    }
    for (m, outcome) in batch.into_iter().zip(outcomes) {
        let settled = match outcome {
            Ok(Outcome::Submitted(job)) => Submitted::Fresh(claimed::placement(job, Some(&array))),
            Ok(Outcome::Existing(job, a)) => {
                Submitted::Adopted(claimed::placement(job, a.as_deref()))
            }
            Ok(Outcome::Deleted) => {
                let _ = m.tx.send(Progress::Withdrawn);
                continue;
            }
            Ok(Outcome::InProgress { .. }) => {
                singles(rt, alone(vec![m]));
                continue;
            }
            Err(e) => {
                tracing::info!(cluster = %rt.cfg.name, key = %m.key, error = %e, "a batch's element did not settle; submitting its task alone");
                singles(rt, alone(vec![m]));
                continue;
            }
        };
        let progress = paced::settle(
            rt,
            &m.key,
            &m.client,
            m.template,
            m.flyte.as_deref(),
            Ok(settled),
        )
        .await;
        let _ = m.tx.send(progress);
    }
}

/// Members whose CreateTasks answer deferred by now, or soon: the single submit owes no answer.
fn alone(mut members: Vec<Member>) -> Vec<Member> {
    for m in &mut members {
        m.answer_by = None;
    }
    members
}

/// A batch's turn to be submitted.
enum Turn<'a> {
    /// A permit of the pacer, and a place among the submits a shutdown waits for.
    Go(Permit, super::gate::InFlight<'a>),
    /// Fewer than two members: each goes alone.
    Alone,
    /// Shutting down: as a single submit does, the batch stays unmade here.
    ShuttingDown,
}

async fn turn(rt: &ClusterRuntime, elements: usize) -> Turn<'_> {
    if elements < 2 {
        return Turn::Alone;
    }
    let permit = rt.submitter.pacer.acquire().await;
    match rt.submitter.gate.enter() {
        Some(submitting) => Turn::Go(permit, submitting),
        None => {
            drop(permit);
            tracing::info!(cluster = %rt.cfg.name, elements, "shutting down: not beginning this batch");
            Turn::ShuttingDown
        }
    }
}

/// Members submitted each as a job of its own.
fn singles(rt: &Arc<ClusterRuntime>, members: Vec<Member>) {
    for m in members {
        single(rt, m);
    }
}

/// A member's submit as a job of its own.
fn single(rt: &Arc<ClusterRuntime>, m: Member) {
    tokio::spawn(paced::run_single(rt.clone(), m));
}

/// The batch's job array (its keys where slurmdbd keeps them: `coalesce_settings.rs`; the
/// tasks' own comment stays theirs), through the protocol's array mode. Element `i` is
/// `batch[i]`.
async fn submit_array(
    rt: &ClusterRuntime,
    batch: &[(String, JobDescription, Client)],
    keys_in: KeysIn,
    (answer_by, permit, latest): (Option<Instant>, &Permit, Instant),
) -> Result<Vec<Submitted>, SubmitFailure> {
    let keys: Vec<&str> = batch.iter().map(|(k, _, _)| k.as_str()).collect();
    let first = &batch[0].1;
    let (name, comment) = match keys_in {
        KeysIn::Comment => (
            crate::render::naming::array_name(batch.iter().map(|(_, job, _)| job.name.as_str())),
            keys_comment(&keys, first.comment.as_deref()),
        ),
        KeysIn::Name | KeysIn::NameAndLogs => (
            keys_name(&keys[..keys.len().min(NAME_KEYS_MAX)]),
            first.comment.clone().unwrap_or_default(),
        ),
    };
    // What the name cannot hold goes in its logs' file names (`KeysIn::NameAndLogs`).
    let logs = (keys_in == KeysIn::NameAndLogs && keys.len() > NAME_KEYS_MAX)
        .then(|| array_log_names(&keys[NAME_KEYS_MAX..]));
    let logs = logs.as_ref().map(|(o, e)| (o.as_str(), e.as_str()));
    let members: Vec<ArrayMember> = batch
        .iter()
        .map(|(key, job, _)| ArrayMember { key, job })
        .collect();
    let array = shape_of::array_job_with_logs(&members, &name, comment, logs).map_err(|e| {
        SubmitFailure {
            what: "making the batch's job array".into(),
            error: SubmitError::Coalesce(e.to_string()),
        }
    })?;
    let cl = rt.once().paced(answer_by, permit, latest);
    protocol::submit_array(cl, &batch[0].2, &array, &keys).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_holds_what_the_comment_can() {
        // 1024 - "flyte-keys=" (11) - the mark (43) = 970 → 88 keys of 11.
        assert_eq!(cap_for(None), 88);
        assert_eq!(cap_for(Some(&"c".repeat(109))), 78);
        assert_eq!(cap_for(Some(&"c".repeat(2000))), 0);
    }
}
