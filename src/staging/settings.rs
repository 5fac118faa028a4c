//! Which staging backend this deployment uses, from the connector's environment:
//! `FLYTE_SLURM_STAGER_URL` (+ `FLYTE_SLURM_STAGER_TOKEN_FILE`) selects the sidecar, otherwise
//! `FLYTE_SLURM_SHARED_MOUNTS` the local mount. Neither: no staging (outputs and logs fail with a
//! message saying what to configure).

use std::path::PathBuf;
use std::sync::Arc;

use super::backend::Staging;
use super::confine::{Mount, Roots, SHARED_MOUNTS_VAR};
use super::error::{Result, StagingError};
use super::local::LocalStaging;
use super::stager::client::SidecarStaging;
use super::stager::{STAGER_TOKEN_FILE_VAR, STAGER_URL_VAR};

#[derive(Debug, Clone)]
pub enum StagingSettings {
    Local(Roots),
    Sidecar { url: String, token_file: PathBuf },
}

impl StagingSettings {
    /// From any variable lookup (tests pass a map; the service passes `std::env::var`).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let url = get(STAGER_URL_VAR).filter(|v| !v.trim().is_empty());
        if let Some(url) = url {
            let token_file = get(STAGER_TOKEN_FILE_VAR)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| StagingError::Config {
                    var: STAGER_TOKEN_FILE_VAR,
                    message: format!(
                        "{STAGER_URL_VAR} is set, so the stager's bearer token file is needed too"
                    ),
                })?;
            return Ok(Some(StagingSettings::Sidecar {
                url: url.trim().to_string(),
                token_file: PathBuf::from(token_file.trim()),
            }));
        }
        match get(SHARED_MOUNTS_VAR).filter(|v| !v.trim().is_empty()) {
            Some(spec) => Ok(Some(StagingSettings::Local(Roots::parse(&spec)?))),
            None => Ok(None),
        }
    }

    /// From a configured cluster (`crate::config`): the stager wins over mounts, as in the env.
    pub fn from_cluster(c: &crate::config::ClusterConfig) -> Result<Option<Self>> {
        if let Some(url) = &c.stager_url {
            let token_file = c.stager_token_file.clone().ok_or_else(|| StagingError::Config {
                var: STAGER_TOKEN_FILE_VAR,
                message: format!(
                    "cluster {:?} has a stager URL, so the stager's bearer token file is needed too",
                    c.name
                ),
            })?;
            return Ok(Some(StagingSettings::Sidecar {
                url: url.to_string(),
                token_file,
            }));
        }
        if c.shared_mounts.is_empty() {
            return Ok(None);
        }
        let mounts = c
            .shared_mounts
            .iter()
            .map(|(cluster, local)| Mount {
                cluster_prefix: PathBuf::from(cluster),
                local_path: local.clone(),
            })
            .collect();
        Ok(Some(StagingSettings::Local(Roots::new(mounts)?)))
    }

    pub fn from_env() -> Result<Option<Self>> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The backend (the sidecar's token is read now, so a bad file fails at startup).
    pub fn build(&self) -> Result<Arc<dyn Staging>> {
        Ok(match self {
            StagingSettings::Local(roots) => Arc::new(LocalStaging::new(roots.clone())),
            StagingSettings::Sidecar { url, token_file } => {
                Arc::new(SidecarStaging::new(url, token_file)?)
            }
        })
    }
}

/// The message for when a job needs staging and none is configured.
pub fn not_configured() -> StagingError {
    StagingError::Config {
        var: SHARED_MOUNTS_VAR,
        message: format!(
            "no access to the cluster's shared filesystem: set {SHARED_MOUNTS_VAR} (cluster_prefix=local_path) \
             or {STAGER_URL_VAR} + {STAGER_TOKEN_FILE_VAR}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn selects_backend() {
        assert!(StagingSettings::from_lookup(lookup(&[])).unwrap().is_none());
        assert!(matches!(
            StagingSettings::from_lookup(lookup(&[(SHARED_MOUNTS_VAR, "/s=/mnt/s")])).unwrap(),
            Some(StagingSettings::Local(_))
        ));
        assert!(matches!(
            StagingSettings::from_lookup(lookup(&[
                (SHARED_MOUNTS_VAR, "/s=/mnt/s"),
                (STAGER_URL_VAR, "http://127.0.0.1:9"),
                (STAGER_TOKEN_FILE_VAR, "/t"),
            ]))
            .unwrap(),
            Some(StagingSettings::Sidecar { .. })
        ));
        let e = StagingSettings::from_lookup(lookup(&[(STAGER_URL_VAR, "http://x")])).unwrap_err();
        assert!(e.to_string().starts_with(STAGER_TOKEN_FILE_VAR), "{e}");
    }

    #[test]
    fn from_deployment_config() {
        use crate::config::DeploymentConfig;
        let cfg = DeploymentConfig::load_with(
            &lookup(&[
                ("FLYTE_SLURM_RESTD_URL", "http://restd:6820"),
                (
                    SHARED_MOUNTS_VAR,
                    "/shared=/mnt/shared,/shared/jobs=/mnt/jobs",
                ),
            ]),
            None,
        )
        .unwrap();
        let c = cfg.clusters.values().next().unwrap();
        let Some(StagingSettings::Local(roots)) = StagingSettings::from_cluster(c).unwrap() else {
            panic!("expected local staging")
        };
        assert_eq!(
            roots.map("/shared/jobs/x").unwrap().local,
            PathBuf::from("/mnt/jobs/x")
        );
        let cfg = DeploymentConfig::load_with(
            &lookup(&[
                ("FLYTE_SLURM_RESTD_URL", "http://restd:6820"),
                (STAGER_URL_VAR, "http://stager:7070"),
                (STAGER_TOKEN_FILE_VAR, "/run/secrets/stager"),
            ]),
            None,
        )
        .unwrap();
        let c = cfg.clusters.values().next().unwrap();
        assert!(matches!(
            StagingSettings::from_cluster(c).unwrap(),
            Some(StagingSettings::Sidecar { .. })
        ));
    }
}
