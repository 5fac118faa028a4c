//! The deployment's settings for interruptible tasks (`interruptible=True` in the task's
//! decorator): the preemptible partition or QOS they go to, and the warning signal Slurm sends
//! before it kills one (at preemption, with `PreemptParameters=send_user_signal` and a
//! `GraceTime`; at the time limit, always).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FLYTE_SLURM_INTERRUPTIBLE_PARTITION` | none | partition of interruptible tasks that name none |
//! | `FLYTE_SLURM_INTERRUPTIBLE_QOS` | none | QOS of interruptible tasks that name none |
//! | `FLYTE_SLURM_INTERRUPTIBLE_SIGNAL` | `USR1@60` | `SIG@SECONDS` before the kill, or `none` |

use super::ConfigError;
use super::env::set_value;
pub use crate::domain::site::InterruptibleSite;

pub(super) fn apply(
    site: &mut InterruptibleSite,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let var = |k: &str| set_value(get, k);
    for (name, slot) in [
        ("FLYTE_SLURM_INTERRUPTIBLE_PARTITION", &mut site.partition),
        ("FLYTE_SLURM_INTERRUPTIBLE_QOS", &mut site.qos),
    ] {
        if let Some(v) = var(name) {
            if v.contains([',', ' ']) || v.chars().any(|c| c.is_control()) {
                return Err(ConfigError::invalid(
                    name,
                    &v,
                    "one name (no commas or spaces): the partition or QOS interruptible tasks go to",
                ));
            }
            *slot = Some(v);
        }
    }
    if let Some(v) = var("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL") {
        site.warning = parse_warning(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL", &v, p))?;
    }
    Ok(())
}

/// `SIG@SECONDS` (`USR1@60`, `SIGTERM@120`, `10@30`) or `none`.
fn parse_warning(v: &str) -> Result<Option<(String, u16)>, String> {
    const EXPECTED: &str = "expected SIGNAL@SECONDS (e.g. USR1@60) or `none`; the scope (batch \
                            shell or job steps) follows the task type";
    if v.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let (sig, secs) = v.split_once('@').ok_or(EXPECTED)?;
    let secs: u16 = secs
        .parse()
        .ok()
        .filter(|s| (1..u16::MAX - 1).contains(s))
        .ok_or(EXPECTED)?;
    let upper = sig.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let ok = match name.parse::<u32>() {
        Ok(n) => (1..=64).contains(&n),
        Err(_) => !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
    };
    if !ok || name.contains(':') {
        return Err(EXPECTED.into());
    }
    Ok(Some((name.to_string(), secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(vars: &[(&str, &str)]) -> Result<InterruptibleSite, ConfigError> {
        crate::config::applied(apply, vars)
    }

    #[test]
    fn settings_are_read_and_bad_ones_named() {
        let s = site(&[]).unwrap();
        assert_eq!(s.warning, Some(("USR1".into(), 60)));
        assert_eq!((s.partition, s.qos), (None, None));
        let s = site(&[
            ("FLYTE_SLURM_INTERRUPTIBLE_PARTITION", "preemptible"),
            ("FLYTE_SLURM_INTERRUPTIBLE_QOS", "scavenger"),
            ("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL", "sigterm@120"),
        ])
        .unwrap();
        assert_eq!(s.partition.as_deref(), Some("preemptible"));
        assert_eq!(s.qos.as_deref(), Some("scavenger"));
        assert_eq!(s.warning, Some(("TERM".into(), 120)));
        assert_eq!(
            site(&[("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL", "none")])
                .unwrap()
                .warning,
            None
        );
        for (var, value) in [
            ("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL", "USR1"),
            ("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL", "B:USR1@60"),
            ("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL", "99@60"),
            ("FLYTE_SLURM_INTERRUPTIBLE_SIGNAL", "USR1@0"),
            ("FLYTE_SLURM_INTERRUPTIBLE_PARTITION", "a,b"),
        ] {
            let e = site(&[(var, value)]).unwrap_err().to_string();
            assert!(e.contains(var), "{e}");
        }
    }
}
