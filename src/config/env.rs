//! The connector's environment. Every variable is optional; the ones describing a cluster build
//! (or override, field by field) the cluster named by `FLYTE_SLURM_CLUSTER_NAME`.

use std::path::PathBuf;

use super::{
    AuthConfig, ClusterConfig, ConfigError, DEFAULT_CLUSTER_NAME, DEFAULT_TOKEN_LIFETIME,
    DeploymentConfig, Secret, UploadLimit, parse_bytes, parse_duration, units,
};

/// Variables that describe the environment's cluster (any one of them makes it exist, together
/// with `FLYTE_SLURM_RESTD_URL` for a new cluster).
const CLUSTER_VARS: &[&str] = &[
    "FLYTE_SLURM_RESTD_URL",
    "FLYTE_SLURM_API_VERSION",
    "FLYTE_SLURM_USERNAME",
    "FLYTE_SLURM_JWT",
    "FLYTE_SLURM_JWT_FILE",
    "FLYTE_SLURM_JWT_KEY_FILE",
    "FLYTE_SLURM_WORKING_DIR",
    "FLYTE_SLURM_SHARED_MOUNTS",
    "FLYTE_SLURM_STAGER_URL",
    "FLYTE_SLURM_STAGER_TOKEN_FILE",
    "FLYTE_SLURM_DEFAULT_PARTITION",
    "FLYTE_SLURM_SSH_HOSTS",
    "FLYTE_SLURM_CA_FILE",
    "FLYTE_SLURM_CONNECT_TIMEOUT",
    "FLYTE_SLURM_REQUEST_TIMEOUT",
];

