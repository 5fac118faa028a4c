//! The seam to the generated client: `convert::submit_request` (generated v0.0.42 types) must
//! serialise to exactly the reference JSON (`JobDescription::to_v0042_submit_body`), which the
//! golden and schema tests pin — for every fixture and for a job using every mapped option.

mod render_support;

use render_support::*;
use serde_json::json;
use slurm_connector::render::render_at;
use slurm_connector::slurmrestd::JobDescription;
use slurm_connector::slurmrestd::convert::submit_request;

fn jobs() -> Vec<(String, JobDescription)> {
    let mut out = Vec::new();
    for name in [
        "native_apptainer_gpu.json",
        "native_pyxis_gpu.json",
        "native_pyxis_sqsh.json",
        "script_job_upload.json",
        "script_no_io.json",
        "script_preprocess.json",
    ] {
        let r = render_at(&task_spec(&load_request(name)), &config(), NOW).unwrap();
        out.push((name.to_string(), r.job));
    }
    for (label, directives) in [
        ("kitchen sink", KITCHEN_SINK.trim_end()),
        (
            "others",
            "#SBATCH --mem=4G --oversubscribe --requeue --ntasks-per-core=1 --threads-per-core=2 -t 0",
        ),
        (
            "mem-per-cpu",
            "#SBATCH --mem-per-cpu=500 --exclusive --open-mode=truncate --hint=compute_bound",
        ),
    ] {
        let mut spec = task_spec(&load_request("script_no_io.json"));
        spec.custom = json!({ "script": format!("#!/bin/bash\n{directives}\necho hi\n") });
        out.push((
            label.to_string(),
            render_at(&spec, &config(), NOW).unwrap().job,
        ));
    }
    out
}

#[test]
fn generated_submit_body_equals_the_reference_json() {
    for (label, job) in jobs() {
        let generated = serde_json::to_value(submit_request(&job)).unwrap();
        let reference = job.to_v0042_submit_body();
        assert_eq!(generated, reference, "{label}");
        let problems = schema_problems(&generated["job"]);
        assert!(problems.is_empty(), "{label}: {problems:#?}");
    }
}

#[test]
fn submit_body_has_the_api_types() {
    let (_, job) = jobs()
        .into_iter()
        .find(|(l, _)| l == "kitchen sink")
        .unwrap();
    let body = serde_json::to_value(submit_request(&job)).unwrap();
    let j = &body["job"];
    // In v0.0.42 cpus_per_task is a plain int32 but time_limit a no-val struct
    // ({set, infinite, number}): the one shape must not be used for the other.
    assert!(j["cpus_per_task"].is_i64());
    assert_eq!(
        j["time_limit"],
        json!({"set": true, "infinite": false, "number": 1440})
    );
    assert!(j["nodes"].is_string());
    assert!(
        j["environment"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.as_str().unwrap().contains('='))
    );
    assert!(j["excluded_nodes"].is_array());
    assert!(j["memory_per_tres"].is_string());
    assert!(j["deadline"].is_i64());
    assert!(j["begin_time"]["number"].is_i64());
}
