//! Which rank of a multi-rank job failed, from the job's stderr. srun runs with `--label` and
//! `--kill-on-bad-exit` (`crate::render::ranks`): every line a rank writes starts with its rank
//! (`3: ...`, padded for 10+ ranks), and srun itself reports the first rank that ended badly
//! before it terminates the others (recorded on the 26.11 dev cluster, `-N2
//! --ntasks-per-node=2`, rank 3 exiting 3):
//!
//! ```text
//! srun: error: node2: task 3: Exited with exit code 3
//! srun: Terminating StepId=1826.0
//! srun: error: node2: task 2: Terminated
//! srun: error: node1: tasks 0-1: Terminated
//! ```
//!
//! So the first such line names the rank and its node; that rank's own lines are its stderr tail.

/// How many lines of the job's stderr are read to find the failing rank's lines.
pub const READ_LINES: usize = 2000;
/// How many of the failing rank's lines the message shows.
pub const SHOW_LINES: usize = 30;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFailure {
    pub rank: u32,
    pub node: String,
    /// What srun said: `Exited with exit code 3`, `Killed`, `Segmentation fault`, ...
    pub how: String,
    /// The rank's last lines, without their label.
    pub lines: Vec<String>,
}

impl RankFailure {
    /// The part of GetTask's message that names the rank.
    pub fn message(&self) -> String {
        let mut m = format!(
            "rank {} on node {} failed first ({}); srun ended the other ranks",
            self.rank, self.node, self.how
        );
        if !self.lines.is_empty() {
            m.push_str(&format!(
                "\n--- last lines of rank {} (node {}) ---\n{}",
                self.rank,
                self.node,
                self.lines.join("\n")
            ));
        }
        m
    }
}

/// `srun: error: NODE: task N: HOW` / `tasks N-M,K: HOW` → (first rank, node, how).
fn srun_error(line: &str) -> Option<(u32, String, String)> {
    let rest = line.strip_prefix("srun: error: ")?;
    let (node, rest) = rest.split_once(": ")?;
    let rest = rest
        .strip_prefix("task ")
        .or_else(|| rest.strip_prefix("tasks "))?;
    let (ranks, how) = rest.split_once(": ")?;
    let first: u32 = ranks.split([',', '-']).next()?.trim().parse().ok()?;
    if node.contains(' ') {
        return None;
    }
    Some((first, node.to_string(), how.trim().to_string()))
}

/// The first rank srun reported, with its own last lines; `None` when srun reported none.
pub fn find(stderr: &str) -> Option<RankFailure> {
    let (rank, node, how) = stderr.lines().find_map(srun_error)?;
    let label = format!("{rank}: ");
    let mut lines: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(&label))
        .map(str::to_string)
        .collect();
    if lines.len() > SHOW_LINES {
        lines.drain(..lines.len() - SHOW_LINES);
    }
    Some(RankFailure {
        rank,
        node,
        how,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job's stderr as recorded above, with the other ranks' lines around rank 3's.
    const RECORDED: &str = "3: hello 3\n3: boom\n2: hello 2\n1: hello 1\n0: hello 0\n\
srun: error: node2: task 3: Exited with exit code 3\n\
srun: Terminating StepId=1826.0\n\
0: [2026-12-01T18:02:43.020] error: *** STEP 1826.0 ON node1 CANCELLED AT 2026-12-01T18:02:43 DUE TO TASK FAILURE ***\n\
srun: error: node2: task 2: Terminated\n\
srun: error: node1: tasks 0-1: Terminated\n\
srun: Force Terminated StepId=1826.0\n";

    #[test]
    fn the_first_reported_rank_with_its_own_lines() {
        let f = find(RECORDED).unwrap();
        assert_eq!(f.rank, 3);
        assert_eq!(f.node, "node2");
        assert_eq!(f.how, "Exited with exit code 3");
        assert_eq!(f.lines, vec!["hello 3", "boom"]);
        let m = f.message();
        assert!(
            m.starts_with("rank 3 on node node2 failed first (Exited with exit code 3)"),
            "{m}"
        );
        assert!(m.ends_with("hello 3\nboom"), "{m}");
    }

    #[test]
    fn padded_labels_and_task_lists() {
        let s = " 7: x\n12: y\n 7: z\nsrun: error: gpu-a17: tasks 7,9-10: Killed\n";
        let f = find(s).unwrap();
        assert_eq!(
            (f.rank, f.node.as_str(), f.how.as_str()),
            (7, "gpu-a17", "Killed")
        );
        assert_eq!(f.lines, vec!["x", "z"]);
    }

    #[test]
    fn nothing_reported_nothing_found() {
        assert_eq!(
            find("0: all fine\nsrun: error: Unable to create step\n"),
            None
        );
        assert_eq!(find(""), None);
    }
}
