//! THE table of sbatch options (Slurm 24.11): what each one takes and what the connector does
//! with it. Directive parsing, `sbatch_options` validation, option mapping and the generated
//! documentation (`docs/sbatch-options.md`) all read this one table, so an option cannot be
//! supported in one place and unknown in another.

/// Whether an option takes an argument (getopt_long's `has_arg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    None,
    Required,
    /// Only as `--opt=value` (or attached to a short option, `-kvalue`).
    Optional,
}

/// What rendering does with an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Becomes job-description fields (see `apply.rs`); the text says which.
    Mapped(&'static str),
    /// Set by the connector. From task config: refused. From a script directive: `job-name`,
    /// `output`, `error`, `chdir` are overridden (as the connector's own options would be on the
    /// sbatch command line); `wrap`, `uid`, `gid` are refused.
    Reserved,
    /// Changes only what the sbatch command prints or whether it blocks; the job is the same.
    /// Accepted and has no effect (logged).
    ClientOnly,
    /// Cannot be expressed in a v0.0.42 job description, or would need the submit host; refused.
    Refused(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptSpec {
    pub long: &'static str,
    pub short: Option<char>,
    pub arg: Arg,
    pub support: Support,
}

const fn o(long: &'static str, short: Option<char>, arg: Arg, support: Support) -> OptSpec {
    OptSpec {
        long,
        short,
        arg,
        support,
    }
}

use Arg::{None as N, Optional as O, Required as R};
use Support::{ClientOnly, Mapped as M, Refused as X, Reserved};

/// Every sbatch 24.11 option, in `sbatch --help` order of long names.
pub const OPTIONS: &[OptSpec] = &[
    o("account", Some('A'), R, M("account")),
    o("acctg-freq", None, R, M("account_gather_frequency")),
    o("array", Some('a'), R, M("array")),
    o("batch", None, R, M("batch_features")),
    o("bb", None, R, M("burst_buffer")),
    o("bbf", None, R, X("reads a file on the submit host")),
    o(
        "begin",
        Some('b'),
        R,
        M("begin_time (unix time; relative and wall-clock forms)"),
    ),
    o("chdir", Some('D'), R, Reserved),
    o("cluster-constraint", None, R, M("cluster_constraint")),
    o(
        "clusters",
        Some('M'),
        R,
        X("the connector submits to the cluster it is configured for"),
    ),
    o(
        "comment",
        None,
        R,
        M("comment (after the connector's idempotency key)"),
    ),
    o("constraint", Some('C'), R, M("constraints")),
    o("container", None, R, M("container")),
    o("container-id", None, R, M("container_id")),
    o("contiguous", None, N, M("contiguous")),
    o("core-spec", Some('S'), R, M("core_specification")),
    o(
        "cores-per-socket",
        None,
        R,
        X("the v0.0.42 job description has no cores-per-socket field"),
    ),
    o("cpu-freq", None, R, M("cpu_frequency")),
    o("cpus-per-gpu", None, R, M("cpus_per_tres (gres/gpu:N)")),
    o("cpus-per-task", Some('c'), R, M("cpus_per_task")),
    o("deadline", None, R, M("deadline (unix time)")),
    o("delay-boot", None, R, M("delay_boot (seconds)")),
    o("dependency", Some('d'), R, M("dependency")),
    o(
        "distribution",
        Some('m'),
        R,
        M("distribution, distribution_plane_size"),
    ),
    o("error", Some('e'), R, Reserved),
    o("exclude", Some('x'), R, M("excluded_nodes")),
    o("exclusive", None, O, M("shared (none | user | mcs | topo)")),
    o(
        "export",
        None,
        R,
        M(
            "only ALL (the default) is accepted: the job's environment is the connector's `environment`; use `env`",
        ),
    ),
    o(
        "export-file",
        None,
        R,
        X("reads a file on the submit host; use `env`"),
    ),
    o("extra", None, R, M("extra")),
    o(
        "extra-node-info",
        Some('B'),
        R,
        X(
            "needs cores-per-socket, which v0.0.42 cannot express; use --sockets-per-node / --threads-per-core",
        ),
    ),
    o(
        "get-user-env",
        None,
        O,
        X(
            "the v0.0.42 job description cannot ask for the login environment; use `env` and `modules`",
        ),
    ),
    o("gid", None, R, Reserved),
    o("gpu-bind", None, R, M("tres_bind (gres/gpu:...)")),
    o("gpu-freq", None, R, M("tres_freq (gpu:...)")),
    o("gpus", Some('G'), R, M("tres_per_job (gres/gpu:...)")),
    o("gpus-per-node", None, R, M("tres_per_node (gres/gpu:...)")),
    o(
        "gpus-per-socket",
        None,
        R,
        M("tres_per_socket (gres/gpu:...)"),
    ),
    o("gpus-per-task", None, R, M("tres_per_task (gres/gpu:...)")),
    o("gres", None, R, M("tres_per_node (gres/...)")),
    o(
        "gres-flags",
        None,
        R,
        M("flags (enforce-binding, disable-binding)"),
    ),
    o("help", Some('h'), N, X("prints help; not a job option")),
    o(
        "hint",
        None,
        R,
        M("threads_per_core, cpu_binding_flags (nomultithread, multithread, compute_bound)"),
    ),
    o("hold", Some('H'), N, M("hold")),
    o("ignore-pbs", None, N, ClientOnly),
    o("input", Some('i'), R, M("standard_input")),
    o("job-name", Some('J'), R, Reserved),
    o(
        "kill-on-invalid-dep",
        None,
        R,
        M("flags (KILL_INVALID_DEPENDENCY / NO_KILL_INVALID_DEPENDENCY)"),
    ),
    o("licenses", Some('L'), R, M("licenses")),
    o("mail-type", None, R, M("mail_type")),
    o("mail-user", None, R, M("mail_user")),
    o("mcs-label", None, R, M("mcs_label")),
    o("mem", None, R, M("memory_per_node (MiB)")),
    o(
        "mem-bind",
        None,
        R,
        M("memory_binding_type, memory_binding"),
    ),
    o("mem-per-cpu", None, R, M("memory_per_cpu (MiB)")),
    o("mem-per-gpu", None, R, M("memory_per_tres (gres/gpu:MiB)")),
    o("mincpus", None, R, M("minimum_cpus_per_node")),
    o("network", None, R, M("network")),
    o("nice", None, O, M("nice (default 100)")),
    o(
        "no-kill",
        Some('k'),
        O,
        M("kill_on_node_fail = false (`off`: true)"),
    ),
    o("no-requeue", None, N, M("requeue = false")),
    o(
        "nodefile",
        Some('F'),
        R,
        X("reads a file on the submit host; use --nodelist"),
    ),
    o("nodelist", Some('w'), R, M("required_nodes")),
    o("nodes", Some('N'), R, M("nodes (N or N-M)")),
    o("ntasks", Some('n'), R, M("tasks")),
    o("ntasks-per-core", None, R, M("tasks_per_core")),
    o("ntasks-per-gpu", None, R, M("ntasks_per_tres")),
    o("ntasks-per-node", None, R, M("tasks_per_node")),
    o("ntasks-per-socket", None, R, M("tasks_per_socket")),
    o("oom-kill-step", None, O, M("oom_kill_step")),
    o("open-mode", None, R, M("open_mode")),
    o("output", Some('o'), R, Reserved),
    o("overcommit", Some('O'), N, M("overcommit")),
    o("oversubscribe", Some('s'), N, M("shared = oversubscribe")),
    o("parsable", None, N, ClientOnly),
    o("partition", Some('p'), R, M("partition")),
    o("prefer", None, R, M("prefer")),
    o("priority", None, R, M("priority")),
    o("profile", None, R, M("profile")),
    o(
        "propagate",
        None,
        O,
        X("propagates the submit host's resource limits, which a REST submission does not have"),
    ),
    o("qos", Some('q'), R, M("qos")),
    o("quiet", Some('Q'), N, ClientOnly),
    o("reboot", None, N, M("reboot")),
    o("requeue", None, N, M("requeue = true")),
    o("reservation", None, R, M("reservation")),
    o("segment", None, R, M("segment_size")),
    o(
        "signal",
        None,
        R,
        M("kill_warning_signal, kill_warning_delay, kill_warning_flags"),
    ),
    o("sockets-per-node", None, R, M("sockets_per_node")),
    o("spread-job", None, N, M("flags (SPREAD_JOB)")),
    o("stepmgr", None, N, M("flags (STEPMGR_ENABLED)")),
    o("switches", None, R, M("required_switches, wait_for_switch")),
    o(
        "test-only",
        None,
        N,
        X("only asks whether the job would be scheduled; it submits nothing"),
    ),
    o("thread-spec", None, R, M("thread_specification")),
    o("threads-per-core", None, R, M("threads_per_core")),
    o("time", Some('t'), R, M("time_limit (minutes)")),
    o("time-min", None, R, M("time_minimum (minutes)")),
    o("tmp", None, R, M("temporary_disk_per_node (MiB)")),
    o("tres-bind", None, R, M("tres_bind")),
    o("tres-per-task", None, R, M("tres_per_task")),
    o("uid", None, R, Reserved),
    o("usage", Some('u'), N, X("prints usage; not a job option")),
    o(
        "use-min-nodes",
        None,
        N,
        M("flags (PREFER_MINIMUM_NODE_COUNT)"),
    ),
    o("verbose", Some('v'), N, ClientOnly),
    o(
        "version",
        Some('V'),
        N,
        X("prints the version; not a job option"),
    ),
    o("wait", Some('W'), N, ClientOnly),
    o("wait-all-nodes", None, R, M("wait_all_nodes")),
    o("wckey", None, R, M("wckey")),
    o("wrap", None, R, Reserved),
];

/// Options a directive may name but the connector overrides (it always sets these fields).
pub const OVERRIDDEN_FROM_SCRIPT: &[&str] = &["job-name", "output", "error", "chdir"];

/// Why looking an option name up failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Unknown,
    /// An abbreviation matching several options.
    Ambiguous(Vec<&'static str>),
}

/// Finds a long option as getopt_long does: an exact name, or an unambiguous prefix of one.
pub fn lookup_long(name: &str) -> Result<&'static OptSpec, Lookup> {
    if let Some(spec) = OPTIONS.iter().find(|s| s.long == name) {
        return Ok(spec);
    }
    if name.is_empty() {
        return Err(Lookup::Unknown);
    }
    let matches: Vec<&'static OptSpec> = OPTIONS
        .iter()
        .filter(|s| s.long.starts_with(name))
        .collect();
    match matches.len() {
        0 => Err(Lookup::Unknown),
        1 => Ok(matches[0]),
        _ => Err(Lookup::Ambiguous(matches.iter().map(|s| s.long).collect())),
    }
}

pub fn lookup_short(c: char) -> Option<&'static OptSpec> {
    OPTIONS.iter().find(|s| s.short == Some(c))
}

