//! What this binary is: its version, the commit it was built from and the slurmrestd API
//! versions it speaks. `--version` prints it and the `slurm_connector_build_info` metric carries
//! it, so an operator can tell replicas (and an image from its source) apart. A leaf: build.rs
//! sets the values, nothing here imports the rest of the crate.

/// The crate's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit (12 hex digits), or `unknown` for a build outside a checkout without
/// `SLURM_CONNECTOR_GIT_HASH` (build.rs).
pub const GIT_HASH: &str = env!("SLURM_CONNECTOR_GIT_HASH");

/// The slurmrestd data_parser versions the connector speaks, comma-separated, oldest first (as
/// `slurmrestd::ApiVersion::ALL`; build.rs's list, which a test there checks against it).
pub const API_VERSIONS: &str = env!("SLURM_CONNECTOR_API_VERSIONS");

/// `--version`'s text after the program name: `0.1.0 (git 0123abcd4567; slurmrestd v0.0.40,…)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("SLURM_CONNECTOR_GIT_HASH"),
    "; slurmrestd ",
    env!("SLURM_CONNECTOR_API_VERSIONS"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_are_the_clients_the_crate_has() {
        let ours: Vec<String> = crate::slurmrestd::ApiVersion::ALL
            .iter()
            .map(|v| v.to_string())
            .collect();
        assert_eq!(API_VERSIONS.split(',').collect::<Vec<_>>(), ours);
    }

    #[test]
    fn the_hash_is_a_commit_or_says_unknown() {
        assert!(
            GIT_HASH == "unknown"
                || (GIT_HASH.len() >= 7 && GIT_HASH.chars().all(|c| c.is_ascii_hexdigit())),
            "{GIT_HASH}"
        );
        assert!(LONG_VERSION.starts_with(VERSION));
        assert!(LONG_VERSION.contains(GIT_HASH) && LONG_VERSION.contains(API_VERSIONS));
    }
}
