//! Which slurmrestd data_parser versions have a given part of the job description
//! (`job_desc_msg`): the per-version support column of the option table.
//!
//! Only the parts that are NOT in every version the connector speaks are listed; every other
//! field an option writes is in all of v0.0.40 to v0.0.46. Built from the upstream specs with
//! `scripts/job-desc-versions.py`, which prints every property and enum value of `job_desc_msg`
//! that some version lacks; rerun it when a version is added and extend this list. Parts the
//! script lists that no sbatch option writes (`container_type`, `runtime`, `step_id`,
//! `memory_update_*`, `power_flags`, `resv_mpi_ports`, the v0.0.40-only `exclusive` /
//! `oversubscribe` booleans, which `shared` supersedes in every version) are left out.

use crate::slurmrestd::ApiVersion;

/// A set of API versions.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Versions(u8);

const fn bit(v: ApiVersion) -> u8 {
    1 << (v as u8)
}

impl Versions {
    pub const ALL: Versions = Versions((1 << ApiVersion::ALL.len()) - 1);

    /// `v` and every newer version.
    pub const fn since(v: ApiVersion) -> Versions {
        Versions(Versions::ALL.0 & !(bit(v) - 1))
    }

    /// `v` and every older version.
    pub const fn until(v: ApiVersion) -> Versions {
        Versions(Versions::ALL.0 & ((bit(v) << 1) - 1))
    }

    pub const fn only(v: ApiVersion) -> Versions {
        Versions(bit(v))
    }

    pub const fn or(self, other: Versions) -> Versions {
        Versions(self.0 | other.0)
    }

    pub const fn and(self, other: Versions) -> Versions {
        Versions(self.0 & other.0)
    }

    pub const fn contains(self, v: ApiVersion) -> bool {
        self.0 & bit(v) != 0
    }

    pub fn iter(self) -> impl Iterator<Item = ApiVersion> {
        ApiVersion::ALL
            .into_iter()
            .filter(move |v| self.contains(*v))
    }

    /// How many versions: one reads "has", several "have".
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// `v0.0.40 and v0.0.45+`, `v0.0.40 to v0.0.43`, `v0.0.41+`: runs of consecutive versions, a
/// run reaching the newest written with `+`.
impl std::fmt::Display for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = ApiVersion::ALL;
        let mut runs = Vec::new();
        let mut i = 0;
        while i < all.len() {
            if !self.contains(all[i]) {
                i += 1;
                continue;
            }
            let mut j = i;
            while j + 1 < all.len() && self.contains(all[j + 1]) {
                j += 1;
            }
            runs.push(if j == i {
                all[i].to_string()
            } else if j == all.len() - 1 {
                format!("{}+", all[i])
            } else {
                format!("{} to {}", all[i], all[j])
            });
            i = j + 1;
        }
        match runs.len() {
            0 => f.write_str("no version"),
            1 => f.write_str(&runs[0]),
            n => write!(f, "{} and {}", runs[..n - 1].join(", "), runs[n - 1]),
        }
    }
}

impl std::fmt::Debug for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Versions({self})")
    }
}

/// Whether a [`Feature`] is a property of `job_desc_msg` or one value of an enum property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Field,
    Value,
}

/// A part of the job description that not every version has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// As the spec spells it: `cores_per_socket`, or `shared: topo` for an enum value.
    pub name: &'static str,
    pub part: Part,
    pub versions: Versions,
}

use ApiVersion::*;

/// `cores_per_socket`: v0.0.41 dropped it, v0.0.45 brought it back.
pub const CORES_PER_SOCKET: Feature = Feature {
    name: "cores_per_socket",
    part: Part::Field,
    versions: Versions::only(V0040).or(Versions::since(V0045)),
};

/// `oom_kill_step`: added in v0.0.42 (with sbatch's `--oom-kill-step`, Slurm 24.11).
pub const OOM_KILL_STEP: Feature = Feature {
    name: "oom_kill_step",
    part: Part::Field,
    versions: Versions::since(V0042),
};

/// `segment_size`: added in v0.0.41.
pub const SEGMENT_SIZE: Feature = Feature {
    name: "segment_size",
    part: Part::Field,
    versions: Versions::since(V0041),
};

/// `shared: topo` (`--exclusive=topo`): v0.0.40's `job_shared` has none, user, mcs, oversubscribe.
pub const SHARED_TOPO: Feature = Feature {
    name: "shared: topo",
    part: Part::Value,
    versions: Versions::since(V0041),
};

/// `flags: STEPMGR_ENABLED` (`--stepmgr`): added in v0.0.41.
pub const FLAG_STEPMGR_ENABLED: Feature = Feature {
    name: "flags: STEPMGR_ENABLED",
    part: Part::Value,
    versions: Versions::since(V0041),
};

/// `memory_binding_type: SORT` (`--mem-bind=sort`): gone from v0.0.44.
pub const MEM_BIND_SORT: Feature = Feature {
    name: "memory_binding_type: SORT",
    part: Part::Value,
    versions: Versions::until(V0043),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_read_as_version_ranges() {
        assert_eq!(
            CORES_PER_SOCKET.versions.to_string(),
            "v0.0.40 and v0.0.45+"
        );
        assert_eq!(MEM_BIND_SORT.versions.to_string(), "v0.0.40 to v0.0.43");
        assert_eq!(SEGMENT_SIZE.versions.to_string(), "v0.0.41+");
        assert_eq!(Versions::only(V0046).to_string(), "v0.0.46");
        assert_eq!(
            Versions::only(V0040)
                .or(Versions::only(V0042))
                .or(Versions::only(V0046))
                .to_string(),
            "v0.0.40, v0.0.42 and v0.0.46"
        );
        assert_eq!(Versions::ALL.to_string(), "v0.0.40+");
        assert_eq!(Versions::ALL.len() as usize, ApiVersion::ALL.len());
        assert!(!CORES_PER_SOCKET.versions.contains(V0042));
        assert!(
            CORES_PER_SOCKET.versions.contains(V0040) && CORES_PER_SOCKET.versions.contains(V0046)
        );
        assert_eq!(Versions::until(V0040), Versions::only(V0040));
        assert_eq!(Versions::since(V0046), Versions::only(V0046));
    }
}
