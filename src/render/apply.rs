//! Effective sbatch options → job-description fields, with sbatch's semantics (Slurm 24.11
//! `slurm_opt.c` / `sbatch/opt.c` and `slurm_opt_create_job_desc`).

use crate::slurmrestd::job_description::{
    CpuBindFlag, JobDescription, JobFlag, Memory, OpenMode, Shared,
};

use super::directives::RawOption;
use super::error::RenderError;
use super::units::{parse_duration_secs, parse_mbytes, parse_point_in_time, parse_time_limit};
use super::values::{mail_types, mem_bind, profiles, signal};

/// Context for options whose meaning depends on the submit time and place.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: i64,
    pub utc_offset: i32,
}

/// What the rest of rendering needs to know about the options besides the job fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// The job asks for GPUs (`--gres=...gpu...`, `--gpus*`): Apptainer needs `--nv`.
    pub gpus_requested: bool,
    /// `--comment`, to be combined with the connector's key.
    pub user_comment: Option<String>,
}

pub(super) fn invalid(o: &RawOption, expected: impl Into<String>) -> RenderError {
    RenderError::InvalidValue {
        origin: o.origin.clone(),
        option: o.spec.long.to_string(),
        value: o.value.clone().unwrap_or_default(),
        expected: expected.into(),
    }
}

pub(super) fn value(o: &RawOption) -> Result<&str, RenderError> {
    o.value
        .as_deref()
        .ok_or_else(|| invalid(o, "this option requires a value"))
}

/// A non-empty string value for a pass-through field.
fn text(o: &RawOption) -> Result<Option<String>, RenderError> {
    let v = value(o)?;
    if v.is_empty() {
        return Err(invalid(o, "must not be empty"));
    }
    Ok(Some(v.to_string()))
}

fn count(o: &RawOption, min: u32) -> Result<Option<u32>, RenderError> {
    let v = value(o)?;
    match v.parse::<u32>() {
        Ok(n) if n >= min && n < i32::MAX as u32 => Ok(Some(n)),
        _ => Err(invalid(
            o,
            format!("expected a whole number of at least {min}"),
        )),
    }
}

fn u16_value(o: &RawOption) -> Result<u16, RenderError> {
    value(o)?
        .parse::<u16>()
        .ok()
        .filter(|n| *n < u16::MAX - 1)
        .ok_or_else(|| invalid(o, "expected a whole number below 65534"))
}

/// `[type:]count` of a GPU option, as a TRES string (`gres/gpu[:type]:count`).
fn gpu_tres(o: &RawOption) -> Result<String, RenderError> {
    let v = value(o)?;
    let (ty, n) = match v.rsplit_once(':') {
        Some((t, n)) => (Some(t), n),
        None => (None, v),
    };
    let ok_type = ty.is_none_or(|t| {
        !t.is_empty()
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    });
    if !ok_type || n.parse::<u32>().map(|n| n == 0).unwrap_or(true) {
        return Err(invalid(o, "expected [type:]count, e.g. 2 or a100:2"));
    }
    Ok(match ty {
        Some(t) => format!("gres/gpu:{t}:{n}"),
        None => format!("gres/gpu:{n}"),
    })
}

/// Node lists split at top-level commas (`node[1,3],node5` is two entries).
fn node_list(o: &RawOption) -> Result<Vec<String>, RenderError> {
    let v = value(o)?;
    if v.contains('/') {
        return Err(invalid(
            o,
            "a node list, not a file (files on the submit host cannot be read)",
        ));
    }
    let mut out = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in v.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    if depth != 0 || out.iter().any(|s| s.is_empty()) {
        return Err(invalid(o, "expected a node list such as node1,node[2-4]"));
    }
    Ok(out)
}

fn set_once<T>(slot: &mut Option<T>, v: T, o: &RawOption, other: &str) -> Result<(), RenderError> {
    if slot.is_some() {
        return Err(RenderError::Conflict {
            problem: format!(
                "--{} ({}) and {other} set the same field; keep one",
                o.spec.long, o.origin
            ),
        });
    }
    *slot = Some(v);
    Ok(())
}

