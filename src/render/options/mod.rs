//! THE sbatch options (Slurm 24.11), one item each in [`defs`]: its names and argument, what the
//! connector does with it (the docs), the function that writes it into the job description, the
//! versions of the job description that can express it, and its own test case. Directive
//! parsing, `sbatch_options` validation, rendering (`apply`, a loop over the items) and the
//! generated documentation (`docs/sbatch-options.md`) all read these items, so an option cannot
//! be supported in one place and unknown in another. Modelled on ripgrep's `flags/defs.rs`.

mod defs;
pub(super) mod values;
pub mod versions;

use std::fmt;

#[cfg(test)]
pub(crate) use defs::CASE_NOW;
pub use defs::OPTIONS;

use crate::slurmrestd::ApiVersion;
use crate::slurmrestd::job_description::JobDescription;

use super::error::{Origin, RenderError};
use versions::{Feature, Versions};

/// Whether an option takes an argument (getopt_long's `has_arg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    None,
    Required,
    /// Only as `--opt=value` (or attached to a short option, `-kvalue`).
    Optional,
}

/// Writes one option occurrence into the job being built.
pub type Setter = fn(&RawOption, &mut Target<'_>) -> Result<(), RenderError>;

/// An option's own test: given this value (`None`: the bare flag), the rendered job passes
/// `check` (run for every item by `apply`'s tests, on each version that can express it).
#[derive(Clone, Copy)]
pub struct Case {
    pub given: Option<&'static str>,
    pub check: fn(&JobDescription, &Applied) -> bool,
}

/// A value of an option that needs a part of the job description not every version has (the
/// option's other values work everywhere its `needs` allow).
#[derive(Debug, Clone, Copy)]
pub struct ValueNeeds {
    /// The value as written, for the docs and the test (`sort`, `memory_bound`, `2:4:1`).
    pub example: &'static str,
    /// Which values: shown in the docs.
    pub which: &'static str,
    pub needs: Feature,
}

/// An option that becomes job-description fields.
#[derive(Clone, Copy)]
pub struct Mapped {
    /// The fields it writes, for the docs.
    pub fields: &'static str,
    pub set: Setter,
    /// Parts of the job description the option always needs that not every version has.
    pub needs: &'static [Feature],
    /// Values that need more than `needs` (checked by `set` with [`Target::require`]).
    pub values_need: &'static [ValueNeeds],
    pub case: Case,
}

/// What rendering does with an option.
#[derive(Clone, Copy)]
pub enum Support {
    Mapped(Mapped),
    /// Set by the connector. From task config: refused. From a script directive: `job-name`,
    /// `output`, `error`, `chdir` are overridden (as the connector's own options would be on the
    /// sbatch command line); `wrap`, `uid`, `gid` are refused.
    Reserved,
    /// Changes only what the sbatch command prints or whether it blocks; the job is the same.
    /// Accepted and has no effect (logged).
    ClientOnly,
    /// Cannot be expressed in any version's job description, or would need the submit host.
    Refused(&'static str),
}

/// One sbatch option.
#[derive(Clone, Copy)]
pub struct OptSpec {
    pub long: &'static str,
    pub short: Option<char>,
    pub arg: Arg,
    /// Options that write the same field share a slot named after one of them, so the later
    /// replaces the earlier (`--requeue` / `--no-requeue`, `--exclusive` / `--oversubscribe`).
    pub slot: Option<&'static str>,
    pub support: Support,
}

impl OptSpec {
    pub fn slot(&self) -> &'static str {
        self.slot.unwrap_or(self.long)
    }

    /// The versions whose job description can express the option (with at least one value).
    pub fn versions(&self) -> Versions {
        match &self.support {
            Support::Mapped(m) => m
                .needs
                .iter()
                .fold(Versions::ALL, |acc, f| acc.and(f.versions)),
            // Handled alike in every version (reserved, no effect, or refused everywhere).
            _ => Versions::ALL,
        }
    }

    pub fn mapped(&self) -> Option<&Mapped> {
        match &self.support {
            Support::Mapped(m) => Some(m),
            _ => None,
        }
    }

    /// Mapped and expressible in `version`.
    pub fn supported_in(&self, version: ApiVersion) -> bool {
        self.mapped().is_some() && self.versions().contains(version)
    }
}

// Items are compared by name (names are unique, see the tests); the setters are functions.
impl PartialEq for OptSpec {
    fn eq(&self, other: &Self) -> bool {
        self.long == other.long
    }
}
impl Eq for OptSpec {}

impl fmt::Debug for OptSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}", self.long)
    }
}

