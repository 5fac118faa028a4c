//! What sbatch derives on the client before it submits (`_opt_verify` in src/sbatch/opt.c), so
//! the REST job matches the one sbatch would have sent.

use crate::slurmrestd::job_description::JobDescription;

/// Number of hosts in a Slurm hostlist entry (`node[1-3,5]` → 4); `None` if it cannot be read.
fn hostlist_count(entry: &str) -> Option<u64> {
    let mut total: u64 = 1;
    let mut rest = entry;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']')? + open;
        let mut n = 0u64;
        for range in rest[open + 1..close].split(',') {
            n += match range.split_once('-') {
                Some((a, b)) => b.parse::<u64>().ok()?.checked_sub(a.parse::<u64>().ok()?)? + 1,
                None => {
                    range.parse::<u64>().ok()?;
                    1
                }
            };
        }
        total = total.checked_mul(n)?;
        rest = &rest[close + 1..];
    }
    Some(total)
}

/// What sbatch's `_opt_verify` derives on the client before submitting, so the REST job matches
/// the one sbatch would send (src/sbatch/opt.c).
pub(super) fn sbatch_derivations(job: &mut JobDescription) {
    let parse_nodes = |n: &str| -> (u32, Option<u32>) {
        match n.split_once('-') {
            Some((a, b)) => (a.parse().unwrap_or(1), b.parse().ok()),
            None => (n.parse().unwrap_or(1), n.parse().ok()),
        }
    };
    // --nodelist raises the minimum node count to the number of listed nodes.
    if !job.required_nodes.is_empty() {
        let listed: Option<u64> = job.required_nodes.iter().map(|e| hostlist_count(e)).sum();
        if let Some(listed) = listed.and_then(|n| u32::try_from(n).ok()) {
            job.nodes = Some(match job.nodes.as_deref().map(parse_nodes) {
                None => listed.to_string(),
                Some((min, Some(max))) if min != max => format!("{}-{max}", min.max(listed)),
                Some((min, _)) => min.max(listed).to_string(),
            });
        }
    }
    // (sbatch also derives ntasks from --ntasks-per-node, but the job record slurmctld makes of
    // it is the same without; sending `tasks` would add EXACT_TASK_COUNT_REQUESTED, which sbatch's
    // job lacks: `tests/render_sbatch_diff.rs` compares the two.)
    // --cpus-per-task raises the per-node CPU minimum.
    if let Some(cpt) = job.cpus_per_task
        && job.minimum_cpus_per_node.is_none_or(|m| m < cpt)
    {
        job.minimum_cpus_per_node = Some(cpt);
    }
}

/// `-B` without a task count: sbatch asks for one task per node times each of the sockets, cores
/// and threads counts given (`_opt_verify`, "massage the numbers"), so its job carries
/// EXACT_TASK_COUNT_REQUESTED (the differential test's `65-extra-node-info.sh`).
pub(super) fn tasks_from_extra_node_info(job: &mut JobDescription) {
    let (min, max) = match job.nodes.as_deref() {
        None => (1, 0),
        Some(n) => match n.split_once('-') {
            Some((a, b)) => (a.parse().unwrap_or(1), b.parse().unwrap_or(0)),
            None => {
                let n = n.parse().unwrap_or(1);
                (n, n)
            }
        },
    };
    if !(min == max || max == 0) || job.tasks_per_node.is_some() || job.tasks.is_some() {
        return;
    }
    let counts = [
        job.sockets_per_node,
        job.cores_per_socket,
        job.threads_per_core,
    ];
    if counts.iter().all(Option::is_none) {
        return;
    }
    let tasks = counts
        .iter()
        .flatten()
        .fold(u64::from(min.max(1u32)), |n, c| {
            n.saturating_mul(u64::from(*c))
        });
    job.tasks = Some(
        u32::try_from(tasks)
            .unwrap_or(u32::MAX)
            .min(i32::MAX as u32),
    );
}
