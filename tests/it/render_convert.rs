//! The seam to the generated clients: what each API version's encoder (`convert::submit_body_json`,
//! the generated type's own serialization, so exactly what is sent) makes of every fixture and of
//! a job using every mapped option. It must fit that version's `job_desc_msg` schema field by
//! field, or be refused naming the field the version lacks; v0.0.42's also fits the upstream
//! schema the goldens pin.

use crate::render_support;

use render_support::*;
use serde_json::json;
use slurm_connector::render::render_at;
use slurm_connector::slurmrestd::convert::submit_body_json;
use slurm_connector::slurmrestd::{ApiVersion, JobDescription};

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
        spec.custom = render_support::slurm_config(
            json!({ "script": format!("#!/bin/bash\n{directives}\necho hi\n") }),
        )
        .unwrap();
        out.push((
            label.to_string(),
            render_at(&spec, &config(), NOW).unwrap().job,
        ));
    }
    out
}

#[test]
fn every_version_encodes_what_it_can_express_and_refuses_the_rest() {
    for (label, job) in jobs() {
        let v42 = submit_body_json(ApiVersion::V0042, &job).unwrap();
        let problems = schema_problems(&v42["job"]);
        assert!(problems.is_empty(), "{label}: {problems:#?}");
        for v in ApiVersion::ALL {
            match submit_body_json(v, &job) {
                Ok(body) => {
                    let problems = schema_problems_for(v.as_str(), &body["job"]);
                    assert!(problems.is_empty(), "{label} in {v}: {problems:#?}");
                }
                Err(e) => {
                    // Only the kitchen sink asks for what older versions lack.
                    assert_eq!(label, "kitchen sink", "{label} refused in {v}: {e}");
                    assert!(v < ApiVersion::V0042, "{label} refused in {v}: {e}");
                    assert!(e.to_string().contains(v.as_str()), "{e}");
                }
            }
        }
    }
}

#[test]
fn submit_body_has_the_api_types() {
    let (_, job) = jobs()
        .into_iter()
        .find(|(l, _)| l == "kitchen sink")
        .unwrap();
    let body = submit_body_json(ApiVersion::V0042, &job).unwrap();
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
