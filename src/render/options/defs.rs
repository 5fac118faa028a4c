//! Every sbatch 24.11 option, in `sbatch --help` order of long names: one item each, with what
//! it writes into the job description and the case that tests it. Adding an option is adding an
//! item here; nothing else matches on option names.

use crate::slurmrestd::job_description::{CpuBindFlag, JobFlag, Limit, Memory, OpenMode, Shared};

use super::super::error::RenderError;
use super::values::{
    count, gpu_tres, invalid, mail_types, mem_bind, node_list, profiles, set_once, signal, text,
    u16_value, value,
};
use super::versions::{
    CORES_PER_SOCKET, FLAG_STEPMGR_ENABLED, MEM_BIND_SORT, OOM_KILL_STEP, SEGMENT_SIZE, SHARED_TOPO,
};
use super::{Applied, Arg, Case, Mapped, OptSpec, Setter, Support, ValueNeeds};
use crate::domain::units::{
    parse_duration_secs, parse_mbytes, parse_point_in_time, parse_time_limit,
};
use crate::slurmrestd::job_description::JobDescription;

use Arg::{None as N, Optional as O, Required as R};
use Support::{ClientOnly, Refused as X, Reserved};

const fn opt(long: &'static str, short: Option<char>, arg: Arg, support: Support) -> OptSpec {
    OptSpec {
        long,
        short,
        arg,
        slot: None,
        support,
    }
}

/// A mapped option every version can express.
const fn m(
    fields: &'static str,
    set: Setter,
    given: Option<&'static str>,
    check: fn(&JobDescription, &Applied) -> bool,
) -> Mapped {
    Mapped {
        fields,
        set,
        needs: &[],
        values_need: &[],
        case: Case { given, check },
    }
}

const fn yes(m: Mapped) -> Support {
    Support::Mapped(m)
}

/// The clock the items' cases are checked at (2026-11-30T02:00:00Z, UTC).
pub(crate) const CASE_NOW: i64 = 1_796_004_000;

fn is(v: &Option<String>, want: &str) -> bool {
    v.as_deref() == Some(want)
}

