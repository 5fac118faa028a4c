//! The one error type of the staging layer.
//!
//! Messages end up in task failure messages the task author reads, so they name the path (as the
//! cluster sees it) and say what to do; they never carry tokens, and never the local path a refused
//! symlink resolved to (that could map the connector's own filesystem for a curious task).

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum StagingError {
    /// The path is outside what the staging layer may touch (`..`, relative, outside the roots,
    /// or a symlink resolving outside them).
    #[error("path {path:?} is refused: {reason}")]
    Refused { path: String, reason: String },

    #[error("{path} does not exist")]
    NotFound { path: String },

    #[error("{op} {path}: {source}{}", unreadable_hint(source))]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },

    /// The object-store destination is not a URI we can write to.
    #[error("object store URI {uri:?} is not usable: {reason}")]
    BadUri { uri: String, reason: String },

    // The store's own message, with the query strings of the URLs it quotes removed: an Azure SAS
    // token or a signed URL travels there, and this message reaches task failures and logs.
    #[error("object store {uri}: {}", redact(source))]
    Store {
        uri: String,
        #[source]
        source: object_store::Error,
    },

    /// A write found no bucket (S3, GCS) or container (Azure) at the destination: named as such,
    /// since the store's own message is "not found" about the object being written.
    #[error(
        "object store {uri}: bucket or container '{bucket}' does not exist (or these credentials \
         cannot see it): create it, or fix the output prefix"
    )]
    NoBucket {
        uri: String,
        bucket: String,
        #[source]
        source: object_store::Error,
    },

    /// The stager sidecar answered with an error, or could not be reached.
    #[error("stager sidecar: {message}")]
    Sidecar { message: String },

    /// Deployment configuration is wrong: names the variable and the fix.
    #[error("{var}: {message}")]
    Config { var: &'static str, message: String },

    /// A declared output is missing, too large or not what was declared: the whole message is
    /// meant for the task author.
    #[error("{message}")]
    Output { message: String },

    #[error("transfer cancelled")]
    Cancelled,
}

impl StagingError {
    pub fn is_refused(&self) -> bool {
        matches!(self, StagingError::Refused { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, StagingError::NotFound { .. })
    }

    pub(crate) fn io(op: &'static str, path: impl Into<String>, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            return StagingError::NotFound { path: path.into() };
        }
        StagingError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn refused(path: impl Into<String>, reason: impl Into<String>) -> Self {
        StagingError::Refused {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = StagingError> = std::result::Result<T, E>;

/// With per-task Slurm identities the job's user writes the files and the connector's (or the
/// stager's) user reads them: a permission error says what the site must arrange.
fn unreadable_hint(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::PermissionDenied {
        " (the job's Slurm user wrote it and this process's user may not read it: give the \
         working directory a group this process is in (setgid, umask 022 or a default ACL), or \
         stage through a stager that may read every user's files; see docs/security.md, \
         \"Job files must stay readable for staging\")"
    } else {
        ""
    }
}

/// `e`'s message with the query string of every URL in it replaced: `object_store` quotes the
/// request URL in its errors, and for Azure with `AZURE_STORAGE_SAS_KEY` (or a signed URL) the
/// query is a credential. Every message that shows a store error goes through here.
pub fn redact(e: &dyn std::fmt::Display) -> String {
    static QUERY: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"(https?://[^\s?#"'<>]*)\?[^\s#"'<>]*"#).expect("valid regex")
    });
    QUERY
        .replace_all(&e.to_string(), "$1?<query redacted>")
        .into_owned()
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    #[test]
    fn a_permission_error_says_what_to_arrange() {
        let e = StagingError::Io {
            op: "read",
            path: "/shared/alice/job.out".into(),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        }
        .to_string();
        assert!(
            e.contains("/shared/alice/job.out") && e.contains("setgid"),
            "{e}"
        );
        let e = StagingError::Io {
            op: "read",
            path: "/x".into(),
            source: io::Error::from(io::ErrorKind::Other),
        }
        .to_string();
        assert!(!e.contains("setgid"), "{e}");
    }
}
