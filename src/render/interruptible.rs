//! Interruptible tasks (`interruptible=True`): the site's preemptible partition and QOS when the
//! task names none, requeueable unless the task said `--no-requeue`, and a warning signal before
//! Slurm kills the job (sbatch's `--signal`) unless the task set its own. The task's own choices
//! win: the site's settings fill in what it left open, as `default_partition` does.
//!
//! The warning reaches the task's own processes: a native task's entrypoint runs in an srun step,
//! so the job's steps are signalled; a script task runs under the batch shell, so the batch shell
//! is (`B:`), and the marker wrapper passes USR1/USR2 on to the script. The task learns the signal
//! and lead time from `FLYTE_SLURM_WARNING_SIGNAL` / `FLYTE_SLURM_WARNING_SECONDS`, and a run
//! after a requeue from Slurm's own `SLURM_RESTART_COUNT`.

use crate::domain::site::InterruptibleSite;
use crate::slurmrestd::job_description::{JobDescription, KillWarning, WarnFlag};

use super::env::EnvBuilder;
use super::error::RenderError;
use super::spec::TaskType;

/// Applies the site's settings to an interruptible task's job (before the deployment's default
/// partition, which the interruptible partition replaces).
pub fn apply(job: &mut JobDescription, site: &InterruptibleSite, task_type: TaskType) {
    if job.partition.is_none() {
        job.partition = site.partition.clone();
    }
    if job.qos.is_none() {
        job.qos = site.qos.clone();
    }
    if job.requeue.is_none() {
        job.requeue = Some(true);
    }
    if job.kill_warning.is_none()
        && let Some((signal, seconds)) = &site.warning
    {
        job.kill_warning = Some(KillWarning {
            signal: signal.clone(),
            delay_seconds: *seconds,
            flags: if task_type.in_container() {
                Vec::new()
            } else {
                vec![WarnFlag::BatchJob]
            },
        });
    }
}

/// What the task sees of it: `FLYTE_SLURM_INTERRUPTIBLE=1` and the warning's signal and lead
/// time (the task's own `--signal` when it set one). In the base layer: a task may override.
pub fn env(job: &JobDescription, envb: &mut EnvBuilder) -> Result<(), RenderError> {
    envb.set_base("FLYTE_SLURM_INTERRUPTIBLE", "1", "interruptible")?;
    if let Some(k) = &job.kill_warning {
        envb.set_base("FLYTE_SLURM_WARNING_SIGNAL", &k.signal, "interruptible")?;
        envb.set_base(
            "FLYTE_SLURM_WARNING_SECONDS",
            &k.delay_seconds.to_string(),
            "interruptible",
        )?;
    }
    Ok(())
}