pub(super) fn apply(
    cfg: &mut DeploymentConfig,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    // Empty values count as unset: `FOO=` in a manifest usually means "not configured".
    let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());

    if let Some(v) = var("FLYTE_SLURM_POLL_INTERVAL") {
        let d = parse_duration(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_POLL_INTERVAL", &v, p))?;
        if d.is_zero() {
            return Err(ConfigError::invalid(
                "FLYTE_SLURM_POLL_INTERVAL",
                &v,
                "must be above zero, e.g. 5s",
            ));
        }
        cfg.poll_interval = d;
    }
    if let Some(v) = var("FLYTE_SLURM_SHUTDOWN_GRACE") {
        cfg.shutdown_grace = parse_duration(&v)
            .and_then(check_grace)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_SHUTDOWN_GRACE", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_TERMINAL_TTL") {
        cfg.terminal_ttl = parse_duration(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_TERMINAL_TTL", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_ACCOUNTING_WAIT") {
        cfg.accounting_wait = parse_duration(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_ACCOUNTING_WAIT", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_REQUEUE_BUDGET") {
        cfg.requeue_budget = v.trim().parse().map_err(|_| {
            ConfigError::invalid(
                "FLYTE_SLURM_REQUEUE_BUDGET",
                &v,
                "must be a whole number of requeues, e.g. 3 (0: never requeue)",
            )
        })?;
    }
    if let Some(v) = var("FLYTE_SLURM_SUBMIT_WAIT") {
        cfg.submit_wait = units::parse_submit_wait(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_SUBMIT_WAIT", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_COALESCE_WINDOW") {
        cfg.coalesce = units::parse_coalesce(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_COALESCE_WINDOW", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_CHECK_EVERY") {
        cfg.check_every = units::parse_check_every(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_CHECK_EVERY", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_SUBMITS_IN_FLIGHT") {
        cfg.submits_in_flight = units::parse_in_flight(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_SUBMITS_IN_FLIGHT", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_LOG_LINKS") {
        cfg.log_links = units::parse_log_links(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_LOG_LINKS", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_JOB_FILES_RETENTION") {
        cfg.job_files_retention = units::parse_retention(&v)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_JOB_FILES_RETENTION", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_ALLOW_TASK_CREDENTIALS") {
        cfg.allow_task_credentials = parse_bool("FLYTE_SLURM_ALLOW_TASK_CREDENTIALS", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES") {
        // A malformed ceiling fails the tasks that upload through the connector (with this
        // message), not the whole connector: the plugin behaves the same way.
        cfg.upload_max_bytes = match parse_bytes(&v) {
            Ok(0) => UploadLimit::Unlimited,
            Ok(n) => UploadLimit::Bytes(n),
            Err(p) => {
                UploadLimit::Malformed(format!("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES={v:?}: {p}"))
            }
        };
    }

    if let Some(v) = var("FLYTE_SLURM_INGRESS_POLICY") {
        cfg.ingress_policy = Some(v.trim().to_string());
    }
    if let Some(v) = var("FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS") {
        cfg.anyone_may_run_as_rule_users =
            parse_bool("FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS", &v)?;
    }
    // The environment overrides the file's pair as a pair: half of one and half of the other
    // would be a certificate with another's key.
    match (
        var("FLYTE_SLURM_TLS_CERT_FILE"),
        var("FLYTE_SLURM_TLS_KEY_FILE"),
    ) {
        (Some(cert), Some(key)) => {
            cfg.server_tls = Some(super::ServerTlsFiles {
                cert: PathBuf::from(cert.trim()),
                key: PathBuf::from(key.trim()),
            })
        }
        (None, None) => {}
        (Some(_), None) | (None, Some(_)) => {
            let (set, missing) = if var("FLYTE_SLURM_TLS_CERT_FILE").is_some() {
                ("FLYTE_SLURM_TLS_CERT_FILE", "FLYTE_SLURM_TLS_KEY_FILE")
            } else {
                ("FLYTE_SLURM_TLS_KEY_FILE", "FLYTE_SLURM_TLS_CERT_FILE")
            };
            return Err(ConfigError::Missing {
                var: missing.into(),
                problem: format!(
                    "{set} is set, {missing} is not: TLS on the gRPC port needs both the \
                     certificate chain and its private key (PEM files)"
                ),
            });
        }
    }

    let name = var("FLYTE_SLURM_CLUSTER_NAME").unwrap_or_else(|| DEFAULT_CLUSTER_NAME.to_string());
    if !CLUSTER_VARS.iter().any(|k| var(k).is_some()) {
        return Ok(());
    }
    let existing = cfg.clusters.remove(&name);
    let mut c = match existing {
        Some(c) => c,
        None => {
            let Some(url) = var("FLYTE_SLURM_RESTD_URL") else {
                let set: Vec<&str> = CLUSTER_VARS
                    .iter()
                    .copied()
                    .filter(|k| var(k).is_some())
                    .collect();
                return Err(ConfigError::Missing {
                    var: "FLYTE_SLURM_RESTD_URL".into(),
                    problem: format!(
                        "{} set but no slurmrestd URL for cluster `{name}`; set FLYTE_SLURM_RESTD_URL \
                         (e.g. http://slurmrestd:6820) or define `{name}` in the config file",
                        set.join(", ")
                    ),
                });
            };
            ClusterConfig::new(name.clone(), parse_url("FLYTE_SLURM_RESTD_URL", &url)?)
        }
    };
    if let Some(v) = var("FLYTE_SLURM_RESTD_URL") {
        c.restd_url = parse_url("FLYTE_SLURM_RESTD_URL", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_API_VERSION") {
        c.api_version = check_api_version("FLYTE_SLURM_API_VERSION", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_USERNAME") {
        c.username = Some(v.trim().to_string());
    }
    if let Some(v) = var("FLYTE_SLURM_WORKING_DIR") {
        c.working_dir = Some(check_abs("FLYTE_SLURM_WORKING_DIR", &v)?);
    }
    if let Some(v) = var("FLYTE_SLURM_SHARED_MOUNTS") {
        c.shared_mounts = parse_mounts("FLYTE_SLURM_SHARED_MOUNTS", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_DEFAULT_PARTITION") {
        c.default_partition = Some(v.trim().to_string());
    }
    if let Some(v) = var("FLYTE_SLURM_SSH_HOSTS") {
        c.ssh_hosts = v
            .split(',')
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .collect();
    }
    if let Some(v) = var("FLYTE_SLURM_STAGER_URL") {
        c.stager_url = Some(parse_url("FLYTE_SLURM_STAGER_URL", &v)?);
    }
    if let Some(v) = var("FLYTE_SLURM_STAGER_TOKEN_FILE") {
        c.stager_token_file = Some(PathBuf::from(v.trim()));
    }
    if let Some(v) = var("FLYTE_SLURM_CA_FILE") {
        c.ca_file = Some(PathBuf::from(v.trim()));
    }
    if let Some(v) = var("FLYTE_SLURM_CONNECT_TIMEOUT") {
        c.connect_timeout = positive_duration("FLYTE_SLURM_CONNECT_TIMEOUT", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_REQUEST_TIMEOUT") {
        c.request_timeout = positive_duration("FLYTE_SLURM_REQUEST_TIMEOUT", &v)?;
    }
    if let Some(auth) = auth_from_env(&var)? {
        c.auth = Some(auth);
    }
    cfg.clusters.insert(name.clone(), c);
    if var("FLYTE_SLURM_CLUSTER_NAME").is_some() || cfg.clusters.len() == 1 {
        cfg.default_cluster = name;
    }
    Ok(())
}

/// At most one of the three credential variables may be set: two would leave it unclear which
/// identity jobs run under.
fn auth_from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<AuthConfig>, ConfigError> {
    let token = var("FLYTE_SLURM_JWT");
    let file = var("FLYTE_SLURM_JWT_FILE");
    let key = var("FLYTE_SLURM_JWT_KEY_FILE");
    let set: Vec<&str> = [
        ("FLYTE_SLURM_JWT", &token),
        ("FLYTE_SLURM_JWT_FILE", &file),
        ("FLYTE_SLURM_JWT_KEY_FILE", &key),
    ]
    .iter()
    .filter(|(_, v)| v.is_some())
    .map(|(k, _)| *k)
    .collect();
    if set.len() > 1 {
        return Err(ConfigError::Missing {
            var: set.join(" and "),
            problem: "several slurmrestd credentials set; keep exactly one (a token, a token file, or the HS256 key file)".into(),
        });
    }
    if let Some(t) = token {
        // Never echo the value: the error names the variable only.
        let t = t.trim();
        let t = t.strip_prefix("SLURM_JWT=").unwrap_or(t);
        if t.is_empty() {
            return Err(ConfigError::Missing {
                var: "FLYTE_SLURM_JWT".into(),
                problem: "holds only `SLURM_JWT=`; paste the token from `scontrol token`".into(),
            });
        }
        return Ok(Some(AuthConfig::Token(Secret::new(t))));
    }
    if let Some(f) = file {
        return Ok(Some(AuthConfig::TokenFile(PathBuf::from(f.trim()))));
    }
    if let Some(k) = key {
        let lifetime = match var("FLYTE_SLURM_JWT_LIFETIME") {
            Some(v) => super::parse_duration(&v)
                .map_err(|p| ConfigError::invalid("FLYTE_SLURM_JWT_LIFETIME", &v, p))?,
            None => DEFAULT_TOKEN_LIFETIME,
        };
        if var("FLYTE_SLURM_USERNAME").is_none() {
            return Err(ConfigError::Missing {
                var: "FLYTE_SLURM_USERNAME".into(),
                problem: "FLYTE_SLURM_JWT_KEY_FILE mints tokens for a user: set FLYTE_SLURM_USERNAME to the Slurm user jobs run as".into(),
            });
        }
        return Ok(Some(AuthConfig::KeyFile {
            path: PathBuf::from(k.trim()),
            lifetime,
        }));
    }
    Ok(None)
}

/// A variable's value, trimmed; `None` when unset or blank (blank means "the default").
pub(super) fn set_value(get: &dyn Fn(&str) -> Option<String>, var: &str) -> Option<String> {
    get(var)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

pub(super) fn parse_bool(var: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::invalid(var, v, "must be true or false")),
    }
}

pub(super) fn parse_url(var: &str, v: &str) -> Result<url::Url, ConfigError> {
    let u = url::Url::parse(v.trim()).map_err(|e| {
        ConfigError::invalid(
            var,
            v,
            format!("not a URL ({e}); write e.g. http://slurmrestd:6820"),
        )
    })?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(ConfigError::invalid(
            var,
            v,
            "must start with http:// or https://",
        ));
    }
    Ok(u)
}

/// `auto` (or empty) → choose per cluster; else one of the versions the connector speaks.
pub(super) fn check_api_version(
    var: &str,
    v: &str,
) -> Result<Option<crate::slurmrestd::ApiVersion>, ConfigError> {
    let t = v.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    t.parse().map(Some).map_err(|_| {
        ConfigError::invalid(
            var,
            v,
            format!(
                "must be `auto` (the newest the cluster serves) or one of {}",
                crate::slurmrestd::version::supported_list()
            ),
        )
    })
}

pub(super) fn check_abs(var: &str, v: &str) -> Result<String, ConfigError> {
    let t = v.trim();
    if !t.starts_with('/') {
        return Err(ConfigError::invalid(
            var,
            v,
            "must be an absolute path on the cluster's shared filesystem",
        ));
    }
    let trimmed = t.trim_end_matches('/');
    Ok(if trimmed.is_empty() {
        "/".to_string()
    } else {
        trimmed.to_string()
    })
}

/// `cluster_prefix=local_path[,...]` (or a bare path, the same on both sides), longest prefix
/// first: [`units::parse_mounts`], the stager's `--roots` parser too, so the connector and the
/// stager accept exactly the same values.
pub(super) fn parse_mounts(var: &str, v: &str) -> Result<Vec<(String, PathBuf)>, ConfigError> {
    let mut out: Vec<(String, PathBuf)> = units::parse_mounts(v)
        .map_err(|problem| ConfigError::invalid(var, v, problem))?
        .into_iter()
        .map(|m| (m.cluster_prefix.display().to_string(), m.local_path))
        .collect();
    // Longest prefix first, so /shared/jobs wins over /shared.
    out.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
    Ok(out)
}

/// The drain deadline must leave time to drain: zero would cut every call in flight.
pub(super) fn check_grace(d: std::time::Duration) -> Result<std::time::Duration, String> {
    if d.is_zero() {
        return Err(
            "must be above zero, e.g. 20s (and below the pod's terminationGracePeriodSeconds)"
                .into(),
        );
    }
    Ok(d)
}

/// A duration above zero (a zero timeout would fail every request).
fn positive_duration(name: &str, v: &str) -> Result<std::time::Duration, ConfigError> {
    match parse_duration(v) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(ConfigError::invalid(name, v, "must be above zero, e.g. 3s")),
        Err(p) => Err(ConfigError::invalid(name, v, p)),
    }
}