/// Applies the effective options (one per option, see `merge`) to `job`.
pub fn apply(
    options: &[RawOption],
    job: &mut JobDescription,
    clock: Clock,
) -> Result<Applied, RenderError> {
    let mut applied = Applied::default();
    // TRES strings several options contribute to, joined at the end in sbatch's order.
    let mut per_node: Vec<String> = Vec::new();
    let mut gres_items: Vec<String> = Vec::new();
    let mut per_task: Vec<String> = Vec::new();
    let has = |name: &str| options.iter().any(|o| o.spec.long == name);

    for o in options {
        match o.spec.long {
            "account" => job.account = text(o)?,
            "acctg-freq" => job.account_gather_frequency = text(o)?,
            "array" => {
                let v = value(o)?;
                if v.is_empty() || !v.chars().all(|c| c.is_ascii_digit() || ",-:%".contains(c)) {
                    return Err(invalid(
                        o,
                        "expected indexes such as 0-15, 1,3,5, 0-15:4 or 0-99%10",
                    ));
                }
                job.array = Some(v.to_string());
            }
            "batch" => job.batch_features = text(o)?,
            "bb" => job.burst_buffer = text(o)?,
            "begin" => {
                job.begin_time = Some(
                    parse_point_in_time(value(o)?, clock.now, clock.utc_offset)
                        .map_err(|e| invalid(o, e))?,
                )
            }
            "cluster-constraint" => job.cluster_constraint = text(o)?,
            "comment" => applied.user_comment = text(o)?,
            "constraint" => job.constraints = text(o)?,
            "container" => job.container = text(o)?,
            "container-id" => job.container_id = text(o)?,
            "contiguous" => job.contiguous = Some(true),
            "core-spec" => job.core_specification = count(o, 0)?,
            "cpu-freq" => job.cpu_frequency = text(o)?,
            "cpus-per-gpu" => {
                job.cpus_per_tres = Some(format!("gres/gpu:{}", count(o, 1)?.unwrap_or(1)))
            }
            "cpus-per-task" => job.cpus_per_task = count(o, 1)?,
            "deadline" => {
                job.deadline = Some(
                    parse_point_in_time(value(o)?, clock.now, clock.utc_offset)
                        .map_err(|e| invalid(o, e))?,
                )
            }
            "delay-boot" => {
                let secs = parse_duration_secs(value(o)?).map_err(|e| invalid(o, e))?;
                job.delay_boot = Some(secs.unwrap_or(0).min(u32::MAX as u64 - 2) as u32);
            }
            "dependency" => job.dependency = text(o)?,
            "distribution" => {
                let v = value(o)?;
                if v.is_empty()
                    || !v
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || ":=,*".contains(c))
                {
                    return Err(invalid(o, "expected e.g. block, cyclic:cyclic, plane=4"));
                }
                if let Some(size) = v.split(',').next().and_then(|d| d.strip_prefix("plane=")) {
                    job.distribution_plane_size = Some(
                        size.parse()
                            .map_err(|_| invalid(o, "plane=<size> needs a whole number"))?,
                    );
                }
                job.distribution = Some(v.to_string());
            }
            "exclude" => job.excluded_nodes = node_list(o)?,
            "exclusive" => {
                job.shared = Some(match o.value.as_deref() {
                    None => Shared::None,
                    Some("user") => Shared::User,
                    Some("mcs") => Shared::Mcs,
                    Some("topo") => Shared::Topo,
                    Some(_) => return Err(invalid(o, "expected no value, user, mcs or topo")),
                })
            }
            "oversubscribe" => job.shared = Some(Shared::Oversubscribe),
            "export" => {
                if !value(o)?.eq_ignore_ascii_case("ALL") {
                    return Err(invalid(
                        o,
                        "only ALL: a REST job's environment is exactly what the connector sends; set variables with `env`",
                    ));
                }
            }
            "extra" => job.extra = text(o)?,
            "gpu-bind" => set_once(
                &mut job.tres_bind,
                format!("gres/gpu:{}", value(o)?),
                o,
                "--tres-bind",
            )?,
            "tres-bind" => set_once(&mut job.tres_bind, value(o)?.to_string(), o, "--gpu-bind")?,
            "gpu-freq" => job.tres_freq = Some(format!("gpu:{}", value(o)?)),
            "gpus" => {
                job.tres_per_job = Some(gpu_tres(o)?);
                applied.gpus_requested = true;
            }
            "gpus-per-node" => {
                per_node.push(gpu_tres(o)?);
                applied.gpus_requested = true;
            }
            "gpus-per-socket" => {
                job.tres_per_socket = Some(gpu_tres(o)?);
                applied.gpus_requested = true;
            }
            "gpus-per-task" => {
                per_task.push(gpu_tres(o)?);
                applied.gpus_requested = true;
            }
            "gres" => {
                let v = value(o)?;
                if !v.eq_ignore_ascii_case("none") {
                    for item in v.split(',') {
                        if item.is_empty() {
                            return Err(invalid(
                                o,
                                "expected name[:type]:count[,...], e.g. gpu:a100:4",
                            ));
                        }
                        if item
                            .split(':')
                            .next()
                            .is_some_and(|n| n.trim_start_matches("gres/") == "gpu")
                        {
                            applied.gpus_requested = true;
                        }
                        // sbatch prefixes each entry with its TRES type (gres_prepend_tres_type).
                        gres_items.push(if item.starts_with("gres/") {
                            item.to_string()
                        } else {
                            format!("gres/{item}")
                        });
                    }
                }
            }
            "gres-flags" => {
                let flag = match value(o)? {
                    "enforce-binding" => JobFlag::GresBindingEnforced,
                    "disable-binding" => JobFlag::GresBindingDisabled,
                    _ => {
                        return Err(invalid(
                            o,
                            "v0.0.42 can express only enforce-binding or disable-binding",
                        ));
                    }
                };
                job.flags.push(flag);
            }
            "hint" => {
                for conflicting in ["threads-per-core", "ntasks-per-core"] {
                    if has(conflicting) {
                        return Err(RenderError::Conflict {
                            problem: format!(
                                "--hint and --{conflicting} are mutually exclusive (as in sbatch); keep one"
                            ),
                        });
                    }
                }
                match value(o)?.to_ascii_lowercase().as_str() {
                    "nomultithread" => {
                        job.threads_per_core = Some(1);
                        job.cpu_binding_flags =
                            vec![CpuBindFlag::ToThreads, CpuBindFlag::OneThreadPerCore];
                    }
                    "multithread" => job.cpu_binding_flags = vec![CpuBindFlag::ToThreads],
                    "compute_bound" => job.cpu_binding_flags = vec![CpuBindFlag::ToCores],
                    _ => {
                        return Err(invalid(
                            o,
                            "v0.0.42 can express nomultithread, multithread or compute_bound (memory_bound needs \
                             cores-per-socket)",
                        ));
                    }
                }
            }
            "hold" => job.hold = Some(true),
            "input" => job.standard_input = text(o)?,
            "kill-on-invalid-dep" => {
                job.flags
                    .push(match value(o)?.to_ascii_lowercase().as_str() {
                        "yes" => JobFlag::KillInvalidDependency,
                        "no" => JobFlag::NoKillInvalidDependency,
                        _ => return Err(invalid(o, "expected yes or no")),
                    })
            }
            "licenses" => job.licenses = text(o)?,
            "mail-type" => job.mail_type = mail_types(o)?,
            "mail-user" => job.mail_user = text(o)?,
            "mcs-label" => job.mcs_label = text(o)?,
            "mem" => {
                job.memory = Some(Memory::PerNode(
                    parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?,
                ))
            }
            "mem-per-cpu" => {
                job.memory = Some(Memory::PerCpu(
                    parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?,
                ))
            }
            "mem-per-gpu" => {
                let mb = parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?;
                job.memory_per_tres = Some(format!("gres/gpu:{mb}"));
            }
            "mem-bind" => mem_bind(o, job)?,
            "mincpus" => job.minimum_cpus_per_node = count(o, 1)?,
            "network" => job.network = text(o)?,
            "nice" => {
                job.nice = Some(match o.value.as_deref() {
                    None => 100,
                    Some(v) => v
                        .parse::<i32>()
                        .ok()
                        .filter(|n| n.unsigned_abs() <= 2_147_483_645)
                        .ok_or_else(|| {
                            invalid(o, "expected a whole number (negative needs privileges)")
                        })?,
                })
            }
            "no-kill" => {
                job.kill_on_node_fail = Some(match o.value.as_deref() {
                    None => false,
                    Some(v) if v.eq_ignore_ascii_case("off") => true,
                    Some(_) => return Err(invalid(o, "expected no value or off")),
                })
            }
            "requeue" => job.requeue = Some(true),
            "no-requeue" => job.requeue = Some(false),
            "nodelist" => job.required_nodes = node_list(o)?,
            "nodes" => {
                let v = value(o)?;
                let (min, max) = match v.split_once('-') {
                    Some((a, b)) => (a.parse::<u32>().ok(), b.parse::<u32>().ok()),
                    None => (v.parse::<u32>().ok(), v.parse::<u32>().ok()),
                };
                match (min, max) {
                    (Some(a), Some(b)) if a >= 1 && a <= b && b < i32::MAX as u32 => {
                        job.nodes = Some(v.to_string())
                    }
                    _ => {
                        return Err(invalid(
                            o,
                            "expected a node count N or a range N-M (N <= M, N >= 1)",
                        ));
                    }
                }
            }
            "ntasks" => job.tasks = count(o, 1)?,
            "ntasks-per-core" => job.tasks_per_core = count(o, 1)?,
            "ntasks-per-gpu" => job.ntasks_per_tres = count(o, 1)?,
            "ntasks-per-node" => job.tasks_per_node = count(o, 1)?,
            "ntasks-per-socket" => job.tasks_per_socket = count(o, 1)?,
            "oom-kill-step" => {
                job.oom_kill_step = Some(match o.value.as_deref() {
                    None | Some("1") => true,
                    Some("0") => false,
                    Some(_) => return Err(invalid(o, "expected 0 or 1")),
                })
            }
            "open-mode" => {
                // sbatch looks at the first letter only.
                job.open_mode = Some(
                    match value(o)?.chars().next().map(|c| c.to_ascii_lowercase()) {
                        Some('a') => OpenMode::Append,
                        Some('t') => OpenMode::Truncate,
                        _ => return Err(invalid(o, "expected append or truncate")),
                    },
                )
            }
            "overcommit" => job.overcommit = Some(true),
            "partition" => job.partition = text(o)?,
            "prefer" => job.prefer = text(o)?,
            "priority" => {
                let v = value(o)?;
                job.priority = Some(crate::slurmrestd::job_description::Limit::Finite(
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| *n < u32::MAX - 1)
                        .ok_or_else(|| {
                            invalid(o, "expected a whole number (TOP is for operators)")
                        })?,
                ));
            }
            "profile" => job.profile = profiles(o)?,
            "qos" => job.qos = text(o)?,
            "reboot" => job.reboot = Some(true),
            "reservation" => job.reservation = text(o)?,
            "segment" => job.segment_size = Some(u16_value(o)?),
            "signal" => job.kill_warning = Some(signal(o)?),
            "sockets-per-node" => job.sockets_per_node = count(o, 1)?,
            "spread-job" => job.flags.push(JobFlag::SpreadJob),
            "stepmgr" => job.flags.push(JobFlag::StepmgrEnabled),
            "switches" => {
                let v = value(o)?;
                let (n, wait) = match v.split_once('@') {
                    Some((n, w)) => (n, Some(w)),
                    None => (v, None),
                };
                job.required_switches = Some(
                    n.parse::<u32>()
                        .ok()
                        .filter(|n| *n < u32::MAX - 1)
                        .ok_or_else(|| invalid(o, "expected count[@max-time]"))?,
                );
                if let Some(w) = wait {
                    let secs = parse_duration_secs(w).map_err(|e| invalid(o, e))?;
                    job.wait_for_switch = Some(secs.unwrap_or(0).min(i32::MAX as u64) as u32);
                }
            }
            "thread-spec" => job.thread_specification = count(o, 0)?,
            "threads-per-core" => job.threads_per_core = count(o, 1)?,
            "time" => {
                job.time_limit = Some(parse_time_limit(value(o)?).map_err(|e| invalid(o, e))?)
            }
            "time-min" => {
                job.time_minimum = Some(parse_time_limit(value(o)?).map_err(|e| invalid(o, e))?)
            }
            "tmp" => {
                let mb = parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?;
                job.temporary_disk_per_node = Some(
                    u32::try_from(mb)
                        .ok()
                        .filter(|m| *m < i32::MAX as u32)
                        .ok_or_else(|| invalid(o, "too large"))?,
                );
            }
            "tres-per-task" => per_task.insert(0, text(o)?.unwrap_or_default()),
            "use-min-nodes" => job.flags.push(JobFlag::PreferMinimumNodeCount),
            "wait-all-nodes" => {
                job.wait_all_nodes = Some(match value(o)? {
                    "0" => false,
                    "1" => true,
                    _ => return Err(invalid(o, "expected 0 or 1")),
                })
            }
            "wckey" => job.wckey = text(o)?,
            other => {
                // The option table marks this option as mapped but no arm handles it: a bug here,
                // refused rather than dropped.
                return Err(RenderError::UnsupportedOption {
                    origin: o.origin.clone(),
                    option: other.to_string(),
                    reason: "not mapped by this connector version".into(),
                    supported: super::options::supported_list(),
                });
            }
        }
    }
    // sbatch (24.11) also records --cpus-per-task as a per-task TRES and flags the CPU count as
    // explicit (JOB_CPUS_SET); without both the job record differs (differential test).
    if let Some(cpt) = job.cpus_per_task {
        per_task.insert(0, format!("cpu={cpt}"));
        job.flags.push(JobFlag::ExactCpuCountRequested);
    }
    // sbatch: the --gres entries first, then --gpus-per-node appended.
    gres_items.append(&mut per_node);
    let per_node = gres_items;
    if !per_node.is_empty() {
        job.tres_per_node = Some(per_node.join(","));
    }
    if !per_task.is_empty() {
        job.tres_per_task = Some(per_task.join(","));
    }
    job.flags.sort();
    job.flags.dedup();
    // sbatch: --hold submits with priority 0, whatever --priority says.
    if job.hold == Some(true) {
        job.priority = None;
    }
    super::derive::sbatch_derivations(job);
    Ok(applied)
}
