//! A cluster's slurmrestd clients: the deployment's (calls, and submits with their long request
//! timeout), a task's own token's, and one pair per Slurm user of the identity rules, made once
//! so each user's minted token is cached and renewed like the deployment's.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::config::{AuthConfig, ClusterConfig, Secret};
use crate::slurmrestd::{Auth, Client};

use super::SUBMIT_REQUEST_TIMEOUT;

pub struct Clients {
    /// The deployment's client.
    calls: Client,
    /// The deployment's client with [`SUBMIT_REQUEST_TIMEOUT`].
    submits: Client,
    /// Clients acting as each Slurm user of the identity rules: (calls, submits).
    users: Mutex<HashMap<String, (Client, Client)>>,
}

impl Clients {
    pub fn new(calls: Client) -> Clients {
        // Fails only where a client could not be built at all, which `calls` was.
        let submits = calls
            .with_request_timeout(SUBMIT_REQUEST_TIMEOUT)
            .unwrap_or_else(|_| calls.clone());
        Clients {
            calls,
            submits,
            users: Mutex::new(HashMap::new()),
        }
    }

    /// The deployment's client.
    pub fn calls(&self) -> &Client {
        &self.calls
    }

    /// The deployment's client with the submit's long request timeout.
    pub fn submits(&self) -> &Client {
        &self.submits
    }

    /// (calls, submits) acting as Slurm user `user` (`None`, or the deployment's own user: the
    /// deployment's). With the key file it mints `user`'s tokens; with `user_jwt_dir` it reads
    /// `<dir>/<user>`; with a token (file) it proxies `user` with `X-SLURM-USER-NAME`, which
    /// needs a SlurmUser or root token.
    pub fn of_user(&self, cfg: &ClusterConfig, user: Option<&str>) -> (Client, Client) {
        let user = match user {
            Some(u) if Some(u) != cfg.username.as_deref() => u,
            _ => return (self.calls.clone(), self.submits.clone()),
        };
        let mut users = self.users.lock().unwrap();
        users
            .entry(user.to_string())
            .or_insert_with(|| {
                let auth = match (&cfg.identities.user_jwt_dir, &cfg.auth) {
                    (Some(dir), _) => Some(Auth::File {
                        path: dir.join(user),
                    }),
                    (None, Some(AuthConfig::KeyFile { path, lifetime })) => Some(Auth::Minted {
                        key_file: path.clone(),
                        token_user: user.to_string(),
                        lifetime: *lifetime,
                    }),
                    (None, _) => None,
                };
                let calls = self.calls.as_user(user, auth);
                let submits = self.submits.with_identity_of(&calls);
                (calls, submits)
            })
            .clone()
    }

    /// (calls, submits) with the task's own token, or the deployment's.
    pub fn of_task(&self, task_token: Option<&Secret>) -> (Client, Client) {
        match task_token {
            None => (self.calls.clone(), self.submits.clone()),
            // Shares the cluster client's negotiated API version and connection pool.
            Some(t) => (
                self.calls.with_auth(Auth::Task { token: t.clone() }),
                self.submits.with_auth(Auth::Task { token: t.clone() }),
            ),
        }
    }
}
