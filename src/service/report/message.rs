//! The words of GetTask's message: the `[TAG]` headline of a failure, the job's state line, a job
//! array's progress, and where to look (output files, `srun --overlap`). Alerts and people match
//! on these lines, so their forms are pinned by `super::tests`.

use crate::tracker::{ElementSnapshot, FailureClass, JobSnapshot};

use super::ResourceMeta;

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
pub(crate) fn bytes_text(b: u64) -> String {
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
            if s.class == Some(FailureClass::Permanent) {
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

/// At most this many failed elements are named one by one in the message (the count covers all).
const FAILED_LISTED: usize = 10;

/// The failed elements, in index order.
pub(crate) fn failed_elements(s: &JobSnapshot) -> Vec<&ElementSnapshot> {
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
    let done = s.elements.iter().filter(|e| e.snapshot.is_over()).count();
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

/// What only an admin can do about a job Slurm keeps waiting, said where the task's owner reads
/// it (Flyte's UI): a job held (after a failed launch Slurm requeues it held, e.g. when a
/// restarted slurmctld launched it twice) or waiting for nodes that are down or drained (the node
/// that reported a duplicate job id after a slurmctld crash is drained). Slurm's own words stay
/// in the reason; the node's own reason is `sinfo -R`'s, which a job record does not carry.
fn admin_hint(reason: &str, job_id: impl std::fmt::Display) -> Option<String> {
    if reason.starts_with("JobHeldAdmin") || reason.contains("requeued held") {
        Some(format!(
            "Slurm holds the job until it is released (`scontrol release {job_id}`, as the job's \
             user or an admin)"
        ))
    } else if reason.contains("DRAIN")
        || reason.contains("DOWN")
        || reason.starts_with("ReqNodeNotAvail")
    {
        Some(
            "the job waits for nodes that are down or drained: `sinfo -R` says why; an admin \
             returns them with `scontrol update nodename=NODE state=resume`"
                .to_string(),
        )
    } else {
        None
    }
}

/// `[TAG] ...` for a failure, then `Slurm job <id> is <STATE>[, exit code x:y][, reason: r]` and
/// the lines after it.
pub fn message(meta: &ResourceMeta, s: &JobSnapshot) -> String {
    let mut m = headline(meta, s)
        .map(|h| format!("{h}\n"))
        .unwrap_or_default();
    let job = match meta.element {
        // A coalesced array's element: what `squeue` shows (`<array>_<index>`), and its own id
        // once it started.
        Some(i) if s.job_id != meta.job_id => format!("{}_{i} (job {})", meta.job_id, s.job_id),
        Some(i) => format!("{}_{i}", meta.job_id),
        None => meta.job_id.to_string(),
    };
    m.push_str(&format!(
        "Slurm job {job} is {}",
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
        if let Some(hint) = admin_hint(r, meta.job_id) {
            m.push_str(&format!("\n{hint}"));
        }
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
    if s.is_running() {
        // An array's elements are jobs of their own: attach to one that runs.
        match s.elements.iter().find(|e| e.snapshot.is_running()) {
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
