//! Collects sbatch options from their three sources and merges them, lowest precedence first:
//! the script's own directives, the first-class `sbatch` fields, then `sbatch_options` — the
//! order the published plugin wrote them as `#SBATCH` lines, where sbatch keeps the last.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::custom::{OptValue, SlurmCustom};
use super::directives::RawOption;
use super::error::{Origin, RenderError};
use super::options::{
    Arg, Lookup, OPTIONS, OVERRIDDEN_FROM_SCRIPT, Support, lookup_long, supported_list,
};
use crate::slurmrestd::ApiVersion;

fn refuse_unsupported(
    origin: Origin,
    long: &str,
    reason: &str,
    version: ApiVersion,
) -> RenderError {
    RenderError::UnsupportedOption {
        origin,
        option: long.to_string(),
        reason: reason.to_string(),
        supported: supported_list(version),
    }
}

/// Keeps a script directive, drops one the connector overrides, or refuses it.
fn from_script(o: RawOption, version: ApiVersion) -> Result<Option<RawOption>, RenderError> {
    match o.spec.support {
        Support::Mapped(_) => Ok(Some(o)),
        Support::Reserved if OVERRIDDEN_FROM_SCRIPT.contains(&o.spec.long) => {
            tracing::info!(option = o.spec.long, origin = %o.origin,
                "script directive overridden: the connector sets the job's name, files and working directory");
            Ok(None)
        }
        Support::Reserved => Err(RenderError::ReservedOption {
            origin: o.origin,
            option: o.spec.long.into(),
        }),
        Support::ClientOnly => {
            tracing::info!(option = o.spec.long, origin = %o.origin, "sbatch-only option has no effect on the job");
            Ok(None)
        }
        Support::Refused(reason) => Err(refuse_unsupported(o.origin, o.spec.long, reason, version)),
    }
}

/// Checks one option given in task config (first-class field or `sbatch_options`).
fn from_config(
    name: &str,
    value: OptValue,
    origin: Origin,
    version: ApiVersion,
) -> Result<Option<RawOption>, RenderError> {
    // A newline would end the directive in an sbatch script and any whitespace is a sign of an
    // injection attempt or a paste error; sbatch options never need it.
    if let OptValue::Value(v) = &value
        && v.chars().any(char::is_whitespace)
    {
        return Err(RenderError::InvalidValue {
            origin,
            option: name.to_string(),
            value: v.escape_default().to_string(),
            expected: "values may not contain whitespace".into(),
        });
    }
    let spec = lookup_long(name).map_err(|l| RenderError::UnknownOption {
        origin: origin.clone(),
        option: name.to_string(),
        hint: match l {
            Lookup::Ambiguous(c) => format!(" (ambiguous abbreviation of: {})", c.join(", ")),
            Lookup::Unknown => format!(" (supported: {})", supported_list(version)),
        },
    })?;
    match spec.support {
        Support::Mapped(_) => {}
        Support::Reserved => {
            return Err(RenderError::ReservedOption {
                origin,
                option: spec.long.into(),
            });
        }
        Support::ClientOnly => {
            tracing::info!(option = spec.long, %origin, "sbatch-only option has no effect on the job");
            return Ok(None);
        }
        Support::Refused(reason) => {
            return Err(refuse_unsupported(origin, spec.long, reason, version));
        }
    }
    let value = match (spec.arg, value) {
        (Arg::Required, OptValue::Flag) => {
            return Err(RenderError::InvalidValue {
                origin,
                option: spec.long.into(),
                value: "true".into(),
                expected: "this option requires a value".into(),
            });
        }
        (Arg::None, OptValue::Value(v)) => {
            return Err(RenderError::InvalidValue {
                origin,
                option: spec.long.into(),
                value: v,
                expected: "this option takes no value: set it to true".into(),
            });
        }
        (_, OptValue::Flag) => None,
        (_, OptValue::Value(v)) => Some(v),
    };
    Ok(Some(RawOption {
        spec,
        value,
        origin,
    }))
}

/// Names accepted for `sbatch_options` keys. Compiled once: compiling it on every CreateTask
/// was ~3.5 % of the `create` bench's CPU (perf, BENCHMARKS.md), a third of the connector's own
/// ~130 µs per CreateTask.
static NAME_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[a-z][a-z0-9-]*$").expect("static regex"));

