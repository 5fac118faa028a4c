//! Configuration of one mock cluster: its size, its token key, which Slurm it imitates.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::faults::FaultConfig;

/// Which real Slurm release the mock imitates where releases differ (status of a rejected
/// submit, error numbers, comma-list answers, `meta.slurm`). Each served API version answers as a
/// release that really serves it: the configured one when it does, else the nearest one that does
/// (see [`SlurmVersion::for_api`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum SlurmVersion {
    /// Slurm 24.11.5 (serves v0.0.40-42): a rejected submit is HTTP 500; no environment -> error
    /// 2019; comma lists -> 400; unknown paths -> 404 `Unable find requested URL. ...`.
    #[default]
    V24_11,
    /// Slurm 26.05.5 (serves v0.0.42-45): a rejected submit is HTTP 422; no environment -> error
    /// 2127; comma lists -> 500/404; unknown paths -> 404 `Unable to find requested URL
    /// endpoint. ...`.
    V26_05,
    /// Slurm 26.11.0-0rc1 (serves v0.0.43-46): like 26.05 in every recorded case but unknown
    /// paths -> 404 `Invalid or unknown URL path`.
    V26_11,
}

impl SlurmVersion {
    /// Every release the mock can imitate, oldest first.
    pub const ALL: [SlurmVersion; 3] = [
        SlurmVersion::V24_11,
        SlurmVersion::V26_05,
        SlurmVersion::V26_11,
    ];

    /// (major, minor, micro, release) as slurmrestd reports them in `meta.slurm`.
    pub fn parts(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            SlurmVersion::V24_11 => ("24", "11", "5", "24.11.5"),
            SlurmVersion::V26_05 => ("26", "05", "5", "26.05.5"),
            SlurmVersion::V26_11 => ("26", "11", "0", "26.11.0-0rc1"),
        }
    }

    /// The data_parser versions this release serves (recorded: `slurmrestd -d list` and
    /// `GET /slurm/<v>/ping/` on the real clusters; everything else answers 404).
    pub fn api_versions(self) -> &'static [ApiVersion] {
        use ApiVersion::*;
        match self {
            SlurmVersion::V24_11 => &[V0_0_40, V0_0_41, V0_0_42],
            SlurmVersion::V26_05 => &[V0_0_42, V0_0_43, V0_0_44, V0_0_45],
            SlurmVersion::V26_11 => &[V0_0_43, V0_0_44, V0_0_45, V0_0_46],
        }
    }

    pub fn serves(self, api: ApiVersion) -> bool {
        self.api_versions().contains(&api)
    }

    /// The release whose behaviour `api` gets when the mock is configured as `self`: `self`
    /// when it serves `api`, else the nearest release that does (v0.0.46 on a "24.11" mock
    /// answers as 26.11, v0.0.40 on a "26.05" mock as 24.11), so `meta.slurm.release` always
    /// names a release that really serves the version it answers for.
    pub fn for_api(self, api: ApiVersion) -> SlurmVersion {
        let idx = |r: SlurmVersion| Self::ALL.iter().position(|x| *x == r).unwrap_or(0) as i32;
        let me = idx(self);
        Self::ALL
            .iter()
            .copied()
            .filter(|r| r.serves(api))
            .min_by_key(|r| ((idx(*r) - me).abs(), -idx(*r)))
            .unwrap_or(self)
    }

    /// Whether this release answers like 24.11 (rather than 26.05 and later) where they differ.
    pub(crate) fn is_24_11(self) -> bool {
        self == SlurmVersion::V24_11
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown Slurm version {0:?}: use 24.11, 26.05 or 26.11")]
pub struct UnknownVersion(String);

impl FromStr for SlurmVersion {
    type Err = UnknownVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "24.11" | "24.11.5" => Ok(SlurmVersion::V24_11),
            "26.05" | "26.05.5" => Ok(SlurmVersion::V26_05),
            "26.11" | "26.11.0" | "26.11.0-0rc1" | "26.11rc1" => Ok(SlurmVersion::V26_11),
            other => Err(UnknownVersion(other.to_string())),
        }
    }
}

/// A slurmrestd data_parser (API) version: the `v0.0.NN` in `/slurm/v0.0.NN/...`. Each has its
/// own JSON shapes (taken from the recordings of that version) and its own accepted job fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiVersion {
    V0_0_40,
    V0_0_41,
    V0_0_42,
    V0_0_43,
    V0_0_44,
    V0_0_45,
    V0_0_46,
}

