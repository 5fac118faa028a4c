//! The values operators write, parsed once for the whole crate: durations (`5s`, `250ms`, `2m`,
//! plain seconds), byte sizes (`500MB`, `2GB`, `512MiB`), shared mounts
//! (`cluster_prefix=local_path,...`), the job-files retention (`7d`, `off`) and log-link templates
//! (`name=https://...{job_id}`).
//!
//! A leaf: it uses nothing else of the crate, so the configuration (which reads the values) and
//! staging (whose `--roots` and mount mapping use the same rules) both depend on it and not on each
//! other. Errors are the problem and its fix; callers prefix the variable or key.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// Plain numbers are seconds; otherwise humantime's syntax (`5s`, `1m 30s`, `250ms`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err("must be a non-negative duration".into());
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("not a duration ({e}); write e.g. 5s, 250ms, 2m"))
}

/// Bytes, with optional decimal (KB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB) unit; `0` = 0.
/// One parser for the whole crate: the staging ceiling reads the same variable the same way.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| {
        format!("{e}; write a number of bytes, optionally with a unit (500MB, 2GB, 512MiB)")
    })
}

/// Parse `123`, `500MB`, `1.5GB`, `512MiB` (case-insensitive, optional space before the unit).
/// Decimal units are powers of 1000, binary ones (`KiB`...) of 1024.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].trim());
    if num.is_empty() {
        return Err("no number".into());
    }
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => return Err(format!("unknown unit {other:?}")),
    };
    if let Some((int, frac)) = num.split_once('.') {
        if mult == 1 || int.is_empty() && frac.is_empty() || frac.contains('.') {
            return Err("a fraction needs a unit, e.g. 1.5GB".into());
        }
        let int: u64 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| "number too large".to_string())?
        };
        let frac_digits = frac.len().min(12) as u32;
        let frac_val: u64 = if frac.is_empty() {
            0
        } else {
            frac[..frac_digits as usize]
                .parse()
                .map_err(|_| "bad fraction".to_string())?
        };
        let whole = int.checked_mul(mult).ok_or("number too large")?;
        let part = (frac_val as u128 * mult as u128 / 10u128.pow(frac_digits)) as u64;
        return whole
            .checked_add(part)
            .ok_or_else(|| "number too large".into());
    }
    let n: u64 = num.parse().map_err(|_| "number too large".to_string())?;
    n.checked_mul(mult).ok_or_else(|| "number too large".into())
}

/// One `cluster_prefix=local_path` pair. A bare `path` means the same path on both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub cluster_prefix: PathBuf,
    pub local_path: PathBuf,
}

/// THE parser of `FLYTE_SLURM_SHARED_MOUNTS` (the connector's config and the stager's `--roots`
/// both use it): comma-separated `cluster_prefix=local_path` entries, or a bare absolute path when
/// both sides see the filesystem at the same path. Both sides absolute, without `..`; trailing `/`
/// dropped. The error is the problem and its fix; callers prefix the variable's name.
pub fn parse_mounts(spec: &str) -> Result<Vec<Mount>, String> {
    const FIX: &str = "write cluster_prefix=local_path[,...] (e.g. /scratch=/mnt/scratch), or a bare \
                       absolute path when the cluster and this process see it at the same path";
    let mut mounts = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (cluster, local) = match entry.split_once('=') {
            Some((c, l)) => (c.trim(), l.trim()),
            None => (entry, entry),
        };
        if cluster.is_empty() || local.is_empty() {
            return Err(format!("entry {entry:?} has an empty side; {FIX}"));
        }
        mounts
            .push(check_mount(cluster, local).map_err(|e| format!("entry {entry:?}: {e}; {FIX}"))?);
    }
    if mounts.is_empty() {
        return Err(format!("no mounts given; {FIX}"));
    }
    Ok(mounts)
}

/// One mount's two sides (also the config file's `shared_mounts` table): absolute, without
/// `..`, trailing `/` dropped.
pub fn check_mount(cluster: &str, local: &str) -> Result<Mount, String> {
    for (side, p) in [("cluster prefix", cluster), ("local path", local)] {
        let path = Path::new(p);
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return Err(format!(
                "the {side} {p:?} must be an absolute path without `..`"
            ));
        }
    }
    let clean = |p: &str| {
        let t = p.trim_end_matches('/');
        PathBuf::from(if t.is_empty() { "/" } else { t })
    };
    Ok(Mount {
        cluster_prefix: clean(cluster),
        local_path: clean(local),
    })
}

/// One `name=template` log link; placeholders `{job_id}`, `{stdout}`, `{stderr}`, `{cluster}`, in
/// the template and in the name (the name is what Flyte's UI shows, so `Slurm job {job_id}` puts
/// the job id there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLinkTemplate {
    pub name: String,
    pub template: String,
}

