//! The deployment's settings for Flyte's clustered tasks (`clustered-task`): whether they are
//! served at all, and what a ClusteredTaskSpec cannot say — the container runtime and its
//! mounts, the partition, the placement (`--switches`), `--exclusive`, the time limit.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FLYTE_SLURM_CLUSTERED_TASKS` | `false` | serve (and advertise) `clustered-task` |
//! | `FLYTE_SLURM_CLUSTERED_RUNTIME` | `pyxis` | `pyxis` or `apptainer` |
//! | `FLYTE_SLURM_CLUSTERED_MOUNTS` | none | comma-separated bind mounts (`/shared` or `/src:/dst`) |
//! | `FLYTE_SLURM_CLUSTERED_PARTITION` | the cluster's default partition | partition of clustered jobs |
//! | `FLYTE_SLURM_CLUSTERED_SWITCHES` | none | sbatch `--switches=count[@max-time]`, e.g. `1@10:00` |
//! | `FLYTE_SLURM_CLUSTERED_EXCLUSIVE` | `true` | whole nodes (`--exclusive`) |
//! | `FLYTE_SLURM_CLUSTERED_TIME_LIMIT` | the partition's | sbatch `--time` of clustered jobs |

use super::ConfigError;
use super::env::{parse_bool, set_value};
pub use crate::domain::site::ClusteredSite;

pub(super) fn apply(
    site: &mut ClusteredSite,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let var = |k: &str| set_value(get, k);
    if let Some(v) = var("FLYTE_SLURM_CLUSTERED_TASKS") {
        site.enabled = parse_bool("FLYTE_SLURM_CLUSTERED_TASKS", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_CLUSTERED_RUNTIME") {
        if v != "pyxis" && v != "apptainer" {
            return Err(ConfigError::invalid(
                "FLYTE_SLURM_CLUSTERED_RUNTIME",
                &v,
                "must be `pyxis` or `apptainer`",
            ));
        }
        site.runtime = v;
    }
    if let Some(v) = var("FLYTE_SLURM_CLUSTERED_MOUNTS") {
        site.mounts = v
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect();
        if let Some(m) = site.mounts.iter().find(|m| !m.starts_with('/')) {
            return Err(ConfigError::invalid(
                "FLYTE_SLURM_CLUSTERED_MOUNTS",
                &v,
                format!("`{m}`: each mount is an absolute path (`/shared` or `/src:/dst`)"),
            ));
        }
    }
    if let Some(v) = var("FLYTE_SLURM_CLUSTERED_PARTITION") {
        site.partition = Some(v);
    }
    if let Some(v) = var("FLYTE_SLURM_CLUSTERED_SWITCHES") {
        check_switches(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_CLUSTERED_SWITCHES", &v, p))?;
        site.switches = Some(v);
    }
    if let Some(v) = var("FLYTE_SLURM_CLUSTERED_EXCLUSIVE") {
        site.exclusive = parse_bool("FLYTE_SLURM_CLUSTERED_EXCLUSIVE", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_CLUSTERED_TIME_LIMIT") {
        site.time_limit = Some(v);
    }
    Ok(())
}

/// `count[@max-time]`, as sbatch's `--switches` (the time in any sbatch time syntax).
fn check_switches(v: &str) -> Result<(), String> {
    let (count, wait) = match v.split_once('@') {
        Some((c, w)) => (c, Some(w)),
        None => (v, None),
    };
    if count.parse::<u32>().map_or(true, |c| c == 0) {
        return Err(
            "must be `count[@max-time]` with a count of at least 1, e.g. `1@10:00` (all nodes under one \
             leaf switch, waiting up to 10 minutes for it)"
                .into(),
        );
    }
    if let Some(w) = wait
        && crate::domain::units::parse_duration_secs(w).is_err()
    {
        return Err(format!(
            "`{w}` is not an sbatch time (minutes, MM:SS, HH:MM:SS, D-HH, ...)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(vars: &[(&str, &str)]) -> Result<ClusteredSite, ConfigError> {
        crate::config::applied(apply, vars)
    }

    #[test]
    fn off_by_default_and_exclusive_unless_said() {
        let s = load(&[]).unwrap();
        assert!(!s.enabled && s.exclusive && s.runtime == "pyxis");
        let s = load(&[
            ("FLYTE_SLURM_CLUSTERED_TASKS", "true"),
            ("FLYTE_SLURM_CLUSTERED_RUNTIME", "apptainer"),
            ("FLYTE_SLURM_CLUSTERED_MOUNTS", "/shared, /data:/data"),
            ("FLYTE_SLURM_CLUSTERED_PARTITION", "gpu"),
            ("FLYTE_SLURM_CLUSTERED_SWITCHES", "1@10:00"),
            ("FLYTE_SLURM_CLUSTERED_EXCLUSIVE", "false"),
        ])
        .unwrap();
        assert!(s.enabled && !s.exclusive);
        assert_eq!(s.mounts, vec!["/shared", "/data:/data"]);
        assert_eq!(s.partition.as_deref(), Some("gpu"));
        assert_eq!(s.switches.as_deref(), Some("1@10:00"));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("FLYTE_SLURM_CLUSTERED_TASKS", "maybe"),
            ("FLYTE_SLURM_CLUSTERED_RUNTIME", "docker"),
            ("FLYTE_SLURM_CLUSTERED_MOUNTS", "shared"),
            ("FLYTE_SLURM_CLUSTERED_SWITCHES", "0"),
            ("FLYTE_SLURM_CLUSTERED_SWITCHES", "1@soon"),
        ] {
            let e = load(&[(k, v)]).unwrap_err().to_string();
            assert!(e.contains(k), "{k}={v}: {e}");
        }
    }
}
