//! GetTask's answer: a tracker snapshot (plus declared outputs and the stderr tail) turned into a
//! `Resource` with the plugin's message format.

use std::time::Duration;

use crate::proto::connector::Resource;
use crate::proto::core::task_execution::Phase;
use crate::proto::core::{self, Blob, BlobMetadata, BlobType, Literal, Scalar};
use crate::proto::task::{NamedLiteral, Outputs};
use crate::staging::{
    self, DeclaredOutput, Dimensionality, OutputBlob, TransferOutcome, UploadMode,
};
use crate::tracker::{ElementSnapshot, FailureClass, JobSnapshot};

use super::cluster::ClusterRuntime;
use super::meta::ResourceMeta;
use super::native_result;

/// The confinement root used when outputs are all uploaded by the job itself and no staging is
/// configured: no file is ever read through it.
const NO_STAGING_ROOT: &str = "/nonexistent/slurm-connector-no-staging";

/// Bound on staging reads inside GetTask (the backend's deadline is 10 s).
const STAGING_BUDGET: Duration = Duration::from_secs(3);

/// `HH:MM:SS` (or `D-HH:MM:SS`) like Slurm prints a time limit.
fn limit_text(minutes: u32) -> String {
    let (d, h, m) = (minutes / 1440, minutes / 60 % 24, minutes % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:00")
    } else {
        format!("{h:02}:{m:02}:00")
    }
}

