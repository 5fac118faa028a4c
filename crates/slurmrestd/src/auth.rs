//! JWT credentials for slurmrestd: a static token, a token file re-read when it changes (secret
//! rotation), or tokens minted from the cluster's HS256 key and renewed before they expire.
//!
//! Nothing here ever prints a token or a key: [`Secret`] redacts itself in `Debug`/`Display`, and
//! errors name files and users, never contents.

use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A secret string (a JWT). Redacted in `Debug` and `Display`; read it with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where the client's JWT comes from.
#[derive(Clone)]
pub enum Auth {
    /// A token given as is (e.g. `FLYTE_SLURM_JWT`; the `SLURM_JWT=` prefix `scontrol token`
    /// prints is accepted). It cannot be renewed: once it expires, calls fail with an auth error.
    Static { token: Secret },
    /// A task's own token (the connection secret `slurm_jwt`): used as is, like `Static`, and
    /// named as the task's in errors.
    Task { token: Secret },
    /// A file holding a token (e.g. a mounted Kubernetes secret), re-read whenever it changes.
    File { path: PathBuf },
    /// Tokens minted here from the cluster's HS256 key (`AuthAltParameters=jwt_key=...`), whose
    /// raw bytes are the signing key, with claims `sun` (the token's user), `iat` and `exp`.
    Minted {
        key_file: PathBuf,
        token_user: String,
        lifetime: Duration,
    },
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Static { .. } => f.write_str("Auth::Static(<redacted>)"),
            Auth::Task { .. } => f.write_str("Auth::Task(<redacted>)"),
            Auth::File { path } => write!(f, "Auth::File({})", path.display()),
            Auth::Minted {
                key_file,
                token_user,
                lifetime,
            } => write!(
                f,
                "Auth::Minted {{ key_file: {}, token_user: {token_user}, lifetime: {lifetime:?} }}",
                key_file.display()
            ),
        }
    }
}

impl Auth {
    /// A human name for errors: which credential, never its value.
    pub fn describe(&self) -> String {
        match self {
            Auth::Static { .. } => "the static token (FLYTE_SLURM_JWT)".to_string(),
            Auth::Task { .. } => "the task's own token (connection secret `slurm_jwt`)".to_string(),
            Auth::File { path } => format!("the token file {}", path.display()),
            Auth::Minted {
                key_file,
                token_user,
                ..
            } => {
                format!(
                    "tokens for user {token_user} minted from the key {}",
                    key_file.display()
                )
            }
        }
    }

    /// Whether a rejected token can be replaced by a fresh one (minted, or a rotated file).
    pub fn can_renew(&self) -> bool {
        !matches!(self, Auth::Static { .. } | Auth::Task { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(
        "cannot read the slurmrestd token file {path}: {source}; mount the secret there or set FLYTE_SLURM_JWT"
    )]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the slurmrestd token file {path} is empty; it must hold a JWT (as `scontrol token` prints it)"
    )]
    EmptyTokenFile { path: PathBuf },
    #[error(
        "the slurmrestd token is empty; set FLYTE_SLURM_JWT to a JWT (as `scontrol token` prints it)"
    )]
    EmptyToken,
    #[error(
        "cannot read the JWT key file {path}: {source}; point FLYTE_SLURM_JWT_KEY_FILE at the cluster's jwt_hs256.key"
    )]
    KeyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the JWT key file {path} is empty; it must hold the cluster's HS256 key bytes")]
    EmptyKeyFile { path: PathBuf },
    #[error("cannot mint a token for user {user}: {detail}")]
    Mint { user: String, detail: String },
}

/// Strip what `scontrol token` prints around a token (`SLURM_JWT=...`) and surrounding space.
pub fn normalize_token(raw: &str) -> &str {
    let t = raw.trim();
    let t = t.strip_prefix("export ").unwrap_or(t).trim_start();
    t.strip_prefix("SLURM_JWT=").unwrap_or(t).trim()
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    sun: &'a str,
    iat: u64,
    exp: u64,
}

/// Mint an HS256 token over the raw bytes of `key` (what slurmctld's auth/jwt verifies).
pub fn mint_token(key: &[u8], user: &str, lifetime: Duration) -> Result<Secret, AuthError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let claims = Claims {
        sun: user,
        iat: now,
        exp: now + lifetime.as_secs().max(1),
    };
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    let mint_err = |e: jsonwebtoken::errors::Error| AuthError::Mint {
        user: user.to_string(),
        detail: e.to_string(),
    };
    let key = jsonwebtoken::EncodingKey::from_secret(key).map_err(mint_err)?;
    jsonwebtoken::encode(&header, &claims, &key)
        .map(Secret)
        .map_err(mint_err)
}

struct Cached {
    token: Secret,
    /// Minted tokens: when to mint the next one (80% of the lifetime).
    renew_at: Option<Instant>,
    /// Token files: the modification time the cached token was read at.
    file_mtime: Option<SystemTime>,
}

