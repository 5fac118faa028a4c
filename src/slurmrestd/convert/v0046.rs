//! slurmrestd v0.0.46 (Slurm 26.11 and later): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way (`shapes.rs`).

super::shapes::version_module! {
    v0046, V0046,

    shapes::cancel_with_status!();
    shapes::ping_responding!();
    shapes::accounting_expanded_paths!();
    shapes::job_desc_since_v0042!(with_cores_per_socket);
    shapes::accounting_restarts!();
    shapes::db_jobs!();
}
