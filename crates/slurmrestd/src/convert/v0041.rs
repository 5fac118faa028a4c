//! slurmrestd v0.0.41 (Slurm 24.05 to 25.11): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way (`shapes.rs`).

super::shapes::version_module! {
    v0041, V0041,

    shapes::cancel_without_status!();
    shapes::ping_pinged!(|p: &g::ControllerPing| p.mode.as_deref().map(|m| m == "primary"));
    shapes::accounting_expanded_paths!();
    /// v0.0.41 has no `oom_kill_step` yet, and no longer `cores_per_socket`.
    pub(super) fn version_fields(
        job: &JobDescription,
        msg: &mut g::JobDescMsg,
    ) -> Result<(), Unexpressible> {
        refuse_unless(job.oom_kill_step.is_none(), "oom_kill_step")?;
        refuse_unless(job.cores_per_socket.is_none(), "cores_per_socket")?;
        msg.segment_size = job.segment_size.map(u16_no_val);
        msg.distribution_plane_size = job.distribution_plane_size.map(u16_no_val);
        Ok(())
    }
    // No `restart_cnt` in this version's slurmdb records.
    pub(super) fn accounting_restarts(_: &g::Job) -> Option<u32> {
        None
    }
    shapes::db_jobs!();
    shapes::conf_none!();
}
