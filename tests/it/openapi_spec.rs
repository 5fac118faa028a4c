//! Each committed spec (`openapi/slurmrestd-<version>.json`) is exactly what
//! scripts/trim-openapi.py produces from the upstream spec `openapi/sources.txt` names, so nobody
//! hand-edits a generated client's source of truth; and every version's trimmed spec has the same
//! operations with the same parameters (what lets one seam serve them all).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use common::skip::{Tier, skip};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// (version, upstream file name) from openapi/sources.txt.
fn sources() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("openapi/sources.txt")).unwrap();
    let out: Vec<(String, String)> = text
        .lines()
        .filter(|l| l.starts_with('v'))
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap().to_string(), w.next().unwrap().to_string())
        })
        .collect();
    assert_eq!(out.len(), 7, "one source per version v0.0.40-46");
    out
}

fn upstream_dir() -> PathBuf {
    std::env::var("SLURM_OPENAPI_UPSTREAM_DIR")
        .map(Into::into)
        .unwrap_or_else(|_| root().join("../shared/openapi-upstream"))
}

#[test]
fn committed_specs_are_what_the_trim_script_produces() {
    let dir = upstream_dir();
    if !dir.exists() {
        skip(
            Tier::OpenapiUpstream,
            format!(
                "upstream specs not found in {} (set SLURM_OPENAPI_UPSTREAM_DIR to a folder \
                 holding the files openapi/sources.txt names)",
                dir.display()
            ),
        );
        return;
    }
    for (version, file) in sources() {
        let out = Command::new("python3")
            .arg(root().join("scripts/trim-openapi.py"))
            .arg(dir.join(&file))
            .arg(&version)
            .output()
            .expect("python3 runs scripts/trim-openapi.py");
        assert!(
            out.status.success(),
            "trim-openapi.py {file} {version} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let committed =
            std::fs::read(root().join(format!("openapi/slurmrestd-{version}.json"))).unwrap();
        assert!(
            out.stdout == committed,
            "openapi/slurmrestd-{version}.json differs from what scripts/trim-openapi.py produces \
             from {file}; regenerate it (see openapi/README.md)"
        );
    }
}

fn spec(version: &str) -> serde_json::Value {
    serde_json::from_slice(
        &std::fs::read(root().join(format!("openapi/slurmrestd-{version}.json"))).unwrap(),
    )
    .unwrap()
}

/// operationId → its parameters' names, in order.
fn operations(spec: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    let mut ops: Vec<(String, Vec<String>)> = spec["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|p| {
            let shared: Vec<String> = p["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|q| q["name"].as_str().map(String::from))
                .collect();
            p.as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| *k != "parameters")
                .map(move |(_, o)| {
                    let mut params = shared.clone();
                    params.extend(
                        o["parameters"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|q| q["name"].as_str().map(String::from)),
                    );
                    (o["operationId"].as_str().unwrap().to_string(), params)
                })
        })
        .collect();
    ops.sort();
    ops
}

/// Operations only some versions have, and the first version with each (the trim script's
/// `OPTIONAL_OPERATIONS`; `crates/slurmrestd/src/convert/shapes.rs` says which versions' modules use them).
const OPTIONAL: &[(&str, &str)] = &[("slurm_get_conf", "v0.0.45")];

#[test]
fn every_version_keeps_the_same_operations_with_the_same_parameters() {
    let reference = operations(&spec("v0.0.42"));
    let names: Vec<&str> = reference.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "slurm_delete_job",
            "slurm_get_diag",
            "slurm_get_job",
            "slurm_get_jobs",
            "slurm_get_jobs_state",
            "slurm_get_partitions",
            "slurm_get_ping",
            "slurm_post_job",
            "slurm_post_job_submit",
            "slurmdb_get_job",
            "slurmdb_get_jobs",
            "slurmdb_get_user",
        ]
    );
    for (version, _) in sources() {
        let mut expected = reference.clone();
        for (op, since) in OPTIONAL {
            // Versions compare as their text: v0.0.NN, zero-padded.
            if version.as_str() >= *since {
                expected.push((op.to_string(), Vec::new()));
            }
        }
        expected.sort();
        assert_eq!(operations(&spec(&version)), expected, "{version}");
        // Fix 8: the state query sends repeated parameters, never a comma list.
        let params =
            &spec(&version)["paths"][format!("/slurm/{version}/jobs/state/")]["get"]["parameters"];
        assert_eq!(params[0]["schema"]["type"], "array", "{version}");
        assert_eq!(params[0]["explode"], true, "{version}");
        // Fix 11: no versioned schema name is left.
        let text = serde_json::to_string(&spec(&version)["components"]).unwrap();
        assert!(!text.contains(&format!("\"{version}_")), "{version}");
    }
}
