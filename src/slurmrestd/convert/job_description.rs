//! JobDescription → the v0.0.42 submit body, field by field. Enums are matched explicitly so a
//! value slurmrestd does not know cannot be sent (it would answer with a warning and no job).

use crate::slurmrestd::JobDescription;
use crate::slurmrestd::generated::v0042::types as g;
use crate::slurmrestd::job_description::{
    CpuBindFlag, JobFlag, Limit, MailType, MemBindType, Memory, OpenMode, Profile, Shared, WarnFlag,
};

fn u32_no_val(l: Limit) -> g::V0042Uint32NoValStruct {
    match l {
        Limit::Finite(n) => g::V0042Uint32NoValStruct {
            set: Some(true),
            infinite: Some(false),
            // Limits above i32::MAX are refused by rendering; saturate rather than wrap.
            number: Some(i32::try_from(n).unwrap_or(i32::MAX)),
        },
        Limit::Infinite => g::V0042Uint32NoValStruct {
            set: Some(false),
            infinite: Some(true),
            number: Some(0),
        },
    }
}

fn u64_no_val(n: u64) -> g::V0042Uint64NoValStruct {
    g::V0042Uint64NoValStruct {
        set: Some(true),
        infinite: Some(false),
        number: Some(i64::try_from(n).unwrap_or(i64::MAX)),
    }
}

fn u16_no_val(n: u16) -> g::V0042Uint16NoValStruct {
    g::V0042Uint16NoValStruct {
        set: Some(true),
        infinite: Some(false),
        number: Some(i32::from(n)),
    }
}

