//! Where claims live (`service/submit/claim`: which job runs an execution, written only with
//! create-if-absent), whom they name as their holder, and how long a holding stands.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FLYTE_SLURM_CLAIMS` | `output-prefix` | `output-prefix`: under each execution's output prefix; or a URI of the connector's own (`s3://bucket/prefix`, `gs://`, `abfs://`, `file:///`) |
//! | `FLYTE_SLURM_CLAIMS_PROBE` | none | with `output-prefix`: a prefix in the store Flyte writes outputs to (its raw-data prefix), probed at start |
//! | `FLYTE_SLURM_REPLICA` | the host name | this replica's name in claims (the chart: the pod's name) |
//! | `FLYTE_SLURM_CLAIM_LEASE` | `180s` | how long a holding stands without a record before another replica may take it over |
//! | `FLYTE_SLURM_SINGLE_REPLICA` | `false` | the deployment runs one replica: a store without conditional writes is accepted |
//! | `FLYTE_SLURM_ONCE_ONLY` | `keys` | `claims`: every job is made once through its execution's claim (experimental; every replica alike) |

use std::time::Duration;

use super::ConfigError;
use super::env::{parse_bool, set_value};
use super::units::parse_duration;

/// `FLYTE_SLURM_CLAIM_LEASE`'s default: a holding must outlast the held submit (whose request may
/// take `service::cluster::SUBMIT_REQUEST_TIMEOUT`, 120 s, on a throttling slurmctld) and the
/// record after it. Safety does not rest on it (a record after a takeover is refused and its job
/// cancelled, never released); a lease shorter than a slow submit only makes a second replica
/// submit too, and one of the two held jobs is cancelled.
pub const DEFAULT_CLAIM_LEASE: Duration = Duration::from_secs(180);
/// The shortest lease: below it a slurmrestd that answers in seconds would see its holdings taken
/// over while they submit, each a held job submitted for nothing.
pub const MIN_CLAIM_LEASE: Duration = Duration::from_secs(30);
/// The longest lease: a replica that died holding an execution leaves it unsubmitted this long.
pub const MAX_CLAIM_LEASE: Duration = Duration::from_secs(3600);

/// Where the claims of executions are written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClaimLocation {
    /// Under each execution's output prefix (`<output_prefix>/.slurm-connector/claim/`): unique per
    /// Flyte attempt, and a store the deployment already writes outputs to.
    #[default]
    OutputPrefix,
    /// Under a prefix of the connector's own (`<prefix>/claims/<sha256 of the execution>/`), for a
    /// deployment whose credentials cannot write under Flyte's output prefixes.
    Prefix(String),
}

/// What keeps an execution to one job across retries, restarts and replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnceOnly {
    /// The execution's key in its job's name, found in slurmctld's and slurmdbd's listings
    /// (`submit/protocol.rs`, `submit/idempotency/`).
    #[default]
    Keys,
    /// The execution's claim (`submit/claim/`), for jobs of their own and coalesced arrays alike.
    /// Every replica must say the same: a replica of `keys` does not read claims. The path every
    /// CreateTask takes once the adoption of keyed jobs moves to claims.
    Claims,
}

/// The deployment's claim settings, decided once at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSettings {
    pub location: ClaimLocation,
    /// A prefix in the store outputs go to, probed at start for conditional writes (with
    /// [`ClaimLocation::OutputPrefix`], whose stores are otherwise known only from requests).
    pub probe: Option<String>,
    /// This replica's name in claims (`None`: the host name, which is the pod's in Kubernetes).
    pub replica: Option<String>,
    pub lease: Duration,
    /// One replica only: a store without conditional writes is accepted (nothing races it).
    pub single_replica: bool,
    /// Keys or claims (`FLYTE_SLURM_ONCE_ONLY`).
    pub once_only: OnceOnly,
}

impl Default for ClaimSettings {
    fn default() -> Self {
        ClaimSettings {
            location: ClaimLocation::OutputPrefix,
            probe: None,
            replica: None,
            lease: DEFAULT_CLAIM_LEASE,
            single_replica: false,
            once_only: OnceOnly::Keys,
        }
    }
}