/// The effective options, one per slot, in option-table order. `version` only shapes the
/// messages (which options it supports); `apply` refuses what it cannot express.
pub fn merge(
    script: Vec<RawOption>,
    custom: &SlurmCustom,
    version: ApiVersion,
) -> Result<Vec<RawOption>, RenderError> {
    let name_re = &*NAME_RE;
    let mut all = Vec::new();
    for o in script {
        all.extend(from_script(o, version)?);
    }
    for (field, option, value) in &custom.sbatch {
        if value.is_empty() {
            tracing::debug!(field, "empty first-class sbatch field: not set");
            continue;
        }
        all.extend(from_config(
            option,
            OptValue::Value(value.clone()),
            Origin::FirstClass(field),
            version,
        )?);
    }
    for (name, value) in &custom.sbatch_options {
        if !name_re.is_match(name) {
            return Err(RenderError::UnknownOption {
                origin: Origin::SbatchOptions,
                option: name.escape_default().to_string(),
                hint: " (option names are long sbatch option names without dashes, matching ^[a-z][a-z0-9-]*$)"
                    .into(),
            });
        }
        all.extend(from_config(
            name,
            value.clone(),
            Origin::SbatchOptions,
            version,
        )?);
    }

    let mut by_slot: BTreeMap<&'static str, RawOption> = BTreeMap::new();
    for o in all {
        by_slot.insert(o.spec.slot(), o);
    }

    let mem: Vec<&RawOption> = ["mem", "mem-per-cpu", "mem-per-gpu"]
        .iter()
        .filter_map(|s| by_slot.get(s))
        .collect();
    if mem.len() > 1 {
        return Err(RenderError::Conflict {
            problem: format!(
                "{} are mutually exclusive (sbatch refuses them together); keep one",
                mem.iter()
                    .map(|o| format!("--{} ({})", o.spec.long, o.origin))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        });
    }

    let mut out: Vec<RawOption> = Vec::with_capacity(by_slot.len());
    for spec in OPTIONS {
        if let Some(o) = by_slot.remove(spec.slot()) {
            out.push(o);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::options::Arg;

    fn from_options(name: &str, arg: Arg) -> Result<Vec<RawOption>, RenderError> {
        let value = match arg {
            Arg::None | Arg::Optional => serde_json::json!(true),
            Arg::Required => serde_json::json!("x"),
        };
        let custom = super::super::custom::parse(&serde_json::json!({
            "script": "#!/bin/bash\n",
            "sbatch_options": { name: value },
        }))?;
        merge(Vec::new(), &custom, ApiVersion::V0042)
    }

    fn from_script(
        spec: &'static crate::render::options::OptSpec,
    ) -> Result<Vec<RawOption>, RenderError> {
        let o = RawOption {
            spec,
            value: (spec.arg == Arg::Required).then(|| "x".to_string()),
            origin: Origin::Script { line: 2 },
        };
        merge(vec![o], &SlurmCustom::default(), ApiVersion::V0042)
    }

    /// The items that are not mapped, each as its kind says, from both kinds of source.
    #[test]
    fn every_unmapped_option_is_refused_dropped_or_overridden() {
        for spec in OPTIONS {
            let (config, script) = (from_options(spec.long, spec.arg), from_script(spec));
            match spec.support {
                Support::Mapped(_) => continue,
                Support::Reserved => {
                    let e = config.unwrap_err().to_string();
                    assert!(
                        e.contains("reserved") && e.contains(spec.long),
                        "--{}: {e}",
                        spec.long
                    );
                    if OVERRIDDEN_FROM_SCRIPT.contains(&spec.long) {
                        assert_eq!(script.unwrap(), vec![], "--{}", spec.long);
                    } else {
                        assert!(
                            script.unwrap_err().to_string().contains("script line 2"),
                            "--{}",
                            spec.long
                        );
                    }
                }
                Support::ClientOnly => {
                    assert_eq!(config.unwrap(), vec![], "--{}", spec.long);
                    assert_eq!(script.unwrap(), vec![], "--{}", spec.long);
                }
                Support::Refused(why) => {
                    for e in [config.unwrap_err(), script.unwrap_err()] {
                        let e = e.to_string();
                        assert!(
                            e.contains(&format!("`--{}`", spec.long)) && e.contains(why),
                            "--{}: {e}",
                            spec.long
                        );
                    }
                }
            }
        }
    }
}
