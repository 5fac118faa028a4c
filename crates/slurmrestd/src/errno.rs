//! The Slurm error numbers the connector acts on, in one place (`slurm_errno.h`'s names).
//! They are the same in every API version: slurmrestd passes slurmctld's and slurmdbd's numbers
//! through as `errors[].error_number` (or `status[].error.code` when cancelling).

/// ESLURM_INVALID_JOB_ID, "Invalid job id specified": unknown to slurmctld (never existed, or
/// aged out).
pub const INVALID_JOB_ID: i32 = 2017;
/// ESLURM_ALREADY_DONE, "Job/step already completing or completed".
pub const ALREADY_DONE: i32 = 2021;
/// ESLURM_JOB_FINISHED, "Job has already finished": an update of a finished job.
pub const JOB_FINISHED: i32 = 2084;
/// SLURM_PROTOCOL_AUTHENTICATION_ERROR, "Protocol authentication error": the token was refused.
pub const AUTH: i32 = 1007;
/// ESLURM_DB_CONNECTION, "Unable to connect to database": slurmdbd is down (or, on 24.11 with
/// an auth-specific description, refused the token).
pub const DB_CONNECTION: i32 = 7000;

/// ESLURM_MAX_JOB_COUNT, "MaxJobCount limit reached": slurmctld holds as many jobs as its
/// `MaxJobCount` allows (each array element counts) and refused the submit; nothing was created
/// (26.05, HTTP 422: `tests/fixtures/slurmrestd/26.05_v0.0.44_maxjobs-submit-refused.json`).
pub const MAX_JOB_COUNT: i32 = 2007;
/// EAGAIN, "Resource temporarily unavailable": what 24.11's slurmctld answers a submit past
/// `MaxJobCount` with (HTTP 500: `24.11_v0.0.42_maxjobs-submit-refused.json`; its log says
/// "job_allocate: MaxJobCount limit from slurm.conf reached"); sbatch sleeps and retries on it.
pub const EAGAIN: i32 = 11;

/// A submit refused because slurmctld has no room for another job now (its `MaxJobCount`):
/// nothing was created, and the same submit succeeds once jobs leave slurmctld.
pub fn is_cluster_full(number: i32) -> bool {
    number == MAX_JOB_COUNT || number == EAGAIN
}

/// SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR .. _BACKOFF: slurmrestd could not reach slurmctld
/// ("Unable to contact slurm controller (connect failure)", measured on 26.05 with slurmctld
/// stopped: `tests/fixtures/slurmrestd/26.05_v0.0.45_ctld-down-submit.json`, HTTP 502 after 10 s).
pub fn is_controller_unreachable(number: i32) -> bool {
    (1800..=1804).contains(&number)
}

/// Numbers that mean "could not talk to slurmctld/slurmdbd right now": worth retrying.
pub fn is_transient(number: i32) -> bool {
    // 1000-1006: SLURM_COMMUNICATIONS_* (connect/send/receive/shutdown); 1800-1804:
    // SLURMCTLD_COMMUNICATIONS_* ("Unable to contact slurm controller", slurmctld down or
    // restarting); 5000-5004: socket errors and timeouts; 7000: slurmdbd down.
    (1000..=1006).contains(&number)
        || is_controller_unreachable(number)
        || (5000..=5004).contains(&number)
        || number == DB_CONNECTION
}
