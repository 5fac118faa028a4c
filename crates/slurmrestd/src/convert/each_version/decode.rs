// The seam, compiled once per API version: each `convert/v00NN.rs` declares
// `use ...::generated::v00NN as api; use api::types as g;` and a `quirks` module, then
// `include!`s the three parts of this folder into one module: this one (slurmrestd's answers →
// the domain; the imports of all three), `encode.rs` (the domain → the submit body) and
// `operations.rs` (the facade's operations on the generated client). Being included, they have
// no inner attributes or `//!` docs.

use std::future::Future;

use futures::future::BoxFuture;
use progenitor_client::{Error as GenError, ResponseValue};

use super::{
    Envelope, Saturate, Unexpressible, no_val, non_empty, parse_tres_str, reason, reason_described,
    secs, state_of,
};
use crate::ApiVersion;
use crate::JobDescription;
use crate::caller::{Caller, Idempotency};
use crate::dialect::{DbJobsFilter, Dialect, Submitted};
use crate::error::ClientError;
use crate::job_description::{Limit, Memory};
use crate::types::{
    ArrayMembership, ClusterConf, Diag, ElementState, ExitCode, JobId, JobInfo, JobRef, JobState,
    JobUsage, Partition, Ping, ServerInfo, SlurmError, States, Tres,
};
use crate::users::UserRecord;

/// This module's version.
pub(crate) const VERSION: ApiVersion = quirks::VERSION;

/// What `DELETE job/{id}` answers in this version (for the seam's tests).
#[cfg(test)]
pub(crate) type CancelResponse = quirks::CancelResponse;

#[cfg(test)]
pub(crate) fn cancel_codes(r: &CancelResponse) -> Vec<i32> {
    quirks::cancel_codes(r)
}

#[cfg(test)]
pub(crate) fn ping(p: &g::ControllerPing) -> Ping {
    quirks::ping(p)
}

// ---------------------------------------------------------------------------------------------
// Responses → domain

fn errors_of(errors: &Option<Vec<g::OpenapiError>>) -> Vec<SlurmError> {
    errors
        .iter()
        .flatten()
        .map(|e| SlurmError {
            number: e.error_number.unwrap_or(0),
            error: e.error.clone().unwrap_or_default(),
            description: e.description.clone().unwrap_or_default(),
            source: e.source.clone().unwrap_or_default(),
        })
        .collect()
}

fn warnings_of(warnings: &Option<Vec<g::OpenapiWarning>>) -> Vec<String> {
    warnings
        .iter()
        .flatten()
        .filter_map(|w| w.description.clone())
        .collect()
}

fn server_of(meta: &Option<g::OpenapiMeta>) -> ServerInfo {
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
    g::OpenapiJobSubmitResponse,
    g::OpenapiJobPostResponse,
    g::OpenapiJobInfoResp,
    g::OpenapiJobStateResp,
    quirks::CancelResponse,
    g::OpenapiSlurmdbdJobsResp,
    g::OpenapiPingArrayResp,
    g::OpenapiDiagResp,
    g::OpenapiPartitionResp,
    g::OpenapiUsersResp,
);

fn u32_of(v: &Option<g::Uint32NoValStruct>) -> Option<u32> {
    let v = v.as_ref()?;
    no_val(v.set, v.infinite, v.number.map(i64::from)).and_then(|n| u32::try_from(n).ok())
}

fn u16_of(v: &Option<g::Uint16NoValStruct>) -> Option<u32> {
    let v = v.as_ref()?;
    no_val(v.set, v.infinite, v.number.map(i64::from)).and_then(|n| u32::try_from(n).ok())
}

fn time_of(v: &Option<g::Uint64NoValStruct>) -> Option<i64> {
    let v = v.as_ref()?;
    no_val(v.set, v.infinite, v.number).filter(|n| *n > 0)
}

fn exit_code(v: &Option<g::ProcessExitCodeVerbose>) -> Option<ExitCode> {
    let v = v.as_ref()?;
    Some(ExitCode {
        status: v.status.clone().unwrap_or_default(),
        return_code: u32_of(&v.return_code),
        signal: v.signal.as_ref().and_then(|s| u16_of(&s.id)),
        signal_name: v
            .signal
            .as_ref()
            .and_then(|s| s.name.clone())
            .filter(|n| !n.is_empty()),
    })
}

fn job_id(id: Option<i32>) -> Option<JobId> {
    u32::try_from(id?).ok().map(JobId)
}

