//! Which staging backend a cluster uses, from its typed configuration (`config::ClusterConfig`):
//! a stager URL (+ token file) selects the sidecar, otherwise shared mounts the local mount.
//! Neither: no staging (outputs and logs fail with a message saying what to configure).

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
    /// From a configured cluster (`crate::config`, which parsed the environment and the file):
    /// the stager wins over mounts.
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
    use crate::config::{ConfigError, DeploymentConfig};
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn load(pairs: &[(&str, &str)]) -> std::result::Result<DeploymentConfig, ConfigError> {
        DeploymentConfig::load_with(&lookup(pairs), None)
    }

    /// The backend of the environment's one cluster.
    fn settings(pairs: &[(&str, &str)]) -> Result<Option<StagingSettings>> {
        let mut all = vec![("FLYTE_SLURM_RESTD_URL", "http://restd:6820")];
        all.extend_from_slice(pairs);
        let cfg = load(&all).unwrap();
        StagingSettings::from_cluster(cfg.clusters.values().next().unwrap())
    }

    #[test]
    fn selects_backend() {
        assert!(settings(&[]).unwrap().is_none());
        assert!(matches!(
            settings(&[(SHARED_MOUNTS_VAR, "/s=/mnt/s")]).unwrap(),
            Some(StagingSettings::Local(_))
        ));
        assert!(matches!(
            settings(&[
                (SHARED_MOUNTS_VAR, "/s=/mnt/s"),
                (STAGER_URL_VAR, "http://127.0.0.1:9"),
                (STAGER_TOKEN_FILE_VAR, "/t"),
            ])
            .unwrap(),
            Some(StagingSettings::Sidecar { .. })
        ));
        let e = settings(&[(STAGER_URL_VAR, "http://x")]).unwrap_err();
        assert!(e.to_string().starts_with(STAGER_TOKEN_FILE_VAR), "{e}");
    }

    #[test]
    fn mounts_map_longest_prefix_first() {
        let Some(StagingSettings::Local(roots)) = settings(&[(
            SHARED_MOUNTS_VAR,
            "/shared=/mnt/shared,/shared/jobs=/mnt/jobs",
        )])
        .unwrap() else {
            panic!("expected local staging")
        };
        assert_eq!(
            roots.map("/shared/jobs/x").unwrap().local,
            PathBuf::from("/mnt/jobs/x")
        );
    }

    #[test]
    fn shared_mounts_parse_as_the_stager_parses_them() {
        // A bare path (the same on both sides) is accepted by the connector as by the stager.
        let spec = "/shared=/mnt/shared,/scratch";
        let c = load(&[
            ("FLYTE_SLURM_RESTD_URL", "http://restd:6820"),
            ("FLYTE_SLURM_SHARED_MOUNTS", spec),
        ])
        .unwrap();
        let d = c.select_cluster(None, None).unwrap();
        assert!(
            d.shared_mounts
                .contains(&("/scratch".to_string(), "/scratch".into()))
        );
        let roots = Roots::parse(spec).unwrap();
        for (cluster, local) in &d.shared_mounts {
            assert_eq!(
                &roots.map(&format!("{cluster}/x")).unwrap().local,
                &local.join("x")
            );
        }
        // The same refusals, naming the variable and the fix, in both.
        for bad in ["shared=/mnt", "/a=../b", "/a="] {
            let e = load(&[
                ("FLYTE_SLURM_RESTD_URL", "http://restd:6820"),
                ("FLYTE_SLURM_SHARED_MOUNTS", bad),
            ])
            .unwrap_err()
            .to_string();
            assert!(e.starts_with("FLYTE_SLURM_SHARED_MOUNTS="), "{bad:?}: {e}");
            assert!(e.contains("cluster_prefix=local_path"), "{bad:?}: {e}");
            let s = Roots::parse(bad).unwrap_err().to_string();
            assert!(s.starts_with("FLYTE_SLURM_SHARED_MOUNTS"), "{bad:?}: {s}");
            assert!(s.contains("cluster_prefix=local_path"), "{bad:?}: {s}");
        }
    }
}
