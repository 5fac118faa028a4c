//! `slurm-connector stager`: the staging sidecar. It runs where the cluster's shared filesystem
//! is mounted (in the connector's pod, or on a data-transfer node), exposes the staging
//! operations over HTTP under confined roots, and uploads outputs itself so the bytes travel once.
//! Every request but `/healthz` needs `Authorization: Bearer <token>`, the token read from a file.

pub mod client;
pub mod server;
pub mod wire;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::confine::Roots;
use super::error::{Result, StagingError};

pub const STAGER_URL_VAR: &str = "FLYTE_SLURM_STAGER_URL";
pub const STAGER_TOKEN_FILE_VAR: &str = "FLYTE_SLURM_STAGER_TOKEN_FILE";

#[derive(Debug, Clone)]
pub struct StagerOptions {
    pub listen: SocketAddr,
    /// What the stager may touch; cluster paths map to its local view (see [`Roots::parse`]).
    pub roots: Roots,
    pub token_file: PathBuf,
}

/// A bearer token. Its Debug output is redacted; it is never logged or put in an error.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// Read from a file; surrounding whitespace (the usual trailing newline) is dropped.
    pub fn from_file(path: &Path) -> Result<Self> {
        let raw = std::fs::read_to_string(path).map_err(|e| StagingError::Config {
            var: STAGER_TOKEN_FILE_VAR,
            message: format!("cannot read the stager token file {}: {e}", path.display()),
        })?;
        let t = raw.trim();
        if t.is_empty() {
            return Err(StagingError::Config {
                var: STAGER_TOKEN_FILE_VAR,
                message: format!("the stager token file {} is empty", path.display()),
            });
        }
        if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(StagingError::Config {
                var: STAGER_TOKEN_FILE_VAR,
                message: format!(
                    "the stager token in {} contains whitespace; use one line of printable characters",
                    path.display()
                ),
            });
        }
        Ok(Token(t.to_string()))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison (in the token's length), so response timing does not leak
    /// how much of a guessed token was right.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let mine = self.0.as_bytes();
        if presented.len() != mine.len() {
            return false;
        }
        let diff = mine
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

/// A stager bound to its address, not yet serving (tests bind port 0 and read the address).
pub struct BoundStager {
    listener: tokio::net::TcpListener,
    router: axum::Router,
}

impl BoundStager {
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serve until the task is dropped or the process gets Ctrl-C / SIGINT.
    pub async fn run(self) -> Result<()> {
        let addr = self.local_addr();
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| StagingError::io("serve on", addr.to_string(), e))
    }
}

/// Read the token, check the roots exist, bind.
pub async fn bind(opts: StagerOptions) -> Result<BoundStager> {
    let token = Token::from_file(&opts.token_file)?;
    for m in opts.roots.mounts() {
        if !m.local_path.is_dir() {
            return Err(StagingError::Config {
                var: super::confine::SHARED_MOUNTS_VAR,
                message: format!(
                    "stager root {} (for {}) is not a directory here",
                    m.local_path.display(),
                    m.cluster_prefix.display()
                ),
            });
        }
    }
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| StagingError::io("bind", opts.listen.to_string(), e))?;
    let router = server::router(opts.roots.clone(), token);
    let bound = BoundStager { listener, router };
    tracing::info!(listen = %bound.local_addr(), roots = %opts.roots.describe(), "stager listening");
    Ok(bound)
}

/// The `slurm-connector stager` subcommand: bind and serve.
pub async fn serve(opts: StagerOptions) -> Result<()> {
    bind(opts).await?.run().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare_and_redaction() {
        let t = Token("s3cret-token".into());
        assert!(t.matches(b"s3cret-token"));
        assert!(!t.matches(b"s3cret-tokeN"));
        assert!(!t.matches(b"s3cret"));
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
