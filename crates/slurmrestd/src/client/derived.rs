//! Clients derived from a cluster's client: other credentials, another Slurm user, another
//! request timeout. Each shares the negotiated version (and, but for the timeout, the connection
//! pool), so acting as many users costs no negotiation and no connections per user.

use std::sync::Arc;
use std::time::Duration;

use super::Client;
use crate::auth::{Auth, TokenSource};
use crate::error::ClientError;

impl Client {
    /// The same cluster with other credentials (a task's own token): shares the negotiated
    /// version and the connection pool. No `X-SLURM-USER-NAME` is sent: the job runs as the
    /// token's own user (the deployment's user name with another user's token is refused by
    /// slurmrestd, 511 with key-file auth).
    pub fn with_auth(&self, auth: Auth) -> Client {
        let mut cfg = (*self.cfg).clone();
        cfg.auth = auth;
        cfg.user_name = None;
        Client {
            dialects: self.dialects.clone(),
            tokens: Arc::new(TokenSource::new(cfg.auth.clone())),
            version: self.version.clone(),
            cfg: Arc::new(cfg),
            http: self.http.clone(),
        }
    }

    /// The same cluster acting as Slurm user `user`: with `auth`, that user's own token (minted
    /// for it, or its file); `None`, this client's (SlurmUser/root) token proxying the user with
    /// `X-SLURM-USER-NAME`. Shares the negotiated version and the connection pool.
    pub fn as_user(&self, user: &str, auth: Option<Auth>) -> Client {
        let mut cfg = (*self.cfg).clone();
        cfg.user_name = Some(user.to_string());
        let tokens = match auth {
            Some(a) => {
                cfg.auth = a.clone();
                Arc::new(TokenSource::new(a))
            }
            None => self.tokens.clone(),
        };
        Client {
            dialects: self.dialects.clone(),
            tokens,
            version: self.version.clone(),
            cfg: Arc::new(cfg),
            http: self.http.clone(),
        }
    }

    /// This client's connection pool and timeouts with `other`'s identity (credentials, their
    /// token cache and the proxied user): a user's submit client shares its minted tokens.
    pub fn with_identity_of(&self, other: &Client) -> Client {
        let mut cfg = (*self.cfg).clone();
        cfg.auth = other.cfg.auth.clone();
        cfg.user_name = other.cfg.user_name.clone();
        Client {
            dialects: self.dialects.clone(),
            tokens: other.tokens.clone(),
            version: self.version.clone(),
            cfg: Arc::new(cfg),
            http: self.http.clone(),
        }
    }

    /// The Slurm user this client acts as (`X-SLURM-USER-NAME`), if it names one.
    pub fn user_name(&self) -> Option<&str> {
        self.cfg.user_name.as_deref()
    }

    /// The same cluster with another request timeout, on a connection pool of its own: submits
    /// that no RPC deadline bounds wait out slurmrestd's BACKOFF retries instead of giving up
    /// on a job slurmrestd then creates anyway. Shares credentials and the negotiated version.
    #[allow(clippy::result_large_err)]
    pub fn with_request_timeout(&self, timeout: Duration) -> Result<Client, ClientError> {
        let mut cfg = (*self.cfg).clone();
        cfg.request_timeout = timeout;
        let (http, dialects) =
            Self::http(&cfg, timeout).map_err(|detail| ClientError::InvalidRequest {
                cluster: cfg.cluster.clone(),
                operation: "configure",
                detail,
            })?;
        Ok(Client {
            dialects: Arc::new(dialects),
            tokens: self.tokens.clone(),
            version: self.version.clone(),
            cfg: Arc::new(cfg),
            http,
        })
    }
}