/// The options that become job-description fields, for error messages.
pub fn supported_list() -> String {
    OPTIONS
        .iter()
        .filter(|s| matches!(s.support, Support::Mapped(_)))
        .map(|s| s.long)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The option table as a Markdown document (`docs/sbatch-options.md`).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "# sbatch options and the slurmrestd job description\n\n\
         Generated from `src/render/options.rs` (`slurm_connector::render::options::markdown_table`).\n\
         Options come from a script's leading `#SBATCH` block, the first-class `sbatch` fields and\n\
         `sbatch_options` (later wins). slurmrestd ignores `#SBATCH` text, so each option becomes\n\
         job-description fields; an option that cannot is refused at CreateTask.\n\n\
         | option | short | argument | what the connector does |\n|---|---|---|---|\n",
    );
    for s in OPTIONS {
        let short = s.short.map(|c| format!("`-{c}`")).unwrap_or_default();
        let arg = match s.arg {
            Arg::None => "none",
            Arg::Required => "required",
            Arg::Optional => "optional (`=`)",
        };
        let what = match s.support {
            Support::Mapped(f) => format!("→ {f}"),
            Support::Reserved => "reserved: refused from task config; from a script, overridden \
                                  (job-name, output, error, chdir) or refused (wrap, uid, gid)"
                .to_string(),
            Support::ClientOnly => {
                "accepted, no effect (only changes the sbatch command's own behaviour)".to_string()
            }
            Support::Refused(why) => format!("refused: {why}"),
        };
        out.push_str(&format!("| `--{}` | {short} | {arg} | {what} |\n", s.long));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let re = regex::Regex::new("^[a-z][a-z0-9-]*$").unwrap();
        let mut seen = std::collections::HashSet::new();
        for s in OPTIONS {
            assert!(re.is_match(s.long), "{}", s.long);
            assert!(seen.insert(s.long), "duplicate {}", s.long);
        }
        let mut shorts = std::collections::HashSet::new();
        for c in OPTIONS.iter().filter_map(|s| s.short) {
            assert!(shorts.insert(c), "duplicate short -{c}");
        }
    }

    #[test]
    fn lookup_follows_getopt_long() {
        assert_eq!(lookup_long("partition").unwrap().long, "partition");
        assert_eq!(lookup_long("part").unwrap().long, "partition");
        // `mem` is exact even though `mem-bind` etc. start with it.
        assert_eq!(lookup_long("mem").unwrap().long, "mem");
        assert!(matches!(lookup_long("me"), Err(Lookup::Ambiguous(_))));
        assert!(matches!(lookup_long("nosuch"), Err(Lookup::Unknown)));
        assert_eq!(lookup_short('N').unwrap().long, "nodes");
        assert_eq!(lookup_short('t').unwrap().long, "time");
    }
}
