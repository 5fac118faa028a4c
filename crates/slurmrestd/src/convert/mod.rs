//! The one seam between generated types and our domain types, for every API version.
//!
//! The trimmed specs give each version's generated module the same type and method names
//! (`scripts/trim-openapi.py`, fixes 9-11), so the seam is written once, in `each_version/`,
//! and compiled against each version's module (`v0040.rs` .. `v0046.rs`): the compiler checks every
//! field access of every version. What really differs between versions — a field one version
//! lacks, a number that became a no-val struct, a ping answer without `pinged` — is each version
//! module's own short `quirks`, the only hand-written per-version code. The version modules look
//! alike by design (the same header, a list of quirk macros): a reader compares two versions by
//! reading their two lists.
//!
//! Besides the conversions, each version module has an `Api`: the generated client of that
//! version and one method per operation the facade (`client/mod.rs`) uses, returning domain types.

use super::ApiVersion;

use super::types::{BaseState, JobState, ServerInfo, SlurmError, Tres};

mod shapes;

// The same body converts `i32` in one version and `i64` in another (e.g. `count`): a conversion
// that is needed somewhere is "useless" in the versions where the types already agree.
#[allow(clippy::useless_conversion)]
pub(crate) mod v0040;
#[allow(clippy::useless_conversion)]
pub(crate) mod v0041;
#[allow(clippy::useless_conversion)]
pub(crate) mod v0042;
#[allow(clippy::useless_conversion)]
pub(crate) mod v0043;
#[allow(clippy::useless_conversion)]
pub(crate) mod v0044;
#[allow(clippy::useless_conversion)]
pub(crate) mod v0045;
#[allow(clippy::useless_conversion)]
pub(crate) mod v0046;

/// Seen by rustfmt only (it formats `mod` files whatever their cfg): the body the version modules
/// `include!`, so `cargo fmt` keeps it formatted like the rest.
#[cfg(any())]
mod each_version {
    mod decode;
    mod encode;
    mod operations;
}

/// The parts every slurmrestd response carries: `errors`, `warnings`, `meta`.
pub trait Envelope {
    fn errors(&self) -> Vec<SlurmError>;
    fn warnings(&self) -> Vec<String>;
    fn server(&self) -> ServerInfo;
}

/// A job description field that the version in use cannot carry. Rendering refuses such options
/// first, naming the versions that can (`render::options`); this is the safety net behind it,
/// so a field is never silently dropped from a submit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the job description sets {what}, which slurmrestd {version} cannot express; \
     pin a version that has it (FLYTE_SLURM_API_VERSION) or drop the option"
)]
pub struct Unexpressible {
    /// The field, and the value where only the value is the problem: `` `shared` = topo ``.
    pub what: String,
    pub version: ApiVersion,
}

fn state_of<I, S>(items: Option<I>) -> JobState
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    match items {
        Some(s) => JobState::from_strings(s),
        None => JobState {
            base: BaseState::Other(String::new()),
            flags: vec![],
        },
    }
}

fn non_empty(s: &Option<String>) -> Option<String> {
    s.as_ref().filter(|s| !s.is_empty()).cloned()
}

/// Slurm reports "no reason" as the string "None".
fn reason(s: &Option<String>) -> Option<String> {
    non_empty(s).filter(|r| r != "None")
}

/// slurmctld's reason with its detail (`state_description`), when it gives one: a pending job's
/// `ReqNodeNotAvail` says which nodes in it (`ReqNodeNotAvail, UnavailableNodes:node1`), a held
/// one who held it. What GetTask's message shows after `reason:`.
fn reason_described(s: &Option<String>, description: &Option<String>) -> Option<String> {
    let r = reason(s);
    match (r, non_empty(description)) {
        (Some(r), Some(d)) if d != r => Some(format!("{r} ({d})")),
        (None, Some(d)) => Some(d),
        (r, _) => r,
    }
}

/// A no-val number as the API carries it (`set`, `infinite`, `number`): `None` unless set and
/// finite.
fn no_val(set: Option<bool>, infinite: Option<bool>, number: Option<i64>) -> Option<i64> {
    if set == Some(false) || infinite == Some(true) {
        return None;
    }
    number
}

/// A number into whichever integer type a version's spec gave the field, saturating (limits past
/// the type's range are refused by rendering already).
trait Saturate: Sized {
    fn saturate(n: i64) -> Self;
}

impl Saturate for i32 {
    fn saturate(n: i64) -> i32 {
        i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX })
    }
}

impl Saturate for i64 {
    fn saturate(n: i64) -> i64 {
        n
    }
}

fn secs(seconds: Option<i64>, micros: Option<i64>) -> Option<f64> {
    match (seconds, micros) {
        (None, None) => None,
        (s, us) => Some(s.unwrap_or(0) as f64 + us.unwrap_or(0) as f64 / 1e6),
    }
}

/// `cpu=2,mem=8000M,node=1,billing=2,gres/gpu=1` → TRES, memory in MiB as slurmdbd counts it.
fn parse_tres_str(s: &str) -> Vec<Tres> {
    s.split(',')
        .filter_map(|item| {
            let (k, v) = item.split_once('=')?;
            let (kind, name) = k.split_once('/').unwrap_or((k, ""));
            let count = if kind == "mem" {
                mebibytes(v)?
            } else {
                v.parse().ok()?
            };
            Some(Tres {
                kind: kind.to_string(),
                name: name.to_string(),
                count,
            })
        })
        .collect()
}

fn mebibytes(v: &str) -> Option<i64> {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().ok()?;
    let factor = match unit {
        "" | "M" => 1.0,
        "K" => 1.0 / 1024.0,
        "G" => 1024.0,
        "T" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * factor).round() as i64)
}

/// The submit body a version would POST for `job`, as JSON: what `render --request` prints and
/// the goldens compare. It is the generated type's own serialization, so it cannot drift from
/// what is sent.
pub fn submit_body_json(
    version: ApiVersion,
    job: &crate::JobDescription,
) -> Result<serde_json::Value, Unexpressible> {
    macro_rules! body {
        ($($v:ident => $m:ident),*) => {
            match version {
                $(ApiVersion::$v => serde_json::to_value($m::submit_request(job)?),)*
            }
        };
    }
    let value = body!(V0040 => v0040, V0041 => v0041, V0042 => v0042, V0043 => v0043,
        V0044 => v0044, V0045 => v0045, V0046 => v0046);
    Ok(value.expect("generated request types always serialize"))
}

#[cfg(test)]
mod tests;
