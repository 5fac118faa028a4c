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

/// slurmrestd's answer to a state query while slurmctld is unreachable: HTTP 500 with only
/// error -1 ("Unable to query job states" / "Unable to query JobId=N", "Unspecified error"), after
/// its 10 s connect timeout (measured on 26.05: tests/fixtures/slurmrestd/
/// 26.05_v0.0.45_ctld-down-jobs-state.json, -job-get.json). Only for reads: a refused submit
/// never carries -1 alone, and a read asked again changes nothing.
fn controller_gone_from_a_query(operation: &str, status: u16, errors: &[SlurmError]) -> bool {
    matches!(operation, "jobs_state" | "job")
        && status == 500
        && !errors.is_empty()
        && errors.iter().all(|e| e.number == -1)
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No answer: `connect` when no connection was made (refused, DNS, or the connect timeout:
    /// packets dropped), so the request was surely not sent; else the connection ended without
    /// an answer.
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

    /// Connected and sent, no answer within the request timeout (never a connect timeout:
    /// that is `Unreachable`).
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
            ClientError::Slurm {
                status,
                errors,
                operation,
                ..
            } => {
                matches!(status, 502..=504)
                    || (!errors.is_empty()
                        && errors.iter().all(|e| super::errno::is_transient(e.number)))
                    || controller_gone_from_a_query(operation, *status, errors)
            }
            _ => false,
        }
    }

    /// An outage rather than load: slurmrestd itself cannot be reached, or it answered that it
    /// cannot reach slurmctld (errors 1800-1804, "Unable to contact slurm controller": slurmctld
    /// stopped, crashed or restarting). Such an answer comes late (slurmrestd gives up after its
    /// 10 s connect timeout) yet says nothing about slurmctld's rate, so submit pacing must not
    /// take it for throttling.
    pub fn is_outage(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Slurm { errors, .. } => errors
                .iter()
                .any(|e| super::errno::is_controller_unreachable(e.number)),
            _ => false,
        }
    }

    /// A submit slurmctld refused for want of room (`MaxJobCount` reached; see
    /// [`super::errno::is_cluster_full`]): certain to have created nothing, and worth making
    /// again once jobs left slurmctld, however long that takes. Not [`Self::is_transient`]: the
    /// cluster is working as configured, and retrying at a hiccup's pace would only add
    /// refused submits to slurmctld's load.
    pub fn is_cluster_full(&self) -> bool {
        match self {
            ClientError::Slurm { errors, .. } => {
                !errors.is_empty()
                    && errors
                        .iter()
                        .all(|e| super::errno::is_cluster_full(e.number))
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