/// `4G`, `512M`: memory in MiB as sbatch takes it.
fn mem_text(mib: u64) -> String {
    if mib >= 1024 && mib.is_multiple_of(1024) {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

/// `4G`, `259.6M`: bytes in sbatch's units, one decimal unless whole.
fn bytes_text(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (u, size) in UNITS {
        if b >= size {
            return if b.is_multiple_of(size) {
                format!("{}{u}", b / size)
            } else {
                format!("{:.1}{u}", b as f64 / size as f64)
            };
        }
    }
    format!("{b}")
}

/// `(used, limit)` in bytes from slurmstepd's `<step> exceeded memory limit (<used> > <limit>),
/// being killed` (jobacct_gather's OverMemoryKill, `src/interfaces/jobacct_gather.c`).
pub fn over_memory_line(stderr_tail: &str) -> Option<(u64, u64)> {
    stderr_tail.lines().rev().find_map(|l| {
        let rest = l.split("exceeded memory limit (").nth(1)?;
        let (nums, _) = rest.split_once(')')?;
        let (used, limit) = nums.split_once(" > ")?;
        Some((used.trim().parse().ok()?, limit.trim().parse().ok()?))
    })
}

/// The first line of a failed task's message, in a stable form alerts and people can match:
/// `[<TAG>] <what happened>`. The tag is Slurm's state (`TIMEOUT`, `OUT_OF_MEMORY`, `NODE_FAIL`,
/// ...), or `LOST` / `UNKNOWN_STATE` for a job the connector could not follow. `None` for a job
/// that has not failed.
pub fn headline(meta: &ResourceMeta, s: &JobSnapshot) -> Option<String> {
    s.class?;
    // A job array: the worst element's line, under its own id, naming the array.
    if let Some(worst) = worst_element(s) {
        let own = ResourceMeta {
            job_id: worst.snapshot.job_id,
            ..meta.clone()
        };
        let line = headline(&own, &worst.snapshot)?;
        return Some(format!(
            "{line} (element {} of job array {})",
            worst.index, meta.job_id
        ));
    }
    let id = meta.job_id;
    let base = s
        .state
        .as_deref()
        .and_then(|t| t.split('+').next())
        .unwrap_or("");
    let on = |s: &JobSnapshot| {
        s.nodes
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default()
    };
    let signal = s
        .signal
        .as_deref()
        .or(s.exit_code.as_ref().and_then(|c| c.signal_name.as_deref()));
    let line = match base {
        "TIMEOUT" => match s.time_limit_minutes {
            Some(m) => format!("[TIMEOUT] after {} (job {id}{})", limit_text(m), on(s)),
            None => format!("[TIMEOUT] job {id} reached its time limit{}", on(s)),
        },
        "OUT_OF_MEMORY" => match s.memory_per_node_mib {
            Some(m) => format!(
                "[OUT_OF_MEMORY] job {id} used more than its {}{}",
                mem_text(m),
                on(s)
            ),
            None => format!(
                "[OUT_OF_MEMORY] job {id} used more than its memory limit{}",
                on(s)
            ),
        },
        "NODE_FAIL" => match &s.nodes {
            Some(n) => format!("[NODE_FAIL] {n} (job {id})"),
            None => format!("[NODE_FAIL] a node of job {id} failed"),
        },
        "BOOT_FAIL" => match &s.nodes {
            Some(n) => format!("[BOOT_FAIL] {n} (job {id})"),
            None => format!("[BOOT_FAIL] a node of job {id} did not boot"),
        },
        "PREEMPTED" => format!("[PREEMPTED] job {id}{} was preempted", on(s)),
        "DEADLINE" => format!("[DEADLINE] job {id} passed its deadline"),
        "FAILED" => {
            let rc = s.exit_code.as_ref().and_then(|c| c.return_code);
            match (rc, signal) {
                (_, Some(sig)) if s.exit_code.as_ref().and_then(|c| c.signal).is_some() => {
                    format!("[FAILED] job {id} was killed by signal {sig}{}", on(s))
                }
                // A shell reports a child killed by signal N as 128+N.
                (Some(rc), _) if (129..=128 + 64).contains(&rc) => format!(
                    "[FAILED] job {id} exited with code {rc} (128+{}: killed by a signal?){}",
                    rc - 128,
                    on(s)
                ),
                (Some(rc), _) => format!("[FAILED] job {id} exited with code {rc}{}", on(s)),
                (None, _) => format!("[FAILED] job {id} failed{}", on(s)),
            }
        }
        _ if s.note.is_some() && s.state.is_some() && s.class.is_some() => {
            // Lost (no record, no marker) or a state this connector does not know.
            if s.phase == crate::proto::core::task_execution::Phase::Failed {
                format!("[UNKNOWN_STATE] job {id}")
            } else {
                format!("[LOST] job {id}")
            }
        }
        _ if s
            .state
            .as_deref()
            .is_some_and(|t| t.contains("SPECIAL_EXIT")) =>
        {
            format!("[SPECIAL_EXIT] job {id} is held by Slurm after a special exit")
        }
        _ if s.state.as_deref().is_some_and(|t| t.contains("REVOKED")) => {
            format!("[REVOKED] job {id} was revoked (it runs on another cluster of the federation)")
        }
        other => format!("[{other}] job {id}"),
    };
    Some(line)
}

/// How bad an element's end is (as the tracker chose the array's): permanent, the task's code,
/// the cluster's.
fn severity(c: Option<FailureClass>) -> u8 {
    match c {
        Some(FailureClass::Permanent) => 3,
        Some(FailureClass::User) => 2,
        Some(FailureClass::Infrastructure) => 1,
        None => 0,
    }
}

/// The failed element whose class is the array's (the lowest index among equals).
fn worst_element(s: &JobSnapshot) -> Option<&ElementSnapshot> {
    s.elements
        .iter()
        .filter(|e| e.snapshot.class.is_some())
        .max_by_key(|e| (severity(e.snapshot.class), std::cmp::Reverse(e.index)))
}

/// At most this many failed elements are named one by one in the message, this many have
/// their stderr read, and this many elements are listed in `custom_info` (the counts cover all).
const FAILED_LISTED: usize = 10;
const TAILS_READ: usize = 3;
const ELEMENTS_LISTED: usize = 200;

/// The failed elements, in index order.
fn failed_elements(s: &JobSnapshot) -> Vec<&ElementSnapshot> {
    s.elements
        .iter()
        .filter(|e| e.snapshot.class.is_some())
        .collect()
}

/// A job array's progress: how many elements are in each state, then each failed one.
pub fn array_progress(meta: &ResourceMeta, s: &JobSnapshot) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for e in &s.elements {
        let state = e
            .snapshot
            .state
            .as_deref()
            .map(|t| t.split('+').next().unwrap_or(t).to_string())
            .unwrap_or_else(|| "not known yet".into());
        match counts.iter_mut().find(|(k, _)| *k == state) {
            Some((_, n)) => *n += 1,
            None => counts.push((state, 1)),
        }
    }
    let done = s
        .elements
        .iter()
        .filter(|e| e.snapshot.phase.is_terminal())
        .count();
    let mut m = format!(
        "job array {}: {done} of {} elements done ({})",
        meta.job_id,
        s.elements.len(),
        counts
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let failed = failed_elements(s);
    if !failed.is_empty() {
        let indices: Vec<String> = failed.iter().map(|e| e.index.to_string()).collect();
        m.push_str(&format!(
            "
failed elements: {}",
            indices.join(", ")
        ));
        for e in failed.iter().take(FAILED_LISTED) {
            let mut line = format!(
                "
element {} (job {}) is {}",
                e.index,
                e.snapshot.job_id,
                e.snapshot.state.as_deref().unwrap_or("not known")
            );
            if let Some(ec) = &e.snapshot.exit_code {
                line.push_str(&format!(", exit code {ec}"));
            }
            if let Some(r) = e
                .snapshot
                .reason
                .as_deref()
                .filter(|r| !r.is_empty() && *r != "None")
            {
                line.push_str(&format!(", reason: {r}"));
            }
            if let Some(n) = &e.snapshot.note {
                line.push_str(&format!(" ({n})"));
            }
            m.push_str(&line);
        }
        if failed.len() > FAILED_LISTED {
            m.push_str(&format!(
                "
... and {} more",
                failed.len() - FAILED_LISTED
            ));
        }
    }
    m
}

/// `[TAG] ...` for a failure, then `Slurm job <id> is <STATE>[, exit code x:y][, reason: r]` and
/// the lines after it.
pub fn message(meta: &ResourceMeta, s: &JobSnapshot) -> String {
    let mut m = headline(meta, s)
        .map(|h| format!("{h}\n"))
        .unwrap_or_default();
    m.push_str(&format!(
        "Slurm job {} is {}",
        meta.job_id,
        s.state.as_deref().unwrap_or("not known yet")
    ));
    if let Some(ec) = &s.exit_code {
        m.push_str(&format!(", exit code {ec}"));
    }
    if let Some(r) = s
        .reason
        .as_deref()
        .filter(|r| !r.is_empty() && *r != "None")
    {
        m.push_str(&format!(", reason: {r}"));
    }
    if let Some(sig) = &s.signal {
        m.push_str(&format!(", signal {sig}"));
    }
    if let Some(n) = &s.note {
        m.push_str(&format!("\n{n}"));
    }
    if !s.elements.is_empty() {
        m.push('\n');
        m.push_str(&array_progress(meta, s));
    }
    if let Some(u) = &s.unreachable {
        let since = chrono::DateTime::<chrono::Utc>::from(u.since).format("%Y-%m-%dT%H:%M:%SZ");
        m.push_str(&format!(
            "\nslurmrestd of cluster {} unreachable since {since} ({}); showing the last known state",
            meta.cluster, u.error
        ));
    }
    if !meta.stdout.is_empty() {
        m.push_str(&format!("\nstdout: {}", meta.stdout));
    }
    if !meta.stderr.is_empty() && meta.stderr != meta.stdout {
        m.push_str(&format!("\nstderr: {}", meta.stderr));
    }
    if s.phase == Phase::Running {
        // An array's elements are jobs of their own: attach to one that runs.
        match s
            .elements
            .iter()
            .find(|e| e.snapshot.phase == Phase::Running)
        {
            Some(e) => m.push_str(&format!(
                "\nattach: srun --jobid={} --overlap --pty bash (element {})",
                e.snapshot.job_id, e.index
            )),
            None if s.elements.is_empty() => m.push_str(&format!(
                "\nattach: srun --jobid={} --overlap --pty bash",
                meta.job_id
            )),
            None => {}
        }
    }
    m
}

pub fn declared(meta: &ResourceMeta) -> Vec<DeclaredOutput> {
    meta.outputs.values().cloned().collect()
}

fn blob_literal(b: &OutputBlob) -> NamedLiteral {
    let dim = match b.dimensionality {
        Dimensionality::Single => core::blob_type::BlobDimensionality::Single,
        Dimensionality::Multipart => core::blob_type::BlobDimensionality::Multipart,
    };
    NamedLiteral {
        name: b.name.clone(),
        value: Some(Literal {
            value: Some(core::literal::Value::Scalar(Box::new(Scalar {
                value: Some(core::scalar::Value::Blob(Blob {
                    metadata: Some(BlobMetadata {
                        r#type: Some(BlobType {
                            format: String::new(),
                            dimensionality: dim as i32,
                        }),
                    }),
                    uri: b.uri.clone(),
                })),
            }))),
            ..Default::default()
        }),
    }
}