/// The values a template is filled with.
#[derive(Debug, Clone)]
pub struct LogVars<'a> {
    pub job_id: &'a str,
    pub stdout: &'a str,
    pub stderr: &'a str,
    pub cluster: &'a str,
}

const PLACEHOLDERS: [&str; 4] = ["job_id", "stdout", "stderr", "cluster"];

impl LogLinkTemplate {
    /// The problem and its fix when the template is not valid; callers prefix the variable.
    pub fn new(name: &str, template: &str) -> Result<Self, String> {
        let bad = |message: String| message;
        if name.trim().is_empty() {
            return Err(bad(format!(
                "link {template:?} has no name; write name=template"
            )));
        }
        for text in [name, template] {
            let mut rest = text;
            while let Some(open) = rest.find('{') {
                let close = rest[open..]
                    .find('}')
                    .ok_or_else(|| bad(format!("link {name:?}: unclosed {{ in {text:?}")))?;
                let key = &rest[open + 1..open + close];
                if !PLACEHOLDERS.contains(&key) {
                    return Err(bad(format!(
                        "link {name:?}: unknown placeholder {{{key}}} in {text:?}; use {{job_id}}, {{stdout}}, {{stderr}} or {{cluster}}"
                    )));
                }
                rest = &rest[open + close + 1..];
            }
        }
        Ok(LogLinkTemplate {
            name: name.trim().to_string(),
            template: template.trim().to_string(),
        })
    }

    /// Fill the placeholders. Values are percent-encoded (keeping `/`), so a job's path cannot
    /// add query parameters or change the link's host.
    pub fn render(&self, vars: &LogVars<'_>) -> String {
        fill(&self.template, vars, encode)
    }

    /// The name with its placeholders filled as they are: it is a label, not a URL.
    pub fn render_name(&self, vars: &LogVars<'_>) -> String {
        fill(&self.name, vars, str::to_string)
    }
}

fn fill(text: &str, vars: &LogVars<'_>, value: fn(&str) -> String) -> String {
    let mut s = text.to_string();
    for (key, v) in [
        ("job_id", vars.job_id),
        ("stdout", vars.stdout),
        ("stderr", vars.stderr),
        ("cluster", vars.cluster),
    ] {
        s = s.replace(&format!("{{{key}}}"), &value(v));
    }
    s
}

/// The link every task shows when `FLYTE_SLURM_LOG_LINKS` is not set: both Flyte plugins forward
/// a RUNNING task's log links to the UI (and drop its message), so the link's name is where the
/// job id is seen while it runs; its target is the job's stdout on the shared filesystem.
pub const DEFAULT_LOG_LINKS: &str = "Slurm job {job_id} on {cluster}=file://{stdout}";

/// [`DEFAULT_LOG_LINKS`], parsed.
pub fn default_log_links() -> Vec<LogLinkTemplate> {
    parse_log_links(DEFAULT_LOG_LINKS).expect("the default log link is valid")
}

/// Parse `name=template;name=template` (the first `=` splits; a `;` inside a URL must be
/// written `%3B`); `off` is no link at all.
pub fn parse_log_links(spec: &str) -> Result<Vec<LogLinkTemplate>, String> {
    if spec.trim().eq_ignore_ascii_case("off") {
        return Ok(Vec::new());
    }
    spec.split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let (name, template) = entry
                .split_once('=')
                .ok_or_else(|| format!("entry {entry:?} is not name=template"))?;
            LogLinkTemplate::new(name, template)
        })
        .collect()
}

fn encode(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// `None` means keep forever (`off`, `never`, or `0` — as `0` means "no limit" for the upload
/// ceiling; removing logs the moment a task ends would leave nothing to debug it with).
/// Accepts `7d`, `12h`, `30m`, `45s`, plain seconds.
pub fn parse_retention(value: &str) -> Result<Option<Duration>, String> {
    let v = value.trim();
    if matches!(v.to_ascii_lowercase().as_str(), "off" | "never") {
        return Ok(None);
    }
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = (&v[..split], v[split..].trim());
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => u64::MAX,
    };
    match num.parse::<u64>() {
        Ok(0) if mult != u64::MAX => Ok(None),
        Ok(n) if mult != u64::MAX => Ok(Some(Duration::from_secs(n.saturating_mul(mult)))),
        _ => Err(format!(
            "{v:?} is not a duration; use e.g. 7d, 12h, 30m, 3600 (seconds) or off"
        )),
    }
}

/// `FLYTE_SLURM_COALESCE_WINDOW`: `auto` (the default), `off` (or 0), or a duration up to
/// [`super::MAX_COALESCE_WINDOW`].
pub fn parse_coalesce(value: &str) -> Result<super::Coalesce, String> {
    match value.trim() {
        "auto" | "" => return Ok(super::Coalesce::Auto),
        "off" | "none" => return Ok(super::Coalesce::Off),
        _ => {}
    }
    let d = parse_duration(value).map_err(|e| format!("{e}, or auto"))?;
    if d > super::MAX_COALESCE_WINDOW {
        return Err(format!(
            "must be at most {}ms: each CreateTask of a batch waits for the window before its \
             submit begins; use e.g. 100ms, auto or off",
            super::MAX_COALESCE_WINDOW.as_millis()
        ));
    }
    Ok(if d.is_zero() {
        super::Coalesce::Off
    } else {
        super::Coalesce::Window(d)
    })
}

