//! Job usage (GetTaskMetrics) from slurmdbd's job record, or from slurmctld's while slurmdbd has
//! none: generated types → [`JobUsage`].

use super::{g, job_state, no_val_time};
use crate::slurmrestd::types::{JobId, JobUsage, Tres};

fn tres_list(list: &[g::V0042Tres]) -> Vec<Tres> {
    list.iter()
        .filter_map(|t| {
            Some(Tres {
                kind: t.type_.clone()?,
                name: t.name.clone().unwrap_or_default(),
                count: t.count?,
            })
        })
        // slurmdbd writes -2 for "not gathered" (energy without an energy plugin).
        .filter(|t| t.count >= 0)
        .collect()
}

fn secs(seconds: Option<i64>, micros: Option<i64>) -> Option<f64> {
    match (seconds, micros) {
        (None, None) => None,
        (s, us) => Some(s.unwrap_or(0) as f64 + us.unwrap_or(0) as f64 / 1e6),
    }
}

#[derive(Clone, Copy)]
enum Cpu {
    Total,
    User,
    System,
}

/// CPU time of a job: the sum over its steps, as sacct's TotalCPU; `None` without step records.
/// The record's own `time.total/user/system` are not used: they stay 0 on real Slurm however
/// much the steps used (recorded on 26.05: 5 s in the batch step, 0 in the job's total).
fn cpu(j: &g::V0042Job, which: Cpu) -> Option<f64> {
    let per_step: Vec<f64> = j
        .steps
        .iter()
        .flat_map(|s| s.0.iter())
        .filter_map(|s| {
            let t = s.time.as_ref()?;
            let (s, us) = match which {
                Cpu::Total => t.total.as_ref().map(|c| (c.seconds, c.microseconds)),
                Cpu::User => t.user.as_ref().map(|c| (c.seconds, c.microseconds)),
                Cpu::System => t.system.as_ref().map(|c| (c.seconds, c.microseconds)),
            }?;
            secs(s, us.map(i64::from))
        })
        .collect();
    (!per_step.is_empty()).then(|| per_step.iter().sum())
}

/// A slurmdb job record. `None` without a job id.
pub fn accounting_usage(j: &g::V0042Job) -> Option<JobUsage> {
    let id = u32::try_from(j.job_id?).ok()?;
    let time = j.time.as_ref();
    let start_time = time.and_then(|t| t.start).filter(|t| *t > 0);
    let end_time = time.and_then(|t| t.end).filter(|t| *t > 0);
    // The peak RSS of the job is the largest `mem` in any step's TRESUsageInMax (bytes there,
    // unlike the allocation's MiB).
    let max_rss_bytes = j
        .steps
        .iter()
        .flat_map(|s| s.0.iter())
        .filter_map(|s| s.tres.as_ref()?.requested.as_ref()?.max.as_ref())
        .flat_map(|m| m.0.iter())
        .filter(|t| t.type_.as_deref() == Some("mem"))
        .filter_map(|t| u64::try_from(t.count?).ok())
        .max();
    Some(JobUsage {
        job_id: JobId(id),
        state: job_state(&j.state.as_ref().and_then(|s| s.current.clone())),
        start_time,
        end_time,
        elapsed_secs: time
            .and_then(|t| t.elapsed)
            .map(i64::from)
            .filter(|_| start_time.is_some()),
        cpu_total_secs: cpu(j, Cpu::Total),
        cpu_user_secs: cpu(j, Cpu::User),
        cpu_system_secs: cpu(j, Cpu::System),
        max_rss_bytes,
        allocated: j
            .tres
            .as_ref()
            .and_then(|t| t.allocated.as_ref())
            .map(|l| tres_list(&l.0))
            .unwrap_or_default(),
        source: "slurmdbd",
    })
}

/// slurmctld's view (a job slurmdbd has no record of yet, or a cluster without accounting):
/// times and allocations, no usage. `now` makes elapsed time of a running job testable.
pub fn controller_usage(j: &g::V0042JobInfo, now: i64) -> Option<JobUsage> {
    let id = u32::try_from(j.job_id?).ok()?;
    let start_time = no_val_time(&j.start_time).filter(|t| *t > 0 && *t <= now);
    let end_time = no_val_time(&j.end_time).filter(|t| *t > 0 && *t <= now);
    Some(JobUsage {
        job_id: JobId(id),
        state: job_state(&j.job_state),
        start_time,
        end_time,
        elapsed_secs: start_time.map(|s| end_time.unwrap_or(now) - s),
        cpu_total_secs: None,
        cpu_user_secs: None,
        cpu_system_secs: None,
        max_rss_bytes: None,
        allocated: j
            .tres_alloc_str
            .as_deref()
            .map(parse_tres_str)
            .unwrap_or_default(),
        source: "slurmctld",
    })
}

/// `cpu=2,mem=8000M,node=1,billing=2,gres/gpu=1` → TRES, memory in MiB as slurmdbd counts it.
fn parse_tres_str(s: &str) -> Vec<Tres> {
    s.split(',')
        .filter_map(|item| {
            let (k, v) = item.split_once('=')?;
            let (kind, name) = k.split_once('/').unwrap_or((k, ""));
            let count = if kind == "mem" {
                mebibytes(v)?
            } else {
                v.parse().ok()?
            };
            Some(Tres {
                kind: kind.to_string(),
                name: name.to_string(),
                count,
            })
        })
        .collect()
}

fn mebibytes(v: &str) -> Option<i64> {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().ok()?;
    let factor = match unit {
        "" | "M" => 1.0,
        "K" => 1.0 / 1024.0,
        "G" => 1024.0,
        "T" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * factor).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tres_strings() {
        let t = parse_tres_str("cpu=2,mem=8000M,node=1,billing=2,gres/gpu=1");
        assert_eq!(t.len(), 5);
        assert_eq!(t[1].kind, "mem");
        assert_eq!(t[1].count, 8000);
        assert_eq!(t[4].kind, "gres");
        assert_eq!(t[4].name, "gpu");
        assert_eq!(parse_tres_str("mem=2G")[0].count, 2048);
        assert_eq!(parse_tres_str("mem=512K")[0].count, 1);
        assert!(parse_tres_str("garbage").is_empty());
    }
}
