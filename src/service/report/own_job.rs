//! A job id slurmctld gave away: after a crash, slurmctld may restart from a state saved before
//! this task's job was submitted and give the same id to a later submit. The task's own
//! exit-status marker then says what became of its job, if it ran; else the job was lost with
//! the crash (the cluster's failure).

use crate::tracker::JobSnapshot;

use crate::service::cluster::ClusterRuntime;
use crate::service::wire::meta::ResourceMeta;

/// The snapshot of this task's own job, or why it was lost: the job's id names another
/// execution's job, and the task's own exit-status marker does not say what became of its own.
pub async fn own_job(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    snap: JobSnapshot,
) -> Result<JobSnapshot, String> {
    let Some(lost) = reused_id(meta, &snap) else {
        return Ok(snap);
    };
    match own_marker(rt, meta).await {
        // Its own job ran under this id before the crash and left its outcome.
        Some(m) if m.job_id == Some(meta.job_id.0) => Ok(from_own_marker(snap, &m)),
        _ => {
            tracing::warn!(cluster = %meta.cluster, job_id = %meta.job_id, "{lost}");
            Err(lost)
        }
    }
}

/// The task's job id now names another execution's job: slurmctld, SIGKILLed after it gave the
/// id to this task's submit and before its next state save, restarted without the job and gave
/// the same id to the next submit (`tests/real_controller_drill.rs` drives it). That job's end
/// is not this task's: reporting it would be a wrong terminal phase. The task's own job was
/// lost with the crash, which is the cluster's failure.
pub fn reused_id(meta: &ResourceMeta, snap: &JobSnapshot) -> Option<String> {
    let theirs = snap.key.as_deref()?;
    let ours = crate::render::key_from_job_name(&meta.job_name)?;
    (theirs != ours).then(|| {
        format!(
            "[SLURM_JOB_LOST] Slurm job {} now belongs to another execution (its record names key \
             {theirs}, this task's is {ours}): slurmctld restarted from a state saved before this \
             task's job was submitted, lost the job and gave its id to a later submit; the \
             failure is the cluster's, so Flyte's retry submits the task again",
            meta.job_id
        )
    })
}

/// The exit-status marker the task's own script left (`<working_dir>/<job>.exit`, beside its
/// stdout), if the staging backend can read it.
async fn own_marker(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
) -> Option<crate::staging::exit_marker::ExitMarker> {
    let staging = rt.staging.as_ref()?;
    let dir = meta.stdout.rsplit_once('/')?.0;
    crate::staging::exit_marker::read_exit_marker(staging.as_ref(), dir, &meta.job_name)
        .await
        .ok()
        .flatten()
}

/// The task's outcome from its own marker, when Slurm's record under its id is another
/// execution's: the job ran (the marker names this id) before slurmctld lost it.
fn from_own_marker(
    mut snap: JobSnapshot,
    m: &crate::staging::exit_marker::ExitMarker,
) -> JobSnapshot {
    let state = crate::tracker::marker_state(m);
    let packed =
        crate::tracker::Packed::pack(&crate::slurmrestd::JobState::from_strings([state])).0;
    snap.slurm = crate::tracker::Slurm::Marker(packed);
    snap.class = packed.class();
    snap.state = Some(state.to_string());
    snap.exit_code = Some(crate::slurmrestd::ExitCode {
        status: vec![if m.code == 0 { "SUCCESS" } else { "ERROR" }.into()],
        return_code: u32::try_from(m.code).ok(),
        signal: None,
        signal_name: m.signal.clone(),
    });
    snap.reason = None;
    snap.signal = m.signal.clone();
    snap.note = Some(format!(
        "read from the exit-status marker the job left: slurmctld restarted from a state saved \
         before it, and job {} is another execution's since",
        snap.job_id
    ));
    snap.key = None;
    snap
}
