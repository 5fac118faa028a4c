//! slurmrestd v0.0.44 (Slurm 25.11 and later): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way (`shapes.rs`).

super::shapes::version_module! {
    v0044, V0044,

    shapes::cancel_with_status!();
    shapes::ping_pinged!(|p: &g::ControllerPing| p.primary);
    shapes::accounting_expanded_paths!();
    shapes::job_desc_since_v0042!(without_cores_per_socket);
    shapes::accounting_restarts!();
    shapes::db_jobs!();
}