impl ApiVersion {
    /// Every version the mock implements, oldest first (also the default of
    /// [`MockConfig::api_versions`]).
    pub const ALL: [ApiVersion; 7] = [
        ApiVersion::V0_0_40,
        ApiVersion::V0_0_41,
        ApiVersion::V0_0_42,
        ApiVersion::V0_0_43,
        ApiVersion::V0_0_44,
        ApiVersion::V0_0_45,
        ApiVersion::V0_0_46,
    ];

    /// `"v0.0.42"`, as in the URL.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V0_0_40 => "v0.0.40",
            ApiVersion::V0_0_41 => "v0.0.41",
            ApiVersion::V0_0_42 => "v0.0.42",
            ApiVersion::V0_0_43 => "v0.0.43",
            ApiVersion::V0_0_44 => "v0.0.44",
            ApiVersion::V0_0_45 => "v0.0.45",
            ApiVersion::V0_0_46 => "v0.0.46",
        }
    }

    /// The minor number (40 for v0.0.40), for "from this version on" checks.
    pub(crate) fn minor(self) -> u32 {
        match self {
            ApiVersion::V0_0_40 => 40,
            ApiVersion::V0_0_41 => 41,
            ApiVersion::V0_0_42 => 42,
            ApiVersion::V0_0_43 => 43,
            ApiVersion::V0_0_44 => 44,
            ApiVersion::V0_0_45 => 45,
            ApiVersion::V0_0_46 => 46,
        }
    }

    /// A comma-separated list (`"v0.0.42,v0.0.46"`, the `--api-versions` flag), sorted and
    /// without duplicates; errors name the bad entry.
    pub fn parse_list(s: &str) -> Result<Vec<ApiVersion>, UnknownApiVersion> {
        let mut out: Vec<ApiVersion> = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err(UnknownApiVersion(s.to_string()));
        }
        Ok(out)
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "unknown slurmrestd API version {0:?}: use v0.0.40, v0.0.41, v0.0.42, v0.0.43, v0.0.44, v0.0.45 or v0.0.46 (comma-separated for several)"
)]
pub struct UnknownApiVersion(String);

impl FromStr for ApiVersion {
    type Err = UnknownApiVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        ApiVersion::ALL
            .iter()
            .copied()
            .find(|v| v.as_str() == t || v.as_str()[1..] == *t)
            .ok_or_else(|| UnknownApiVersion(s.to_string()))
    }
}

/// Everything a [`crate::MockServer`] needs. `Default` is a one-node, 8-CPU cluster like the
/// recorded one, with an EMPTY jwt key: set `jwt_key` (an empty key rejects every token).
#[derive(Clone)]
pub struct MockConfig {
    /// CPUs per node.
    pub cpus: u32,
    /// Number of nodes (named node1..nodeN).
    pub nodes: u32,
    /// Raw bytes of the HS256 key (the same file slurmctld's `AuthAltParameters=jwt_key=` names).
    pub jwt_key: Vec<u8>,
    /// Slurm's SlurmUser: a token for this user (or root) may act for any user via X-SLURM-USER-NAME.
    pub slurm_user: String,
    /// MinJobAge: how long a finished job stays visible to slurmctld endpoints before it ages out
    /// into the accounting (slurmdb) view only.
    pub min_job_age: Duration,
    /// How long one minute of a job's `time_limit` lasts. 60 s like the real one; tests shrink it.
    pub minute: Duration,
    /// KillWait: time between SIGTERM and SIGKILL when a job is cancelled or times out.
    pub kill_wait: Duration,
    pub cluster_name: String,
    /// The only partition (the default one).
    pub partition: String,
    /// Where job scripts are written (one folder per job). `None`: a fresh temp folder.
    pub state_dir: Option<PathBuf>,
    pub slurm_version: SlurmVersion,
    /// The data_parser versions served under `/slurm/<v>/` and `/slurmdb/<v>/`; any other version
    /// answers 404 like the real one. Default: [`ApiVersion::ALL`] (v0.0.40-46), a superset of
    /// every release, so a client of any version finds its own and version negotiation picks
    /// the newest. Imitate one real release with [`MockConfig::imitating`].
    pub api_versions: Vec<ApiVersion>,
    /// The first job id handed out.
    pub first_job_id: u32,
    /// slurmdbd is configured: `false` imitates a cluster without accounting (slurmrestd run
    /// with `-s openapi/slurmctld`: every slurmdb path is an unknown path, 404).
    pub accounting: bool,
    /// Faults active from the start (change them later through the handle or `/mock/faults`).
    pub faults: FaultConfig,
    /// slurm.conf's `MaxJobCount`: past it a submit is refused as the release refuses it (24.11:
    /// EAGAIN once `MaxJobCount - 1` jobs are held, HTTP 500; 26.05+: 2007 past `MaxJobCount`,
    /// HTTP 422; recorded, `tests/fixtures/slurmrestd/*_maxjobs-*.json`). Every array element
    /// counts. `None`: no limit (Slurm's default of 10 000 is never reached by a test).
    pub max_job_count: Option<usize>,
    /// slurm.conf's `AccountingStoreFlags` has `job_comment`: slurmdbd's records carry each
    /// job's comment. `false` imitates Slurm's default (no flags): slurmdbd keeps no comment.
    pub job_comment: bool,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            cpus: 8,
            nodes: 1,
            jwt_key: Vec::new(),
            slurm_user: "slurm".to_string(),
            min_job_age: Duration::from_secs(300),
            minute: Duration::from_secs(60),
            kill_wait: Duration::from_secs(5),
            cluster_name: "mock".to_string(),
            partition: "debug".to_string(),
            state_dir: None,
            slurm_version: SlurmVersion::V24_11,
            api_versions: ApiVersion::ALL.to_vec(),
            first_job_id: 1,
            accounting: true,
            faults: FaultConfig::default(),
            max_job_count: None,
            job_comment: true,
        }
    }
}