/// Hands out the current token, renewing it when due. Cheap to call on every request.
pub struct TokenSource {
    auth: Auth,
    cached: Mutex<Option<Cached>>,
    refreshes: AtomicU64,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    pub fn new(auth: Auth) -> TokenSource {
        TokenSource {
            auth,
            cached: Mutex::new(None),
            refreshes: AtomicU64::new(0),
        }
    }

    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// How many tokens were minted or (re-)read so far.
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }

    /// The token to send now. File reads and minting are small synchronous operations (a few
    /// hundred bytes), done at most once per renewal, so they don't need a blocking pool.
    pub fn token(&self) -> Result<Secret, AuthError> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        match &self.auth {
            Auth::Static { token } | Auth::Task { token } => {
                let t = normalize_token(token.expose());
                if t.is_empty() {
                    return Err(AuthError::EmptyToken);
                }
                Ok(Secret(t.to_string()))
            }
            Auth::File { path } => {
                let mtime =
                    std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .map_err(|source| AuthError::TokenFile {
                            path: path.clone(),
                            source,
                        })?;
                if let Some(c) = cached.as_ref()
                    && c.file_mtime == Some(mtime)
                {
                    return Ok(c.token.clone());
                }
                let raw = std::fs::read_to_string(path).map_err(|source| AuthError::TokenFile {
                    path: path.clone(),
                    source,
                })?;
                let t = normalize_token(&raw);
                if t.is_empty() {
                    return Err(AuthError::EmptyTokenFile { path: path.clone() });
                }
                let token = Secret(t.to_string());
                self.refreshes.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(path = %path.display(), "read slurmrestd token file");
                *cached = Some(Cached {
                    token: token.clone(),
                    renew_at: None,
                    file_mtime: Some(mtime),
                });
                Ok(token)
            }
            Auth::Minted {
                key_file,
                token_user,
                lifetime,
            } => {
                if let Some(c) = cached.as_ref()
                    && c.renew_at.is_some_and(|at| Instant::now() < at)
                {
                    return Ok(c.token.clone());
                }
                // Re-read the key on every mint, so a rotated key is picked up.
                let key = std::fs::read(key_file).map_err(|source| AuthError::KeyFile {
                    path: key_file.clone(),
                    source,
                })?;
                if key.is_empty() {
                    return Err(AuthError::EmptyKeyFile {
                        path: key_file.clone(),
                    });
                }
                let token = mint_token(&key, token_user, *lifetime)?;
                self.refreshes.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(user = %token_user, lifetime_s = lifetime.as_secs(), "minted slurmrestd token");
                let renew_at = Instant::now() + lifetime.mul_f64(0.8);
                *cached = Some(Cached {
                    token: token.clone(),
                    renew_at: Some(renew_at),
                    file_mtime: None,
                });
                Ok(token)
            }
        }
    }

    /// Forget the cached token after slurmctld rejected it, so the next call mints or re-reads.
    pub fn invalidate(&self) {
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_scontrol_output() {
        assert_eq!(normalize_token("SLURM_JWT=abc.def.ghi\n"), "abc.def.ghi");
        assert_eq!(normalize_token("  export SLURM_JWT=abc "), "abc");
        assert_eq!(normalize_token("abc"), "abc");
    }

    #[test]
    fn minted_token_has_sun_iat_exp_and_verifies_with_the_key() {
        let key = b"0123456789abcdef0123456789abcdef";
        let t = mint_token(key, "flyte", Duration::from_secs(600)).unwrap();
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        v.required_spec_claims = ["exp".to_string()].into();
        let data = jsonwebtoken::decode::<serde_json::Value>(
            t.expose(),
            &jsonwebtoken::DecodingKey::from_secret(key).unwrap(),
            &v,
        )
        .unwrap();
        assert_eq!(data.claims["sun"], "flyte");
        let iat = data.claims["iat"].as_u64().unwrap();
        assert_eq!(data.claims["exp"].as_u64().unwrap(), iat + 600);
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let token = "eyJhbGciOiJIUzI1NiJ9.secretpayload.sig";
        let auth = Auth::Static {
            token: Secret::new(token),
        };
        assert!(!format!("{auth:?}").contains("secretpayload"));
        let src = TokenSource::new(auth);
        let got = src.token().unwrap();
        assert!(!format!("{got:?} {got} {src:?}").contains("secretpayload"));
    }

    #[test]
    fn minted_tokens_are_cached_until_renewal_and_reminted_after_invalidate() {
        let dir = std::env::temp_dir().join(format!("sc-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("jwt.key");
        std::fs::write(&key, b"k3y-bytes-k3y-bytes-k3y-bytes-xx").unwrap();
        let src = TokenSource::new(Auth::Minted {
            key_file: key,
            token_user: "flyte".into(),
            lifetime: Duration::from_secs(600),
        });
        let a = src.token().unwrap();
        let b = src.token().unwrap();
        assert_eq!(a, b);
        assert_eq!(src.refreshes(), 1);
        src.invalidate();
        src.token().unwrap();
        assert_eq!(src.refreshes(), 2);
    }

    #[test]
    fn token_file_is_reread_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("sc-auth-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "SLURM_JWT=first\n").unwrap();
        let src = TokenSource::new(Auth::File { path: path.clone() });
        assert_eq!(src.token().unwrap().expose(), "first");
        // Make sure the modification time moves even on coarse-grained filesystems.
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::write(&path, "second").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(src.token().unwrap().expose(), "second");
    }

    #[test]
    fn missing_key_file_error_names_the_file_and_the_fix() {
        let src = TokenSource::new(Auth::Minted {
            key_file: "/nonexistent/jwt_hs256.key".into(),
            token_user: "flyte".into(),
            lifetime: Duration::from_secs(600),
        });
        let e = src.token().unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent/jwt_hs256.key") && e.contains("FLYTE_SLURM_JWT_KEY_FILE"),
            "{e}"
        );
    }
}
