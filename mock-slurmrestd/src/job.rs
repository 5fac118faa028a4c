//! One job as the mock's slurmctld keeps it.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::jobdesc::{DepClause, JobSpec};

/// Base job state (the first entry of `job_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    Timeout,
}

impl Base {
    pub fn as_str(self) -> &'static str {
        match self {
            Base::Pending => "PENDING",
            Base::Running => "RUNNING",
            Base::Completed => "COMPLETED",
            Base::Failed => "FAILED",
            Base::Cancelled => "CANCELLED",
            Base::Timeout => "TIMEOUT",
        }
    }
    pub fn is_finished(self) -> bool {
        !matches!(self, Base::Pending | Base::Running)
    }
}

/// The batch script's end, as a wait status: exited with a code, or killed by a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// Array membership of one task record.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayTask {
    pub array_job_id: u32,
    pub task_id: u32,
    pub count: u32,
    pub min: u32,
    pub max: u32,
    pub step: u32,
    pub max_running: Option<u32>,
}

/// Messages from the REST side to the process running a job.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// Send this signal to the job's process group; `cancel` escalates to SIGKILL after KillWait.
    Signal { signal: i32, cancel: bool },
}

#[derive(Debug)]
pub struct Job {
    pub id: u32,
    pub spec: Arc<JobSpec>,
    pub user: String,
    pub array: Option<ArrayTask>,
    pub deps: Vec<DepClause>,
    pub state: Base,
    /// Processes still being killed (job_state gets a "COMPLETING" flag).
    pub completing: bool,
    pub reason: String,
    pub submit_time: i64,
    pub eligible_time: i64,
    pub start_time: i64,
    pub end_time: i64,
    pub last_sched: i64,
    pub exit: Exit,
    /// (node index, cpus) while the job holds resources.
    pub alloc: Vec<(usize, u32)>,
    /// Node names the job ran on (kept after the allocation is released).
    pub node_names: Vec<String>,
    pub stdout: String,
    pub stderr: String,
    pub stdin: String,
    pub kill_request_user: String,
    pub control: Option<mpsc::UnboundedSender<Control>>,
    /// Process group of the running script (killed directly at shutdown).
    pub pgid: Option<i32>,
    /// When the job ended (monotonic), for MinJobAge.
    pub ended_at: Option<std::time::Instant>,
    /// How often the job was requeued (`restart_cnt`).
    pub restart_cnt: u32,
    /// Not eligible before this instant (a requeued job's BeginTime).
    pub begin_at: Option<std::time::Instant>,
    /// Requeued while running: its old processes are still being killed, so it may not start
    /// again yet, and their end must not count as the job's end.
    pub requeued: bool,
}

impl Job {
    /// The id jobs/state shows: "N", or "<own id>_T" for an array element, under the array's
    /// id until it started (recorded on 24.11: `2205_3 PENDING`, then `2209_3 RUNNING`; that
    /// is why it is a string).
    pub fn state_id(&self) -> String {
        match &self.array {
            Some(a) if self.start_time == 0 => format!("{}_{}", a.array_job_id, a.task_id),
            Some(a) => format!("{}_{}", self.id, a.task_id),
            None => self.id.to_string(),
        }
    }

    pub fn cpus(&self) -> u32 {
        self.spec.total_cpus()
    }

    pub fn node_list(&self) -> String {
        node_list(&self.node_names)
    }
}

/// `node1`, `node[1-3]`, `node[1,3]`.
pub fn node_list(names: &[String]) -> String {
    match names.len() {
        0 => String::new(),
        1 => names[0].clone(),
        _ => {
            let nums: Vec<u32> = names
                .iter()
                .filter_map(|n| n.strip_prefix("node").and_then(|s| s.parse().ok()))
                .collect();
            format!("node[{}]", ranges(&nums))
        }
    }
}

/// Sorted numbers as Slurm writes a set of them (node lists, array indices): `0-3,5,7-8`.
pub fn ranges(ids: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The job fields a filename pattern can use.
pub struct PatternCtx<'a> {
    pub job_id: u32,
    pub name: &'a str,
    pub user: &'a str,
    pub array_job_id: u32,
    /// `None`: not an array task (`%a` expands to 4294967294 like the real one).
    pub array_task_id: Option<u32>,
    pub node: &'a str,
}

/// Expand `%j %J %x %u %A %a %N %n %s %t %%` (with optional zero-padding width, `%4j`) and make a
/// relative path absolute against `cwd`, like slurmstepd does for standard_output/error/input.
pub fn expand_pattern(pattern: &str, ctx: &PatternCtx<'_>, cwd: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
            width.push(d);
            chars.next();
        }
        let w: usize = width.parse().unwrap_or(0).min(10);
        let pad = |s: String| format!("{s:0>w$}");
        match chars.next() {
            Some('%') => out.push('%'),
            Some('j') => out.push_str(&pad(ctx.job_id.to_string())),
            Some('J') => out.push_str(&format!("{}.batch", pad(ctx.job_id.to_string()))),
            Some('A') => out.push_str(&pad(ctx.array_job_id.to_string())),
            Some('a') => out.push_str(&pad(ctx.array_task_id.unwrap_or(4_294_967_294).to_string())),
            Some('x') => out.push_str(ctx.name),
            Some('u') => out.push_str(ctx.user),
            Some('N') => out.push_str(ctx.node),
            Some('n') | Some('t') => out.push_str(&pad("0".into())),
            Some('s') => out.push_str("batch"),
            Some(other) => {
                out.push('%');
                out.push_str(&width);
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    if out.starts_with('/') || cwd.is_empty() {
        out
    } else {
        Path::new(cwd).join(out).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let ctx = PatternCtx {
            job_id: 42,
            name: "x",
            user: "flyte",
            array_job_id: 40,
            array_task_id: Some(2),
            node: "node1",
        };
        assert_eq!(
            expand_pattern("slurm-%j.out", &ctx, "/tmp"),
            "/tmp/slurm-42.out"
        );
        assert_eq!(
            expand_pattern("/o/%x-%u-%A_%a-%%-%5j", &ctx, "/tmp"),
            "/o/x-flyte-40_2-%-00042"
        );
        let plain = PatternCtx {
            array_task_id: None,
            ..ctx
        };
        assert_eq!(expand_pattern("%a", &plain, ""), "4294967294");
    }

    #[test]
    fn node_lists() {
        let n = |v: &[&str]| node_list(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(n(&["node1"]), "node1");
        assert_eq!(n(&["node1", "node2", "node3"]), "node[1-3]");
        assert_eq!(n(&["node1", "node3"]), "node[1,3]");
        assert_eq!(n(&["node1", "node2", "node3", "node5"]), "node[1-3,5]");
        assert_eq!(ranges(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
    }
}
