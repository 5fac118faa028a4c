//! Which API version a cluster is spoken to in: negotiated at start and again after slurmrestd
//! went away or stopped serving the chosen version (it may come back upgraded).

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Client;
use crate::ApiVersion;
use crate::caller::is_unknown_path;
use crate::dialect::Dialect;
use crate::error::ClientError;
use crate::transport;
use crate::types::ServerInfo;

/// What negotiation found on a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The version every call now uses.
    pub version: ApiVersion,
    /// Of the versions this connector speaks, those the cluster serves, oldest first.
    pub served: Vec<ApiVersion>,
    /// True when the deployment pinned `version`; false when it was the newest in common.
    pub pinned: bool,
    /// The Slurm that answered (release, cluster name), from the probe of `version`.
    pub server: ServerInfo,
}

impl Negotiated {
    /// Why this version, in one line (for `check` and the start-up log).
    pub fn reason(&self) -> String {
        let served = self
            .served
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if self.pinned {
            format!("pinned by api_version; the cluster serves {served}")
        } else {
            format!("the newest of {served} (served by the cluster) that this connector speaks")
        }
    }
}

/// The version in use and whether it must be looked for again.
pub(super) struct VersionState {
    pub(super) chosen: RwLock<Option<ApiVersion>>,
    /// Every version of ours the cluster served at the last negotiation, oldest first: a job
    /// the chosen one cannot express may go through another (`JobDescription::submit_version`).
    pub(super) served: RwLock<Vec<ApiVersion>>,
    /// Set when slurmrestd was unreachable or stopped serving the chosen version's paths: it may
    /// come back upgraded, so the next call negotiates again.
    pub(super) stale: AtomicBool,
    /// One negotiation at a time; calls that arrive meanwhile wait for its answer.
    pub(super) negotiating: tokio::sync::Mutex<()>,
}

impl Client {
    /// Finds which of our versions the cluster serves and chooses one: the pinned one if it is
    /// served, else the newest. Every call negotiates first when nothing is chosen yet (or after
    /// slurmrestd was unreachable); `serve` and `check` call this at start to fail early.
    ///
    /// The probe is `GET /slurm/<v>/ping/` of each version, all at once: slurmrestd answers a
    /// version it does not serve with a text/plain 404 (its wording differs per release) without
    /// a slurmctld round trip or a token check beyond "one is present" (a request without any
    /// token gets 401 first; ours always carry one), and ping is the cheapest path every version
    /// has. (`/openapi/v3` would list the versions too, but it needs a valid token and is ~2 MB.)
    pub async fn negotiate(&self) -> Result<Negotiated, ClientError> {
        let _one = self.version.negotiating.lock().await;
        let probes = futures::future::join_all(
            self.dialects
                .all()
                .map(|d| async move { (d.version(), d.probe(self.caller()).await) }),
        )
        .await;
        let mut served = Vec::new();
        let mut servers = Vec::new();
        for (v, answer) in probes {
            match answer {
                Ok(server) => {
                    served.push(v);
                    servers.push((v, server));
                }
                Err(e) if is_unknown_path(&e) => {}
                // Unreachable, timed out, a proxy's 502: nothing can be concluded. The previous
                // choice (if any) stays, and the next call tries again.
                Err(e) => return Err(e),
            }
        }
        let chosen = match self.cfg.api_version {
            Some(pinned) if served.contains(&pinned) => pinned,
            Some(pinned) => {
                return Err(ClientError::VersionNotServed {
                    cluster: self.cfg.cluster.clone(),
                    pinned,
                    served,
                });
            }
            None => match served.last() {
                Some(v) => *v,
                None => {
                    return Err(ClientError::NoCommonVersion {
                        cluster: self.cfg.cluster.clone(),
                        others: self.foreign_versions().await,
                    });
                }
            },
        };
        let server = servers
            .into_iter()
            .find(|(v, _)| *v == chosen)
            .map(|(_, s)| s)
            .unwrap_or_default();
        let before = self
            .version
            .chosen
            .write()
            .expect("version lock")
            .replace(chosen);
        *self.version.served.write().expect("version lock") = served.clone();
        self.version.stale.store(false, Ordering::Relaxed);
        if before != Some(chosen) {
            tracing::info!(
                cluster = %self.cfg.cluster,
                api_version = %chosen,
                previous = ?before.map(|v| v.as_str()),
                release = ?server.release,
                "slurmrestd API version chosen"
            );
        }
        Ok(Negotiated {
            version: chosen,
            served,
            pinned: self.cfg.api_version.is_some(),
            server,
        })
    }

    /// Versions just outside ours that the cluster answers, only to say so when none of ours is
    /// served (plain GETs: no generated client exists for them).
    async fn foreign_versions(&self) -> Vec<String> {
        let Ok(token) = self.tokens.token() else {
            return Vec::new();
        };
        let base = self.cfg.base_url.as_str().trim_end_matches('/');
        let mut found = Vec::new();
        for v in [
            "v0.0.37", "v0.0.38", "v0.0.39", "v0.0.47", "v0.0.48", "v0.0.49",
        ] {
            let mut req = self
                .http
                .get(format!("{base}/slurm/{v}/ping/"))
                .header(transport::TOKEN_HEADER, token.expose());
            if let Some(u) = &self.cfg.user_name {
                req = req.header(transport::USER_HEADER, u);
            }
            if let Ok(resp) = req.send().await
                && resp.status().is_success()
            {
                found.push(v.to_string());
            }
        }
        found
    }

    /// The version calls use, negotiated first when none is chosen yet.
    pub async fn version(&self) -> Result<ApiVersion, ClientError> {
        Ok(self.current().await?.version())
    }

    /// The dialect to call with: the chosen version's, negotiated first when there is none or
    /// the last call found slurmrestd unreachable.
    pub(super) async fn current(&self) -> Result<&dyn Dialect, ClientError> {
        let chosen = self.api_version();
        let v = match chosen {
            Some(v) if !self.version.stale.load(Ordering::Relaxed) => v,
            Some(v) => match self.negotiate().await {
                Ok(n) => n.version,
                // Still unreachable: keep the old choice; the call itself will say what is wrong.
                Err(e) if e.is_transient() => v,
                Err(e) => return Err(e),
            },
            None => self.negotiate().await?.version,
        };
        Ok(self.dialects.get(v))
    }
}
