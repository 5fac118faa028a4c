//! The seam against real answers: every response recorded from real slurmrestd, of every release
//! and version (`tests/fixtures/slurmrestd/<release>_<version>_<case>.json`), decodes through that
//! version's generated types, and the conversions read from it what the connector acts on. Kept
//! inside the crate because the generated types are private to it.
//!
//! `decode`: the recorded answers read as the connector needs them; `encode`: job descriptions
//! as each version's body; `arrays`: job arrays' elements, release and cancel.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;
use crate::JobDescription;
use crate::job_description::{JobFlag, MemBindType, Shared};
use crate::types::{BaseState, JobId};

/// Runs `$body` with `$m` naming the recording's version module (its conversions, and its
/// generated types as `$m::g`).
macro_rules! per_version {
    ($version:expr, $m:ident => $body:expr) => {
        match $version {
            ApiVersion::V0040 => {
                use v0040 as $m;
                $body
            }
            ApiVersion::V0041 => {
                use v0041 as $m;
                $body
            }
            ApiVersion::V0042 => {
                use v0042 as $m;
                $body
            }
            ApiVersion::V0043 => {
                use v0043 as $m;
                $body
            }
            ApiVersion::V0044 => {
                use v0044 as $m;
                $body
            }
            ApiVersion::V0045 => {
                use v0045 as $m;
                $body
            }
            ApiVersion::V0046 => {
                use v0046 as $m;
                $body
            }
        }
    };
}

/// Decodes a recorded body through its version's generated type, as the client would.
macro_rules! decode_in {
    ($m:ident, $op:expr, $body:expr) => {{
        use crate::generated::$m::types as g;
        match $op {
            Op::Submit => decode_as::<g::OpenapiJobSubmitResponse>($body).map(|_| ()),
            Op::States => decode_as::<g::OpenapiJobStateResp>($body).map(|_| ()),
            Op::Jobs | Op::Job => decode_as::<g::OpenapiJobInfoResp>($body).map(|_| ()),
            Op::Cancel => decode_as::<super::$m::CancelResponse>($body).map(|_| ()),
            Op::Ping => decode_as::<g::OpenapiPingArrayResp>($body).map(|_| ()),
            Op::Diag => decode_as::<g::OpenapiDiagResp>($body).map(|_| ()),
            Op::Accounting => decode_as::<g::OpenapiSlurmdbdJobsResp>($body).map(|_| ()),
            Op::User => decode_as::<g::OpenapiUsersResp>($body).map(|_| ()),
        }
    }};
}

// After the macros, which they use.
mod arrays;
mod decode;
mod encode;

/// One recorded exchange.
struct Recording {
    file: String,
    version: ApiVersion,
    method: String,
    path: String,
    status: u64,
    body: Value,
}

fn recordings() -> Vec<Recording> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/slurmrestd");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let name = file.file_name()?.to_string_lossy().to_string();
            let version: ApiVersion = name.split('_').nth(1)?.parse().ok()?;
            let sample: Value = serde_json::from_str(&std::fs::read_to_string(&file).ok()?).ok()?;
            let url = url::Url::parse(sample["request"]["url"].as_str()?).ok()?;
            Some(Recording {
                file: name,
                version,
                method: sample["request"]["method"].as_str()?.to_string(),
                path: url.path().trim_end_matches('/').to_string(),
                status: sample["response"]["status"].as_u64().unwrap_or(0),
                body: sample["response"]["body"].clone(),
            })
        })
        .collect()
}

fn recording(file: &str) -> Recording {
    recordings()
        .into_iter()
        .find(|r| r.file == format!("{file}.json"))
        .unwrap_or_else(|| panic!("no recording {file}"))
}

fn decode_as<T: serde::de::DeserializeOwned>(body: &Value) -> Result<T, String> {
    serde_json::from_value::<T>(body.clone()).map_err(|e| e.to_string())
}