/// One option occurrence, before interpretation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawOption {
    pub spec: &'static OptSpec,
    pub value: Option<String>,
    pub origin: Origin,
}

/// Context for options whose meaning depends on the submit time and place.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: i64,
    pub utc_offset: i32,
}

/// What the rest of rendering needs to know about the options besides the job fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// The job asks for GPUs (`--gres=...gpu...`, `--gpus*`): Apptainer needs `--nv`.
    pub gpus_requested: bool,
    /// `--comment`, to be combined with the connector's key.
    pub user_comment: Option<String>,
}

/// The job being built from the effective options, and what the setters share.
pub struct Target<'a> {
    pub job: &'a mut JobDescription,
    pub applied: Applied,
    pub clock: Clock,
    /// The version the job description is rendered for.
    pub version: ApiVersion,
    /// Every effective option (some options conflict with others).
    pub given: &'a [RawOption],
    /// TRES strings several options contribute to, joined by `apply` in sbatch's order:
    /// `--gres` entries, then `--gpus-per-node`; `--tres-per-task` then `--gpus-per-task`.
    pub gres_per_node: Vec<String>,
    pub gpus_per_node: Vec<String>,
    pub per_task: Vec<String>,
}

impl Target<'_> {
    pub fn has(&self, long: &str) -> bool {
        self.given.iter().any(|o| o.spec.long == long)
    }

    /// Refuses `o` (with `value` if only that value needs it) when the version in use lacks
    /// `feature`, naming the versions that have it.
    pub fn require(
        &self,
        o: &RawOption,
        value: Option<&str>,
        feature: Feature,
    ) -> Result<(), RenderError> {
        require(self.version, o, value, feature)
    }
}

pub(super) fn require(
    version: ApiVersion,
    o: &RawOption,
    value: Option<&str>,
    feature: Feature,
) -> Result<(), RenderError> {
    if feature.versions.contains(version) {
        return Ok(());
    }
    Err(RenderError::NotInApiVersion {
        origin: o.origin.clone(),
        option: o.spec.long.to_string(),
        value: value.map(str::to_string),
        feature,
        version,
    })
}

/// Options a directive may name but the connector overrides (it always sets these fields).
pub const OVERRIDDEN_FROM_SCRIPT: &[&str] = &["job-name", "output", "error", "chdir"];

/// Why looking an option name up failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Unknown,
    /// An abbreviation matching several options.
    Ambiguous(Vec<&'static str>),
}

/// Finds a long option as getopt_long does: an exact name, or an unambiguous prefix of one.
pub fn lookup_long(name: &str) -> Result<&'static OptSpec, Lookup> {
    if let Some(spec) = OPTIONS.iter().find(|s| s.long == name) {
        return Ok(spec);
    }
    if name.is_empty() {
        return Err(Lookup::Unknown);
    }
    let matches: Vec<&'static OptSpec> = OPTIONS
        .iter()
        .filter(|s| s.long.starts_with(name))
        .collect();
    match matches.len() {
        0 => Err(Lookup::Unknown),
        1 => Ok(matches[0]),
        _ => Err(Lookup::Ambiguous(matches.iter().map(|s| s.long).collect())),
    }
}

pub fn lookup_short(c: char) -> Option<&'static OptSpec> {
    OPTIONS.iter().find(|s| s.short == Some(c))
}