/// The whole GetTask resource. Never fails: staging problems become part of the message (or,
/// for declared outputs, the task's failure), never an RPC error.
/// The deployment's log-link templates filled in for this job (percent-encoded values).
fn log_links(
    templates: &[staging::logs::LogLinkTemplate],
    meta: &ResourceMeta,
) -> Vec<crate::proto::core::TaskLog> {
    let job_id = meta.job_id.to_string();
    let vars = staging::logs::LogVars {
        job_id: &job_id,
        stdout: &meta.stdout,
        stderr: &meta.stderr,
        cluster: &meta.cluster,
    };
    staging::logs::render_links(templates, &vars)
        .into_iter()
        .map(|(name, uri)| crate::proto::core::TaskLog {
            uri,
            name,
            show_while_pending: true,
            ready: true,
            ..Default::default()
        })
        .collect()
}

/// What [`resource`] reads besides the job: the deployment's settings and the native results.
pub struct Context<'a> {
    pub ceiling: &'a Result<staging::Ceiling, String>,
    pub log_templates: &'a [staging::logs::LogLinkTemplate],
    pub native: &'a native_result::Probes,
    /// The deployment's requeue budget, for metas that do not carry their own.
    pub requeue_budget: u32,
}

/// Slurm requeued the job (node failure, preemption) more often than the task's budget allows:
/// `Some((restarts, budget))`. The service then cancels the job and the task fails retryably.
pub fn over_budget(meta: &ResourceMeta, s: &JobSnapshot, deployment: u32) -> Option<(u32, u32)> {
    let budget = meta.requeue_budget.unwrap_or(deployment);
    let restarts = s.restart_count.unwrap_or(0);
    // A job that ended on its own (succeeded, or the task's code failed in its last run) says
    // so itself; the budget speaks only for a job the cluster keeps putting back.
    let own_end = s.phase == Phase::Succeeded || s.class == Some(FailureClass::User);
    (restarts > budget && !own_end).then_some((restarts, budget))
}

