//! slurmrestd v0.0.46 (Slurm 26.11 and later): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way (`shapes.rs`).

super::shapes::version_module! {
    v0046, V0046,
    shapes::since_v0042!(ping_responding(), with_cores_per_socket, conf_read);
}