/// A slurmctld job record (GET job/{id}, GET jobs/). `None` without a job id.
pub(crate) fn job_info(j: &g::JobInfo) -> Option<JobInfo> {
    let state = state_of(j.job_state.as_ref());
    // A pending job's reason with slurmctld's detail (which nodes, who held it); a finished
    // job's reason stays the bare name (`RaisedSignal`), which classification reads.
    let reason = if state.base == crate::BaseState::Pending {
        reason_described(&j.state_reason, &j.state_description)
    } else {
        reason(&j.state_reason)
    };
    Some(JobInfo {
        job_id: job_id(j.job_id)?,
        name: j.name.clone().unwrap_or_default(),
        state,
        exit_code: exit_code(&j.exit_code),
        reason,
        comment: non_empty(&j.comment),
        user: non_empty(&j.user_name),
        standard_output: non_empty(&j.standard_output),
        standard_error: non_empty(&j.standard_error),
        current_working_directory: non_empty(&j.current_working_directory),
        partition: non_empty(&j.partition),
        submit_time: time_of(&j.submit_time),
        start_time: time_of(&j.start_time),
        end_time: time_of(&j.end_time),
        // What a failure message and custom_info report.
        nodes: nodes(&j.nodes),
        restart_count: j.restart_cnt.and_then(|n| u32::try_from(n).ok()),
        time_limit_minutes: u32_of(&j.time_limit),
        memory_per_node_mib: time_of(&j.memory_per_node).and_then(|n| u64::try_from(n).ok()),
        array: array_of(u32_of(&j.array_job_id), u32_of(&j.array_task_id)),
    })
}

/// A record's array membership: slurmctld says `array_job_id` 0 (set) and slurmdbd
/// `array.job_id` 0 for a job that is not an array element.
fn array_of(array_job_id: Option<u32>, task_id: Option<u32>) -> Option<ArrayMembership> {
    array_job_id.filter(|id| *id > 0).map(|id| ArrayMembership {
        array_job_id: JobId(id),
        task_id,
    })
}

/// slurmctld says `""` and slurmdbd `"None assigned"` for a job that has no nodes yet.
fn nodes(s: &Option<String>) -> Option<String> {
    non_empty(s).filter(|n| n != "None assigned")
}

/// A slurmdbd job record (GET slurmdb job/{id}, jobs/). `None` without a job id.
pub(crate) fn accounting_job(j: &g::Job) -> Option<JobInfo> {
    let state = j.state.as_ref();
    let time = j.time.as_ref();
    let (stdout, stderr) = quirks::accounting_output_paths(j);
    Some(JobInfo {
        job_id: job_id(j.job_id)?,
        name: j.name.clone().unwrap_or_default(),
        state: state_of(state.and_then(|s| s.current.as_ref())),
        exit_code: exit_code(&j.exit_code),
        reason: reason(&state.and_then(|s| s.reason.clone())),
        comment: j.comment.as_ref().and_then(|c| non_empty(&c.job)),
        user: non_empty(&j.user),
        standard_output: stdout,
        standard_error: stderr,
        current_working_directory: non_empty(&j.working_directory),
        partition: non_empty(&j.partition),
        submit_time: time.and_then(|t| t.submission).filter(|t| *t > 0),
        start_time: time.and_then(|t| t.start).filter(|t| *t > 0),
        end_time: time.and_then(|t| t.end).filter(|t| *t > 0),
        nodes: nodes(&j.nodes),
        restart_count: quirks::accounting_restarts(j),
        time_limit_minutes: time.and_then(|t| u32_of(&t.limit)),
        memory_per_node_mib: j
            .required
            .as_ref()
            .and_then(|r| time_of(&r.memory_per_node))
            .and_then(|n| u64::try_from(n).ok()),
        array: j.array.as_ref().and_then(|a| {
            array_of(
                a.job_id.and_then(|id| u32::try_from(id).ok()),
                u32_of(&a.task_id),
            )
        }),
    })
}

/// One jobs/state entry: a plain job, or an element of an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateEntry {
    Job(JobId, JobState),
    Element(ElementState),
}

/// jobs/state entries: `{job_id: "31", state: ["COMPLETED"]}` (job_id is a string here), an
/// array element `"2209_3"` (its own id, its index: slurmrestd expands every array, pending
/// remainder included, so never `2205_[2-5]`). Heterogeneous jobs (`"40+1"`) are not ours.
pub(crate) fn state_entry(e: &g::JobStateEntry) -> Option<StateEntry> {
    let text = e.job_id.as_deref()?.trim();
    let state = JobState::from_strings(e.state.iter().flatten());
    match text.split_once('_') {
        None => Some(StateEntry::Job(text.parse().ok()?, state)),
        Some((id, index)) => Some(StateEntry::Element(ElementState {
            id: id.parse().ok()?,
            index: index.parse().ok()?,
            state,
        })),
    }
}

/// The answer's entries, plain jobs and array elements apart.
pub(crate) fn states_of(entries: impl IntoIterator<Item = StateEntry>) -> States {
    let mut out = States::default();
    for e in entries {
        match e {
            StateEntry::Job(id, s) => {
                out.jobs.insert(id, s);
            }
            StateEntry::Element(e) => out.elements.push(e),
        }
    }
    out
}

