//! The optional TOML file describing several clusters:
//!
//! ```toml
//! default_cluster = "hpc1"
//! poll_interval = "5s"
//! shutdown_grace = "20s"
//! allow_task_credentials = false
//!
//! [clusters.hpc1]
//! restd_url = "http://slurmrestd.hpc1:6820"
//! username = "flyte"
//! jwt_key_file = "/etc/slurm/jwt_hs256.key"
//! working_dir = "/shared/flyte/jobs"
//! shared_mounts = { "/shared" = "/mnt/hpc1-shared" }
//! ssh_hosts = ["login1.hpc1"]
//!
//! [[clusters.hpc1.images]]        # pre-staged images (see images.rs)
//! match = "ghcr.io/org/*"
//! pyxis = "/shared/images/{flat}.sqsh"
//! ```
//! Tokens never go in the file: only paths to files holding them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::env::{check_abs, check_api_version, parse_url};
use super::{
    AuthConfig, ClusterConfig, ConfigError, DEFAULT_TOKEN_LIFETIME, DeploymentConfig,
    parse_duration,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    default_cluster: Option<String>,
    poll_interval: Option<String>,
    terminal_ttl: Option<String>,
    accounting_wait: Option<String>,
    shutdown_grace: Option<String>,
    requeue_budget: Option<u32>,
    submit_wait: Option<String>,
    coalesce_window: Option<String>,
    submits_in_flight: Option<u64>,
    check_every: Option<String>,
    allow_task_credentials: Option<bool>,
    /// TLS on the gRPC port: both, or neither.
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
    #[serde(default)]
    clusters: BTreeMap<String, FileCluster>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCluster {
    restd_url: String,
    api_version: Option<String>,
    username: Option<String>,
    jwt_file: Option<PathBuf>,
    jwt_key_file: Option<PathBuf>,
    jwt_lifetime: Option<String>,
    working_dir: Option<String>,
    #[serde(default)]
    shared_mounts: BTreeMap<String, PathBuf>,
    default_partition: Option<String>,
    #[serde(default)]
    ssh_hosts: Vec<String>,
    stager_url: Option<String>,
    stager_token_file: Option<PathBuf>,
    /// Per-user identities (`identity.rs`).
    #[serde(default)]
    identities: Vec<super::identity::FileRule>,
    identity_default: Option<super::identity::FileDefault>,
    user_jwt_dir: Option<PathBuf>,
    slurm_daemon_user: Option<String>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    images: Vec<super::images::FileImageRule>,
    connect_timeout: Option<String>,
    request_timeout: Option<String>,
}

pub(super) fn load(path: &Path) -> Result<DeploymentConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

pub(super) fn parse(path: &Path, text: &str) -> Result<DeploymentConfig, ConfigError> {
    let f: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let bad = |key: &str, problem: String| ConfigError::Parse {
        path: path.to_path_buf(),
        message: format!("`{key}`: {problem}"),
    };
    let mut cfg = DeploymentConfig::empty();
    if let Some(v) = &f.poll_interval {
        cfg.poll_interval = parse_duration(v).map_err(|p| bad("poll_interval", p))?;
        if cfg.poll_interval.is_zero() {
            return Err(bad(
                "poll_interval",
                "must be above zero, e.g. \"5s\"".into(),
            ));
        }
    }
    if let Some(v) = &f.terminal_ttl {
        cfg.terminal_ttl = parse_duration(v).map_err(|p| bad("terminal_ttl", p))?;
    }
    if let Some(v) = &f.accounting_wait {
        cfg.accounting_wait = parse_duration(v).map_err(|p| bad("accounting_wait", p))?;
    }
    if let Some(v) = &f.shutdown_grace {
        cfg.shutdown_grace = parse_duration(v)
            .and_then(super::env::check_grace)
            .map_err(|p| bad("shutdown_grace", p))?;
    }
    if let Some(v) = f.requeue_budget {
        cfg.requeue_budget = v;
    }
    if let Some(v) = &f.submit_wait {
        cfg.submit_wait =
            super::units::parse_submit_wait(v).map_err(|p| bad("submit_wait", p.to_string()))?;
    }
    if let Some(v) = &f.coalesce_window {
        cfg.coalesce = super::units::parse_coalesce(v).map_err(|p| bad("coalesce_window", p))?;
    }
    if let Some(v) = &f.check_every {
        cfg.check_every = super::units::parse_check_every(v).map_err(|p| bad("check_every", p))?;
    }
    if let Some(v) = f.submits_in_flight {
        cfg.submits_in_flight = super::units::parse_in_flight(&v.to_string())
            .map_err(|p| bad("submits_in_flight", p.to_string()))?;
    }
    if let Some(v) = f.allow_task_credentials {
        cfg.allow_task_credentials = v;
    }
    if let Some(d) = f.default_cluster {
        cfg.default_cluster = d;
    }
    match (f.tls_cert_file, f.tls_key_file) {
        (Some(cert), Some(key)) => cfg.server_tls = Some(super::ServerTlsFiles { cert, key }),
        (None, None) => {}
        (Some(_), None) => {
            return Err(bad(
                "tls_key_file",
                "needed with `tls_cert_file`: the certificate's private key (PEM)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(bad(
                "tls_cert_file",
                "needed with `tls_key_file`: the certificate chain it belongs to (PEM)".into(),
            ));
        }
    }
    for (name, c) in f.clusters {
        let cerr = |problem: String| ConfigError::Cluster {
            path: path.to_path_buf(),
            cluster: name.clone(),
            problem,
        };
        // Config-file errors carry the key instead of an env var name.
        let wrap = |e: ConfigError| cerr(e.to_string());
        let timeout = |key: &str, v: Option<&str>| {
            v.map(|v| match parse_duration(v) {
                Ok(d) if !d.is_zero() => Ok(d),
                Ok(_) => Err(cerr(format!("`{key}`: must be above zero, e.g. 3s"))),
                Err(p) => Err(cerr(format!("`{key}`: {p}"))),
            })
            .transpose()
        };
        if c.jwt_file.is_some() && c.jwt_key_file.is_some() {
            return Err(cerr("set only one of `jwt_file` and `jwt_key_file`".into()));
        }
        let auth = match (c.jwt_file, c.jwt_key_file) {
            (Some(p), None) => Some(AuthConfig::TokenFile(p)),
            (None, Some(p)) => {
                if c.username.is_none() {
                    return Err(cerr(
                        "`jwt_key_file` mints tokens for a user: set `username`".into(),
                    ));
                }
                let lifetime = match &c.jwt_lifetime {
                    Some(v) => {
                        parse_duration(v).map_err(|p| cerr(format!("`jwt_lifetime`: {p}")))?
                    }
                    None => DEFAULT_TOKEN_LIFETIME,
                };
                Some(AuthConfig::KeyFile { path: p, lifetime })
            }
            _ => None,
        };
        let slurm_daemon_user = c
            .slurm_daemon_user
            .clone()
            .unwrap_or_else(|| super::DEFAULT_SLURM_DAEMON_USER.to_string());
        let mut identities =
            super::identity::build(c.identities, c.identity_default, &slurm_daemon_user)
                .map_err(cerr)?;
        identities.user_jwt_dir = c.user_jwt_dir.clone();
        if c.user_jwt_dir.is_some() && auth.is_none() {
            return Err(cerr(
                "`user_jwt_dir` holds the users' tokens, but the connector polls every user's \
                 jobs with its own: set `jwt_file` or `jwt_key_file` too"
                    .into(),
            ));
        }
        let mut mounts = Vec::new();
        for (remote, local) in c.shared_mounts {
            // The same rules as FLYTE_SLURM_SHARED_MOUNTS and the stager's roots.
            let m = super::units::check_mount(&remote, &local.to_string_lossy())
                .map_err(|e| {
                    cerr(format!(
                        "`shared_mounts`: `{remote}` = {local:?}: {e}, e.g. \"/shared\" = \"/mnt/shared\""
                    ))
                })?;
            mounts.push((m.cluster_prefix.display().to_string(), m.local_path));
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
        let cluster = ClusterConfig {
            name: name.clone(),
            restd_url: parse_url("restd_url", &c.restd_url).map_err(wrap)?,
            api_version: match &c.api_version {
                Some(v) => check_api_version("api_version", v).map_err(wrap)?,
                None => None,
            },
            username: c.username,
            auth,
            working_dir: c
                .working_dir
                .as_deref()
                .map(|w| check_abs("working_dir", w))
                .transpose()
                .map_err(wrap)?,
            shared_mounts: mounts,
            default_partition: c.default_partition,
            ssh_hosts: c.ssh_hosts,
            stager_url: c
                .stager_url
                .as_deref()
                .map(|u| parse_url("stager_url", u))
                .transpose()
                .map_err(wrap)?,
            stager_token_file: c.stager_token_file,
            identities,
            ca_file: c.ca_file,
            images: super::images::ImageMap::from_file("images", c.images).map_err(cerr)?,
            connect_timeout: timeout("connect_timeout", c.connect_timeout.as_deref())?
                .unwrap_or(super::DEFAULT_CONNECT_TIMEOUT),
            request_timeout: timeout("request_timeout", c.request_timeout.as_deref())?
                .unwrap_or(super::DEFAULT_REQUEST_TIMEOUT),
        };
        cfg.clusters.insert(name, cluster);
    }
    Ok(cfg)
}
