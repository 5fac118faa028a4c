//! Which slurmrestd data_parser versions have a given part of the job description
//! (`job_desc_msg`): the per-version support column of the option table.
//!
//! Only the parts that are NOT in every version the connector speaks are listed; every other
//! field an option writes is in all of v0.0.40 to v0.0.46. Built from the upstream specs with
//! `scripts/job-desc-versions.py`, which prints every property and enum value of `job_desc_msg`
//! that some version lacks; rerun it when a version is added and extend this list (the test
//! below checks it against the committed specs and fails on a difference it does not know). Parts the
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

impl Feature {
    /// A field of the job description that only `versions` have.
    const fn field(name: &'static str, versions: Versions) -> Feature {
        Feature {
            name,
            part: Part::Field,
            versions,
        }
    }

    /// A value of an enum field that only `versions` have.
    const fn value(name: &'static str, versions: Versions) -> Feature {
        Feature {
            name,
            part: Part::Value,
            versions,
        }
    }
}

use ApiVersion::*;

/// `cores_per_socket`: v0.0.41 dropped it, v0.0.45 brought it back.
pub const CORES_PER_SOCKET: Feature = Feature::field(
    "cores_per_socket",
    Versions::only(V0040).or(Versions::since(V0045)),
);

/// `oom_kill_step`: added in v0.0.42 (with sbatch's `--oom-kill-step`, Slurm 24.11).
pub const OOM_KILL_STEP: Feature = Feature::field("oom_kill_step", Versions::since(V0042));

/// `segment_size`: added in v0.0.41.
pub const SEGMENT_SIZE: Feature = Feature::field("segment_size", Versions::since(V0041));

/// `shared: topo` (`--exclusive=topo`): v0.0.40's `job_shared` has none, user, mcs, oversubscribe.
pub const SHARED_TOPO: Feature = Feature::value("shared: topo", Versions::since(V0041));

/// `flags: STEPMGR_ENABLED` (`--stepmgr`): added in v0.0.41.
pub const FLAG_STEPMGR_ENABLED: Feature =
    Feature::value("flags: STEPMGR_ENABLED", Versions::since(V0041));

/// `memory_binding_type: SORT` (`--mem-bind=sort`): gone from v0.0.44.
pub const MEM_BIND_SORT: Feature =
    Feature::value("memory_binding_type: SORT", Versions::until(V0043));

/// Every part above (the options' `needs` and `values_need` name them).
pub const ALL: &[Feature] = &[
    CORES_PER_SOCKET,
    OOM_KILL_STEP,
    SEGMENT_SIZE,
    SHARED_TOPO,
    FLAG_STEPMGR_ENABLED,
    MEM_BIND_SORT,
];

/// Parts `scripts/job-desc-versions.py` lists that no sbatch 24.11 option writes, so no option
/// depends on them (checked against the committed specs below, so a new difference is noticed).
#[cfg(test)]
const NOT_WRITTEN: &[&str] = &[
    // Not sbatch 24.11 options, or set by slurmrestd itself.
    "container_type",
    "runtime",
    "step_id",
    "memory_update_delay",
    "memory_update_margin",
    "power_flags",
    "resv_mpi_ports",
    // v0.0.40's booleans beside `shared`, which expresses --exclusive/--oversubscribe everywhere.
    "exclusive",
    "oversubscribe",
    "exclusive: topo",
    "cpu_binding_flags: CPU_BIND_RANK",
    "kill_warning_flags: NO_CRON_JOBS",
    // Job flags no sbatch 24.11 option maps to here (--gres-flags=*-sharing: only v0.0.40 has
    // them; the connector refuses those values).
    "flags: CONSOLIDATE_SEGMENTS",
    "flags: EXPEDITED_REQUEUE",
    "flags: EXTERNAL_JOB",
    "flags: GRES_ALLOW_TASK_SHARING",
    "flags: GRES_MULTIPLE_TASKS_PER_SHARING",
    "flags: GRES_ONE_TASK_PER_SHARING",
    "flags: JOB_IMPLICIT_MAX_NODES",
    "flags: RESET_CONSOLIDATE_SEGMENTS",
    "flags: RESET_SPREAD_SEGMENTS",
    "flags: SAVE_BATCH_SCRIPT",
    "flags: SPREAD_SEGMENTS",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// `field` and `field: VALUE` for every property and enum value of `<v>_job_desc_msg`.
    fn parts(spec: &serde_json::Value, v: ApiVersion) -> BTreeSet<String> {
        let schemas = &spec["components"]["schemas"];
        fn enum_values(
            schemas: &serde_json::Value,
            node: &serde_json::Value,
            depth: u8,
        ) -> Vec<String> {
            if depth > 8 {
                return vec![];
            }
            if let Some(r) = node["$ref"].as_str() {
                let name = r.rsplit('/').next().unwrap_or_default();
                return enum_values(schemas, &schemas[name], depth + 1);
            }
            // Upstream specs say `enum`; the committed trimmed ones `x-slurm-enum`.
            for key in ["enum", "x-slurm-enum"] {
                if let Some(e) = node[key].as_array() {
                    return e
                        .iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect();
                }
            }
            if node["type"] == "array" {
                return enum_values(schemas, &node["items"], depth + 1);
            }
            vec![]
        }
        // Upstream names it `v0.0.NN_job_desc_msg`; the trimmed specs drop the prefix.
        let msg = &schemas[format!("{v}_job_desc_msg")];
        let msg = if msg.is_null() {
            &schemas["job_desc_msg"]
        } else {
            msg
        };
        let props = msg["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{v}: no {v}_job_desc_msg in the spec"));
        let mut out = BTreeSet::new();
        for (name, prop) in props {
            out.insert(name.clone());
            for value in enum_values(schemas, prop, 0) {
                out.insert(format!("{name}: {value}"));
            }
        }
        out
    }

    /// The table agrees with every committed spec (`openapi/slurmrestd-<v>.json`, the ones the
    /// clients are generated from), and every part some of them lack is either in the table or
    /// known not to be written by any option.
    #[test]
    fn the_table_matches_the_committed_specs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi");
        let mut specs = BTreeMap::new();
        for v in ApiVersion::ALL {
            if let Ok(text) = std::fs::read_to_string(root.join(format!("slurmrestd-{v}.json"))) {
                specs.insert(v, parts(&serde_json::from_str(&text).unwrap(), v));
            }
        }
        assert_eq!(
            specs.len(),
            ApiVersion::ALL.len(),
            "one committed spec per version"
        );
        for (v, have) in &specs {
            for f in ALL {
                assert_eq!(
                    have.contains(f.name),
                    f.versions.contains(*v),
                    "{} in {v}",
                    f.name
                );
            }
        }
        let every: BTreeSet<&String> = specs.values().flatten().collect();
        for part in every {
            // A value counts where its field is (as the script prints it).
            let field = part.split(": ").next().unwrap_or_default();
            let in_all = specs
                .values()
                .filter(|p| p.contains(field))
                .all(|p| p.contains(part));
            assert!(
                in_all
                    || ALL.iter().any(|f| f.name == part)
                    || NOT_WRITTEN.contains(&part.as_str()),
                "{part} is not in every version: add it to render/options/versions.rs"
            );
        }
    }

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
