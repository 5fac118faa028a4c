//! Reading option values: the shared shapes (text, counts, node lists, GPU TRES) and the values
//! with a small grammar of their own (`--mail-type`, `--profile`, `--mem-bind`, `--signal`).

use crate::slurmrestd::job_description::{
    JobDescription, KillWarning, MailType, MemBindType, Profile, WarnFlag,
};

use super::super::error::RenderError;
use super::{RawOption, Target, versions};

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
pub(super) fn text(o: &RawOption) -> Result<Option<String>, RenderError> {
    let v = value(o)?;
    if v.is_empty() {
        return Err(invalid(o, "must not be empty"));
    }
    Ok(Some(v.to_string()))
}

pub(super) fn count(o: &RawOption, min: u32) -> Result<Option<u32>, RenderError> {
    let v = value(o)?;
    match v.parse::<u32>() {
        Ok(n) if n >= min && n < i32::MAX as u32 => Ok(Some(n)),
        _ => Err(invalid(
            o,
            format!("expected a whole number of at least {min}"),
        )),
    }
}

pub(super) fn u16_value(o: &RawOption) -> Result<u16, RenderError> {
    value(o)?
        .parse::<u16>()
        .ok()
        .filter(|n| *n < u16::MAX - 1)
        .ok_or_else(|| invalid(o, "expected a whole number below 65534"))
}

/// `[type:]count` of a GPU option, as a TRES string (`gres/gpu[:type]:count`).
pub(super) fn gpu_tres(o: &RawOption) -> Result<String, RenderError> {
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
pub(super) fn node_list(o: &RawOption) -> Result<Vec<String>, RenderError> {
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

pub(super) fn set_once<T>(
    slot: &mut Option<T>,
    v: T,
    o: &RawOption,
    other: &str,
) -> Result<(), RenderError> {
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

pub(super) fn mem_bind(o: &RawOption, t: &mut Target<'_>) -> Result<(), RenderError> {
    let version = t.version;
    let job: &mut JobDescription = t.job;
    let mut types = Vec::new();
    let mut in_list = false;
    for word in value(o)?.split(',') {
        let lower = word.to_ascii_lowercase();
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
            "sort" => {
                super::require(version, o, Some(word), versions::MEM_BIND_SORT)?;
                MemBindType::Sort
            }
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