pub static OPTIONS: &[OptSpec] = &[
    opt(
        "account",
        Some('A'),
        R,
        yes(m(
            "account",
            |o, t| {
                t.job.account = text(o)?;
                Ok(())
            },
            Some("proj"),
            |j, _| is(&j.account, "proj"),
        )),
    ),
    opt(
        "acctg-freq",
        None,
        R,
        yes(m(
            "account_gather_frequency",
            |o, t| {
                t.job.account_gather_frequency = text(o)?;
                Ok(())
            },
            Some("task=30"),
            |j, _| is(&j.account_gather_frequency, "task=30"),
        )),
    ),
    opt(
        "array",
        Some('a'),
        R,
        yes(m(
            "array",
            |o, t| {
                let v = value(o)?;
                if let Err(why) = crate::render::array::indices(v) {
                    return Err(invalid(
                        o,
                        format!("{why}; expected indexes such as 0-15, 1,3,5, 0-15:4 or 0-99%10"),
                    ));
                }
                t.job.array = Some(v.to_string());
                Ok(())
            },
            Some("0-15%4"),
            |j, _| is(&j.array, "0-15%4"),
        )),
    ),
    opt(
        "batch",
        None,
        R,
        yes(m(
            "batch_features",
            |o, t| {
                t.job.batch_features = text(o)?;
                Ok(())
            },
            Some("feat"),
            |j, _| is(&j.batch_features, "feat"),
        )),
    ),
    opt(
        "bb",
        None,
        R,
        yes(m(
            "burst_buffer",
            |o, t| {
                t.job.burst_buffer = text(o)?;
                Ok(())
            },
            Some("bbspec"),
            |j, _| is(&j.burst_buffer, "bbspec"),
        )),
    ),
    opt("bbf", None, R, X("reads a file on the submit host")),
    opt(
        "begin",
        Some('b'),
        R,
        yes(m(
            "begin_time (unix time; relative and wall-clock forms)",
            |o, t| {
                t.job.begin_time = Some(
                    parse_point_in_time(value(o)?, t.clock.now, t.clock.utc_offset)
                        .map_err(|e| invalid(o, e))?,
                );
                Ok(())
            },
            Some("now+1hour"),
            |j, _| j.begin_time == Some(CASE_NOW + 3600),
        )),
    ),
    opt("chdir", Some('D'), R, Reserved),
    opt(
        "cluster-constraint",
        None,
        R,
        yes(m(
            "cluster_constraint",
            |o, t| {
                t.job.cluster_constraint = text(o)?;
                Ok(())
            },
            Some("cc"),
            |j, _| is(&j.cluster_constraint, "cc"),
        )),
    ),
    opt(
        "clusters",
        Some('M'),
        R,
        X("the connector submits to the cluster it is configured for"),
    ),
    opt(
        "comment",
        None,
        R,
        yes(m(
            "comment (the task's own; a coalesced array's after its elements' keys)",
            |o, t| {
                t.applied.user_comment = text(o)?;
                Ok(())
            },
            Some("mine"),
            |_, a| is(&a.user_comment, "mine"),
        )),
    ),
    opt(
        "constraint",
        Some('C'),
        R,
        yes(m(
            "constraints",
            |o, t| {
                t.job.constraints = text(o)?;
                Ok(())
            },
            Some("a100"),
            |j, _| is(&j.constraints, "a100"),
        )),
    ),
    opt(
        "container",
        None,
        R,
        yes(m(
            "container",
            |o, t| {
                t.job.container = text(o)?;
                Ok(())
            },
            Some("/oci/b"),
            |j, _| is(&j.container, "/oci/b"),
        )),
    ),
    opt(
        "container-id",
        None,
        R,
        yes(m(
            "container_id",
            |o, t| {
                t.job.container_id = text(o)?;
                Ok(())
            },
            Some("cid"),
            |j, _| is(&j.container_id, "cid"),
        )),
    ),
    opt(
        "contiguous",
        None,
        N,
        yes(m(
            "contiguous",
            |_, t| {
                t.job.contiguous = Some(true);
                Ok(())
            },
            None,
            |j, _| j.contiguous == Some(true),
        )),
    ),
    opt(
        "core-spec",
        Some('S'),
        R,
        yes(m(
            "core_specification",
            |o, t| {
                t.job.core_specification = count(o, 0)?;
                Ok(())
            },
            Some("2"),
            |j, _| j.core_specification == Some(2),
        )),
    ),
    opt(
        "cores-per-socket",
        None,
        R,
        yes(Mapped {
            needs: &[CORES_PER_SOCKET],
            ..m(
                "cores_per_socket",
                |o, t| {
                    t.job.cores_per_socket = count(o, 1)?;
                    Ok(())
                },
                Some("4"),
                |j, _| j.cores_per_socket == Some(4),
            )
        }),
    ),
    opt(
        "cpu-freq",
        None,
        R,
        yes(m(
            "cpu_frequency",
            |o, t| {
                t.job.cpu_frequency = text(o)?;
                Ok(())
            },
            Some("high"),
            |j, _| is(&j.cpu_frequency, "high"),
        )),
    ),
    opt(
        "cpus-per-gpu",
        None,
        R,
        yes(m(
            "cpus_per_tres (gres/gpu:N)",
            |o, t| {
                t.job.cpus_per_tres = Some(format!("gres/gpu:{}", count(o, 1)?.unwrap_or(1)));
                Ok(())
            },
            Some("4"),
            |j, _| is(&j.cpus_per_tres, "gres/gpu:4"),
        )),
    ),
    opt(
        "cpus-per-task",
        Some('c'),
        R,
        yes(m(
            "cpus_per_task (and, as sbatch does, tres_per_task cpu=N, EXACT_CPU_COUNT_REQUESTED)",
            |o, t| {
                t.job.cpus_per_task = count(o, 1)?;
                Ok(())
            },
            Some("8"),
            |j, _| {
                j.cpus_per_task == Some(8)
                    && is(&j.tres_per_task, "cpu=8")
                    && j.flags.contains(&JobFlag::ExactCpuCountRequested)
                    && j.minimum_cpus_per_node == Some(8)
            },
        )),
    ),
    opt(
        "deadline",
        None,
        R,
        yes(m(
            "deadline (unix time)",
            |o, t| {
                t.job.deadline = Some(
                    parse_point_in_time(value(o)?, t.clock.now, t.clock.utc_offset)
                        .map_err(|e| invalid(o, e))?,
                );
                Ok(())
            },
            Some("2026-12-01T10:00"),
            |j, _| j.deadline == Some(1_796_119_200),
        )),
    ),
    opt(
        "delay-boot",
        None,
        R,
        yes(m(
            "delay_boot (seconds)",
            |o, t| {
                let secs = parse_duration_secs(value(o)?).map_err(|e| invalid(o, e))?;
                t.job.delay_boot = Some(secs.unwrap_or(0).min(u32::MAX as u64 - 2) as u32);
                Ok(())
            },
            Some("5"),
            |j, _| j.delay_boot == Some(300),
        )),
    ),
    opt(
        "dependency",
        Some('d'),
        R,
        yes(m(
            "dependency",
            |o, t| {
                t.job.dependency = text(o)?;
                Ok(())
            },
            Some("afterok:1"),
            |j, _| is(&j.dependency, "afterok:1"),
        )),
    ),
    opt(
        "distribution",
        Some('m'),
        R,
        yes(m(
            "distribution, distribution_plane_size",
            |o, t| {
                let v = value(o)?;
                if v.is_empty()
                    || !v
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || ":=,*".contains(c))
                {
                    return Err(invalid(o, "expected e.g. block, cyclic:cyclic, plane=4"));
                }
                if let Some(size) = v.split(',').next().and_then(|d| d.strip_prefix("plane=")) {
                    t.job.distribution_plane_size = Some(
                        size.parse()
                            .map_err(|_| invalid(o, "plane=<size> needs a whole number"))?,
                    );
                }
                t.job.distribution = Some(v.to_string());
                Ok(())
            },
            Some("plane=4"),
            |j, _| is(&j.distribution, "plane=4") && j.distribution_plane_size == Some(4),
        )),
    ),
    opt("error", Some('e'), R, Reserved),
    opt(
        "exclude",
        Some('x'),
        R,
        yes(m(
            "excluded_nodes",
            |o, t| {
                t.job.excluded_nodes = node_list(o)?;
                Ok(())
            },
            Some("bad[1-2],bad5"),
            |j, _| j.excluded_nodes == ["bad[1-2]", "bad5"],
        )),
    ),
    opt(
        "exclusive",
        None,
        O,
        yes(Mapped {
            values_need: &[ValueNeeds {
                example: "topo",
                which: "`=topo`",
                needs: SHARED_TOPO,
            }],
            ..m(
                "shared (none | user | mcs | topo)",
                |o, t| {
                    t.job.shared = Some(match o.value.as_deref() {
                        None => Shared::None,
                        Some("user") => Shared::User,
                        Some("mcs") => Shared::Mcs,
                        Some("topo") => {
                            t.require(o, Some("topo"), SHARED_TOPO)?;
                            Shared::Topo
                        }
                        Some(_) => return Err(invalid(o, "expected no value, user, mcs or topo")),
                    });
                    Ok(())
                },
                Some("user"),
                |j, _| j.shared == Some(Shared::User),
            )
        }),
    ),
    opt(
        "export",
        None,
        R,
        yes(m(
            "only ALL (the default) is accepted: the job's environment is the connector's `environment`; use `env`",
            |o, _| {
                if !value(o)?.eq_ignore_ascii_case("ALL") {
                    return Err(invalid(
                        o,
                        "only ALL: a REST job's environment is exactly what the connector sends; set variables with `env`",
                    ));
                }
                Ok(())
            },
            Some("ALL"),
            |j, _| *j == JobDescription::default(),
        )),
    ),
    opt(
        "export-file",
        None,
        R,
        X("reads a file on the submit host; use `env`"),
    ),
    opt(
        "extra",
        None,
        R,
        yes(m(
            "extra",
            |o, t| {
                t.job.extra = text(o)?;
                Ok(())
            },
            Some("x"),
            |j, _| is(&j.extra, "x"),
        )),
    ),
    opt(
        "extra-node-info",
        Some('B'),
        R,
        yes(Mapped {
            values_need: &[ValueNeeds {
                example: "2:4:1",
                which: "a cores count (`S:C[:T]`)",
                needs: CORES_PER_SOCKET,
            }],
            ..m(
                "sockets_per_node, cores_per_socket, threads_per_core (`*` leaves one unset); without a task count, tasks = nodes × the counts given (as sbatch)",
                extra_node_info,
                Some("2:*:1"),
                |j, _| {
                    j.sockets_per_node == Some(2)
                        && j.cores_per_socket.is_none()
                        && j.threads_per_core == Some(1)
                        && j.tasks == Some(2)
                },
            )
        }),
    ),
    opt(
        "get-user-env",
        None,
        O,
        X("no job description can ask for the login environment; use `env` and `modules`"),
    ),
    opt("gid", None, R, Reserved),
    opt(
        "gpu-bind",
        None,
        R,
        yes(m(
            "tres_bind (gres/gpu:...)",
            |o, t| {
                set_once(
                    &mut t.job.tres_bind,
                    format!("gres/gpu:{}", value(o)?),
                    o,
                    "--tres-bind",
                )
            },
            Some("closest"),
            |j, _| is(&j.tres_bind, "gres/gpu:closest"),
        )),
    ),
    opt(
        "gpu-freq",
        None,
        R,
        yes(m(
            "tres_freq (gpu:...)",
            |o, t| {
                t.job.tres_freq = Some(format!("gpu:{}", value(o)?));
                Ok(())
            },
            Some("high"),
            |j, _| is(&j.tres_freq, "gpu:high"),
        )),
    ),
    opt(
        "gpus",
        Some('G'),
        R,
        yes(m(
            "tres_per_job (gres/gpu:...)",
            |o, t| {
                t.job.tres_per_job = Some(gpu_tres(o)?);
                t.applied.gpus_requested = true;
                Ok(())
            },
            Some("a100:8"),
            |j, a| is(&j.tres_per_job, "gres/gpu:a100:8") && a.gpus_requested,
        )),
    ),
    opt(
        "gpus-per-node",
        None,
        R,
        yes(m(
            "tres_per_node (gres/gpu:...)",
            |o, t| {
                t.gpus_per_node.push(gpu_tres(o)?);
                t.applied.gpus_requested = true;
                Ok(())
            },
            Some("2"),
            |j, a| is(&j.tres_per_node, "gres/gpu:2") && a.gpus_requested,
        )),
    ),
    opt(
        "gpus-per-socket",
        None,
        R,
        yes(m(
            "tres_per_socket (gres/gpu:...)",
            |o, t| {
                t.job.tres_per_socket = Some(gpu_tres(o)?);
                t.applied.gpus_requested = true;
                Ok(())
            },
            Some("1"),
            |j, a| is(&j.tres_per_socket, "gres/gpu:1") && a.gpus_requested,
        )),
    ),
    opt(
        "gpus-per-task",
        None,
        R,
        yes(m(
            "tres_per_task (gres/gpu:...)",
            |o, t| {
                t.per_task.push(gpu_tres(o)?);
                t.applied.gpus_requested = true;
                Ok(())
            },
            Some("1"),
            |j, a| is(&j.tres_per_task, "gres/gpu:1") && a.gpus_requested,
        )),
    ),
    opt(
        "gres",
        None,
        R,
        yes(m(
            "tres_per_node (gres/...)",
            |o, t| {
                let v = value(o)?;
                if v.eq_ignore_ascii_case("none") {
                    return Ok(());
                }
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
                        t.applied.gpus_requested = true;
                    }
                    // sbatch prefixes each entry with its TRES type (gres_prepend_tres_type).
                    t.gres_per_node.push(if item.starts_with("gres/") {
                        item.to_string()
                    } else {
                        format!("gres/{item}")
                    });
                }
                Ok(())
            },
            Some("gpu:a100:4,nvme:1"),
            |j, a| is(&j.tres_per_node, "gres/gpu:a100:4,gres/nvme:1") && a.gpus_requested,
        )),
    ),
    opt(
        "gres-flags",
        None,
        R,
        yes(m(
            "flags (enforce-binding, disable-binding)",
            |o, t| {
                let flag = match value(o)? {
                    "enforce-binding" => JobFlag::GresBindingEnforced,
                    "disable-binding" => JobFlag::GresBindingDisabled,
                    _ => {
                        return Err(invalid(
                            o,
                            "the connector expresses only enforce-binding or disable-binding",
                        ));
                    }
                };
                t.job.flags.push(flag);
                Ok(())
            },
            Some("enforce-binding"),
            |j, _| j.flags == [JobFlag::GresBindingEnforced],
        )),
    ),
    opt("help", Some('h'), N, X("prints help; not a job option")),
    opt(
        "hint",
        None,
        R,
        yes(Mapped {
            values_need: &[ValueNeeds {
                example: "memory_bound",
                which: "`memory_bound`",
                needs: CORES_PER_SOCKET,
            }],
            ..m(
                "threads_per_core, cpu_binding_flags (nomultithread, multithread, compute_bound); \
             memory_bound: cores_per_socket = 1, threads_per_core = 1, CPU_BIND_TO_CORES",
                hint,
                Some("nomultithread"),
                |j, _| {
                    j.threads_per_core == Some(1)
                        && j.cpu_binding_flags
                            == [CpuBindFlag::ToThreads, CpuBindFlag::OneThreadPerCore]
                },
            )
        }),
    ),
    opt(
        "hold",
        Some('H'),
        N,
        yes(m(
            "hold",
            |_, t| {
                t.job.hold = Some(true);
                Ok(())
            },
            None,
            |j, _| j.hold == Some(true),
        )),
    ),
    opt("ignore-pbs", None, N, ClientOnly),
    opt(
        "input",
        Some('i'),
        R,
        yes(m(
            "standard_input",
            |o, t| {
                t.job.standard_input = text(o)?;
                Ok(())
            },
            Some("/dev/null"),
            |j, _| is(&j.standard_input, "/dev/null"),
        )),
    ),
    opt("job-name", Some('J'), R, Reserved),
    opt(
        "kill-on-invalid-dep",
        None,
        R,
        yes(m(
            "flags (KILL_INVALID_DEPENDENCY / NO_KILL_INVALID_DEPENDENCY)",
            |o, t| {
                t.job
                    .flags
                    .push(match value(o)?.to_ascii_lowercase().as_str() {
                        "yes" => JobFlag::KillInvalidDependency,
                        "no" => JobFlag::NoKillInvalidDependency,
                        _ => return Err(invalid(o, "expected yes or no")),
                    });
                Ok(())
            },
            Some("no"),
            |j, _| j.flags == [JobFlag::NoKillInvalidDependency],
        )),
    ),
    opt(
        "licenses",
        Some('L'),
        R,
        yes(m(
            "licenses",
            |o, t| {
                t.job.licenses = text(o)?;
                Ok(())
            },
            Some("matlab:1"),
            |j, _| is(&j.licenses, "matlab:1"),
        )),
    ),
    opt(
        "mail-type",
        None,
        R,
        yes(m(
            "mail_type",
            |o, t| {
                t.job.mail_type = mail_types(o)?;
                Ok(())
            },
            Some("END,TIME_LIMIT_90"),
            |j, _| {
                use crate::slurmrestd::job_description::MailType;
                j.mail_type == [MailType::End, MailType::Time90]
            },
        )),
    ),
    opt(
        "mail-user",
        None,
        R,
        yes(m(
            "mail_user",
            |o, t| {
                t.job.mail_user = text(o)?;
                Ok(())
            },
            Some("a@b.c"),
            |j, _| is(&j.mail_user, "a@b.c"),
        )),
    ),
    opt(
        "mcs-label",
        None,
        R,
        yes(m(
            "mcs_label",
            |o, t| {
                t.job.mcs_label = text(o)?;
                Ok(())
            },
            Some("m"),
            |j, _| is(&j.mcs_label, "m"),
        )),
    ),
    opt(
        "mem",
        None,
        R,
        yes(m(
            "memory_per_node (MiB)",
            |o, t| {
                t.job.memory = Some(Memory::PerNode(
                    parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?,
                ));
                Ok(())
            },
            Some("4G"),
            |j, _| j.memory == Some(Memory::PerNode(4096)),
        )),
    ),
    opt(
        "mem-bind",
        None,
        R,
        yes(Mapped {
            values_need: &[ValueNeeds {
                example: "sort",
                which: "`sort`",
                needs: MEM_BIND_SORT,
            }],
            ..m(
                "memory_binding_type, memory_binding",
                mem_bind,
                Some("verbose,map_mem:0,1"),
                |j, _| {
                    use crate::slurmrestd::job_description::MemBindType;
                    j.memory_binding_type == [MemBindType::Verbose, MemBindType::Map]
                        && is(&j.memory_binding, "0,1")
                },
            )
        }),
    ),
    opt(
        "mem-per-cpu",
        None,
        R,
        yes(m(
            "memory_per_cpu (MiB)",
            |o, t| {
                t.job.memory = Some(Memory::PerCpu(
                    parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?,
                ));
                Ok(())
            },
            Some("500"),
            |j, _| j.memory == Some(Memory::PerCpu(500)),
        )),
    ),
    opt(
        "mem-per-gpu",
        None,
        R,
        yes(m(
            "memory_per_tres (gres/gpu:MiB)",
            |o, t| {
                let mb = parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?;
                t.job.memory_per_tres = Some(format!("gres/gpu:{mb}"));
                Ok(())
            },
            Some("16G"),
            |j, _| is(&j.memory_per_tres, "gres/gpu:16384"),
        )),
    ),
    opt(
        "mincpus",
        None,
        R,
        yes(m(
            "minimum_cpus_per_node",
            |o, t| {
                t.job.minimum_cpus_per_node = count(o, 1)?;
                Ok(())
            },
            Some("8"),
            |j, _| j.minimum_cpus_per_node == Some(8),
        )),
    ),
    opt(
        "network",
        None,
        R,
        yes(m(
            "network",
            |o, t| {
                t.job.network = text(o)?;
                Ok(())
            },
            Some("net"),
            |j, _| is(&j.network, "net"),
        )),
    ),
    opt(
        "nice",
        None,
        O,
        yes(m(
            "nice (default 100)",
            |o, t| {
                t.job.nice = Some(match o.value.as_deref() {
                    None => 100,
                    Some(v) => v
                        .parse::<i32>()
                        .ok()
                        .filter(|n| n.unsigned_abs() <= 2_147_483_645)
                        .ok_or_else(|| {
                            invalid(o, "expected a whole number (negative needs privileges)")
                        })?,
                });
                Ok(())
            },
            None,
            |j, _| j.nice == Some(100),
        )),
    ),
    opt(
        "no-kill",
        Some('k'),
        O,
        yes(m(
            "kill_on_node_fail = false (`off`: true)",
            |o, t| {
                t.job.kill_on_node_fail = Some(match o.value.as_deref() {
                    None => false,
                    Some(v) if v.eq_ignore_ascii_case("off") => true,
                    Some(_) => return Err(invalid(o, "expected no value or off")),
                });
                Ok(())
            },
            None,
            |j, _| j.kill_on_node_fail == Some(false),
        )),
    ),
    OptSpec {
        slot: Some("requeue"),
        ..opt(
            "no-requeue",
            None,
            N,
            yes(m(
                "requeue = false",
                |_, t| {
                    t.job.requeue = Some(false);
                    Ok(())
                },
                None,
                |j, _| j.requeue == Some(false),
            )),
        )
    },
    opt(
        "nodefile",
        Some('F'),
        R,
        X("reads a file on the submit host; use --nodelist"),
    ),
    opt(
        "nodelist",
        Some('w'),
        R,
        yes(m(
            "required_nodes",
            |o, t| {
                t.job.required_nodes = node_list(o)?;
                Ok(())
            },
            Some("good[1-4]"),
            |j, _| j.required_nodes == ["good[1-4]"] && is(&j.nodes, "4"),
        )),
    ),
    opt(
        "nodes",
        Some('N'),
        R,
        yes(m(
            "nodes (N or N-M)",
            |o, t| {
                let v = value(o)?;
                let (min, max) = match v.split_once('-') {
                    Some((a, b)) => (a.parse::<u32>().ok(), b.parse::<u32>().ok()),
                    None => (v.parse::<u32>().ok(), v.parse::<u32>().ok()),
                };
                match (min, max) {
                    (Some(a), Some(b)) if a >= 1 && a <= b && b < i32::MAX as u32 => {
                        t.job.nodes = Some(v.to_string());
                        Ok(())
                    }
                    _ => Err(invalid(
                        o,
                        "expected a node count N or a range N-M (N <= M, N >= 1)",
                    )),
                }
            },
            Some("2-4"),
            |j, _| is(&j.nodes, "2-4"),
        )),
    ),
    opt(
        "ntasks",
        Some('n'),
        R,
        yes(m(
            "tasks",
            |o, t| {
                t.job.tasks = count(o, 1)?;
                Ok(())
            },
            Some("16"),
            |j, _| j.tasks == Some(16),
        )),
    ),
    opt(
        "ntasks-per-core",
        None,
        R,
        yes(m(
            "tasks_per_core",
            |o, t| {
                t.job.tasks_per_core = count(o, 1)?;
                Ok(())
            },
            Some("1"),
            |j, _| j.tasks_per_core == Some(1),
        )),
    ),
    opt(
        "ntasks-per-gpu",
        None,
        R,
        yes(m(
            "ntasks_per_tres",
            |o, t| {
                t.job.ntasks_per_tres = count(o, 1)?;
                Ok(())
            },
            Some("2"),
            |j, _| j.ntasks_per_tres == Some(2),
        )),
    ),
    opt(
        "ntasks-per-node",
        None,
        R,
        yes(m(
            "tasks_per_node",
            |o, t| {
                t.job.tasks_per_node = count(o, 1)?;
                Ok(())
            },
            Some("4"),
            |j, _| j.tasks_per_node == Some(4),
        )),
    ),
    opt(
        "ntasks-per-socket",
        None,
        R,
        yes(m(
            "tasks_per_socket",
            |o, t| {
                t.job.tasks_per_socket = count(o, 1)?;
                Ok(())
            },
            Some("2"),
            |j, _| j.tasks_per_socket == Some(2),
        )),
    ),
    opt(
        "oom-kill-step",
        None,
        O,
        yes(Mapped {
            needs: &[OOM_KILL_STEP],
            ..m(
                "oom_kill_step",
                |o, t| {
                    t.job.oom_kill_step = Some(match o.value.as_deref() {
                        None | Some("1") => true,
                        Some("0") => false,
                        Some(_) => return Err(invalid(o, "expected 0 or 1")),
                    });
                    Ok(())
                },
                Some("0"),
                |j, _| j.oom_kill_step == Some(false),
            )
        }),
    ),
    opt(
        "open-mode",
        None,
        R,
        yes(m(
            "open_mode",
            |o, t| {
                // sbatch looks at the first letter only.
                t.job.open_mode = Some(
                    match value(o)?.chars().next().map(|c| c.to_ascii_lowercase()) {
                        Some('a') => OpenMode::Append,
                        Some('t') => OpenMode::Truncate,
                        _ => return Err(invalid(o, "expected append or truncate")),
                    },
                );
                Ok(())
            },
            Some("append"),
            |j, _| j.open_mode == Some(OpenMode::Append),
        )),
    ),
    opt("output", Some('o'), R, Reserved),
    opt(
        "overcommit",
        Some('O'),
        N,
        yes(m(
            "overcommit",
            |_, t| {
                t.job.overcommit = Some(true);
                Ok(())
            },
            None,
            |j, _| j.overcommit == Some(true),
        )),
    ),
    OptSpec {
        slot: Some("exclusive"),
        ..opt(
            "oversubscribe",
            Some('s'),
            N,
            yes(m(
                "shared = oversubscribe",
                |_, t| {
                    t.job.shared = Some(Shared::Oversubscribe);
                    Ok(())
                },
                None,
                |j, _| j.shared == Some(Shared::Oversubscribe),
            )),
        )
    },
    opt("parsable", None, N, ClientOnly),
    opt(
        "partition",
        Some('p'),
        R,
        yes(m(
            "partition",
            |o, t| {
                t.job.partition = text(o)?;
                Ok(())
            },
            Some("gpu"),
            |j, _| is(&j.partition, "gpu"),
        )),
    ),
    opt(
        "prefer",
        None,
        R,
        yes(m(
            "prefer",
            |o, t| {
                t.job.prefer = text(o)?;
                Ok(())
            },
            Some("fast"),
            |j, _| is(&j.prefer, "fast"),
        )),
    ),
    opt(
        "priority",
        None,
        R,
        yes(m(
            "priority",
            |o, t| {
                let v = value(o)?;
                t.job.priority = Some(Limit::Finite(
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| *n < u32::MAX - 1)
                        .ok_or_else(|| {
                            invalid(o, "expected a whole number (TOP is for operators)")
                        })?,
                ));
                Ok(())
            },
            Some("100"),
            |j, _| j.priority == Some(Limit::Finite(100)),
        )),
    ),
    opt(
        "profile",
        None,
        R,
        yes(m(
            "profile",
            |o, t| {
                t.job.profile = profiles(o)?;
                Ok(())
            },
            Some("task"),
            |j, _| j.profile == [crate::slurmrestd::job_description::Profile::Task],
        )),
    ),
    opt(
        "propagate",
        None,
        O,
        X("propagates the submit host's resource limits, which a REST submission does not have"),
    ),
    opt(
        "qos",
        Some('q'),
        R,
        yes(m(
            "qos",
            |o, t| {
                t.job.qos = text(o)?;
                Ok(())
            },
            Some("high"),
            |j, _| is(&j.qos, "high"),
        )),
    ),
    opt("quiet", Some('Q'), N, ClientOnly),
    opt(
        "reboot",
        None,
        N,
        yes(m(
            "reboot",
            |_, t| {
                t.job.reboot = Some(true);
                Ok(())
            },
            None,
            |j, _| j.reboot == Some(true),
        )),
    ),
    opt(
        "requeue",
        None,
        N,
        yes(m(
            "requeue = true",
            |_, t| {
                t.job.requeue = Some(true);
                Ok(())
            },
            None,
            |j, _| j.requeue == Some(true),
        )),
    ),
    opt(
        "reservation",
        None,
        R,
        yes(m(
            "reservation",
            |o, t| {
                t.job.reservation = text(o)?;
                Ok(())
            },
            Some("r"),
            |j, _| is(&j.reservation, "r"),
        )),
    ),
    opt(
        "segment",
        None,
        R,
        yes(Mapped {
            needs: &[SEGMENT_SIZE],
            ..m(
                "segment_size",
                |o, t| {
                    t.job.segment_size = Some(u16_value(o)?);
                    Ok(())
                },
                Some("2"),
                |j, _| j.segment_size == Some(2),
            )
        }),
    ),
    opt(
        "signal",
        None,
        R,
        yes(m(
            "kill_warning_signal, kill_warning_delay, kill_warning_flags",
            |o, t| {
                t.job.kill_warning = Some(signal(o)?);
                Ok(())
            },
            Some("R:TERM@120"),
            |j, _| {
                use crate::slurmrestd::job_description::WarnFlag;
                j.kill_warning.as_ref().is_some_and(|k| {
                    k.signal == "TERM"
                        && k.delay_seconds == 120
                        && k.flags == [WarnFlag::ReservationJob]
                })
            },
        )),
    ),
    opt(
        "sockets-per-node",
        None,
        R,
        yes(m(
            "sockets_per_node",
            |o, t| {
                t.job.sockets_per_node = count(o, 1)?;
                Ok(())
            },
            Some("2"),
            |j, _| j.sockets_per_node == Some(2),
        )),
    ),
    opt(
        "spread-job",
        None,
        N,
        yes(m(
            "flags (SPREAD_JOB)",
            |_, t| {
                t.job.flags.push(JobFlag::SpreadJob);
                Ok(())
            },
            None,
            |j, _| j.flags == [JobFlag::SpreadJob],
        )),
    ),
    opt(
        "stepmgr",
        None,
        N,
        yes(Mapped {
            needs: &[FLAG_STEPMGR_ENABLED],
            ..m(
                "flags (STEPMGR_ENABLED)",
                |_, t| {
                    t.job.flags.push(JobFlag::StepmgrEnabled);
                    Ok(())
                },
                None,
                |j, _| j.flags == [JobFlag::StepmgrEnabled],
            )
        }),
    ),
    opt(
        "switches",
        None,
        R,
        yes(m(
            "required_switches, wait_for_switch",
            |o, t| {
                let v = value(o)?;
                let (n, wait) = match v.split_once('@') {
                    Some((n, w)) => (n, Some(w)),
                    None => (v, None),
                };
                t.job.required_switches = Some(
                    n.parse::<u32>()
                        .ok()
                        .filter(|n| *n < u32::MAX - 1)
                        .ok_or_else(|| invalid(o, "expected count[@max-time]"))?,
                );
                if let Some(w) = wait {
                    let secs = parse_duration_secs(w).map_err(|e| invalid(o, e))?;
                    t.job.wait_for_switch = Some(secs.unwrap_or(0).min(i32::MAX as u64) as u32);
                }
                Ok(())
            },
            Some("1@10"),
            |j, _| j.required_switches == Some(1) && j.wait_for_switch == Some(600),
        )),
    ),
    opt(
        "test-only",
        None,
        N,
        X("only asks whether the job would be scheduled; it submits nothing"),
    ),
    opt(
        "thread-spec",
        None,
        R,
        yes(m(
            "thread_specification",
            |o, t| {
                t.job.thread_specification = count(o, 0)?;
                Ok(())
            },
            Some("1"),
            |j, _| j.thread_specification == Some(1),
        )),
    ),
    opt(
        "threads-per-core",
        None,
        R,
        yes(m(
            "threads_per_core",
            |o, t| {
                t.job.threads_per_core = count(o, 1)?;
                Ok(())
            },
            Some("2"),
            |j, _| j.threads_per_core == Some(2),
        )),
    ),
    opt(
        "time",
        Some('t'),
        R,
        yes(m(
            "time_limit (minutes)",
            |o, t| {
                t.job.time_limit = Some(parse_time_limit(value(o)?).map_err(|e| invalid(o, e))?);
                Ok(())
            },
            Some("1-0"),
            |j, _| j.time_limit == Some(Limit::Finite(1440)),
        )),
    ),
    opt(
        "time-min",
        None,
        R,
        yes(m(
            "time_minimum (minutes)",
            |o, t| {
                t.job.time_minimum = Some(parse_time_limit(value(o)?).map_err(|e| invalid(o, e))?);
                Ok(())
            },
            Some("30"),
            |j, _| j.time_minimum == Some(Limit::Finite(30)),
        )),
    ),
    opt(
        "tmp",
        None,
        R,
        yes(m(
            "temporary_disk_per_node (MiB)",
            |o, t| {
                let mb = parse_mbytes(value(o)?).map_err(|e| invalid(o, e))?;
                t.job.temporary_disk_per_node = Some(
                    u32::try_from(mb)
                        .ok()
                        .filter(|m| *m < i32::MAX as u32)
                        .ok_or_else(|| invalid(o, "too large"))?,
                );
                Ok(())
            },
            Some("10G"),
            |j, _| j.temporary_disk_per_node == Some(10240),
        )),
    ),
    opt(
        "tres-bind",
        None,
        R,
        yes(m(
            "tres_bind",
            |o, t| set_once(&mut t.job.tres_bind, value(o)?.to_string(), o, "--gpu-bind"),
            Some("gres/gpu:closest"),
            |j, _| is(&j.tres_bind, "gres/gpu:closest"),
        )),
    ),
    opt(
        "tres-per-task",
        None,
        R,
        yes(m(
            "tres_per_task",
            |o, t| {
                t.per_task.insert(0, text(o)?.unwrap_or_default());
                Ok(())
            },
            Some("license/x:1"),
            |j, _| is(&j.tres_per_task, "license/x:1"),
        )),
    ),
    opt("uid", None, R, Reserved),
    opt("usage", Some('u'), N, X("prints usage; not a job option")),
    opt(
        "use-min-nodes",
        None,
        N,
        yes(m(
            "flags (PREFER_MINIMUM_NODE_COUNT)",
            |_, t| {
                t.job.flags.push(JobFlag::PreferMinimumNodeCount);
                Ok(())
            },
            None,
            |j, _| j.flags == [JobFlag::PreferMinimumNodeCount],
        )),
    ),
    opt("verbose", Some('v'), N, ClientOnly),
    opt(
        "version",
        Some('V'),
        N,
        X("prints the version; not a job option"),
    ),
    opt("wait", Some('W'), N, ClientOnly),
    opt(
        "wait-all-nodes",
        None,
        R,
        yes(m(
            "wait_all_nodes",
            |o, t| {
                t.job.wait_all_nodes = Some(match value(o)? {
                    "0" => false,
                    "1" => true,
                    _ => return Err(invalid(o, "expected 0 or 1")),
                });
                Ok(())
            },
            Some("1"),
            |j, _| j.wait_all_nodes == Some(true),
        )),
    ),
    opt(
        "wckey",
        None,
        R,
        yes(m(
            "wckey",
            |o, t| {
                t.job.wckey = text(o)?;
                Ok(())
            },
            Some("wk"),
            |j, _| is(&j.wckey, "wk"),
        )),
    ),
    opt("wrap", None, R, Reserved),
];

