//! Option values with a small grammar of their own: `--mail-type`, `--profile`, `--mem-bind`,
//! `--signal`.

use crate::slurmrestd::job_description::{
    JobDescription, KillWarning, MailType, MemBindType, Profile, WarnFlag,
};

use super::apply::{invalid, value};
use super::directives::RawOption;
use super::error::RenderError;

pub(super) fn mail_types(o: &RawOption) -> Result<Vec<MailType>, RenderError> {
    let mut out = Vec::new();
    for t in value(o)?.split(',') {
        match t.to_ascii_uppercase().as_str() {
            "NONE" => out.clear(),
            "ALL" => out.extend([
                MailType::Begin,
                MailType::End,
                MailType::Fail,
                MailType::Requeue,
                MailType::StageOut,
                MailType::InvalidDependency,
            ]),
            "BEGIN" => out.push(MailType::Begin),
            "END" => out.push(MailType::End),
            "FAIL" => out.push(MailType::Fail),
            "REQUEUE" => out.push(MailType::Requeue),
            "STAGE_OUT" => out.push(MailType::StageOut),
            "TIME_LIMIT" => out.push(MailType::Time100),
            "TIME_LIMIT_90" => out.push(MailType::Time90),
            "TIME_LIMIT_80" => out.push(MailType::Time80),
            "TIME_LIMIT_50" => out.push(MailType::Time50),
            "ARRAY_TASKS" => out.push(MailType::ArrayTasks),
            "INVALID_DEPEND" => out.push(MailType::InvalidDependency),
            _ => {
                return Err(invalid(
                    o,
                    "expected a comma list of NONE, BEGIN, END, FAIL, REQUEUE, ALL, INVALID_DEPEND, STAGE_OUT, \
                     TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50, ARRAY_TASKS",
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

pub(super) fn profiles(o: &RawOption) -> Result<Vec<Profile>, RenderError> {
    let mut out = Vec::new();
    for t in value(o)?.split(',') {
        match t.to_ascii_lowercase().as_str() {
            "all" => out.extend([
                Profile::Energy,
                Profile::Lustre,
                Profile::Network,
                Profile::Task,
            ]),
            "none" => out.push(Profile::None),
            "energy" => out.push(Profile::Energy),
            "lustre" => out.push(Profile::Lustre),
            "network" => out.push(Profile::Network),
            "task" => out.push(Profile::Task),
            _ => {
                return Err(invalid(
                    o,
                    "expected all, none or a comma list of energy, lustre, network, task",
                ));
            }
        }
    }
    Ok(out)
}

pub(super) fn mem_bind(o: &RawOption, job: &mut JobDescription) -> Result<(), RenderError> {
    let mut types = Vec::new();
    let mut in_list = false;
    for t in value(o)?.split(',') {
        let lower = t.to_ascii_lowercase();
        // `map_mem:0,1`: list items continue the previous map/mask (Slurm's _isvalue).
        if in_list
            && !lower.is_empty()
            && lower
                .chars()
                .all(|c| c.is_ascii_hexdigit() || "x*".contains(c))
        {
            if let Some(list) = job.memory_binding.as_mut() {
                list.push(',');
                list.push_str(&lower);
            }
            continue;
        }
        in_list = lower.starts_with("map_mem") || lower.starts_with("mask_mem");
        let ty = match lower.as_str() {
            "quiet" => continue,
            "verbose" | "v" => MemBindType::Verbose,
            "none" | "no" => MemBindType::None,
            "rank" => MemBindType::Rank,
            "local" => MemBindType::Local,
            "sort" => MemBindType::Sort,
            "prefer" => MemBindType::Prefer,
            _ => {
                if let Some(list) = lower
                    .strip_prefix("map_mem:")
                    .or_else(|| lower.strip_prefix("map_mem="))
                {
                    job.memory_binding = Some(list.to_string());
                    MemBindType::Map
                } else if let Some(list) = lower
                    .strip_prefix("mask_mem:")
                    .or_else(|| lower.strip_prefix("mask_mem="))
                {
                    job.memory_binding = Some(list.to_string());
                    MemBindType::Mask
                } else {
                    return Err(invalid(
                        o,
                        "expected [quiet|verbose,]none|rank|local|sort|prefer|map_mem:<list>|mask_mem:<list>",
                    ));
                }
            }
        };
        types.push(ty);
    }
    job.memory_binding_type = types;
    Ok(())
}

/// Signal names sbatch's `sig_name2num` knows (without `SIG`).
const SIGNALS: &[&str] = &[
    "HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT", "STOP",
    "TSTP", "TTIN", "TTOU", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "POLL", "IO", "PWR", "SYS",
    "TRAP", "PIPE",
];

/// `--signal=[{R|B}:]<sig_num>[@sig_time]`.
pub(super) fn signal(o: &RawOption) -> Result<KillWarning, RenderError> {
    const EXPECTED: &str = "expected [R|B:]<signal>[@seconds], e.g. B:USR1@60";
    let v = value(o)?;
    let (scope, rest) = match v.split_once(':') {
        Some((s, r)) => (s, r),
        None => ("", v),
    };
    let mut flags = Vec::new();
    for c in scope.chars() {
        match c.to_ascii_uppercase() {
            'B' => flags.push(WarnFlag::BatchJob),
            'R' => flags.push(WarnFlag::ReservationJob),
            _ => return Err(invalid(o, EXPECTED)),
        }
    }
    let (sig, delay) = match rest.split_once('@') {
        Some((s, d)) => (
            s,
            d.parse::<u16>()
                .ok()
                .filter(|d| *d < u16::MAX - 1)
                .ok_or_else(|| invalid(o, EXPECTED))?,
        ),
        None => (rest, 60),
    };
    let upper = sig.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let signal = if let Ok(n) = sig.parse::<u32>() {
        if !(1..=64).contains(&n) {
            return Err(invalid(o, EXPECTED));
        }
        n.to_string()
    } else if SIGNALS.contains(&name) {
        name.to_string()
    } else {
        return Err(invalid(o, EXPECTED));
    };
    Ok(KillWarning {
        signal,
        delay_seconds: delay,
        flags,
    })
}
