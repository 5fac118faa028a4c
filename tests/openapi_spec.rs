//! The committed spec (openapi/slurmrestd-v0.0.42.json) is exactly what scripts/trim-openapi.py
//! produces from the upstream spec it was made from, so nobody hand-edits the generated client's
//! source of truth.

use std::path::Path;
use std::process::Command;

mod common;
use common::skip::{Tier, skip};

#[test]
fn committed_spec_is_what_the_trim_script_produces() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let upstream = std::env::var("SLURM_OPENAPI_UPSTREAM")
        .map(Into::into)
        .unwrap_or_else(|_| {
            root.join("../shared/openapi-upstream/slurm-24.11-openapi-v0.0.42.json")
        });
    if !upstream.exists() {
        skip(
            Tier::OpenapiUpstream,
            format!(
                "upstream spec {} not found (set SLURM_OPENAPI_UPSTREAM to a full \
                 `slurmrestd --generate-openapi-spec` output for Slurm 24.11, data_parser v0.0.42)",
                upstream.display()
            ),
        );
        return;
    }
    let out = Command::new("python3")
        .arg(root.join("scripts/trim-openapi.py"))
        .arg(&upstream)
        .arg("v0.0.42")
        .output()
        .expect("python3 runs scripts/trim-openapi.py");
    assert!(
        out.status.success(),
        "trim-openapi.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = std::fs::read(root.join("openapi/slurmrestd-v0.0.42.json")).unwrap();
    assert!(
        out.stdout == committed,
        "openapi/slurmrestd-v0.0.42.json differs from what scripts/trim-openapi.py produces; \
         regenerate it (see openapi/README.md)"
    );
}

#[test]
fn trimmed_spec_keeps_exactly_the_operations_the_client_uses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("openapi/slurmrestd-v0.0.42.json")).unwrap(),
    )
    .unwrap();
    let mut ops: Vec<String> = spec["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|p| {
            p.as_object()
                .unwrap()
                .values()
                .filter_map(|o| o["operationId"].as_str().map(String::from))
        })
        .collect();
    ops.sort();
    assert_eq!(
        ops,
        [
            "slurm_v0042_delete_job",
            "slurm_v0042_get_diag",
            "slurm_v0042_get_job",
            "slurm_v0042_get_jobs",
            "slurm_v0042_get_jobs_state",
            "slurm_v0042_get_partitions",
            "slurm_v0042_get_ping",
            "slurm_v0042_post_job_submit",
            "slurmdb_v0042_get_job",
            "slurmdb_v0042_get_jobs",
        ]
    );
    // Fix 8: the state query sends repeated parameters, never a comma list.
    let params = &spec["paths"]["/slurm/v0.0.42/jobs/state/"]["get"]["parameters"];
    assert_eq!(params[0]["schema"]["type"], "array");
    assert_eq!(params[0]["explode"], true);
}