/// The operation a recorded request was, by method and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Submit,
    States,
    Jobs,
    Job,
    Cancel,
    Ping,
    Diag,
    Accounting,
    User,
}

fn op_of(r: &Recording) -> Option<Op> {
    let v = r.version.as_str();
    let p = r.path.as_str();
    let slurm = format!("/slurm/{v}/");
    let db = format!("/slurmdb/{v}/");
    Some(match r.method.as_str() {
        "POST" if p.ends_with(&format!("{slurm}job/submit")) => Op::Submit,
        "GET" if p.ends_with(&format!("{slurm}jobs/state")) => Op::States,
        "GET" if p.ends_with(&format!("{slurm}jobs")) => Op::Jobs,
        "GET" if p.contains(&format!("{slurm}job/")) => Op::Job,
        "DELETE" if p.contains(&format!("{slurm}job/")) => Op::Cancel,
        "GET" if p.ends_with(&format!("{slurm}ping")) => Op::Ping,
        "GET" if p.ends_with(&format!("{slurm}diag")) => Op::Diag,
        "GET" if p.contains(&format!("{db}job")) => Op::Accounting,
        "GET" if p.contains(&format!("{db}user/")) => Op::User,
        _ => return None,
    })
}

fn decode(r: &Recording, op: Op) -> Result<(), String> {
    match r.version {
        ApiVersion::V0040 => decode_in!(v0040, op, &r.body),
        ApiVersion::V0041 => decode_in!(v0041, op, &r.body),
        ApiVersion::V0042 => decode_in!(v0042, op, &r.body),
        ApiVersion::V0043 => decode_in!(v0043, op, &r.body),
        ApiVersion::V0044 => decode_in!(v0044, op, &r.body),
        ApiVersion::V0045 => decode_in!(v0045, op, &r.body),
        ApiVersion::V0046 => decode_in!(v0046, op, &r.body),
    }
}

fn job_infos(r: &Recording) -> Vec<crate::JobInfo> {
    per_version!(r.version, m => {
        let resp: m::g::OpenapiJobInfoResp = decode_as(&r.body).unwrap();
        resp.jobs.iter().flatten().filter_map(m::job_info).collect()
    })
}

fn accounting(r: &Recording) -> Vec<crate::JobInfo> {
    per_version!(r.version, m => {
        let resp: m::g::OpenapiSlurmdbdJobsResp = decode_as(&r.body).unwrap();
        resp.jobs.iter().flatten().filter_map(m::accounting_job).collect()
    })
}

fn states(r: &Recording) -> Vec<(JobId, crate::JobState)> {
    let mut plain: Vec<_> = all_states(r).jobs.into_iter().collect();
    plain.sort_by_key(|(id, _)| *id);
    plain
}

fn all_states(r: &Recording) -> crate::States {
    per_version!(r.version, m => {
        let resp: m::g::OpenapiJobStateResp = decode_as(&r.body).unwrap();
        m::states_of(resp.jobs.iter().flatten().filter_map(m::state_entry))
    })
}

fn cancel_codes(r: &Recording) -> Vec<i32> {
    per_version!(r.version, m => {
        let resp: m::CancelResponse = decode_as(&r.body).unwrap();
        m::cancel_codes(&resp)
    })
}

fn pings(r: &Recording) -> Vec<crate::Ping> {
    per_version!(r.version, m => {
        let resp: m::g::OpenapiPingArrayResp = decode_as(&r.body).unwrap();
        resp.pings.iter().flatten().map(m::ping).collect()
    })
}

/// The recordings of one case, one per (release, version) that has it.
fn case(name: &str) -> Vec<Recording> {
    let suffix = format!("_{name}.json");
    let found: Vec<Recording> = recordings()
        .into_iter()
        .filter(|r| r.file.ends_with(&suffix))
        .collect();
    assert!(
        found.len() >= 10,
        "only {} recordings of {name}",
        found.len()
    );
    found
}
