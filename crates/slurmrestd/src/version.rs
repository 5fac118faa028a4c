//! The slurmrestd data_parser versions this connector speaks, and which Slurm releases serve them.
//!
//! A version is the `v0.0.NN` in every URL (`/slurm/v0.0.42/job/submit`). Each Slurm release
//! serves a window of them and drops the oldest as it adds one, so a connector that is to reach
//! every Slurm of the last three years speaks them all and picks, per cluster, the newest that
//! both sides serve (see `slurmrestd::negotiate`).

use std::fmt;
use std::str::FromStr;

/// One data_parser version. Ordered: a later variant is a newer version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiVersion {
    V0040,
    V0041,
    V0042,
    V0043,
    V0044,
    V0045,
    V0046,
}

impl ApiVersion {
    /// Every version the connector speaks, oldest first.
    pub const ALL: [ApiVersion; 7] = [
        ApiVersion::V0040,
        ApiVersion::V0041,
        ApiVersion::V0042,
        ApiVersion::V0043,
        ApiVersion::V0044,
        ApiVersion::V0045,
        ApiVersion::V0046,
    ];
    pub const OLDEST: ApiVersion = ApiVersion::V0040;
    pub const NEWEST: ApiVersion = ApiVersion::V0046;

    /// As it appears in URLs and configuration: `v0.0.42`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V0040 => "v0.0.40",
            ApiVersion::V0041 => "v0.0.41",
            ApiVersion::V0042 => "v0.0.42",
            ApiVersion::V0043 => "v0.0.43",
            ApiVersion::V0044 => "v0.0.44",
            ApiVersion::V0045 => "v0.0.45",
            ApiVersion::V0046 => "v0.0.46",
        }
    }

    /// The Slurm releases that serve this version, from each release's notes (shown to people
    /// choosing or debugging a version; never used to decide anything).
    pub const fn served_by(self) -> &'static str {
        match self {
            ApiVersion::V0040 => "23.11 to 25.05",
            ApiVersion::V0041 => "24.05 to 25.11",
            ApiVersion::V0042 => "24.11 to 26.05",
            ApiVersion::V0043 => "25.05 to 26.11",
            ApiVersion::V0044 => "25.11 and later",
            ApiVersion::V0045 => "26.05 and later",
            ApiVersion::V0046 => "26.11 and later",
        }
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A version string this connector does not speak.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "slurmrestd API version {given:?} is not one this connector speaks ({})",
    supported_list()
)]
pub struct UnknownApiVersion {
    pub given: String,
}

/// `v0.0.40, v0.0.41, ...` for messages.
pub fn supported_list() -> String {
    ApiVersion::ALL
        .iter()
        .map(|v| v.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// As its name (`"v0.0.40"`): a job description carries it in a deferred `resource_meta`.
impl serde::Serialize for ApiVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ApiVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for ApiVersion {
    type Err = UnknownApiVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        ApiVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == t)
            .ok_or_else(|| UnknownApiVersion {
                given: t.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_orders() {
        for v in ApiVersion::ALL {
            assert_eq!(v.as_str().parse::<ApiVersion>(), Ok(v));
        }
        assert!(ApiVersion::V0046 > ApiVersion::V0042);
        assert_eq!(ApiVersion::ALL.first(), Some(&ApiVersion::OLDEST));
        assert_eq!(ApiVersion::ALL.last(), Some(&ApiVersion::NEWEST));
    }

    #[test]
    fn unknown_names_what_is_spoken() {
        let e = "v0.0.39".parse::<ApiVersion>().unwrap_err().to_string();
        assert!(
            e.contains("v0.0.39") && e.contains("v0.0.40") && e.contains("v0.0.46"),
            "{e}"
        );
    }
}