/// The options that become job-description fields in `version`, for error messages.
pub fn supported_list(version: ApiVersion) -> String {
    OPTIONS
        .iter()
        .filter(|s| s.supported_in(version))
        .map(|s| s.long)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The option items as a Markdown document (`docs/sbatch-options.md`).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "# sbatch options and the slurmrestd job description\n\n\
         Generated from `src/render/options/` (`slurm_connector::render::options::markdown_table`).\n\
         Options come from a script's leading `#SBATCH` block, the first-class `sbatch` fields and\n\
         `sbatch_options` (later wins). slurmrestd ignores `#SBATCH` text, so each option becomes\n\
         job-description fields; an option that cannot is refused at CreateTask.\n\n\
         What can be expressed depends on the slurmrestd data_parser version the job is rendered for\n\
         (the one the connector speaks with the cluster): one column per version. ✓ expressible;\n\
         ✓\\* expressible except the values noted; ✗ refused (the message names the versions that\n\
         have it); R reserved (set by the connector); – accepted with no effect.\n\
         The per-version differences come from the upstream specs (`scripts/job-desc-versions.py`).\n\n",
    );
    out.push_str("| option | short | argument | what the connector does |");
    for v in ApiVersion::ALL {
        out.push_str(&format!(" {v} |"));
    }
    out.push_str("\n|---|---|---|---|");
    for _ in ApiVersion::ALL {
        out.push_str("---|");
    }
    out.push('\n');
    for s in OPTIONS {
        let short = s.short.map(|c| format!("`-{c}`")).unwrap_or_default();
        let arg = match s.arg {
            Arg::None => "none",
            Arg::Required => "required",
            Arg::Optional => "optional (`=`)",
        };
        let what = match &s.support {
            Support::Mapped(m) => {
                let mut w = format!("→ {}", m.fields);
                if !m.needs.is_empty() {
                    let needs: Vec<String> = m
                        .needs
                        .iter()
                        .map(|f| format!("`{}` ({})", f.name, f.versions))
                        .collect();
                    w.push_str(&format!("; needs {}", needs.join(", ")));
                }
                for vn in m.values_need {
                    w.push_str(&format!(
                        "; {} needs `{}` ({})",
                        vn.which, vn.needs.name, vn.needs.versions
                    ));
                }
                w
            }
            Support::Reserved => "reserved: refused from task config; from a script, overridden \
                                  (job-name, output, error, chdir) or refused (wrap, uid, gid)"
                .to_string(),
            Support::ClientOnly => {
                "accepted, no effect (only changes the sbatch command's own behaviour)".to_string()
            }
            Support::Refused(why) => format!("refused: {why}"),
        };
        out.push_str(&format!("| `--{}` | {short} | {arg} | {what} |", s.long));
        for v in ApiVersion::ALL {
            let cell = match &s.support {
                Support::Mapped(_) if !s.versions().contains(v) => "✗",
                Support::Mapped(m)
                    if m.values_need.iter().any(|n| !n.needs.versions.contains(v)) =>
                {
                    "✓\\*"
                }
                Support::Mapped(_) => "✓",
                Support::Reserved => "R",
                Support::ClientOnly => "–",
                Support::Refused(_) => "✗",
            };
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let re = regex::Regex::new("^[a-z][a-z0-9-]*$").unwrap();
        let mut seen = std::collections::HashSet::new();
        for s in OPTIONS {
            assert!(re.is_match(s.long), "{}", s.long);
            assert!(seen.insert(s.long), "duplicate {}", s.long);
            if let Some(slot) = s.slot {
                assert!(
                    OPTIONS.iter().any(|o| o.long == slot),
                    "--{}: slot {slot}",
                    s.long
                );
            }
        }
        let mut shorts = std::collections::HashSet::new();
        for c in OPTIONS.iter().filter_map(|s| s.short) {
            assert!(shorts.insert(c), "duplicate short -{c}");
        }
    }

    #[test]
    fn lookup_follows_getopt_long() {
        assert_eq!(lookup_long("partition").unwrap().long, "partition");
        assert_eq!(lookup_long("part").unwrap().long, "partition");
        // `mem` is exact even though `mem-bind` etc. start with it.
        assert_eq!(lookup_long("mem").unwrap().long, "mem");
        assert!(matches!(lookup_long("me"), Err(Lookup::Ambiguous(_))));
        assert!(matches!(lookup_long("nosuch"), Err(Lookup::Unknown)));
        assert_eq!(lookup_short('N').unwrap().long, "nodes");
        assert_eq!(lookup_short('t').unwrap().long, "time");
    }

    #[test]
    fn no_message_names_a_fixed_version() {
        // Messages name the version in use (from `Target::version`), never a hard-coded one.
        for s in OPTIONS {
            let texts: Vec<&str> = match &s.support {
                Support::Mapped(m) => std::iter::once(m.fields)
                    .chain(m.values_need.iter().map(|v| v.which))
                    .collect(),
                Support::Refused(why) => vec![why],
                _ => vec![],
            };
            for t in texts {
                assert!(!t.contains("v0.0."), "--{}: {t}", s.long);
            }
        }
    }
}
