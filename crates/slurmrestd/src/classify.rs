//! Turning whatever slurmrestd answered — typed JSON, a text/plain error, no answer at all — into a
//! domain value or a [`ClientError`] that names the cluster, the operation and the fix.

use progenitor_client::{Error as GenError, ResponseValue};

use super::ApiVersion;
use super::auth::Auth;
use super::client::config::ClientConfig;
use super::convert::Envelope;
use super::errno;
use super::error::ClientError;
use super::exchange::Reply;

pub(super) fn classify<T: Envelope>(
    cfg: &ClientConfig,
    version: ApiVersion,
    operation: &'static str,
    result: Result<ResponseValue<T>, GenError<T>>,
    status: Option<u16>,
    json: bool,
) -> Result<T, ClientError> {
    let cluster = || cfg.cluster.clone();
    match result {
        Ok(v) => Ok(v.into_inner()),
        Err(GenError::ErrorResponse(v)) => {
            let status = v.status().as_u16();
            let body = v.into_inner();
            let errors = body.errors();
            if status == 511 || errors.iter().any(|e| e.number == errno::AUTH) {
                return Err(rejected(
                    cfg,
                    operation,
                    status,
                    errors.first().map(|e| e.to_string()),
                ));
            }
            // slurmdbd answers an auth failure with 502 / 7000 and an auth-specific text
            // on 24.11 ("authentication error"): a rejected token, not a slurmdbd outage.
            if status == 502
                && errors.iter().any(|e| {
                    e.number == errno::DB_CONNECTION && e.description.contains("authentication")
                })
            {
                return Err(rejected(
                    cfg,
                    operation,
                    status,
                    errors.first().map(|e| e.to_string()),
                ));
            }
            Err(ClientError::Slurm {
                cluster: cluster(),
                operation,
                status,
                errors,
            })
        }
        Err(GenError::InvalidResponsePayload(bytes, e)) => match status {
            Some(401) => Err(ClientError::NoToken {
                cluster: cluster(),
                operation,
            }),
            Some(s) if !json || !(200..300).contains(&s) => Err(ClientError::Http {
                cluster: cluster(),
                operation,
                status: s,
                body: String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
                    .trim()
                    .to_string(),
            }),
            _ => Err(ClientError::Decode {
                cluster: cluster(),
                operation,
                version,
                status,
                detail: e.to_string(),
            }),
        },
        Err(GenError::UnexpectedResponse(r)) => Err(ClientError::Http {
            cluster: cluster(),
            operation,
            status: r.status().as_u16(),
            body: String::new(),
        }),
        // No connection first: reqwest reports its connect timeout as both a connect error and a
        // timeout, and a connection never made is an outage of slurmrestd or of the path to it
        // (a firewall dropping packets), where a late answer on a connection is slurmctld's load.
        Err(GenError::CommunicationError(e)) | Err(GenError::ResponseBodyError(e)) => {
            if e.is_connect() && is_certificate_error(&e) {
                Err(ClientError::Tls {
                    cluster: cluster(),
                    host: cfg
                        .base_url
                        .host_str()
                        .map(|h| match cfg.base_url.port() {
                            Some(p) => format!("{h}:{p}"),
                            None => h.to_string(),
                        })
                        .unwrap_or_default(),
                    operation,
                    detail: error_chain(&e),
                })
            } else if e.is_timeout() && !e.is_connect() {
                Err(ClientError::Timeout {
                    cluster: cluster(),
                    operation,
                })
            } else {
                Err(ClientError::Unreachable {
                    cluster: cluster(),
                    operation,
                    detail: error_chain(&e),
                    connect: e.is_connect(),
                })
            }
        }
        Err(GenError::InvalidRequest(detail)) | Err(GenError::Custom(detail)) => {
            Err(ClientError::InvalidRequest {
                cluster: cluster(),
                operation,
                detail,
            })
        }
        Err(GenError::InvalidUpgrade(e)) => Err(ClientError::InvalidRequest {
            cluster: cluster(),
            operation,
            detail: e.to_string(),
        }),
    }
}

/// How an exchange ended, for the metrics: its HTTP status when one came, else what the
/// classification made of the failure. `None`: no request was sent (it could not be built).
pub(super) fn reply<T>(status: Option<u16>, result: &Result<T, ClientError>) -> Option<Reply> {
    if let Some(s) = status {
        return Some(Reply::Status(s));
    }
    match result {
        // An answer whose status the hook did not see (outside a facade call): a 200.
        Ok(_) => Some(Reply::Status(200)),
        Err(ClientError::Unreachable { connect: true, .. }) | Err(ClientError::Tls { .. }) => {
            Some(Reply::Unreachable)
        }
        Err(ClientError::Unreachable { connect: false, .. }) => Some(Reply::Closed),
        Err(ClientError::Timeout { .. }) => Some(Reply::Late),
        Err(ClientError::Slurm { status, .. }) | Err(ClientError::Http { status, .. }) => {
            Some(Reply::Status(*status))
        }
        Err(ClientError::Rejected { status, .. }) => Some(Reply::Status(*status)),
        Err(ClientError::NoToken { .. }) => Some(Reply::Status(401)),
        Err(ClientError::Decode { status, .. }) => Some(Reply::Status(status.unwrap_or(200))),
        Err(_) => None,
    }
}

fn rejected(
    cfg: &ClientConfig,
    operation: &'static str,
    status: u16,
    detail: Option<String>,
) -> ClientError {
    let user = cfg
        .user_name
        .clone()
        .or_else(|| match &cfg.auth {
            Auth::Minted { token_user, .. } => Some(token_user.clone()),
            _ => None,
        })
        .unwrap_or_else(|| "(the token's user)".into());
    ClientError::Rejected {
        cluster: cfg.cluster.clone(),
        user,
        credential: cfg.auth.describe(),
        operation,
        status,
        detail: detail.unwrap_or_else(|| "no details".into()),
    }
}

/// 404 with error 2017 (or any 2017): slurmctld does not know the job.
/// slurmctld refused with this error number.
pub(super) fn has_errno(e: &ClientError, number: i32) -> bool {
    matches!(e, ClientError::Slurm { errors, .. } if errors.iter().any(|e| e.number == number))
}

pub(super) fn is_unknown_job(e: &ClientError) -> bool {
    match e {
        ClientError::Slurm { errors, status, .. } => {
            errors.iter().any(|e| e.number == errno::INVALID_JOB_ID)
                || (*status == 404 && errors.is_empty())
        }
        _ => false,
    }
}

/// reqwest's Display hides the cause ("error sending request"); the chain says "connection refused".
/// rustls' verification failures ("invalid peer certificate: UnknownIssuer", a name mismatch,
/// an expired certificate) as they appear in the error chain.
fn is_certificate_error(e: &dyn std::error::Error) -> bool {
    let chain = error_chain(e).to_ascii_lowercase();
    chain.contains("certificate") || chain.contains("unknownissuer")
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let c_s = c.to_string();
        if !s.contains(&c_s) {
            s.push_str(": ");
            s.push_str(&c_s);
        }
        cur = c.source();
    }
    s
}
