//! The embedded default of `serve`: with no cluster configured, the connector runs against an
//! in-process mock-slurmrestd that really runs batch jobs, with job files and outputs under one
//! local data directory — so a newcomer can watch a task go through every stage on a laptop.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mock_slurmrestd::{MockConfig, MockHandle, MockServer};

use crate::config::{AuthConfig, ClusterConfig, DeploymentConfig};

/// The user the embedded cluster's jobs are submitted as (the stand-in runs them as the
/// connector's own OS user).
pub const EMBEDDED_USER: &str = "flyte";
pub const EMBEDDED_CLUSTER: &str = "embedded";

/// `$FLYTE_SLURM_DATA_DIR`, else `$XDG_DATA_HOME/slurm-connector`, else
/// `~/.local/share/slurm-connector`, else a folder under the temp dir.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FLYTE_SLURM_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("slurm-connector");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".local/share/slurm-connector");
    }
    std::env::temp_dir().join("slurm-connector")
}

/// Where the embedded default's pieces live.
#[derive(Debug, Clone)]
pub struct EmbeddedLayout {
    pub data_dir: PathBuf,
    /// The "shared filesystem": job scripts, logs and outputs.
    pub shared: PathBuf,
    /// The working directory for job files (under `shared`).
    pub jobs: PathBuf,
    /// The local object store, as a `file://` prefix for task outputs.
    pub objects: PathBuf,
    pub key_file: PathBuf,
    pub mock_state: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "cannot prepare the data directory {path}: {source}; set FLYTE_SLURM_DATA_DIR to a writable folder"
    )]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the embedded slurmrestd stand-in: {0}")]
    Mock(String),
}

impl EmbeddedLayout {
    pub fn new(data_dir: &Path) -> EmbeddedLayout {
        let shared = data_dir.join("shared");
        EmbeddedLayout {
            data_dir: data_dir.to_path_buf(),
            jobs: shared.join("jobs"),
            shared,
            objects: data_dir.join("objects"),
            key_file: data_dir.join("jwt_hs256.key"),
            mock_state: data_dir.join("mock-state"),
        }
    }

    fn create(&self) -> Result<(), EmbeddedError> {
        for dir in [
            &self.data_dir,
            &self.shared,
            &self.jobs,
            &self.objects,
            &self.mock_state,
        ] {
            std::fs::create_dir_all(dir).map_err(|source| EmbeddedError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// The HS256 key, made once (32 random bytes, mode 0600) and reused across restarts. (The
    /// stand-in's state folder keeps only its next job id, so ids are never reused; the jobs of a
    /// previous run are gone, as on a real cluster after they age out without accounting.)
    fn key(&self) -> Result<Vec<u8>, EmbeddedError> {
        let io = |source| EmbeddedError::Io {
            path: self.key_file.clone(),
            source,
        };
        match std::fs::read(&self.key_file) {
            Ok(k) if !k.is_empty() => return Ok(k),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let key: [u8; 32] = rand::random();
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&self.key_file).map_err(io)?;
        f.write_all(&key).map_err(io)?;
        Ok(key.to_vec())
    }

    /// A `file://` output prefix under the local object store, for a run.
    pub fn output_prefix(&self, run: &str) -> String {
        format!("file://{}/{run}", self.objects.display())
    }
}

/// The embedded cluster as the connector sees it, given where its stand-in listens.
pub fn cluster_config(layout: &EmbeddedLayout, restd_url: url::Url) -> ClusterConfig {
    let shared = layout.shared.display().to_string();
    ClusterConfig {
        username: Some(EMBEDDED_USER.into()),
        auth: Some(AuthConfig::KeyFile {
            path: layout.key_file.clone(),
            lifetime: crate::config::DEFAULT_TOKEN_LIFETIME,
        }),
        working_dir: Some(layout.jobs.display().to_string()),
        // The stand-in runs jobs on this machine: cluster paths are local paths.
        shared_mounts: vec![(shared, layout.shared.clone())],
        default_partition: Some("debug".into()),
        ..ClusterConfig::new(EMBEDDED_CLUSTER, restd_url)
    }
}

/// The running stand-in plus the deployment config that points the connector at it.
pub struct Embedded {
    pub mock: MockHandle,
    pub config: DeploymentConfig,
    pub layout: EmbeddedLayout,
}

/// Start the stand-in and describe it as the connector's one cluster.
pub async fn start(data_dir: &Path, base: DeploymentConfig) -> Result<Embedded, EmbeddedError> {
    let layout = EmbeddedLayout::new(data_dir);
    layout.create()?;
    let cfg = MockConfig {
        jwt_key: layout.key()?,
        cluster_name: EMBEDDED_CLUSTER.into(),
        state_dir: Some(layout.mock_state.clone()),
        // Finished jobs stay queryable for 5 minutes, then move to the accounting view.
        min_job_age: Duration::from_secs(300),
        ..MockConfig::default()
    };
    let mock = MockServer::start(cfg, "127.0.0.1:0".parse().expect("a loopback address"))
        .await
        .map_err(|e| EmbeddedError::Mock(e.to_string()))?;
    let url = mock
        .url()
        .parse()
        .map_err(|e: url::ParseError| EmbeddedError::Mock(e.to_string()))?;
    let cluster = cluster_config(&layout, url);
    let mut config = base;
    config.clusters.insert(EMBEDDED_CLUSTER.into(), cluster);
    config.default_cluster = EMBEDDED_CLUSTER.into();
    config.embedded = true;
    Ok(Embedded {
        mock,
        config,
        layout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn embedded_default_runs_a_mock_and_keeps_its_key() {
        let dir = std::env::temp_dir().join(format!("sc-embedded-{}", std::process::id()));
        let e = start(&dir, DeploymentConfig::empty()).await.unwrap();
        let key = std::fs::read(&e.layout.key_file).unwrap();
        assert_eq!(key.len(), 32);
        let c = &e.config.clusters[EMBEDDED_CLUSTER];
        assert!(c.restd_url.as_str().starts_with("http://127.0.0.1:"));
        assert!(e.layout.jobs.is_dir() && e.layout.objects.is_dir());
        e.mock.shutdown().await;
        // A second start reuses the key.
        let again = start(&dir, DeploymentConfig::empty()).await.unwrap();
        assert_eq!(std::fs::read(&again.layout.key_file).unwrap(), key);
        again.mock.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