// The key must never reach logs: Debug shows only its length.
impl fmt::Debug for MockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockConfig")
            .field("cpus", &self.cpus)
            .field("nodes", &self.nodes)
            .field(
                "jwt_key",
                &format_args!("<{} bytes redacted>", self.jwt_key.len()),
            )
            .field("slurm_user", &self.slurm_user)
            .field("min_job_age", &self.min_job_age)
            .field("minute", &self.minute)
            .field("kill_wait", &self.kill_wait)
            .field("cluster_name", &self.cluster_name)
            .field("partition", &self.partition)
            .field("state_dir", &self.state_dir)
            .field("slurm_version", &self.slurm_version)
            .field("max_job_count", &self.max_job_count)
            .field("job_comment", &self.job_comment)
            .field("api_versions", &self.api_versions)
            .field("first_job_id", &self.first_job_id)
            .field("faults", &self.faults)
            .finish()
    }
}

impl MockConfig {
    /// The default configuration imitating one real release: its behaviour and exactly the API
    /// versions it serves (24.11: v0.0.40-42; 26.05: v0.0.42-45; 26.11: v0.0.43-46).
    pub fn imitating(release: SlurmVersion) -> MockConfig {
        MockConfig {
            slurm_version: release,
            api_versions: release.api_versions().to_vec(),
            ..MockConfig::default()
        }
    }

    /// Whether `/slurm/<api>/...` is served.
    pub fn serves(&self, api: ApiVersion) -> bool {
        self.api_versions.contains(&api)
    }

    /// Node names as the job records show them.
    pub fn node_name(&self, index: usize) -> String {
        format!("node{}", index + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_lists() {
        assert_eq!(
            ApiVersion::parse_list(" v0.0.46,v0.0.42,0.0.42 ").unwrap(),
            vec![ApiVersion::V0_0_42, ApiVersion::V0_0_46]
        );
        let e = ApiVersion::parse_list("v0.0.42,v0.0.39").unwrap_err();
        assert!(e.to_string().contains("\"v0.0.39\""), "{e}");
        assert!(ApiVersion::parse_list(" , ").is_err());
        assert_eq!(
            "v0.0.44".parse::<ApiVersion>().unwrap().to_string(),
            "v0.0.44"
        );
    }

    #[test]
    fn each_version_answers_as_a_release_that_serves_it() {
        use ApiVersion::*;
        use SlurmVersion::*;
        for release in SlurmVersion::ALL {
            for api in ApiVersion::ALL {
                let r = release.for_api(api);
                assert!(r.serves(api), "{release:?} {api}");
                if release.serves(api) {
                    assert_eq!(r, release);
                }
            }
        }
        assert_eq!(V24_11.for_api(V0_0_43), V26_05);
        assert_eq!(V24_11.for_api(V0_0_46), V26_11);
        assert_eq!(V26_11.for_api(V0_0_42), V26_05);
        assert_eq!(V26_11.for_api(V0_0_40), V24_11);
        assert_eq!(
            MockConfig::imitating(V26_05).api_versions,
            vec![V0_0_42, V0_0_43, V0_0_44, V0_0_45]
        );
    }
}
