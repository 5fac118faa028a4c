// The seam, compiled once per API version: each `convert/v00NN.rs` declares
// `use ...::generated::v00NN as api; use api::types as g;` and a `quirks` module, then
// `include!`s this file. (Being included, it has no inner attributes or `//!` docs.)

use std::future::Future;

use progenitor_client::{Error as GenError, ResponseValue};

use super::{
    Envelope, Saturate, Unexpressible, no_val, non_empty, parse_tres_str, reason, reason_described,
    secs, state_of,
};
use crate::slurmrestd::ApiVersion;
use crate::slurmrestd::JobDescription;
use crate::slurmrestd::client::{Client, Idempotency};
use crate::slurmrestd::error::ClientError;
use crate::slurmrestd::job_description::{Limit, Memory};
use crate::slurmrestd::types::{
    ArrayMembership, Diag, ElementState, ExitCode, JobId, JobInfo, JobState, JobUsage, Partition,
    Ping, ServerInfo, SlurmError, States, Tres,
};
use crate::slurmrestd::users::UserRecord;

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
    let reason = if state.base == crate::slurmrestd::BaseState::Pending {
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

// ---------------------------------------------------------------------------------------------
// Domain → the submit body

fn u32_no_val(l: Limit) -> g::Uint32NoValStruct {
    match l {
        Limit::Finite(n) => g::Uint32NoValStruct {
            set: Some(true),
            infinite: Some(false),
            // Limits above i32::MAX are refused by rendering; saturate rather than wrap.
            number: Some(Saturate::saturate(i64::from(n))),
        },
        Limit::Infinite => g::Uint32NoValStruct {
            set: Some(false),
            infinite: Some(true),
            number: Some(0),
        },
    }
}

fn u64_no_val(n: u64) -> g::Uint64NoValStruct {
    g::Uint64NoValStruct {
        set: Some(true),
        infinite: Some(false),
        number: Some(Saturate::saturate(i64::try_from(n).unwrap_or(i64::MAX))),
    }
}

fn u16_no_val(n: u16) -> g::Uint16NoValStruct {
    g::Uint16NoValStruct {
        set: Some(true),
        infinite: Some(false),
        number: Some(Saturate::saturate(i64::from(n))),
    }
}

/// For `quirks::version_fields`: a field this version lacks must be unset.
#[allow(dead_code)] // versions that have every field never refuse
fn refuse_unless(ok: bool, field: &'static str) -> Result<(), Unexpressible> {
    if ok {
        Ok(())
    } else {
        Err(Unexpressible {
            what: format!("`{field}`"),
            version: VERSION,
        })
    }
}

/// API strings of a string-enum field, each checked against this version's spec
/// (`api::JOB_DESC_ENUMS`, from the spec's `x-slurm-enum`); nothing for an empty list, so Slurm's
/// default applies.
fn enum_strings<T>(
    field: &'static str,
    items: &[T],
    f: impl Fn(&T) -> &'static str,
) -> Result<Option<Vec<String>>, Unexpressible> {
    if items.is_empty() {
        return Ok(None);
    }
    let known = api::JOB_DESC_ENUMS
        .iter()
        .find(|(name, _)| *name == field)
        .map(|(_, values)| *values)
        .unwrap_or_default();
    items
        .iter()
        .map(|i| {
            let s = f(i);
            if known.contains(&s) {
                Ok(s.to_string())
            } else {
                Err(Unexpressible {
                    what: format!("`{field}` = {s}"),
                    version: VERSION,
                })
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn int(n: Option<u32>) -> Option<i32> {
    n.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

fn names(items: &[String]) -> Option<Vec<String>> {
    (!items.is_empty()).then(|| items.to_vec())
}

/// The `job` object of the submit body: the fields every version shares here, then the
/// version's own (`quirks::version_fields`), which refuses what the version cannot carry.
pub(crate) fn job_desc(job: &JobDescription) -> Result<g::JobDescMsg, Unexpressible> {
    let (memory_per_node, memory_per_cpu) = match job.memory {
        Some(Memory::PerNode(mb)) => (Some(u64_no_val(mb)), None),
        Some(Memory::PerCpu(mb)) => (None, Some(u64_no_val(mb))),
        None => (None, None),
    };
    let kw = job.kill_warning.as_ref();
    let mut msg = g::JobDescMsg {
        name: Some(job.name.clone()),
        script: Some(job.script.clone()),
        current_working_directory: Some(job.current_working_directory.clone()),
        environment: Some(
            job.environment
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        ),
        standard_output: job.standard_output.clone(),
        standard_error: job.standard_error.clone(),
        standard_input: job.standard_input.clone(),
        partition: job.partition.clone(),
        comment: job.comment.clone(),
        time_limit: job.time_limit.map(u32_no_val),
        time_minimum: job.time_minimum.map(u32_no_val),
        cpus_per_task: int(job.cpus_per_task),
        account: job.account.clone(),
        account_gather_frequency: job.account_gather_frequency.clone(),
        array: job.array.clone(),
        batch_features: job.batch_features.clone(),
        begin_time: job.begin_time.map(|t| u64_no_val(t.max(0) as u64)),
        burst_buffer: job.burst_buffer.clone(),
        cluster_constraint: job.cluster_constraint.clone(),
        constraints: job.constraints.clone(),
        container: job.container.clone(),
        container_id: job.container_id.clone(),
        contiguous: job.contiguous,
        core_specification: int(job.core_specification),
        thread_specification: int(job.thread_specification),
        cpu_binding_flags: enum_strings("cpu_binding_flags", &job.cpu_binding_flags, |c| {
            c.as_api_str()
        })?,
        cpu_frequency: job.cpu_frequency.clone(),
        cpus_per_tres: job.cpus_per_tres.clone(),
        deadline: job.deadline,
        delay_boot: int(job.delay_boot),
        dependency: job.dependency.clone(),
        distribution: job.distribution.clone(),
        excluded_nodes: names(&job.excluded_nodes),
        extra: job.extra.clone(),
        flags: enum_strings("flags", &job.flags, |f| f.as_api_str())?,
        hold: job.hold,
        kill_on_node_fail: job.kill_on_node_fail,
        kill_warning_signal: kw.map(|w| w.signal.clone()),
        kill_warning_delay: kw.map(|w| u16_no_val(w.delay_seconds)),
        kill_warning_flags: match kw {
            Some(w) => enum_strings("kill_warning_flags", &w.flags, |f| f.as_api_str())?,
            None => None,
        },
        licenses: job.licenses.clone(),
        mail_type: enum_strings("mail_type", &job.mail_type, |m| m.as_api_str())?,
        mail_user: job.mail_user.clone(),
        mcs_label: job.mcs_label.clone(),
        memory_per_node,
        memory_per_cpu,
        memory_binding: job.memory_binding.clone(),
        memory_binding_type: enum_strings("memory_binding_type", &job.memory_binding_type, |m| {
            m.as_api_str()
        })?,
        memory_per_tres: job.memory_per_tres.clone(),
        minimum_cpus_per_node: int(job.minimum_cpus_per_node),
        network: job.network.clone(),
        nice: job.nice,
        nodes: job.nodes.clone(),
        ntasks_per_tres: int(job.ntasks_per_tres),
        open_mode: enum_strings("open_mode", job.open_mode.as_slice(), |o| o.as_api_str())?,
        overcommit: job.overcommit,
        prefer: job.prefer.clone(),
        priority: job.priority.map(u32_no_val),
        profile: enum_strings("profile", &job.profile, |p| p.as_api_str())?,
        qos: job.qos.clone(),
        reboot: job.reboot,
        required_nodes: names(&job.required_nodes),
        required_switches: job.required_switches.map(|n| u32_no_val(Limit::Finite(n))),
        requeue: job.requeue,
        reservation: job.reservation.clone(),
        shared: enum_strings("shared", job.shared.as_slice(), |s| s.as_api_str())?,
        sockets_per_node: int(job.sockets_per_node),
        tasks: int(job.tasks),
        tasks_per_core: int(job.tasks_per_core),
        tasks_per_node: int(job.tasks_per_node),
        tasks_per_socket: int(job.tasks_per_socket),
        temporary_disk_per_node: int(job.temporary_disk_per_node),
        threads_per_core: int(job.threads_per_core),
        tres_bind: job.tres_bind.clone(),
        tres_freq: job.tres_freq.clone(),
        tres_per_job: job.tres_per_job.clone(),
        tres_per_node: job.tres_per_node.clone(),
        tres_per_socket: job.tres_per_socket.clone(),
        tres_per_task: job.tres_per_task.clone(),
        wait_all_nodes: job.wait_all_nodes,
        wait_for_switch: int(job.wait_for_switch),
        wckey: job.wckey.clone(),
        ..Default::default()
    };
    quirks::version_fields(job, &mut msg)?;
    Ok(msg)
}

/// The body of `POST job/submit` for one job.
pub(crate) fn submit_request(job: &JobDescription) -> Result<g::JobSubmitReq, Unexpressible> {
    Ok(g::JobSubmitReq {
        job: Some(job_desc(job)?),
        jobs: None,
        script: None,
    })
}

// ---------------------------------------------------------------------------------------------
// The operations the facade uses, on this version's generated client

type Answer<T> = Result<ResponseValue<T>, GenError<T>>;

/// This version's generated client, with one method per facade operation.
#[derive(Clone)]
pub(crate) struct Api {
    raw: api::Client,
}

impl Api {
    pub(crate) fn new(base_url: &str, http: reqwest::Client) -> Api {
        Api {
            raw: api::Client::new_with_client(base_url, http),
        }
    }

    async fn call<'a, T, F, Fut>(
        &'a self,
        c: &Client,
        op: &'static str,
        idem: Idempotency,
        f: F,
    ) -> Result<T, ClientError>
    where
        T: Envelope,
        F: Fn(&'a api::Client) -> Fut,
        Fut: Future<Output = Answer<T>>,
    {
        c.call(VERSION, op, idem, || f(&self.raw)).await
    }

    /// `POST job/submit`: the job id (`None`: a 200 without one) and slurmrestd's warnings.
    pub(crate) async fn submit(
        &self,
        c: &Client,
        job: &JobDescription,
    ) -> Result<(Option<u32>, Vec<String>), ClientError> {
        let body = submit_request(job).map_err(|e| c.unexpressible(e))?;
        let resp = self
            .call(c, "submit", Idempotency::OnlyIfNeverSent, |a| {
                a.slurm_post_job_submit(&body)
            })
            .await?;
        Ok((
            resp.job_id.and_then(|id| u32::try_from(id).ok()),
            resp.warnings(),
        ))
    }

    /// `POST job/{id}` with `hold: false` (and the comment the job keeps): releases a job
    /// submitted held. Releasing a job already released is accepted by slurmctld ("already
    /// released, ignoring request"), also once it runs.
    pub(crate) async fn release(
        &self,
        c: &Client,
        id: JobId,
        comment: Option<&str>,
        keep_held: bool,
    ) -> Result<(), ClientError> {
        let id = id.to_string();
        let body = g::JobDescMsg {
            hold: (!keep_held).then_some(false),
            comment: comment.map(str::to_string),
            ..Default::default()
        };
        self.call(c, "release", Idempotency::Idempotent, |a| {
            a.slurm_post_job(&id, &body)
        })
        .await?;
        Ok(())
    }

    pub(crate) async fn states(
        &self,
        c: &Client,
        ids: &Vec<String>,
    ) -> Result<States, ClientError> {
        let resp = self
            .call(c, "jobs_state", Idempotency::Idempotent, |a| {
                a.slurm_get_jobs_state(Some(ids))
            })
            .await?;
        Ok(states_of(
            resp.jobs.iter().flatten().filter_map(state_entry),
        ))
    }

    async fn controller_records(
        &self,
        c: &Client,
        id: JobId,
    ) -> Result<Vec<g::JobInfo>, ClientError> {
        let id = id.to_string();
        let resp = self
            .call(c, "job", Idempotency::Idempotent, |a| {
                a.slurm_get_job(&id, None, None)
            })
            .await?;
        Ok(resp.jobs.unwrap_or_default())
    }

    /// slurmctld's records of one job (`GET job/{id}`; an error 2017 for an unknown job).
    pub(crate) async fn job(&self, c: &Client, id: JobId) -> Result<Vec<JobInfo>, ClientError> {
        let records = self.controller_records(c, id).await?;
        Ok(records.iter().filter_map(job_info).collect())
    }

    /// slurmctld's view of one job's usage, for GetTaskMetrics.
    pub(crate) async fn controller_usage(
        &self,
        c: &Client,
        id: JobId,
        now: i64,
    ) -> Result<Vec<JobUsage>, ClientError> {
        let records = self.controller_records(c, id).await?;
        Ok(records
            .iter()
            .filter_map(|j| controller_usage(j, now))
            .collect())
    }

    /// Every job slurmctld knows, as full records.
    pub(crate) async fn jobs(&self, c: &Client) -> Result<Vec<JobInfo>, ClientError> {
        let resp = self
            .call(c, "jobs", Idempotency::Idempotent, |a| {
                a.slurm_get_jobs(None, None)
            })
            .await?;
        Ok(resp.jobs.iter().flatten().filter_map(job_info).collect())
    }

    /// `DELETE job/{id}`: the Slurm error numbers of the answer's per-job status.
    pub(crate) async fn cancel(
        &self,
        c: &Client,
        id: JobId,
        signal: Option<&str>,
    ) -> Result<Vec<i32>, ClientError> {
        let id = id.to_string();
        let resp = self
            .call(c, "cancel", Idempotency::Idempotent, |a| {
                a.slurm_delete_job(&id, None, signal)
            })
            .await?;
        Ok(quirks::cancel_codes(&resp))
    }

    async fn accounting_records(&self, c: &Client, id: JobId) -> Result<Vec<g::Job>, ClientError> {
        let id = id.to_string();
        let resp = self
            .call(c, "accounting_job", Idempotency::Idempotent, |a| {
                a.slurmdb_get_job(&id)
            })
            .await?;
        // Newest first: an array or requeued job has several records.
        let mut jobs = resp.jobs.unwrap_or_default();
        jobs.reverse();
        Ok(jobs)
    }

    /// slurmdbd's records of one job, newest first.
    pub(crate) async fn accounting_job(
        &self,
        c: &Client,
        id: JobId,
    ) -> Result<Vec<JobInfo>, ClientError> {
        let records = self.accounting_records(c, id).await?;
        Ok(records.iter().filter_map(accounting_job).collect())
    }

    /// slurmdbd's usage records of one job, newest first.
    pub(crate) async fn accounting_usage(
        &self,
        c: &Client,
        id: JobId,
    ) -> Result<Vec<JobUsage>, ClientError> {
        let records = self.accounting_records(c, id).await?;
        Ok(records.iter().filter_map(accounting_usage).collect())
    }

    /// slurmdbd's `GET jobs/` with the filters the facade uses (the generated call takes all of
    /// them positionally: they are spelt out once, in `quirks::db_jobs`).
    pub(crate) async fn accounting_jobs(
        &self,
        c: &Client,
        op: &'static str,
        filter: &crate::slurmrestd::client::DbJobsFilter<'_>,
    ) -> Result<Vec<JobInfo>, ClientError> {
        let resp = self
            .call(c, op, Idempotency::Idempotent, |a| {
                quirks::db_jobs(a, filter)
            })
            .await?;
        Ok(resp
            .jobs
            .iter()
            .flatten()
            .filter_map(accounting_job)
            .collect())
    }

    /// slurmdbd's `GET user/{name}?with_assocs`: the user's record, `None` when there is no such
    /// user. (slurmrestd without slurmdb answers its text/plain 404 of unknown paths.)
    pub(crate) async fn user(
        &self,
        c: &Client,
        name: &str,
        cluster: Option<&str>,
    ) -> Result<Option<UserRecord>, ClientError> {
        let resp = self
            .call(c, "slurmdb_user", Idempotency::Idempotent, |a| {
                a.slurmdb_get_user(name, Some("true"))
            })
            .await?;
        Ok(user_record(&resp, name, cluster))
    }

    pub(crate) async fn ping(&self, c: &Client) -> Result<Vec<Ping>, ClientError> {
        let resp = self
            .call(c, "ping", Idempotency::Idempotent, |a| a.slurm_get_ping())
            .await?;
        Ok(resp.pings.iter().flatten().map(quirks::ping).collect())
    }

    /// `GET ping/` as a probe: whether the cluster serves this version at all (404: no). Retried
    /// like any read when slurmrestd hiccups, so a 503 is not taken for an answer.
    pub(crate) async fn probe(&self, c: &Client) -> Result<ServerInfo, ClientError> {
        let resp = self
            .call(c, "probe", Idempotency::Probe, |a| a.slurm_get_ping())
            .await?;
        Ok(resp.server())
    }

    pub(crate) async fn diag(&self, c: &Client) -> Result<Diag, ClientError> {
        let resp = self
            .call(c, "diag", Idempotency::Idempotent, |a| a.slurm_get_diag())
            .await?;
        Ok(diag_of(&resp))
    }

    pub(crate) async fn partitions(&self, c: &Client) -> Result<Vec<Partition>, ClientError> {
        let resp = self
            .call(c, "partitions", Idempotency::Idempotent, |a| {
                a.slurm_get_partitions(None, None)
            })
            .await?;
        Ok(partitions_of(&resp))
    }
}