/// sbatch refuses `--hint` with the options that set the same things (`validate_hint_option`).
/// (Not with `--sockets-per-node` here: the connector has always applied both.)
fn hint(o: &super::RawOption, t: &mut super::Target<'_>) -> Result<(), RenderError> {
    for conflicting in [
        "threads-per-core",
        "ntasks-per-core",
        "cores-per-socket",
        "extra-node-info",
    ] {
        if t.has(conflicting) {
            return Err(RenderError::Conflict {
                problem: format!(
                    "--hint and --{conflicting} are mutually exclusive (as in sbatch); keep one"
                ),
            });
        }
    }
    match value(o)?.to_ascii_lowercase().as_str() {
        "nomultithread" => {
            t.job.threads_per_core = Some(1);
            t.job.cpu_binding_flags = vec![CpuBindFlag::ToThreads, CpuBindFlag::OneThreadPerCore];
        }
        "multithread" => t.job.cpu_binding_flags = vec![CpuBindFlag::ToThreads],
        "compute_bound" => t.job.cpu_binding_flags = vec![CpuBindFlag::ToCores],
        "memory_bound" => {
            t.require(o, Some("memory_bound"), CORES_PER_SOCKET)?;
            // sbatch's verify_hint: one core per socket, one thread per core, bound to cores.
            t.job.cores_per_socket = Some(1);
            t.job.threads_per_core = Some(1);
            t.job.cpu_binding_flags = vec![CpuBindFlag::ToCores];
        }
        _ => {
            return Err(invalid(
                o,
                "expected nomultithread, multithread, compute_bound or memory_bound",
            ));
        }
    }
    Ok(())
}

