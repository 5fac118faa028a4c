//! The one way a test skips because its environment is missing (a real Slurm, the flyteidl2
//! stubs, moto_server, ...), so that CI can turn a skip into a failure.
//!
//! A skipped test returns early and counts as passed; a CI run that claims a tier but lost its
//! environment would go green having tested nothing. `SLURM_CONNECTOR_REQUIRE_REAL` says which
//! tiers the environment provides, and a skip of one of those panics with the reason instead:
//! - `1` or `all`: every tier;
//! - a comma-separated list of tier names (`cluster,accounting,python,s3,gcs,azure`): those tiers, as
//!   `.ci/run` sets it per test invocation (the 24.11 run has no apptainer, the no-accounting
//!   run only runs its own test);
//! - unset or empty: nothing is required (a developer's machine).

use std::fmt::Display;

/// What a test needs from its environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// A dev cluster's environment (`eval "$(deploy/dev-cluster/dev-cluster env)"`).
    Cluster,
    /// The dev cluster with slurmdbd and a short MinJobAge (`--min-job-age 5`, the default `up`).
    Accounting,
    /// The dev cluster without slurmdbd (`--no-accounting`).
    NoAccounting,
    /// The dev cluster with apptainer (`--apptainer`).
    Apptainer,
    /// The dev cluster with several nodes and apptainer (`--apptainer --nodes 2`).
    Multinode,
    /// The dev cluster with Enroot + Pyxis (`--pyxis`) and its images pre-staged in /shared/images.
    Pyxis,
    /// The dev cluster with memory enforced and preemptible partitions (`--failure-modes`).
    FailureModes,
    /// The dev cluster with slurmctld's RPC rate limiting (`--rate-limit`).
    RateLimit,
    /// The dev cluster with a small `MaxJobCount` (`--max-job-count`, at most 20): a full
    /// slurmctld refusing submits (tests/real_failures.rs).
    MaxJobCount,
    /// The preemption drill asked for (`SLURM_CONNECTOR_PREEMPTION_DRILL=<tasks>`, on a
    /// `--failure-modes` cluster): many interruptible tasks preempted again and again, minutes
    /// of Slurm's requeue delays (tests/real_failures.rs).
    PreemptionDrill,
    /// A second dev cluster up beside the first (`SLURM_DEV_CLUSTER_OTHER_RELEASE` names its
    /// release): tests/real_two_clusters.rs.
    TwoClusters,
    /// A dev cluster the test may stop and kill the daemons of (`SLURM_DEV_CLUSTER_DRILLS=1`:
    /// nothing else runs on it meanwhile): tests/real_controller_drill.rs.
    ControllerDrills,
    /// `stunnel4` (Debian's package) and `openssl` on PATH: a TLS terminator in front of the dev
    /// cluster's slurmrestd (tests/real_identity/tls.rs).
    Tls,
    /// The dev cluster with Flyte 1's Python (`dev-cluster flyte1`: flytekit in the chroot).
    Flyte1,
    /// `SLURM_CONNECTOR_PYTHON`: a python with flyteidl2 and grpcio.
    Python,
    /// `moto_server` on PATH (`pip install 'moto[server]'`).
    S3,
    /// `moto_server` on PATH, serving GCS's XML API to object_store's gs:// client:
    /// tests/emulators/staging_gcs.rs.
    Gcs,
    /// `azurite-blob` on PATH (`npm install azurite`, its `node_modules/.bin`):
    /// tests/emulators/staging_azure.rs.
    Azure,
    /// The full upstream OpenAPI spec the committed one is trimmed from.
    OpenapiUpstream,
    /// `promtool` on PATH (Debian's `prometheus` package) and `SLURM_CONNECTOR_PYTHON` with
    /// helm-python-sdk (deploy/validate-chart.sh's venv): the chart's alerts run over the
    /// connector's own metrics (tests/it/alert_drills.rs).
    Promtool,
}

impl Tier {
    pub const ALL: [Tier; 20] = [
        Tier::Cluster,
        Tier::Accounting,
        Tier::NoAccounting,
        Tier::Apptainer,
        Tier::Multinode,
        Tier::Pyxis,
        Tier::FailureModes,
        Tier::RateLimit,
        Tier::MaxJobCount,
        Tier::PreemptionDrill,
        Tier::TwoClusters,
        Tier::ControllerDrills,
        Tier::Tls,
        Tier::Flyte1,
        Tier::Python,
        Tier::S3,
        Tier::Gcs,
        Tier::Azure,
        Tier::OpenapiUpstream,
        Tier::Promtool,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tier::Cluster => "cluster",
            Tier::Accounting => "accounting",
            Tier::NoAccounting => "no-accounting",
            Tier::Apptainer => "apptainer",
            Tier::Multinode => "multinode",
            Tier::Pyxis => "pyxis",
            Tier::FailureModes => "failure-modes",
            Tier::RateLimit => "rate-limit",
            Tier::MaxJobCount => "max-job-count",
            Tier::PreemptionDrill => "preemption-drill",
            Tier::TwoClusters => "two-clusters",
            Tier::ControllerDrills => "controller-drills",
            Tier::Tls => "tls",
            Tier::Flyte1 => "flyte1",
            Tier::Python => "python",
            Tier::S3 => "s3",
            Tier::Gcs => "gcs",
            Tier::Azure => "azure",
            Tier::OpenapiUpstream => "openapi-upstream",
            Tier::Promtool => "promtool",
        }
    }
}

pub const REQUIRE_VAR: &str = "SLURM_CONNECTOR_REQUIRE_REAL";

/// The tiers `value` (of [`REQUIRE_VAR`]) requires; an unknown name panics naming the known ones,
/// so a typo in CI cannot make the requirement quietly empty.
pub fn required(value: &str) -> Vec<Tier> {
    let value = value.trim();
    if value.is_empty() || value == "0" {
        return Vec::new();
    }
    if value == "1" || value == "all" {
        return Tier::ALL.to_vec();
    }
    value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            Tier::ALL
                .into_iter()
                .find(|t| t.name() == n)
                .unwrap_or_else(|| {
                    let known: Vec<_> = Tier::ALL.iter().map(|t| t.name()).collect();
                    panic!(
                        "{REQUIRE_VAR}={value}: unknown tier '{n}'; use 1, all, or a comma-separated \
                         list of {}",
                        known.join(", ")
                    )
                })
        })
        .collect()
}

/// Whether the environment says `tier` must run.
pub fn is_required(tier: Tier) -> bool {
    required(&std::env::var(REQUIRE_VAR).unwrap_or_default()).contains(&tier)
}

/// Reports that the calling test skips (the caller then returns) because `tier`'s environment is
/// missing; panics with `reason` instead when [`REQUIRE_VAR`] requires the tier.
#[track_caller]
pub fn skip(tier: Tier, reason: impl Display) {
    if is_required(tier) {
        panic!(
            "{REQUIRE_VAR} requires the '{}' tier, but this test would skip: {reason}",
            tier.name()
        );
    }
    eprintln!("skipping ({} tier): {reason}", tier.name());
}
