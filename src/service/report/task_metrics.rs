//! GetTaskMetrics: what a task's Slurm job used — wall time, CPU time, peak memory, allocations —
//! from Slurm's own accounting, no agent on the nodes.
//!
//! flyteidl's `ExecutionMetricResult.data` is "the result data in Prometheus range query result
//! format", so each metric is a `matrix` with one series labelled by cluster and job (a job
//! array: one series per element, labelled with the array's id and the index). Slurm keeps
//! totals, not time series: a series holds one sample, taken at the job's end (or now while it
//! runs), and is empty when the sample falls outside the request's window or Slurm has no figure
//! (usage needs finished steps and a `JobAcctGatherType` on the cluster).

use serde_json::json;

use crate::service::wire::status::{MetricResult, MetricsQuery};
use crate::slurmrestd::JobUsage;

use crate::service::ServiceError;
use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;

/// The metrics a query may name; an empty query list means all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    ElapsedSeconds,
    CpuSeconds,
    CpuUserSeconds,
    CpuSystemSeconds,
    MaxRssBytes,
    AllocatedCpus,
    AllocatedMemoryBytes,
    AllocatedGpus,
    AllocatedNodes,
}

const METRICS: [(&str, Metric); 9] = [
    ("elapsed_seconds", Metric::ElapsedSeconds),
    ("cpu_seconds", Metric::CpuSeconds),
    ("cpu_user_seconds", Metric::CpuUserSeconds),
    ("cpu_system_seconds", Metric::CpuSystemSeconds),
    ("max_rss_bytes", Metric::MaxRssBytes),
    ("allocated_cpus", Metric::AllocatedCpus),
    ("allocated_memory_bytes", Metric::AllocatedMemoryBytes),
    ("allocated_gpus", Metric::AllocatedGpus),
    ("allocated_nodes", Metric::AllocatedNodes),
];

impl Metric {
    pub fn name(self) -> &'static str {
        METRICS
            .iter()
            .find(|(_, m)| *m == self)
            .map(|(n, _)| *n)
            .unwrap_or("")
    }
}

/// The request's `queries`, each a metric name; unknown names are refused, naming the supported
/// ones (a typo must not read as "no data").
pub fn parse_queries(queries: &[String]) -> Result<Vec<Metric>, String> {
    if queries.iter().all(|q| q.trim().is_empty()) {
        return Ok(METRICS.iter().map(|(_, m)| *m).collect());
    }
    queries
        .iter()
        .filter(|q| !q.trim().is_empty())
        .map(|q| {
            METRICS
                .iter()
                .find(|(n, _)| *n == q.trim())
                .map(|(_, m)| *m)
                .ok_or_else(|| {
                    format!(
                        "queries: `{q}` is not a metric of the Slurm connector; use one of {} (or no \
                         query for all of them)",
                        METRICS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    )
                })
        })
        .collect()
}

/// One metric's figure, if Slurm has it.
pub fn value(u: &JobUsage, m: Metric) -> Option<f64> {
    match m {
        Metric::ElapsedSeconds => u.elapsed_secs.map(|s| s as f64),
        Metric::CpuSeconds => u.cpu_total_secs,
        Metric::CpuUserSeconds => u.cpu_user_secs,
        Metric::CpuSystemSeconds => u.cpu_system_secs,
        Metric::MaxRssBytes => u.max_rss_bytes.map(|b| b as f64),
        Metric::AllocatedCpus => u.allocated("cpu", "").map(|n| n as f64),
        // TRES memory is in MiB.
        Metric::AllocatedMemoryBytes => u
            .allocated("mem", "")
            .map(|n| n as f64)
            .map(|m| m * 1024.0 * 1024.0),
        Metric::AllocatedGpus => u.allocated("gres", "gpu").map(|n| n as f64),
        Metric::AllocatedNodes => u.allocated("node", "").map(|n| n as f64),
    }
    // Before the job starts, usage "0" would be a lie: no sample.
    .filter(|_| u.start_time.is_some())
}

/// The results for `metrics`, each a Prometheus `matrix` with one series per job in `usages`
/// (one job, or each element of a job array, labelled with its index); `window` is the
/// request's (start, end) in Unix seconds, `now` the time of a running job's sample.
pub fn results(
    cluster: &str,
    usages: &[JobUsage],
    metrics: &[Metric],
    window: (Option<i64>, Option<i64>),
    now: i64,
) -> Vec<MetricResult> {
    metrics
        .iter()
        .map(|&m| {
            let series: Vec<serde_json::Value> = usages
                .iter()
                .filter_map(|u| {
                    let at = u.end_time.unwrap_or(now);
                    let in_window =
                        window.0.is_none_or(|s| at >= s) && window.1.is_none_or(|e| at <= e);
                    let v = value(u, m).filter(|_| in_window)?;
                    let mut labels = json!({
                        "__name__": m.name(),
                        "cluster": cluster,
                        "job_id": u.job_id.to_string(),
                        "state": u.state.to_string(),
                        "source": u.source,
                    });
                    if let Some(a) = u.array {
                        labels["array_job_id"] = json!(a.array_job_id.to_string());
                        if let Some(i) = a.task_id {
                            labels["array_task_id"] = json!(i.to_string());
                        }
                    }
                    // Prometheus writes sample values as strings.
                    Some(json!({"metric": labels, "values": [[at, v.to_string()]]}))
                })
                .collect();
            MetricResult {
                metric: m.name().to_string(),
                data: json!({
                    "resultType": "matrix",
                    "result": series,
                }),
            }
        })
        .collect()
}

/// GetTaskMetrics of job `m`, with the connector's own credentials (the request carries none).
pub async fn of_job(
    rt: &ClusterRuntime,
    m: &ResourceMeta,
    req: &MetricsQuery,
) -> Result<Vec<MetricResult>, ServiceError> {
    let metrics = parse_queries(&req.queries).map_err(ServiceError::Invalid)?;
    let array = m
        .array_indices()
        .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    let usage = match array {
            // A job array: each element's own figures.
            Some(_) => Some(
                rt.client_as(m.slurm_user.as_deref())
                    .array_usage(m.job_id)
                    .await
                    .map_err(ServiceError::slurm("reading the job array's usage"))?,
            )
            .filter(|u| !u.is_empty()),
            None => rt
                .client_as(m.slurm_user.as_deref())
                .usage(m.job_id)
                .await
                .map_err(ServiceError::slurm("reading the job's usage"))?
                .map(|u| vec![u]),
        }
        .ok_or_else(|| {
                ServiceError::NotFound(format!(
                    "Slurm job {} is known to neither slurmctld nor slurmdbd of cluster {}: it left \
                     slurmctld (MinJobAge) on a cluster without accounting, or its record was purged",
                    m.job_id, rt.cfg.name
                ))
            })?;
    let window = (req.start, req.end);
    let now = chrono::Utc::now().timestamp();
    Ok(results(&rt.cfg.name, &usage, &metrics, window, now))
}
