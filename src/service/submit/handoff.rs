//! Graceful shutdown: what SIGTERM (or Ctrl-C) changes while the process drains.
//!
//! The order, in `serve`: health turns NOT_SERVING for every service (readiness probes and load
//! balancers stop sending work); a new CreateTask submits nothing here and is handed to another
//! replica ([`hand_off`]: not an error, which would cost the task an attempt); the CreateTasks
//! already in flight run to their end (submit held, duplicate check, release: a half-done submit
//! would leave a held job for a retry to release); then the gRPC server stops accepting, sends
//! GOAWAY and lets the remaining calls finish. Submits that outlive their CreateTask (paced,
//! `paced.rs`) are waited for the same way while in their held submit / check / release, and
//! none begins after the signal (a deferred one is then made by another replica: the takeover of
//! `takeover.rs`). All of it within the drain deadline (`FLYTE_SLURM_SHUTDOWN_GRACE`); past it
//! the process exits anyway, and what it left is what a SIGKILL leaves (the duplicate-job
//! protocol covers that: a held job is released by the retried CreateTask or the takeover).

use crate::service::error::ServiceError;
use crate::slurmrestd::JobDescription;

use super::deferred::{TAKE_OVER_AFTER, now_unix};
use crate::service::wire::meta::{DeferredSubmit, ResourceMeta};

/// CreateTask while shutting down: nothing is submitted here (a submit begun now could be cut
/// half done), and the answer is not an error either (Flyte's backend spends one of the task's
/// retries on a CreateTask error: `paced.rs`). It is a deferred meta already past the takeover
/// age, so the first replica that sees it in a GetTask, once the backend's connection has moved
/// off this one, submits it (the duplicate check keeps that to one job). A task with its own
/// slurmrestd token can only be submitted by a replica holding the token: that one is refused
/// with UNAVAILABLE (nothing submitted), which the backend retries.
pub fn hand_off(
    cluster: &str,
    key: &str,
    job: &JobDescription,
    template: ResourceMeta,
    own_credentials: bool,
) -> Result<Vec<u8>, ServiceError> {
    if own_credentials {
        return Err(ServiceError::Unavailable(
            "this connector replica is shutting down; nothing was submitted: retry CreateTask \
             (another replica answers it)"
                .into(),
        ));
    }
    tracing::info!(
        cluster,
        key,
        "shutting down: CreateTask answered with a deferred meta that another replica submits"
    );
    let mut m = template;
    m.deferred = Some(Box::new(DeferredSubmit {
        key: key.to_string(),
        at: now_unix() - TAKE_OVER_AFTER.as_secs() as i64,
        job: job.clone(),
        own_credentials: false,
    }));
    Ok(m.encode())
}