impl ClaimSettings {
    /// The replica's name in claims: `FLYTE_SLURM_REPLICA`, else the host's name as the kernel
    /// has it (the pod's in Kubernetes; `HOSTNAME` is a shell variable, not always exported),
    /// else `slurm-connector`.
    pub fn replica_name(&self) -> String {
        self.replica.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "slurm-connector".into())
        })
    }

    /// The prefix the start-up probe writes under: the connector's own, else the one named for it.
    pub fn probe_prefix(&self) -> Option<&str> {
        match &self.location {
            ClaimLocation::Prefix(p) => Some(p),
            ClaimLocation::OutputPrefix => self.probe.as_deref(),
        }
    }
}

pub(super) fn apply(
    s: &mut ClaimSettings,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let var = |k: &str| set_value(get, k);
    if let Some(v) = var("FLYTE_SLURM_CLAIMS") {
        s.location = if v.eq_ignore_ascii_case("output-prefix") {
            ClaimLocation::OutputPrefix
        } else {
            ClaimLocation::Prefix(store_prefix(&v).map_err(|p| {
                ConfigError::invalid(
                    "FLYTE_SLURM_CLAIMS",
                    &v,
                    format!("{p}; or `output-prefix` (the default: claims under each task's output prefix)"),
                )
            })?)
        };
    }
    if let Some(v) = var("FLYTE_SLURM_CLAIMS_PROBE") {
        s.probe = Some(
            store_prefix(&v)
                .map_err(|p| ConfigError::invalid("FLYTE_SLURM_CLAIMS_PROBE", &v, p))?,
        );
    }
    if let Some(v) = var("FLYTE_SLURM_REPLICA") {
        s.replica =
            Some(replica_name(&v).map_err(|p| ConfigError::invalid("FLYTE_SLURM_REPLICA", &v, p))?);
    }
    if let Some(v) = var("FLYTE_SLURM_CLAIM_LEASE") {
        s.lease = parse_duration(&v)
            .and_then(check_lease)
            .map_err(|p| ConfigError::invalid("FLYTE_SLURM_CLAIM_LEASE", &v, p))?;
    }
    if let Some(v) = var("FLYTE_SLURM_SINGLE_REPLICA") {
        s.single_replica = parse_bool("FLYTE_SLURM_SINGLE_REPLICA", &v)?;
    }
    if let Some(v) = var("FLYTE_SLURM_ONCE_ONLY") {
        s.once_only = match v.to_ascii_lowercase().as_str() {
            "keys" => OnceOnly::Keys,
            "claims" => OnceOnly::Claims,
            _ => {
                return Err(ConfigError::invalid(
                    "FLYTE_SLURM_ONCE_ONLY",
                    &v,
                    "`keys` (the default: the execution's key in its job's name) or `claims` \
                     (experimental: each execution's claim in the object store; every replica alike)",
                ));
            }
        };
    }
    Ok(())
}

/// A store URI with a folder in it (`s3://bucket/prefix`): the schemes staging opens. Checked here
/// so a typo stops the start, not every CreateTask; by scheme and shape only, since `config`
/// comes before `staging` in lib.rs's order and cannot call `staging::objstore::open` (the
/// start-up probe opens it for real).
fn store_prefix(v: &str) -> Result<String, String> {
    const EXPECTED: &str = "expected s3://bucket/prefix, gs://bucket/prefix, \
                            abfs://container/prefix (or az://) or file:///absolute/path";
    let url = url::Url::parse(v).map_err(|e| format!("{e}: {EXPECTED}"))?;
    let folder = url.path().trim_matches('/');
    let ok = match url.scheme() {
        "s3" | "s3a" | "gs" | "abfs" | "abfss" | "az" | "azure" => {
            url.host_str().is_some_and(|h| !h.is_empty()) && !folder.is_empty()
        }
        "file" => url.host_str().is_none_or(str::is_empty) && !folder.is_empty(),
        _ => false,
    };
    if !ok {
        return Err(format!("not a folder in an object store: {EXPECTED}"));
    }
    Ok(v.trim_end_matches('/').to_string())
}

/// A name a claim can carry and an operator can read: letters, digits, `.`, `-`, `_`, at most 63
/// (a Kubernetes pod name fits).
fn replica_name(v: &str) -> Result<String, String> {
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if !ok {
        return Err(
            "at most 63 letters, digits, `.`, `-` or `_` (the chart sets the pod's name)".into(),
        );
    }
    Ok(v.to_string())
}

