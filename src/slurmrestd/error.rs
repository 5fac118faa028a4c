//! Errors of the slurmrestd facade. Each names the cluster and the operation, and says what to do.

use super::ApiVersion;
use super::auth::AuthError;
use super::types::SlurmError;

fn versions(vs: &[ApiVersion]) -> String {
    vs.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
}

/// Joins Slurm's error entries for a message.
fn list(errors: &[SlurmError]) -> String {
    if errors.is_empty() {
        return "no error details".to_string();
    }
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("slurmrestd of cluster {cluster} is unreachable ({operation}): {detail}")]
    Unreachable {
        cluster: String,
        operation: &'static str,
        detail: String,
        connect: bool,
    },

    /// slurmrestd's (or its TLS proxy's) certificate did not verify: not a hiccup, the
    /// deployment must trust the site's CA.
    #[error(
        "slurmrestd of cluster {cluster} at {host}: its TLS certificate is not trusted \
         ({operation}): {detail}; if the site signs it with its own CA, give that CA's PEM file \
         as `ca_file` (FLYTE_SLURM_CA_FILE)"
    )]
    Tls {
        cluster: String,
        host: String,
        operation: &'static str,
        detail: String,
    },

    #[error(
        "slurmrestd of cluster {cluster} did not answer {operation} within the request timeout"
    )]
    Timeout {
        cluster: String,
        operation: &'static str,
    },

    #[error(
        "slurmrestd of cluster {cluster} received no token ({operation}: HTTP 401); \
         configure FLYTE_SLURM_JWT, FLYTE_SLURM_JWT_FILE or FLYTE_SLURM_JWT_KEY_FILE"
    )]
    NoToken {
        cluster: String,
        operation: &'static str,
    },

    #[error(
        "cluster {cluster} rejected the credentials ({credential}) for user {user} \
         ({operation}: HTTP {status}, {detail}); check that the token is valid and unexpired, or that \
         the key file is the cluster's jwt_hs256.key, and that a proxied user is only used with a \
         SlurmUser/root token"
    )]
    Rejected {
        cluster: String,
        user: String,
        credential: String,
        operation: &'static str,
        status: u16,
        detail: String,
    },

    #[error("credentials for cluster {cluster}: {source}")]
    Credentials {
        cluster: String,
        #[source]
        source: AuthError,
    },

    #[error("Slurm refused {operation} on cluster {cluster} (HTTP {status}): {}", list(.errors))]
    Slurm {
        cluster: String,
        operation: &'static str,
        status: u16,
        errors: Vec<SlurmError>,
    },

    #[error(
        "slurmrestd of cluster {cluster} accepted the job but returned no job id, so no job was \
         created: a field of the job description had the wrong type. Warnings: {}",
        if .warnings.is_empty() { "none".to_string() } else { .warnings.join("; ") }
    )]
    SubmitWithoutJobId {
        cluster: String,
        warnings: Vec<String>,
    },

    #[error("slurmrestd of cluster {cluster} answered {operation} with HTTP {status}: {body}")]
    Http {
        cluster: String,
        operation: &'static str,
        status: u16,
        body: String,
    },

    #[error("slurmrestd of cluster {cluster} sent a response to {operation} that does not decode as {version}{}: {detail}",
        .status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Decode {
        cluster: String,
        operation: &'static str,
        version: ApiVersion,
        status: Option<u16>,
        detail: String,
    },

    #[error(
        "slurmrestd of cluster {cluster} does not serve the pinned API version {pinned} \
         (api_version / FLYTE_SLURM_API_VERSION); it serves {}. Pin one of those, or unset the \
         setting so the connector picks the newest both sides speak",
        versions(.served)
    )]
    VersionNotServed {
        cluster: String,
        pinned: ApiVersion,
        served: Vec<ApiVersion>,
    },

    #[error(
        "slurmrestd of cluster {cluster} serves none of the API versions this connector speaks \
         ({}){}: this Slurm is too old or too new for this connector; upgrade one side",
        versions(&ApiVersion::ALL),
        if .others.is_empty() { String::new() } else { format!("; it does serve {}", .others.join(", ")) }
    )]
    NoCommonVersion {
        cluster: String,
        /// Versions outside ours that answered (probed only to say so).
        others: Vec<String>,
    },

    #[error("invalid request to slurmrestd of cluster {cluster} ({operation}): {detail}")]
    InvalidRequest {
        cluster: String,
        operation: &'static str,
        detail: String,
    },
}

impl ClientError {
    /// Worth retrying later: the request may succeed unchanged (slurmrestd or slurmctld down,
    /// overloaded or slow). Never true for a rejected credential or a refused job.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } | ClientError::Timeout { .. } => true,
            ClientError::Http { status, .. } => matches!(status, 500 | 502 | 503 | 504),
            ClientError::Slurm { status, errors, .. } => {
                matches!(status, 502..=504)
                    || (!errors.is_empty()
                        && errors.iter().all(|e| super::errno::is_transient(e.number)))
            }
            _ => false,
        }
    }

    /// True when the request surely did not reach slurmrestd (safe to retry even a submit).
    pub fn never_sent(&self) -> bool {
        matches!(self, ClientError::Unreachable { connect: true, .. })
    }

    /// The credential was refused or missing: a configuration problem, not a hiccup.
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            ClientError::NoToken { .. }
                | ClientError::Rejected { .. }
                | ClientError::Credentials { .. }
        )
    }
}
