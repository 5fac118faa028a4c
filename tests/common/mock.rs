//! An in-process mock-slurmrestd that really runs the batch scripts, and the deployment that
//! points the connector at it: the one mock cluster of the service tests, the drills and the
//! benches.

use std::path::PathBuf;
use std::time::Duration;

use mock_slurmrestd::{FaultConfig, MockConfig, MockHandle, MockServer};
use slurm_connector::config::{AuthConfig, ClusterConfig, DeploymentConfig, Secret};

/// The mock's JWT signing key (what `key_file` writes).
pub const KEY: &[u8] = b"mock-cluster-test-key-0123456789abcdef";

pub struct Mock {
    pub handle: MockHandle,
    /// This mock's own folder: `jobs/` (the jobs' working directory) and `state/` (the mock's).
    pub dir: PathBuf,
}

impl Mock {
    /// What a mock is unless a test says otherwise: 4 nodes × 64 CPUs (room for 256 one-CPU
    /// tasks), jobs aging out after 10 min, a cancelled job killed 200 ms after SIGTERM.
    pub fn config() -> MockConfig {
        MockConfig {
            nodes: 4,
            cpus: 64,
            min_job_age: Duration::from_secs(600),
            kill_wait: Duration::from_millis(200),
            ..MockConfig::default()
        }
    }

    /// [`Mock::config`] with the given MinJobAge and faults.
    pub async fn start(tag: &str, min_job_age: Duration, faults: FaultConfig) -> Mock {
        Mock::start_with(
            tag,
            MockConfig {
                min_job_age,
                faults,
                ..Mock::config()
            },
        )
        .await
    }

    /// A mock with `cfg`, signing with [`KEY`] and keeping its state in its own folder (unique per
    /// process and call, so tests of one binary never share one).
    pub async fn start_with(tag: &str, cfg: MockConfig) -> Mock {
        let dir = super::fresh_dir(&format!("mock-{tag}"));
        std::fs::create_dir_all(dir.join("jobs")).unwrap();
        let cfg = MockConfig {
            jwt_key: KEY.to_vec(),
            state_dir: Some(dir.join("state")),
            ..cfg
        };
        let handle = MockServer::start(cfg, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        Mock { handle, dir }
    }

    /// The jobs' working directory (the same path for the mock's jobs and this process).
    pub fn jobs(&self) -> PathBuf {
        self.dir.join("jobs")
    }

    pub fn key_file(&self) -> PathBuf {
        let p = self.dir.join("jwt.key");
        std::fs::write(&p, KEY).unwrap();
        p
    }

    /// The cluster as the connector sees it, with the given credentials.
    pub fn cluster(&self, auth: AuthConfig, username: Option<&str>) -> ClusterConfig {
        ClusterConfig {
            username: username.map(str::to_string),
            auth: Some(auth),
            working_dir: Some(self.jobs().display().to_string()),
            ..ClusterConfig::new("mock", url::Url::parse(&self.handle.url()).unwrap())
        }
    }

    /// A token for user `flyte`, valid for an hour.
    pub fn token(&self) -> String {
        self.handle.mint_token("flyte", Duration::from_secs(3600))
    }

    /// A long-lived static token (tests that are not about tokens).
    pub fn static_auth(&self) -> AuthConfig {
        AuthConfig::Token(Secret::new(self.token()))
    }

    /// The usual deployment: this cluster with a static token, polled every `poll`.
    pub fn deployment(&self, poll: Duration) -> DeploymentConfig {
        deployment(self.cluster(self.static_auth(), None), poll)
    }

    pub async fn stop(self) {
        self.handle.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A deployment of the one cluster `c` (its default), polled every `poll`.
pub fn deployment(c: ClusterConfig, poll: Duration) -> DeploymentConfig {
    let mut d = DeploymentConfig::empty();
    d.poll_interval = poll;
    d.default_cluster = c.name.clone();
    d.clusters.insert(c.name.clone(), c);
    d
}
