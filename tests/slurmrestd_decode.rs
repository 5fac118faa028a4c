//! Every recorded real slurmrestd v0.0.42 response body decodes through the generated types —
//! success and error shapes alike (the spec fixes in scripts/trim-openapi.py exist for this).

use std::path::Path;

use serde_json::Value;
use slurm_connector::slurmrestd::generated::v0042::types as g;

/// The generated response type for a recorded request, by method and path.
fn decode(method: &str, path: &str, body: Value) -> Result<(), String> {
    fn go<T: serde::de::DeserializeOwned>(body: Value) -> Result<(), String> {
        serde_json::from_value::<T>(body)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    let p = path.trim_end_matches('/');
    let last = p.rsplit('/').next().unwrap_or("");
    match (method, p) {
        ("POST", p) if p.ends_with("/slurm/v0.0.42/job/submit") => {
            go::<g::V0042OpenapiJobSubmitResponse>(body)
        }
        ("GET", p) if p.ends_with("/slurm/v0.0.42/jobs/state") => {
            go::<g::V0042OpenapiJobStateResp>(body)
        }
        ("GET", p) if p.ends_with("/slurm/v0.0.42/jobs") => go::<g::V0042OpenapiJobInfoResp>(body),
        ("GET", p) if p.contains("/slurm/v0.0.42/job/") => {
            let _ = last;
            go::<g::V0042OpenapiJobInfoResp>(body)
        }
        ("DELETE", p) if p.contains("/slurm/v0.0.42/job/") => {
            go::<g::V0042OpenapiKillJobResp>(body)
        }
        ("GET", p) if p.ends_with("/slurm/v0.0.42/ping") => {
            go::<g::V0042OpenapiPingArrayResp>(body)
        }
        ("GET", p) if p.ends_with("/slurm/v0.0.42/diag") => go::<g::V0042OpenapiDiagResp>(body),
        ("GET", p) if p.contains("/slurmdb/v0.0.42/job") => {
            go::<g::V0042OpenapiSlurmdbdJobsResp>(body)
        }
        _ => Err(format!("no generated type for {method} {path}")),
    }
}

#[test]
fn every_recorded_v0042_body_decodes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurmrestd");
    let mut decoded = 0;
    let mut failures = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for file in files {
        if file.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let sample: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let body = sample["response"]["body"].clone();
        // text/plain answers (401 "Authentication failure", 400 "Unable to parse query.") are
        // recorded as JSON strings: the facade handles those without decoding.
        if !body.is_object() {
            continue;
        }
        let url = url::Url::parse(sample["request"]["url"].as_str().unwrap()).unwrap();
        let method = sample["request"]["method"].as_str().unwrap();
        match decode(method, url.path(), body) {
            Ok(()) => decoded += 1,
            Err(e) => failures.push(format!(
                "{}: {e}",
                file.file_name().unwrap().to_string_lossy()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} bodies failed to decode:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Guard against the test silently reading nothing.
    assert!(decoded >= 100, "only {decoded} bodies decoded");
    eprintln!("decoded {decoded} real v0.0.42 bodies");
}
