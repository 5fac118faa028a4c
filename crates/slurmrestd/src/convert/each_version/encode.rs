// Part of the seam (see decode.rs, which holds the imports of all three parts).

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
