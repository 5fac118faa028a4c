//! Pure helpers of the scheduler: where a job fits, whether its dependencies allow it to start,
//! and its output paths with `%j %x %u %A %a` expanded.

use crate::job::{Base, Job, PatternCtx, expand_pattern};
use crate::jobdesc::DepClause;
use crate::scheduler::Cluster;

/// Output paths as the record shows them (expanded, absolute against the cwd).
pub(crate) fn expand_io(job: &mut Job, node: &str) {
    let spec = job.spec.clone();
    let (ajid, atid) = match &job.array {
        Some(a) => (a.array_job_id, Some(a.task_id)),
        None => (job.id, None),
    };
    let ctx = PatternCtx {
        job_id: job.id,
        name: &spec.name,
        user: &job.user,
        array_job_id: ajid,
        array_task_id: atid,
        node,
    };
    let default_out = if spec.array.is_some() {
        "slurm-%A_%a.out"
    } else {
        "slurm-%j.out"
    };
    let out = spec.standard_output.as_deref().unwrap_or(default_out);
    job.stdout = expand_pattern(out, &ctx, &spec.cwd);
    job.stderr = match spec.standard_error.as_deref() {
        Some(p) => expand_pattern(p, &ctx, &spec.cwd),
        None => job.stdout.clone(),
    };
    job.stdin = match spec.standard_input.as_deref() {
        Some(p) => expand_pattern(p, &ctx, &spec.cwd),
        None => "/dev/null".into(),
    };
}

/// Pick `nodes` nodes with room for an even share of `total` CPUs each.
pub(crate) fn allocate(free: &[u32], total: u32, nodes: usize) -> Option<Vec<(usize, u32)>> {
    let per = total.div_ceil(nodes as u32);
    let mut left = total;
    let mut out = Vec::new();
    for (i, f) in free.iter().enumerate() {
        if out.len() == nodes {
            break;
        }
        let want = per.min(left);
        if *f >= want {
            out.push((i, want));
            left -= want;
        }
    }
    (out.len() == nodes).then_some(out)
}

pub(crate) enum DepStatus {
    Ok,
    Wait,
    Never,
}

pub(crate) fn dependency_status(c: &Cluster, deps: &[DepClause]) -> DepStatus {
    let mut wait = false;
    for clause in deps {
        if clause.kind == "singleton" {
            continue;
        }
        for id in &clause.job_ids {
            let related: Vec<&Job> = c
                .jobs
                .values()
                .chain(c.aged.values())
                .filter(|j| j.id == *id || j.array.as_ref().is_some_and(|a| a.array_job_id == *id))
                .collect();
            for j in related {
                let finished = j.state.is_finished() && !j.completing;
                let ok = j.state == Base::Completed;
                match clause.kind.as_str() {
                    "after" if j.state == Base::Pending => wait = true,
                    "afterany" if !finished => wait = true,
                    "afterok" | "aftercorr" if finished && !ok => return DepStatus::Never,
                    "afterok" | "aftercorr" if !finished => wait = true,
                    "afternotok" if finished && ok => return DepStatus::Never,
                    "afternotok" if !finished => wait = true,
                    _ => {}
                }
            }
        }
    }
    if wait { DepStatus::Wait } else { DepStatus::Ok }
}