/// `FLYTE_SLURM_SUBMIT_WAIT`: a duration from 0 (CreateTask never waits: every submit is
/// answered deferred) to [`super::MAX_SUBMIT_WAIT`].
pub fn parse_submit_wait(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value)?;
    if d > super::MAX_SUBMIT_WAIT {
        return Err(format!(
            "must be at most {}s: CreateTask has to answer within the backend's 10 s deadline; \
             use e.g. 5s",
            super::MAX_SUBMIT_WAIT.as_secs()
        ));
    }
    Ok(d)
}

/// `FLYTE_SLURM_CHECK_EVERY`: a duration from 0 (each check at once) to
/// [`super::MAX_CHECK_EVERY`].
pub fn parse_check_every(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value)?;
    if d > super::MAX_CHECK_EVERY {
        return Err(format!(
            "must be at most {}s: a held job waits that long for its check at worst; use e.g. 1s",
            super::MAX_CHECK_EVERY.as_secs()
        ));
    }
    Ok(d)
}

/// `FLYTE_SLURM_SUBMITS_IN_FLIGHT`: a whole number from 1.
pub fn parse_in_flight(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of submits, at least 1, e.g. 8".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_is_auto_off_or_a_window() {
        use super::super::Coalesce;
        assert_eq!(parse_coalesce("auto"), Ok(Coalesce::Auto));
        assert_eq!(parse_coalesce(""), Ok(Coalesce::Auto));
        assert_eq!(parse_coalesce("off"), Ok(Coalesce::Off));
        assert_eq!(parse_coalesce("0"), Ok(Coalesce::Off));
        assert_eq!(
            parse_coalesce("150ms"),
            Ok(Coalesce::Window(Duration::from_millis(150)))
        );
        let e = parse_coalesce("3s").unwrap_err();
        assert!(e.contains("at most 2000ms"), "{e}");
        let e = parse_coalesce("soon").unwrap_err();
        assert!(e.contains("auto"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512 mib"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        for bad in [
            "",
            "MB",
            "1.5",
            "12XB",
            "1..2GB",
            "-1",
            "99999999999999999999",
            "1e6",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn retention() {
        assert_eq!(parse_retention("off").unwrap(), None);
        assert_eq!(parse_retention("0").unwrap(), None);
        assert_eq!(parse_retention("0d").unwrap(), None);
        assert_eq!(
            parse_retention("2d").unwrap(),
            Some(Duration::from_secs(2 * 86_400))
        );
        assert_eq!(
            parse_retention("90").unwrap(),
            Some(Duration::from_secs(90))
        );
        for bad in ["", "7 days", "-1d", "1.5h", "d"] {
            assert!(parse_retention(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn links() {
        let t = parse_log_links(
            "Open OnDemand=https://ood.example/pun/sys/files/fs{stdout} ; Grafana=https://g.example/d/x?var-job={job_id}&var-cluster={cluster}",
        )
        .unwrap();
        let vars = LogVars {
            job_id: "95",
            stdout: "/scratch/jobs/a b.out",
            stderr: "/scratch/jobs/a.err",
            cluster: "c1&x=1",
        };
        let rendered: Vec<_> = t
            .iter()
            .map(|t| (t.name.clone(), t.render(&vars)))
            .collect();
        assert_eq!(
            rendered,
            vec![
                (
                    "Open OnDemand".to_string(),
                    "https://ood.example/pun/sys/files/fs/scratch/jobs/a%20b.out".to_string()
                ),
                (
                    "Grafana".to_string(),
                    "https://g.example/d/x?var-job=95&var-cluster=c1%26x%3D1".to_string()
                ),
            ]
        );
        for bad in [
            "x",
            "=https://a/{job_id}",
            "a=https://a/{jobid}",
            "a=https://a/{job_id",
            "Job {jobid}=https://a/",
        ] {
            assert!(parse_log_links(bad).is_err(), "{bad}");
        }
        // Names carry placeholders too, filled as they are (a label, not a URL); `off` is none.
        let named = &parse_log_links("Job {job_id} on {cluster}=https://a/{job_id}").unwrap()[0];
        assert_eq!(named.render_name(&vars), "Job 95 on c1&x=1");
        assert_eq!(parse_log_links(" OFF "), Ok(Vec::new()));
        let default = &default_log_links()[0];
        assert_eq!(
            (default.render_name(&vars), default.render(&vars)),
            (
                "Slurm job 95 on c1&x=1".to_string(),
                "file:///scratch/jobs/a%20b.out".to_string()
            )
        );
    }
}
