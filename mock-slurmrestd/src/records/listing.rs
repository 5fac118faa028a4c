//! What `jobs` and `job/{id}` list: one record per job, but an array's never-started tasks as
//! one record of its pending remainder, as slurmctld does.

use serde_json::{Value, json};

use super::{job_info, nv_unset};

/// The records slurmctld lists: the elements of an array that never started are one record of
/// its pending remainder, under the array's id, without a task id, the pending indices in
/// `array_task_string` (recorded on 24.11: `*_arrays-held-job-get`, `0-3%2`); an element is a
/// record of its own once it started.
pub fn listed<'a>(
    jobs: impl IntoIterator<Item = &'a crate::job::Job>,
    cfg: &crate::config::MockConfig,
    sv: crate::versions::Served,
) -> Vec<Value> {
    let mut out = Vec::new();
    // Array id → (its remainder's place in `out`, the pending indices, max running).
    let mut remainders: std::collections::BTreeMap<u32, (usize, Vec<u32>, Option<u32>)> =
        Default::default();
    for j in jobs {
        match &j.array {
            Some(a) if j.start_time == 0 => match remainders.get_mut(&a.array_job_id) {
                Some((_, pending, _)) => pending.push(a.task_id),
                None => {
                    remainders.insert(a.array_job_id, (out.len(), vec![a.task_id], a.max_running));
                    out.push(job_info(j, cfg, sv));
                }
            },
            _ => out.push(job_info(j, cfg, sv)),
        }
    }
    for (array, (at, mut pending, max_running)) in remainders {
        pending.sort_unstable();
        let mut tasks = crate::job::ranges(&pending);
        if let Some(m) = max_running {
            tasks.push_str(&format!("%{m}"));
        }
        let Some(r) = out[at].as_object_mut() else {
            continue;
        };
        r.insert("job_id".into(), json!(array));
        if let Some(slot) = r.get_mut("array_task_id") {
            *slot = nv_unset();
        }
        if let Some(slot) = r.get_mut("array_task_string") {
            *slot = json!(tasks);
        }
    }
    out
}
