//! slurmrestd v0.0.43 (Slurm 25.05 to 26.11): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way (`shapes.rs`).

super::shapes::version_module! {
    v0043, V0043,
    shapes::since_v0042!(ping_pinged(|p: &g::ControllerPing| p.primary), without_cores_per_socket, conf_none);
}
