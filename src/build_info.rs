//! What this binary is: its version, the commit it was built from and the slurmrestd API
//! versions it speaks. `--version` prints it and the `slurm_connector_build_info` metric carries
//! it, so an operator can tell replicas (and an image from its source) apart. A leaf: build.rs
//! sets the hash, the slurmrestd crate the versions; nothing here imports the rest of the crate.

/// The crate's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit (12 hex digits), or `unknown` for a build outside a checkout without
/// `SLURM_CONNECTOR_GIT_HASH` (build.rs).
pub const GIT_HASH: &str = env!("SLURM_CONNECTOR_GIT_HASH");

/// The slurmrestd data_parser versions the connector speaks, comma-separated, oldest first (as
/// `slurmrestd::ApiVersion::ALL`: the slurmrestd crate's build.rs list, checked against it there).
pub const API_VERSIONS: &str = slurm_connector_slurmrestd::API_VERSIONS;

/// `--version`'s text after the program name: `0.1.0 (git 0123abcd4567; slurmrestd v0.0.40,…)`.
/// Made once at first use: the versions come from another crate, so `concat!` cannot join them.
pub fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| format!("{VERSION} (git {GIT_HASH}; slurmrestd {API_VERSIONS})"))
}

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
        assert!(long_version().starts_with(VERSION));
        assert!(long_version().contains(GIT_HASH) && long_version().contains(API_VERSIONS));
    }
}