fn int(n: Option<u32>) -> Option<i32> {
    n.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

fn non_empty<T, U>(items: &[T], f: impl Fn(&T) -> U) -> Option<Vec<U>> {
    (!items.is_empty()).then(|| items.iter().map(f).collect())
}

fn mail(m: &MailType) -> g::V0042JobMailFlagsItem {
    use g::V0042JobMailFlagsItem as G;
    match m {
        MailType::Begin => G::Begin,
        MailType::End => G::End,
        MailType::Fail => G::Fail,
        MailType::Requeue => G::Requeue,
        MailType::Time100 => G::Time100,
        MailType::Time90 => G::Time90,
        MailType::Time80 => G::Time80,
        MailType::Time50 => G::Time50,
        MailType::StageOut => G::StageOut,
        MailType::ArrayTasks => G::ArrayTasks,
        MailType::InvalidDependency => G::InvalidDependency,
    }
}

fn flag(f: &JobFlag) -> g::V0042JobFlagsItem {
    use g::V0042JobFlagsItem as G;
    match f {
        JobFlag::KillInvalidDependency => G::KillInvalidDependency,
        JobFlag::NoKillInvalidDependency => G::NoKillInvalidDependency,
        JobFlag::SpreadJob => G::SpreadJob,
        JobFlag::PreferMinimumNodeCount => G::PreferMinimumNodeCount,
        JobFlag::GresBindingEnforced => G::GresBindingEnforced,
        JobFlag::GresBindingDisabled => G::GresBindingDisabled,
        JobFlag::StepmgrEnabled => G::StepmgrEnabled,
        JobFlag::ExactCpuCountRequested => G::ExactCpuCountRequested,
    }
}

fn shared(s: Shared) -> g::V0042JobSharedItem {
    use g::V0042JobSharedItem as G;
    match s {
        Shared::None => G::None,
        Shared::Oversubscribe => G::Oversubscribe,
        Shared::User => G::User,
        Shared::Mcs => G::Mcs,
        Shared::Topo => G::Topo,
    }
}

fn open_mode(o: OpenMode) -> g::V0042OpenModeItem {
    match o {
        OpenMode::Append => g::V0042OpenModeItem::Append,
        OpenMode::Truncate => g::V0042OpenModeItem::Truncate,
    }
}

fn warn(w: &WarnFlag) -> g::V0042WarnFlagsItem {
    match w {
        WarnFlag::BatchJob => g::V0042WarnFlagsItem::BatchJob,
        WarnFlag::ReservationJob => g::V0042WarnFlagsItem::ReservationJob,
    }
}

fn mem_bind(m: &MemBindType) -> g::V0042MemoryBindingTypeItem {
    use g::V0042MemoryBindingTypeItem as G;
    match m {
        MemBindType::None => G::None,
        MemBindType::Rank => G::Rank,
        MemBindType::Map => G::Map,
        MemBindType::Mask => G::Mask,
        MemBindType::Local => G::Local,
        MemBindType::Verbose => G::Verbose,
        MemBindType::Sort => G::Sort,
        MemBindType::Prefer => G::Prefer,
    }
}

fn cpu_bind(c: &CpuBindFlag) -> g::V0042CpuBindingFlagsItem {
    use g::V0042CpuBindingFlagsItem as G;
    match c {
        CpuBindFlag::ToThreads => G::CpuBindToThreads,
        CpuBindFlag::ToCores => G::CpuBindToCores,
        CpuBindFlag::OneThreadPerCore => G::CpuBindOneThreadPerCore,
    }
}

fn profile(p: &Profile) -> g::V0042AcctGatherProfileItem {
    use g::V0042AcctGatherProfileItem as G;
    match p {
        Profile::None => G::None,
        Profile::Energy => G::Energy,
        Profile::Lustre => G::Lustre,
        Profile::Network => G::Network,
        Profile::Task => G::Task,
    }
}

/// The `job` object of the submit body.
pub fn job_desc(job: &JobDescription) -> g::V0042JobDescMsg {
    let (memory_per_node, memory_per_cpu) = match job.memory {
        Some(Memory::PerNode(mb)) => (Some(u64_no_val(mb)), None),
        Some(Memory::PerCpu(mb)) => (None, Some(u64_no_val(mb))),
        None => (None, None),
    };
    let kw = job.kill_warning.as_ref();
    g::V0042JobDescMsg {
        name: Some(job.name.clone()),
        script: Some(job.script.clone()),
        current_working_directory: Some(job.current_working_directory.clone()),
        environment: Some(g::V0042StringArray(
            job.environment
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        )),
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
        cpu_binding_flags: non_empty(&job.cpu_binding_flags, cpu_bind).map(g::V0042CpuBindingFlags),
        cpu_frequency: job.cpu_frequency.clone(),
        cpus_per_tres: job.cpus_per_tres.clone(),
        deadline: job.deadline,
        delay_boot: int(job.delay_boot),
        dependency: job.dependency.clone(),
        distribution: job.distribution.clone(),
        distribution_plane_size: job.distribution_plane_size.map(u16_no_val),
        excluded_nodes: non_empty(&job.excluded_nodes, Clone::clone).map(g::V0042CsvString),
        extra: job.extra.clone(),
        flags: non_empty(&job.flags, flag).map(g::V0042JobFlags),
        hold: job.hold,
        kill_on_node_fail: job.kill_on_node_fail,
        kill_warning_signal: kw.map(|w| w.signal.clone()),
        kill_warning_delay: kw.map(|w| u16_no_val(w.delay_seconds)),
        kill_warning_flags: kw
            .and_then(|w| non_empty(&w.flags, warn))
            .map(g::V0042WarnFlags),
        licenses: job.licenses.clone(),
        mail_type: non_empty(&job.mail_type, mail).map(g::V0042JobMailFlags),
        mail_user: job.mail_user.clone(),
        mcs_label: job.mcs_label.clone(),
        memory_per_node,
        memory_per_cpu,
        memory_binding: job.memory_binding.clone(),
        memory_binding_type: non_empty(&job.memory_binding_type, mem_bind)
            .map(g::V0042MemoryBindingType),
        memory_per_tres: job.memory_per_tres.clone(),
        minimum_cpus_per_node: int(job.minimum_cpus_per_node),
        network: job.network.clone(),
        nice: job.nice,
        nodes: job.nodes.clone(),
        ntasks_per_tres: int(job.ntasks_per_tres),
        oom_kill_step: job.oom_kill_step.map(i32::from),
        open_mode: job.open_mode.map(|o| g::V0042OpenMode(vec![open_mode(o)])),
        overcommit: job.overcommit,
        prefer: job.prefer.clone(),
        priority: job.priority.map(u32_no_val),
        profile: non_empty(&job.profile, profile).map(g::V0042AcctGatherProfile),
        qos: job.qos.clone(),
        reboot: job.reboot,
        required_nodes: non_empty(&job.required_nodes, Clone::clone).map(g::V0042CsvString),
        required_switches: job.required_switches.map(|n| u32_no_val(Limit::Finite(n))),
        requeue: job.requeue,
        reservation: job.reservation.clone(),
        segment_size: job.segment_size.map(u16_no_val),
        shared: job.shared.map(|s| g::V0042JobShared(vec![shared(s)])),
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
    }
}

/// The body of `POST job/submit` for one job.
pub fn submit_request(job: &JobDescription) -> g::V0042JobSubmitReq {
    g::V0042JobSubmitReq {
        job: Some(job_desc(job)),
        jobs: None,
        script: None,
    }
}
