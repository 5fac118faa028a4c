//! slurmdbd's record of a Slurm user (`GET slurmdb/<v>/user/<name>?with_assocs`), as the start-up
//! check of identity rules needs it: that each rule's user exists on the cluster, is no
//! administrator, and has the rule's account. Read from every version's generated types at the
//! seam (`user_record` in convert/each_version/decode.rs; recorded on 24.11, v0.0.41, and 26.11rc1, v0.0.46:
//! `tests/fixtures/slurmrestd/*_slurmdb-user-*.json`).

/// What the connector needs of a user's accounting record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub name: String,
    /// `administrator_level`: `None`, `Operator` or `Administrator`.
    pub admin_level: String,
    /// The accounts of its associations on any cluster of the database, sorted.
    pub accounts: Vec<String>,
    pub default_account: String,
}
