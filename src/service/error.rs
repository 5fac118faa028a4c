//! The service's one error type, mapped to a gRPC [`Status`] in one place.
//!
//! Every operation of the [`Connector`](super::Connector) returns [`ServiceError`]; the gRPC
//! handlers turn it into a `Status` with `?` (axum's error-handling example: one error, one
//! conversion). The code matters to Flyte's backend: INVALID_ARGUMENT and PERMISSION_DENIED fail
//! the attempt for good, UNAVAILABLE is retried, and a CreateTask error of any kind costs the
//! task an attempt (`flyte-backend.md`), which is why a submit that is merely slow is not one.

use tonic::Status;

use crate::slurmrestd::ClientError;

use super::submit::identity::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The request or the task cannot be served as they are; the message names the field and
    /// the fix.
    #[error("{0}")]
    Invalid(String),
    /// The deployment's identity rules refuse the requester.
    #[error("{0}")]
    Denied(String),
    /// `resource_meta` names something this connector does not have, or the job is gone.
    #[error("{0}")]
    NotFound(String),
    /// Nothing was done and trying again may succeed (a replica shutting down, a submit that
    /// failed transiently, a job not submitted yet).
    #[error("{0}")]
    Unavailable(String),
    /// DeleteTask came first.
    #[error("{0}")]
    Aborted(String),
    /// slurmrestd's answer while doing `what`; its class decides the code.
    #[error("{what}: {source}")]
    Slurm {
        what: &'static str,
        /// Boxed: a `ClientError` is large, and every operation's `Result` would carry its size.
        #[source]
        source: Box<ClientError>,
    },
    /// A bug of the connector, not of the request.
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    /// A slurmrestd error met while doing `what` (`"cancelling the job"`).
    pub fn slurm(what: &'static str) -> impl FnOnce(ClientError) -> ServiceError {
        move |source| ServiceError::Slurm {
            what,
            source: Box::new(source),
        }
    }
}

impl From<Refusal> for ServiceError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Denied { .. } => ServiceError::Denied(r.to_string()),
            Refusal::Limit { .. } | Refusal::ChoseUser { .. } => {
                ServiceError::Invalid(r.to_string())
            }
        }
    }
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let message = e.to_string();
        match e {
            ServiceError::Invalid(_) => Status::invalid_argument(message),
            ServiceError::Denied(_) => Status::permission_denied(message),
            ServiceError::NotFound(_) => Status::not_found(message),
            ServiceError::Unavailable(_) => Status::unavailable(message),
            ServiceError::Aborted(_) => Status::aborted(message),
            ServiceError::Internal(_) => Status::internal(message),
            ServiceError::Slurm { source, .. } => {
                if source.is_transient() {
                    Status::unavailable(message)
                } else if source.is_auth() {
                    Status::permission_denied(message)
                } else if matches!(
                    *source,
                    ClientError::Slurm { .. } | ClientError::SubmitWithoutJobId { .. }
                ) {
                    Status::invalid_argument(message)
                } else {
                    Status::internal(message)
                }
            }
        }
    }
}
