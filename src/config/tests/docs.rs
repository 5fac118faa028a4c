use super::super::*;

/// docs/configuration.md quotes each default from its one definition (the API version's, `auto`,
/// is no constant: negotiation chooses it).
#[test]
fn docs_quote_the_defaults() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    // The "Default" column of the variable's row in the environment table.
    let default_of = |var: &str| -> String {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{var}` |")))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row for {var}"));
        row.split('|').nth(3).unwrap().trim().to_string()
    };
    for (var, want) in [
        (
            "FLYTE_SLURM_POLL_INTERVAL",
            format!("`{}s`", DEFAULT_POLL_INTERVAL.as_secs()),
        ),
        (
            "FLYTE_SLURM_TERMINAL_TTL",
            format!("`{}` s", DEFAULT_TERMINAL_TTL.as_secs()),
        ),
        (
            "FLYTE_SLURM_JWT_LIFETIME",
            format!("`{}` s", DEFAULT_TOKEN_LIFETIME.as_secs()),
        ),
        (
            "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES",
            format!("`{DEFAULT_UPLOAD_MAX_BYTES}`"),
        ),
        (
            "FLYTE_SLURM_JOB_FILES_RETENTION",
            format!("`{}d`", DEFAULT_RETENTION.as_secs() / 86_400),
        ),
        (
            "FLYTE_SLURM_SHUTDOWN_GRACE",
            format!("`{}s`", DEFAULT_SHUTDOWN_GRACE.as_secs()),
        ),
        (
            "FLYTE_SLURM_SUBMIT_WAIT",
            format!("`{}s`", DEFAULT_SUBMIT_WAIT.as_secs()),
        ),
        (
            "FLYTE_SLURM_SUBMITS_IN_FLIGHT",
            format!("`{DEFAULT_SUBMITS_IN_FLIGHT}`"),
        ),
        (
            "FLYTE_SLURM_CHECK_EVERY",
            format!("`{}s`", DEFAULT_CHECK_EVERY.as_secs()),
        ),
        (
            "FLYTE_SLURM_CLAIM_LEASE",
            format!("`{}s`", claims::DEFAULT_CLAIM_LEASE.as_secs()),
        ),
        (
            "FLYTE_SLURM_CONNECT_TIMEOUT",
            format!("`{}s`", DEFAULT_CONNECT_TIMEOUT.as_secs()),
        ),
        (
            "FLYTE_SLURM_REQUEST_TIMEOUT",
            format!("`{}s`", DEFAULT_REQUEST_TIMEOUT.as_secs()),
        ),
    ] {
        let have = default_of(var);
        assert!(
            have.starts_with(&want),
            "{var}: the docs say {have}, the code {want}"
        );
    }
}