pub async fn resource(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: JobSnapshot,
    ctx: &Context<'_>,
) -> Resource {
    let (ceiling, log_templates) = (ctx.ceiling, ctx.log_templates);
    let mut phase = snap.phase;
    let mut failure_class = snap.class;
    let mut msg = message(meta, &snap);
    let budget = meta.requeue_budget.unwrap_or(ctx.requeue_budget);
    if let Some((restarts, budget)) = over_budget(meta, &snap, ctx.requeue_budget) {
        // The cluster's failures, not the task's: only a spent budget reaches Flyte, and as a
        // retryable failure (Flyte's own retries then start a new attempt).
        phase = Phase::RetryableFailed;
        failure_class = Some(FailureClass::Infrastructure);
        msg = format!(
            "[REQUEUE_BUDGET] Slurm requeued job {} {restarts} time{} after node failures or \
             preemptions, more than the task's budget of {budget}; the job was cancelled\n{msg}",
            meta.job_id,
            if restarts == 1 { "" } else { "s" }
        );
    } else if let Some(n) = snap.restart_count.filter(|n| *n > 0)
        && !matches!(phase, Phase::Failed | Phase::RetryableFailed)
    {
        msg.push_str(&format!(
            "\nrequeued by Slurm after a node failure or preemption ({n} of {budget})"
        ));
    } else if snap.class == Some(FailureClass::Infrastructure) && snap.restart_count.is_some() {
        // Slurm requeues a requeueable batch job itself after a node failure; this one ended
        // instead, so it was not requeueable here.
        msg.push_str(
            "\nSlurm did not put the job back in the queue (it does so only for a requeueable \
             job: no --no-requeue, JobRequeue=1, and for preemption PreemptMode=REQUEUE); the \
             failure is the cluster's, so Flyte's retry applies",
        );
    }
    let mut outputs = None;

    // A native task's entrypoint says how the task went (outputs.pb / error.pb), not the exit code.
    if phase == Phase::Succeeded
        && let Some(prefix) = &meta.native_prefix
    {
        let source = native_result::Source::for_prefix(prefix, rt.staging.as_ref());
        match ctx
            .native
            .decision(&meta.cluster, meta.job_id, prefix, source)
            .await
        {
            Some(d) => {
                phase = d.phase;
                failure_class = match d.phase {
                    Phase::Failed => Some(FailureClass::Permanent),
                    Phase::RetryableFailed => Some(FailureClass::User),
                    _ => None,
                };
                msg.push_str(&format!("\n{}", d.message));
            }
            None => {
                phase = Phase::Running;
                msg = format!(
                    "Slurm job {} COMPLETED; reading the task's result at {prefix}",
                    meta.job_id
                );
            }
        }
    }

    if phase == Phase::Succeeded && !meta.outputs.is_empty() {
        let decl = declared(meta);
        let needs_staging = decl.iter().any(|d| d.upload == UploadMode::Connector);
        match (&rt.staging, needs_staging) {
            (None, true) => {
                phase = Phase::Failed;
                failure_class = Some(FailureClass::Permanent);
                msg.push_str(&format!(
                    "\n{}; or declare the outputs with output_upload=\"job\" so the job uploads them itself",
                    staging::settings::not_configured()
                ));
            }
            (staging_backend, _) => {
                let (outcome, progress) = {
                    let mut transfers = rt.transfers.lock().unwrap();
                    let t = transfers.entry(meta.job_id).or_insert_with(|| {
                        let backend: std::sync::Arc<dyn staging::Staging> = match staging_backend {
                            Some(s) => s.clone(),
                            // Job uploads only: nothing is read from the cluster's filesystem,
                            // so a backend confined to a root that holds nothing is enough.
                            None => std::sync::Arc::new(staging::LocalStaging::new(
                                staging::Roots::parse(NO_STAGING_ROOT)
                                    .expect("a fixed absolute path"),
                            )),
                        };
                        let c = ceiling
                            .clone()
                            .map_err(|message| staging::StagingError::Config {
                                var: "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES",
                                message,
                            });
                        staging::outputs::start(backend, meta.job_id.to_string(), decl.clone(), c)
                    });
                    (t.outcome(), t.progress())
                };
                match outcome {
                    None => {
                        phase = Phase::Running;
                        msg = staging::outputs::pending_message(
                            &meta.job_id.to_string(),
                            &decl,
                            progress,
                        );
                    }
                    Some(TransferOutcome::Succeeded(blobs)) => {
                        outputs = Some(Outputs {
                            literals: blobs.iter().map(blob_literal).collect(),
                        });
                    }
                    Some(TransferOutcome::Failed(why)) => {
                        // The job finished: an output that is missing now never appears.
                        phase = Phase::Failed;
                        failure_class = Some(FailureClass::Permanent);
                        msg.push_str(&format!("\n{why}"));
                    }
                    Some(TransferOutcome::Cancelled) => {
                        phase = Phase::Aborted;
                        msg.push_str("\noutput upload cancelled");
                    }
                }
            }
        }
    }

    if matches!(phase, Phase::Failed | Phase::RetryableFailed)
        && let Some(st) = &rt.staging
        && !meta.stderr.is_empty()
        && !snap.elements.is_empty()
    {
        // A job array: the tails of the first failed elements, each from its own file, all
        // within the one staging budget.
        let deadline = tokio::time::Instant::now() + STAGING_BUDGET;
        for e in failed_elements(&snap).into_iter().take(TAILS_READ) {
            let path = staging::element_path(&meta.stderr, meta.job_id.0, e.index);
            match tokio::time::timeout_at(deadline, staging::logs::failure_tail(st.as_ref(), &path))
                .await
            {
                Ok(Ok(Some(tail))) => msg.push_str(&format!(
                    "\n--- last lines of stderr of element {} ({path}) ---\n{tail}",
                    e.index
                )),
                Ok(Ok(None)) => {}
                Ok(Err(err)) => msg.push_str(&format!(
                    "\n(stderr of element {} not readable: {err})",
                    e.index
                )),
                Err(_) => {
                    msg.push_str("\n(stderr not read: the staging backend is slow)");
                    break;
                }
            }
        }
    } else if matches!(phase, Phase::Failed | Phase::RetryableFailed)
        && let Some(st) = &rt.staging
        && !meta.stderr.is_empty()
    {
        match tokio::time::timeout(
            STAGING_BUDGET,
            staging::logs::failure_tail(st.as_ref(), &meta.stderr),
        )
        .await
        {
            Ok(Ok(Some(tail))) => {
                // jobacct_gather's OverMemoryKill ends the job FAILED by SIGKILL; only the line
                // slurmstepd writes to the job's stderr says it was the memory limit.
                if snap
                    .state
                    .as_deref()
                    .is_some_and(|t| t.starts_with("FAILED"))
                    && let Some((used, limit)) = over_memory_line(&tail)
                {
                    let first = msg.find('\n').unwrap_or(msg.len());
                    msg.replace_range(
                        ..first,
                        &format!(
                            "[OUT_OF_MEMORY] job {} used more than its {} (MaxRSS {})",
                            meta.job_id,
                            bytes_text(limit),
                            bytes_text(used)
                        ),
                    );
                }
                msg.push_str(&format!("\n--- last lines of stderr ---\n{tail}"))
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => msg.push_str(&format!("\n(stderr not readable: {e})")),
            Err(_) => msg.push_str("\n(stderr not read: the staging backend is slow)"),
        }
    }

    let custom_info = serde_json::json!({
        "cluster": meta.cluster,
        "job_id": meta.job_id.0,
        "job_name": meta.job_name,
        "state": snap.state,
        "reason": snap.reason,
        "exit_code": snap.exit_code.as_ref().map(|e| e.to_string()),
        "signal": snap.signal,
        "nodes": snap.nodes,
        "requeue_count": snap.restart_count.unwrap_or(0),
        "failure_class": failure_class.map(|c| c.as_str()),
        "stdout": meta.stdout,
        "stderr": meta.stderr,
    });
    let mut custom_info = custom_info;
    if !snap.elements.is_empty() {
        let mut counts = serde_json::Map::new();
        for e in &snap.elements {
            let state = e
                .snapshot
                .state
                .as_deref()
                .map(|t| t.split('+').next().unwrap_or(t))
                .unwrap_or("UNKNOWN");
            let n = counts.get(state).and_then(|v| v.as_u64()).unwrap_or(0);
            counts.insert(state.to_string(), serde_json::json!(n + 1));
        }
        custom_info["array"] = serde_json::json!({
            "indices": meta.array,
            "total": snap.elements.len(),
            "counts": counts,
            // Bounded: custom_info travels in every task event.
            "elements": snap.elements.iter().take(ELEMENTS_LISTED).map(|e| serde_json::json!({
                "index": e.index,
                "job_id": e.snapshot.job_id.0,
                "state": e.snapshot.state,
                "exit_code": e.snapshot.exit_code.as_ref().map(|c| c.to_string()),
            })).collect::<Vec<_>>(),
            "failed": failed_elements(&snap).iter().map(|e| e.index).collect::<Vec<_>>(),
        });
    }
    Resource {
        outputs,
        message: msg,
        log_links: log_links(log_templates, meta),
        phase: phase as i32,
        custom_info: Some(crate::proto::json_to_struct(&custom_info)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurmrestd::{ExitCode, JobId};

    fn meta() -> ResourceMeta {
        ResourceMeta {
            v: 1,
            cluster: "hpc1".into(),
            job_id: JobId(123),
            job_name: "flyte-t-1".into(),
            stdout: String::new(),
            stderr: String::new(),
            outputs: Default::default(),
            native_prefix: None,
            requeue_budget: None,
            array: None,
            deferred: None,
        }
    }

    fn snap(state: &str, class: Option<FailureClass>) -> JobSnapshot {
        JobSnapshot {
            job_id: JobId(123),
            phase: class.map(|c| c.phase()).unwrap_or(Phase::Running),
            state: Some(state.into()),
            exit_code: None,
            reason: None,
            note: None,
            class,
            signal: None,
            nodes: None,
            restart_count: None,
            time_limit_minutes: None,
            memory_per_node_mib: None,
            unreachable: None,
            elements: Vec::new(),
        }
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
            if class.is_none() {
                s.phase = Phase::Succeeded;
            }
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
        s.phase = Phase::Succeeded;
        assert_eq!(over_budget(&m, &s, 3), None);
        let mut failed = snap("FAILED", Some(FailureClass::User));
        failed.restart_count = Some(1);
        assert_eq!(over_budget(&m, &failed, 3), None);
        // Cancelled by the connector for the budget: still reported as the budget's.
        let mut cancelled = snap("CANCELLED", None);
        cancelled.phase = Phase::Aborted;
        cancelled.restart_count = Some(1);
        assert_eq!(over_budget(&m, &cancelled, 3), Some((1, 0)));
    }
}
