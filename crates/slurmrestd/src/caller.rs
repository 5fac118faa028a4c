//! How one operation is made: credentials, retries, one re-mint after a rejected token, and the
//! answer classified. What every version's operations (`convert/each_version/operations.rs`)
//! get from the client, as a small [`Caller`] rather than the whole client: the per-version code
//! then depends on what it uses only, and the client on it, never the other way round.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use progenitor_client::{Error as GenError, ResponseValue};

use super::ApiVersion;
use super::auth::TokenSource;
use super::classify;
use super::client::config::ClientConfig;
use super::convert::{Envelope, Unexpressible};
use super::error::ClientError;
use super::exchange::Exchange;
use super::transport::{self, CallContext};

/// Whether a call may be repeated without changing the outcome.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// GETs and DELETE (cancelling twice is harmless): retry transient failures.
    Idempotent,
    /// A submit: only retried when the request surely never reached slurmrestd.
    OnlyIfNeverSent,
    /// A version probe: retried like a read, but its 404 is the answer ("not served"), not a
    /// sign that the chosen version went away.
    Probe,
}

/// What an operation needs from the client that makes it: the cluster's configuration (its
/// name and URL for errors, the proxied user, the retry policy, the observer), where tokens come
/// from, and the flag that makes the next call negotiate again. Borrowed from the client for
/// one call; cheap to copy.
#[derive(Clone, Copy)]
pub(crate) struct Caller<'a> {
    pub(crate) cfg: &'a ClientConfig,
    pub(crate) tokens: &'a TokenSource,
    /// Set when slurmrestd was unreachable or stopped serving the chosen version's paths: it may
    /// come back upgraded, so the next call negotiates again.
    pub(crate) stale: &'a AtomicBool,
}

impl Caller<'_> {
    /// A job description the version in use cannot carry, as the error a submit returns.
    pub(crate) fn unexpressible(&self, e: Unexpressible) -> ClientError {
        ClientError::InvalidRequest {
            cluster: self.cfg.cluster.clone(),
            operation: "submit",
            detail: e.to_string(),
        }
    }

    /// One operation with credentials, retries and one re-mint after a rejected token.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        version: ApiVersion,
        operation: &'static str,
        idem: Idempotency,
        f: F,
    ) -> Result<T, ClientError>
    where
        T: Envelope,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<ResponseValue<T>, GenError<T>>>,
    {
        let mut attempt = 1;
        let mut reminted = false;
        loop {
            let token = self
                .tokens
                .token()
                .map_err(|source| ClientError::Credentials {
                    cluster: self.cfg.cluster.clone(),
                    source,
                })?;
            let ctx = CallContext::new(&token, self.cfg.user_name.as_deref()).ok_or_else(|| {
                ClientError::InvalidRequest {
                    cluster: self.cfg.cluster.clone(),
                    operation,
                    detail: "the token or user name holds characters an HTTP header cannot carry"
                        .into(),
                }
            })?;
            let note = ctx.response();
            let result = transport::with_context(ctx, f()).await;
            let result = classify::classify(
                self.cfg,
                version,
                operation,
                result,
                note.status(),
                note.was_json(),
            );
            if let (Some(observe), Some(daemon), Some(reply)) = (
                &self.cfg.observer,
                note.daemon(),
                classify::reply(note.status(), &result),
            ) {
                observe(&Exchange {
                    operation,
                    version,
                    daemon,
                    reply,
                });
            }
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if idem != Idempotency::Probe
                && (matches!(err, ClientError::Unreachable { .. }) || is_unknown_path(&err))
            {
                // slurmrestd went away, or stopped serving this version: it may be back upgraded,
                // so the next call looks at its versions again.
                self.stale.store(true, Ordering::Relaxed);
            }
            if matches!(err, ClientError::Rejected { .. }) && !reminted && self.cfg.auth.can_renew()
            {
                // A token can be rejected because it expired early, the key rotated, or the file
                // was replaced: get a fresh one and try once more.
                tracing::info!(cluster = %self.cfg.cluster, operation, "token rejected; renewing it and retrying once");
                self.tokens.invalidate();
                reminted = true;
                continue;
            }
            let may_retry = match idem {
                Idempotency::Idempotent | Idempotency::Probe => err.is_transient(),
                Idempotency::OnlyIfNeverSent => err.never_sent(),
            };
            if !may_retry || attempt >= self.cfg.retry.max_attempts {
                return Err(err);
            }
            let delay = self.cfg.retry.delay(attempt);
            tracing::debug!(cluster = %self.cfg.cluster, operation, api_version = %version, attempt, ?delay, error = %err, "retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

/// slurmrestd's answer for a path it has no handler for — here, a version it does not serve: a
/// text/plain 404, "Unable find requested URL..." on 24.11, "Unable to find requested URL
/// endpoint..." on 26.05, "Invalid or unknown URL path" on 26.11 (all recorded). A job slurmctld
/// does not know is a JSON 404 with error 2017 instead, which classifies as `Slurm`, not `Http`.
pub(crate) fn is_unknown_path(e: &ClientError) -> bool {
    matches!(e, ClientError::Http { status: 404, .. })
}
