//! What a `Client` is made from: one cluster's slurmrestd, credentials and limits.
//! Apart from the client so that the error classification (`classify.rs`), which names the
//! cluster, user and URL in its errors, reads it without importing the client.

use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::ApiVersion;
use crate::auth::Auth;
use crate::exchange::Exchange;
use crate::retry::RetryPolicy;

/// Default number of ids per `jobs/state` request: ~16 bytes each keeps the URL near 6 KiB,
/// under the 8 KiB many proxies allow.
pub const DEFAULT_STATE_CHUNK: usize = 400;

/// Observes every HTTP exchange (for metrics): its operation, API version, daemon and how it
/// ended. A request that could not be built (never sent) is not an exchange.
pub type RequestObserver = Arc<dyn Fn(&Exchange) + Send + Sync>;

#[derive(Clone)]
pub struct ClientConfig {
    /// The cluster's name, used in every error and log line.
    pub cluster: String,
    /// Where slurmrestd listens, e.g. `http://slurmrestd.hpc:6820` (no `/slurm/...` suffix).
    pub base_url: Url,
    pub auth: Auth,
    /// The data_parser version to use, when the deployment pins one; `None`: the newest that
    /// both this connector and the cluster serve, found by `Client::negotiate`.
    pub api_version: Option<ApiVersion>,
    /// `X-SLURM-USER-NAME`: the user jobs run as. With a SlurmUser/root token this proxies that
    /// user; with a user's own token it must equal the token's user (or be left out).
    pub user_name: Option<String>,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry: RetryPolicy,
    pub state_chunk: usize,
    pub observer: Option<RequestObserver>,
    /// A PEM file of CAs slurmrestd's certificate may chain to, besides the system's
    /// (`ca_file` / `FLYTE_SLURM_CA_FILE`).
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("cluster", &self.cluster)
            .field("base_url", &self.base_url.as_str())
            .field("auth", &self.auth)
            .field("api_version", &self.api_version)
            .field("user_name", &self.user_name)
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("state_chunk", &self.state_chunk)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    pub fn new(cluster: impl Into<String>, base_url: Url, auth: Auth) -> ClientConfig {
        ClientConfig {
            cluster: cluster.into(),
            base_url,
            auth,
            api_version: None,
            user_name: None,
            request_timeout: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(3),
            retry: RetryPolicy::default(),
            state_chunk: DEFAULT_STATE_CHUNK,
            observer: None,
            ca_file: None,
        }
    }
}
