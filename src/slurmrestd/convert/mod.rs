//! The one seam between generated v0.0.42 types and our domain types. Adding an API version means
//! one more generated module and one more set of these conversions; nothing else changes.

mod job_description;
mod usage;

pub use job_description::submit_request;
pub use usage::{accounting_usage, controller_usage};

use super::generated::v0042::types as g;
use super::types::{
    BaseState, Diag, ExitCode, JobId, JobInfo, JobState, Partition, Ping, ServerInfo, SlurmError,
};

/// The parts every slurmrestd response carries: `errors`, `warnings`, `meta`.
pub trait Envelope {
    fn errors(&self) -> Vec<SlurmError>;
    fn warnings(&self) -> Vec<String>;
    fn server(&self) -> ServerInfo;
}

fn errors_of(errors: &Option<g::V0042OpenapiErrors>) -> Vec<SlurmError> {
    errors
        .as_ref()
        .map(|e| {
            e.0.iter()
                .map(|e| SlurmError {
                    number: e.error_number.unwrap_or(0),
                    error: e.error.clone().unwrap_or_default(),
                    description: e.description.clone().unwrap_or_default(),
                    source: e.source.clone().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn warnings_of(warnings: &Option<g::V0042OpenapiWarnings>) -> Vec<String> {
    warnings
        .as_ref()
        .map(|w| w.0.iter().filter_map(|w| w.description.clone()).collect())
        .unwrap_or_default()
}

fn server_of(meta: &Option<g::V0042OpenapiMeta>) -> ServerInfo {
    let Some(meta) = meta else {
        return ServerInfo::default();
    };
    ServerInfo {
        release: meta.slurm.as_ref().and_then(|s| s.release.clone()),
        cluster: meta.slurm.as_ref().and_then(|s| s.cluster.clone()),
        data_parser: meta.plugin.as_ref().and_then(|p| p.data_parser.clone()),
        client_user: meta.client.as_ref().and_then(|c| c.user.clone()),
    }
}

macro_rules! envelope {
    ($($t:ty),* $(,)?) => {$(
        impl Envelope for $t {
            fn errors(&self) -> Vec<SlurmError> { errors_of(&self.errors) }
            fn warnings(&self) -> Vec<String> { warnings_of(&self.warnings) }
            fn server(&self) -> ServerInfo { server_of(&self.meta) }
        }
    )*};
}

envelope!(
    g::V0042OpenapiJobSubmitResponse,
    g::V0042OpenapiJobInfoResp,
    g::V0042OpenapiJobStateResp,
    g::V0042OpenapiKillJobResp,
    g::V0042OpenapiSlurmdbdJobsResp,
    g::V0042OpenapiPingArrayResp,
    g::V0042OpenapiDiagResp,
    g::V0042OpenapiPartitionResp,
);

/// A no-val number: `None` unless `set` and not `infinite`.
fn no_val_u32(v: &Option<g::V0042Uint32NoValStruct>) -> Option<u32> {
    let v = v.as_ref()?;
    if v.set == Some(false) || v.infinite == Some(true) {
        return None;
    }
    v.number.and_then(|n| u32::try_from(n).ok())
}

fn no_val_u16(v: &Option<g::V0042Uint16NoValStruct>) -> Option<u32> {
    let v = v.as_ref()?;
    if v.set == Some(false) || v.infinite == Some(true) {
        return None;
    }
    v.number.and_then(|n| u32::try_from(n).ok())
}

fn no_val_time(v: &Option<g::V0042Uint64NoValStruct>) -> Option<i64> {
    let v = v.as_ref()?;
    if v.set == Some(false) || v.infinite == Some(true) {
        return None;
    }
    v.number.filter(|n| *n > 0)
}

fn exit_code(v: &Option<g::V0042ProcessExitCodeVerbose>) -> Option<ExitCode> {
    let v = v.as_ref()?;
    Some(ExitCode {
        status: v
            .status
            .as_ref()
            .map(|s| s.0.iter().map(|i| i.to_string()).collect())
            .unwrap_or_default(),
        return_code: no_val_u32(&v.return_code),
        signal: v.signal.as_ref().and_then(|s| no_val_u16(&s.id)),
        signal_name: v
            .signal
            .as_ref()
            .and_then(|s| s.name.clone())
            .filter(|n| !n.is_empty()),
    })
}

fn non_empty(s: &Option<String>) -> Option<String> {
    s.as_ref().filter(|s| !s.is_empty()).cloned()
}

/// Slurm reports "no reason" as the string "None".
fn reason(s: &Option<String>) -> Option<String> {
    non_empty(s).filter(|r| r != "None")
}

fn job_state(v: &Option<g::V0042JobState>) -> JobState {
    match v {
        Some(s) => JobState::from_strings(s.0.iter().map(|i| i.to_string())),
        None => JobState {
            base: BaseState::Other(String::new()),
            flags: vec![],
        },
    }
}

/// A slurmctld job record (GET job/{id}, GET jobs/). `None` without a job id.
pub fn job_info(j: &g::V0042JobInfo) -> Option<JobInfo> {
    let id = u32::try_from(j.job_id?).ok()?;
    Some(JobInfo {
        job_id: JobId(id),
        name: j.name.clone().unwrap_or_default(),
        state: job_state(&j.job_state),
        exit_code: exit_code(&j.exit_code),
        reason: reason(&j.state_reason),
        comment: non_empty(&j.comment),
        user: non_empty(&j.user_name),
        standard_output: non_empty(&j.standard_output),
        standard_error: non_empty(&j.standard_error),
        current_working_directory: non_empty(&j.current_working_directory),
        partition: non_empty(&j.partition),
        submit_time: no_val_time(&j.submit_time),
        start_time: no_val_time(&j.start_time),
        end_time: no_val_time(&j.end_time),
        // issue 18: what a failure message and custom_info report.
        nodes: nodes(&j.nodes),
        restart_count: j.restart_cnt.and_then(|n| u32::try_from(n).ok()),
        time_limit_minutes: no_val_u32(&j.time_limit),
        memory_per_node_mib: no_val_time(&j.memory_per_node).and_then(|n| u64::try_from(n).ok()),
    })
}

/// slurmctld says `""` and slurmdbd `"None assigned"` for a job that has no nodes yet.
fn nodes(s: &Option<String>) -> Option<String> {
    non_empty(s).filter(|n| n != "None assigned")
}

/// A slurmdbd job record (GET slurmdb job/{id}, jobs/). `None` without a job id.
pub fn accounting_job(j: &g::V0042Job) -> Option<JobInfo> {
    let id = u32::try_from(j.job_id?).ok()?;
    let state = j.state.as_ref();
    let time = j.time.as_ref();
    Some(JobInfo {
        job_id: JobId(id),
        name: j.name.clone().unwrap_or_default(),
        state: job_state(&state.and_then(|s| s.current.clone())),
        exit_code: exit_code(&j.exit_code),
        reason: reason(&state.and_then(|s| s.reason.clone())),
        comment: j.comment.as_ref().and_then(|c| non_empty(&c.job)),
        user: non_empty(&j.user),
        // The expanded paths are the real files (`%j` replaced); older records may lack them.
        standard_output: non_empty(&j.stdout_expanded).or_else(|| non_empty(&j.stdout)),
        standard_error: non_empty(&j.stderr_expanded).or_else(|| non_empty(&j.stderr)),
        current_working_directory: non_empty(&j.working_directory),
        partition: non_empty(&j.partition),
        submit_time: time.and_then(|t| t.submission).filter(|t| *t > 0),
        start_time: time.and_then(|t| t.start).filter(|t| *t > 0),
        end_time: time.and_then(|t| t.end).filter(|t| *t > 0),
        // issue 18: what a failure message and custom_info report.
        nodes: nodes(&j.nodes),
        restart_count: j.restart_cnt.and_then(|n| u32::try_from(n).ok()),
        time_limit_minutes: time.and_then(|t| no_val_u32(&t.limit)),
        memory_per_node_mib: j
            .required
            .as_ref()
            .and_then(|r| no_val_time(&r.memory_per_node))
            .and_then(|n| u64::try_from(n).ok()),
    })
}

/// jobs/state entries: `{job_id: "31", state: ["COMPLETED"]}` (job_id is a string here).
pub fn state_entry(e: &g::V0042JobStateEntry) -> Option<(JobId, JobState)> {
    let id: JobId = e.job_id.as_deref()?.parse().ok()?;
    let state = JobState::from_strings(e.state.iter().flatten());
    Some((id, state))
}

pub fn pings(r: &g::V0042OpenapiPingArrayResp) -> Vec<Ping> {
    r.pings
        .as_ref()
        .map(|p| {
            p.0.iter()
                .map(|p| Ping {
                    hostname: p.hostname.clone().unwrap_or_default(),
                    pinged: p.pinged.clone().unwrap_or_default(),
                    latency_us: p.latency,
                    mode: p.mode.clone(),
                    primary: p.primary,
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn diag(r: &g::V0042OpenapiDiagResp) -> Diag {
    let s = r.statistics.as_ref();
    Diag {
        server: r.server(),
        jobs_submitted: s.and_then(|s| s.jobs_submitted).map(i64::from),
        jobs_running: s.and_then(|s| s.jobs_running).map(i64::from),
        jobs_pending: s.and_then(|s| s.jobs_pending).map(i64::from),
        server_thread_count: s.and_then(|s| s.server_thread_count).map(i64::from),
        rpcs_by_message: s
            .and_then(|s| s.rpcs_by_message_type.as_ref())
            .map(|r| {
                r.0.iter()
                    .filter_map(|t| {
                        Some((t.message_type.clone()?, i64::from(t.count.unwrap_or(0))))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

pub fn partitions(r: &g::V0042OpenapiPartitionResp) -> Vec<Partition> {
    r.partitions
        .as_ref()
        .map(|p| {
            p.0.iter()
                .filter_map(|p| {
                    Some(Partition {
                        name: p.name.clone()?,
                        state: p
                            .partition
                            .as_ref()
                            .and_then(|q| q.state.as_ref())
                            .map(|s| s.0.iter().map(|i| i.to_string()).collect())
                            .unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}