fn tres_list(list: &[g::Tres]) -> Vec<Tres> {
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

#[derive(Clone, Copy)]
enum Cpu {
    Total,
    User,
    System,
}

/// CPU time of a job: the sum over its steps, as sacct's TotalCPU; `None` without step records.
/// The record's own `time.total/user/system` are not used: they stay 0 on real Slurm however
/// much the steps used (recorded on 26.05: 5 s in the batch step, 0 in the job's total).
fn cpu(j: &g::Job, which: Cpu) -> Option<f64> {
    let per_step: Vec<f64> = j
        .steps
        .iter()
        .flatten()
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

/// What a job used, from its slurmdb record. `None` without a job id.
pub(crate) fn accounting_usage(j: &g::Job) -> Option<JobUsage> {
    let time = j.time.as_ref();
    let start_time = time.and_then(|t| t.start).filter(|t| *t > 0);
    let end_time = time.and_then(|t| t.end).filter(|t| *t > 0);
    // The peak RSS of the job is the largest `mem` in any step's TRESUsageInMax (bytes there,
    // unlike the allocation's MiB).
    let max_rss_bytes = j
        .steps
        .iter()
        .flatten()
        .filter_map(|s| s.tres.as_ref()?.requested.as_ref()?.max.as_ref())
        .flatten()
        .filter(|t| t.type_.as_deref() == Some("mem"))
        .filter_map(|t| u64::try_from(t.count?).ok())
        .max();
    // Energy the steps consumed (sacct's ConsumedEnergyRaw: the sum of the steps' TRESUsageOutTot
    // `energy`, joules). Without an `AcctGatherEnergyType` it is 0 (recorded on 26.05): no figure.
    let energy_joules: u64 = j
        .steps
        .iter()
        .flatten()
        .filter_map(|s| s.tres.as_ref()?.consumed.as_ref()?.total.as_ref())
        .flatten()
        .filter(|t| t.type_.as_deref() == Some("energy"))
        .filter_map(|t| u64::try_from(t.count?).ok())
        .sum();
    Some(JobUsage {
        job_id: job_id(j.job_id)?,
        state: state_of(j.state.as_ref().and_then(|s| s.current.as_ref())),
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
        energy_joules: (energy_joules > 0).then_some(energy_joules),
        allocated: j
            .tres
            .as_ref()
            .and_then(|t| t.allocated.as_deref())
            .map(tres_list)
            .unwrap_or_default(),
        source: "slurmdbd",
        array: j.array.as_ref().and_then(|a| {
            array_of(
                a.job_id.and_then(|id| u32::try_from(id).ok()),
                u32_of(&a.task_id),
            )
        }),
    })
}

/// slurmctld's view (a job slurmdbd has no record of yet, or a cluster without accounting):
/// times and allocations, no usage. `now` makes elapsed time of a running job testable.
pub(crate) fn controller_usage(j: &g::JobInfo, now: i64) -> Option<JobUsage> {
    let start_time = time_of(&j.start_time).filter(|t| *t > 0 && *t <= now);
    let end_time = time_of(&j.end_time).filter(|t| *t > 0 && *t <= now);
    Some(JobUsage {
        job_id: job_id(j.job_id)?,
        state: state_of(j.job_state.as_ref()),
        start_time,
        end_time,
        elapsed_secs: start_time.map(|s| end_time.unwrap_or(now) - s),
        cpu_total_secs: None,
        cpu_user_secs: None,
        cpu_system_secs: None,
        max_rss_bytes: None,
        energy_joules: None,
        allocated: j
            .tres_alloc_str
            .as_deref()
            .map(parse_tres_str)
            .unwrap_or_default(),
        source: "slurmctld",
        array: array_of(u32_of(&j.array_job_id), u32_of(&j.array_task_id)),
    })
}

fn diag_of(r: &g::OpenapiDiagResp) -> Diag {
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
                r.iter()
                    .filter_map(|t| {
                        Some((t.message_type.clone()?, i64::from(t.count.unwrap_or(0))))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn partitions_of(r: &g::OpenapiPartitionResp) -> Vec<Partition> {
    r.partitions
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(Partition {
                name: p.name.clone()?,
                state: p
                    .partition
                    .as_ref()
                    .and_then(|q| q.state.clone())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// slurmdbd's record of user `name` (`GET slurmdb user/{name}?with_assocs`) with the accounts of
/// its associations on `cluster` (on any cluster for `None`; an association without a cluster
/// counts everywhere); `None` when slurmdbd has no such user: real slurmdbd then answers 200 with
/// an empty `users` list and a "found nothing" warning (recorded on 24.11), not an error.
pub(crate) fn user_record(
    r: &g::OpenapiUsersResp,
    name: &str,
    cluster: Option<&str>,
) -> Option<UserRecord> {
    let u = r
        .users
        .iter()
        .flatten()
        .find(|u| u.name.as_deref() == Some(name))?;
    let mut accounts: Vec<String> = u
        .associations
        .iter()
        .flatten()
        .filter(|a| {
            let on = a.cluster.as_deref().unwrap_or_default();
            cluster.is_none_or(|c| on.is_empty() || on == c)
        })
        .filter_map(|a| non_empty(&a.account))
        .collect();
    accounts.sort();
    accounts.dedup();
    Some(UserRecord {
        name: name.to_string(),
        // A list of one in every version; an absent level is no privilege.
        admin_level: u
            .administrator_level
            .iter()
            .flatten()
            .next()
            .cloned()
            .unwrap_or_else(|| "None".into()),
        accounts,
        default_account: u
            .default
            .as_ref()
            .and_then(|d| d.account.clone())
            .unwrap_or_default(),
    })
}
