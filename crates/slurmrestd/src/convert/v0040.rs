//! slurmrestd v0.0.40 (Slurm 23.11 to 25.05): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way (`shapes.rs`).

super::shapes::version_module! {
    v0040, V0040,

    shapes::cancel_without_status!();
    shapes::ping_pinged!(|p: &g::ControllerPing| p.mode.as_deref().map(|m| m == "primary"));
    // v0.0.40 slurmdb records carry no output paths (v0.0.41 added them): the connector then
    // uses the paths it rendered, which resource_meta keeps.
    pub(super) fn accounting_output_paths(_: &g::Job) -> (Option<String>, Option<String>) {
        (None, None)
    }
    /// v0.0.40 has neither `oom_kill_step` nor `segment_size`, has `cores_per_socket` (which
    /// v0.0.41-44 lack), and takes the plane size as a plain integer.
    pub(super) fn version_fields(
        job: &JobDescription,
        msg: &mut g::JobDescMsg,
    ) -> Result<(), Unexpressible> {
        refuse_unless(job.oom_kill_step.is_none(), "oom_kill_step")?;
        refuse_unless(job.segment_size.is_none(), "segment_size")?;
        msg.cores_per_socket = int(job.cores_per_socket);
        msg.distribution_plane_size = job.distribution_plane_size.map(i32::from);
        Ok(())
    }
    // No `restart_cnt` in this version's slurmdb records.
    pub(super) fn accounting_restarts(_: &g::Job) -> Option<u32> {
        None
    }
    shapes::db_jobs!();
    shapes::conf_none!();
}
