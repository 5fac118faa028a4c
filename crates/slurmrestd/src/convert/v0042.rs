//! slurmrestd v0.0.42 (Slurm 24.11 to 26.05): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way (`shapes.rs`).

super::shapes::version_module! {
    v0042, V0042,
    shapes::since_v0042!(ping_pinged(|p: &g::ControllerPing| p.primary), without_cores_per_socket, conf_none);
}
