//! Shared fixtures for the staging tests (`common::staging`).
//!
//! Layout of a fixture, with the cluster prefix `/cluster/shared` mapped to `<tmp>/shared`:
//! `<tmp>/outside/secret` (must never be readable), `<tmp>/shared/...` (job files), `<tmp>/store`
//! (a `file://` object store).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use slurm_connector::staging::stager::{self, StagerOptions};
use slurm_connector::staging::{LocalStaging, Roots, SidecarStaging, Staging};

pub const PREFIX: &str = "/cluster/shared";
pub const TOKEN: &str = "test-token-7f3a9c";

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = super::fresh_dir(&format!("staging-{tag}"));
        TempDir(p.canonicalize().unwrap())
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Fixture {
    pub tmp: TempDir,
}

impl Fixture {
    pub fn new(tag: &str) -> Self {
        let tmp = TempDir::new(tag);
        std::fs::create_dir_all(tmp.path().join("shared")).unwrap();
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        std::fs::create_dir_all(tmp.path().join("store")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), "TOP SECRET\n").unwrap();
        Fixture { tmp }
    }

    pub fn roots(&self) -> Roots {
        Roots::parse(&format!("{PREFIX}={}", self.shared().display())).unwrap()
    }

    /// Local path of the shared root.
    pub fn shared(&self) -> PathBuf {
        self.tmp.path().join("shared")
    }

    /// Local path for a cluster path under the prefix.
    pub fn local(&self, cluster: &str) -> PathBuf {
        self.shared().join(
            cluster
                .strip_prefix(PREFIX)
                .unwrap()
                .trim_start_matches('/'),
        )
    }

    pub fn write(&self, cluster: &str, content: impl AsRef<[u8]>) {
        let p = self.local(cluster);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn symlink(&self, target: impl AsRef<Path>, cluster_link: &str) {
        let p = self.local(cluster_link);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    pub fn store_uri(&self, rel: &str) -> String {
        format!("file://{}/store/{rel}", self.tmp.path().display())
    }

    pub fn store_path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join("store").join(rel)
    }

    pub fn local_backend(&self) -> Arc<dyn Staging> {
        Arc::new(LocalStaging::new(self.roots()))
    }

    /// A stager over the same roots on 127.0.0.1:0, and a client for it.
    pub async fn sidecar_backend(&self) -> Arc<dyn Staging> {
        self.sidecar_with_url().await.0
    }

    /// The sidecar backend and the stager's base URL.
    pub async fn sidecar_with_url(&self) -> (Arc<dyn Staging>, String) {
        let token_file = self.tmp.path().join("stager.token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let bound = stager::bind(StagerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            roots: self.roots(),
            token_file: token_file.clone(),
        })
        .await
        .unwrap();
        let url = format!("http://{}", bound.local_addr());
        tokio::spawn(bound.run());
        (
            Arc::new(SidecarStaging::new(&url, &token_file).unwrap()),
            url,
        )
    }

    /// Both backends over this fixture: `[("local", ..), ("sidecar", ..)]`.
    pub async fn backends(&self) -> Vec<(&'static str, Arc<dyn Staging>)> {
        vec![
            ("local", self.local_backend()),
            ("sidecar", self.sidecar_backend().await),
        ]
    }
}

/// Peak resident memory of this process so far (VmHWM), in KiB.
pub fn peak_rss_kib() -> u64 {
    status_kib("VmHWM")
}

/// Resident memory of this process now (VmRSS), in KiB.
#[allow(dead_code)] // staging_memory's log case reads it; other binaries include this file too
pub fn rss_kib() -> u64 {
    status_kib("VmRSS")
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}