/// `-B sockets[:cores[:threads]]`, each a count or `*` (any).
fn extra_node_info(o: &super::RawOption, t: &mut super::Target<'_>) -> Result<(), RenderError> {
    const EXPECTED: &str = "expected sockets[:cores[:threads]], each a count or *, e.g. 2:8:1";
    for other in ["sockets-per-node", "cores-per-socket", "threads-per-core"] {
        if t.has(other) {
            return Err(RenderError::Conflict {
                problem: format!("-B/--extra-node-info and --{other} set the same field; keep one"),
            });
        }
    }
    let parts: Vec<&str> = value(o)?.split(':').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(invalid(o, EXPECTED));
    }
    let mut counts = [None; 3];
    for (i, p) in parts.iter().enumerate() {
        if *p == "*" {
            continue;
        }
        counts[i] = Some(
            p.parse::<u32>()
                .ok()
                .filter(|n| *n >= 1 && *n < i32::MAX as u32)
                .ok_or_else(|| invalid(o, EXPECTED))?,
        );
    }
    if counts[1].is_some() {
        t.require(o, Some(value(o)?), CORES_PER_SOCKET)?;
    }
    t.job.sockets_per_node = counts[0];
    t.job.cores_per_socket = counts[1];
    t.job.threads_per_core = counts[2];
    Ok(())
}