fn check_lease(d: Duration) -> Result<Duration, String> {
    if d < MIN_CLAIM_LEASE || d > MAX_CLAIM_LEASE {
        return Err(format!(
            "must be between {}s and {}s: longer than a held submit and its record take (the \
             default, {}s, outlasts the submit's 120 s timeout), short enough that a crashed \
             replica's tasks are taken over soon",
            MIN_CLAIM_LEASE.as_secs(),
            MAX_CLAIM_LEASE.as_secs(),
            DEFAULT_CLAIM_LEASE.as_secs()
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<ClaimSettings, ConfigError> {
        crate::config::applied(apply, vars)
    }

    #[test]
    fn defaults_put_claims_under_output_prefixes_with_nothing_probed() {
        let s = settings(&[]).unwrap();
        assert_eq!(s, ClaimSettings::default());
        assert_eq!(s.location, ClaimLocation::OutputPrefix);
        assert_eq!(s.probe_prefix(), None);
        assert_eq!(s.lease, Duration::from_secs(180));
        assert!(!s.single_replica);
    }

    #[test]
    fn a_connector_prefix_is_probed_and_a_probe_prefix_only_with_output_prefix() {
        let s = settings(&[("FLYTE_SLURM_CLAIMS", "s3://ops-bucket/slurm-connector/")]).unwrap();
        assert_eq!(
            s.location,
            ClaimLocation::Prefix("s3://ops-bucket/slurm-connector".into())
        );
        assert_eq!(s.probe_prefix(), Some("s3://ops-bucket/slurm-connector"));

        let s = settings(&[
            ("FLYTE_SLURM_CLAIMS", "output-prefix"),
            ("FLYTE_SLURM_CLAIMS_PROBE", "gs://flyte-data/raw"),
        ])
        .unwrap();
        assert_eq!(s.location, ClaimLocation::OutputPrefix);
        assert_eq!(s.probe_prefix(), Some("gs://flyte-data/raw"));

        let s = settings(&[("FLYTE_SLURM_CLAIMS", "file:///var/lib/claims")]).unwrap();
        assert_eq!(s.probe_prefix(), Some("file:///var/lib/claims"));
    }

    #[test]
    fn bad_values_name_the_variable_and_the_fix() {
        for (var, value, says) in [
            ("FLYTE_SLURM_CLAIMS", "s3://bucket-only", "not a folder"),
            ("FLYTE_SLURM_CLAIMS", "http://host/x", "not a folder"),
            ("FLYTE_SLURM_CLAIMS", "claims", "output-prefix"),
            (
                "FLYTE_SLURM_CLAIMS",
                "file://host/x",
                "file:///absolute/path",
            ),
            (
                "FLYTE_SLURM_CLAIMS_PROBE",
                "/data/raw",
                "s3://bucket/prefix",
            ),
            ("FLYTE_SLURM_REPLICA", "pod name", "letters, digits"),
            ("FLYTE_SLURM_CLAIM_LEASE", "10s", "between 30s and 3600s"),
            ("FLYTE_SLURM_CLAIM_LEASE", "2h", "between 30s and 3600s"),
            ("FLYTE_SLURM_CLAIM_LEASE", "soon", "soon"),
            ("FLYTE_SLURM_SINGLE_REPLICA", "maybe", "true or false"),
            ("FLYTE_SLURM_ONCE_ONLY", "claim", "`keys` (the default"),
        ] {
            let e = settings(&[(var, value)]).unwrap_err().to_string();
            assert!(e.starts_with(var), "{var}={value}: {e}");
            assert!(e.contains(says), "{var}={value}: {e}");
        }
    }

    #[test]
    fn replica_lease_and_single_replica_are_read() {
        let s = settings(&[
            ("FLYTE_SLURM_REPLICA", "slurm-connector-7d9f-x2k"),
            ("FLYTE_SLURM_CLAIM_LEASE", "90s"),
            ("FLYTE_SLURM_SINGLE_REPLICA", "true"),
            ("FLYTE_SLURM_ONCE_ONLY", "Claims"),
        ])
        .unwrap();
        assert_eq!(s.replica.as_deref(), Some("slurm-connector-7d9f-x2k"));
        assert_eq!(s.lease, Duration::from_secs(90));
        assert!(s.single_replica);
        assert_eq!(s.once_only, OnceOnly::Claims);
        assert_eq!(settings(&[]).unwrap().once_only, OnceOnly::Keys);
    }
}
