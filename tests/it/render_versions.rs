//! sbatch options per slurmrestd API version: an option whose job-description field a version
//! lacks is refused there, naming the version in use and the versions that have it, and rendered
//! on the others. (Every option item's own case runs on every version in `render::apply`'s tests.)

use crate::render_support;

use render_support::*;
use serde_json::{Value, json};
use slurm_connector::render::{RenderConfig, RenderError, Rendered, TaskSpec, render_at};
use slurm_connector::slurmrestd::ApiVersion;
use slurm_connector::slurmrestd::ApiVersion::*;
use slurm_connector::slurmrestd::job_description::{CpuBindFlag, MemBindType, Shared};

fn script_spec(custom: Value) -> TaskSpec {
    let mut spec = task_spec(&load_request("script_no_io.json"));
    spec.custom = slurm_config(custom).expect("a valid config");
    spec
}

fn with_options(opts: Value) -> TaskSpec {
    script_spec(json!({ "script": "#!/bin/bash\necho hi\n", "sbatch_options": opts }))
}

fn script(body: &str) -> TaskSpec {
    script_spec(json!({ "script": format!("#!/bin/bash\n{body}\necho hi\n") }))
}

fn on(v: ApiVersion, spec: &TaskSpec) -> Result<Rendered, RenderError> {
    let cfg = RenderConfig {
        api_version: v,
        ..config()
    };
    render_at(spec, &cfg, NOW)
}

/// The versions `spec` renders on, and the message it is refused with on the first other one.
fn accepted_on(spec: &TaskSpec) -> (Vec<ApiVersion>, Option<String>) {
    let mut ok = Vec::new();
    let mut first_refusal = None;
    for v in ApiVersion::ALL {
        match on(v, spec) {
            Ok(_) => ok.push(v),
            Err(e) => {
                first_refusal.get_or_insert(e.to_string());
            }
        }
    }
    (ok, first_refusal)
}

#[test]
fn cores_per_socket_is_rendered_where_the_version_has_the_field() {
    let spec = with_options(json!({"cores-per-socket": 4.0}));
    for v in [V0040, V0045, V0046] {
        assert_eq!(on(v, &spec).unwrap().job.cores_per_socket, Some(4), "{v}");
    }
    for v in [V0041, V0042, V0043, V0044] {
        let e = on(v, &spec).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "`sbatch_options`: `--cores-per-socket` needs a job description field that {v} lacks \
                 (`cores_per_socket`); v0.0.40 and v0.0.45+ have it. Remove it, or pin api_version to \
                 one of those if the cluster serves it"
            )
        );
    }
    // From a script directive, the message names the line.
    let e = on(V0042, &script("#SBATCH --cores-per-socket=4"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("script line 2 (#SBATCH): `--cores-per-socket`"),
        "{e}"
    );
}

#[test]
fn options_and_values_follow_the_versions_that_can_express_them() {
    let all: Vec<ApiVersion> = ApiVersion::ALL.to_vec();
    for (spec, want, names) in [
        // Fields.
        (
            with_options(json!({"oom-kill-step": true})),
            &all[2..],
            "v0.0.42+",
        ),
        (with_options(json!({"segment": "2"})), &all[1..], "v0.0.41+"),
        (
            script("#SBATCH -B 2:4:1"),
            &[V0040, V0045, V0046][..],
            "v0.0.40 and v0.0.45+",
        ),
        (
            script("#SBATCH --hint=memory_bound"),
            &[V0040, V0045, V0046][..],
            "v0.0.40 and v0.0.45+",
        ),
        // Enum values.
        (
            with_options(json!({"stepmgr": true})),
            &all[1..],
            "v0.0.41+",
        ),
        (
            with_options(json!({"exclusive": "topo"})),
            &all[1..],
            "v0.0.41+",
        ),
        (
            with_options(json!({"mem-bind": "sort"})),
            &all[..4],
            "v0.0.40 to v0.0.43",
        ),
    ] {
        let (ok, refusal) = accepted_on(&spec);
        assert_eq!(ok, want, "{:?}", spec.custom);
        let refusal = refusal.unwrap();
        let first_lacking = ApiVersion::ALL
            .into_iter()
            .find(|v| !want.contains(v))
            .unwrap();
        assert!(
            refusal.contains(&format!("that {first_lacking} lacks"))
                && refusal.contains(&format!("; {names} ha")),
            "{refusal}"
        );
    }
    // The values every version has work everywhere.
    for spec in [
        with_options(json!({"exclusive": "user"})),
        with_options(json!({"mem-bind": "local"})),
        with_options(json!({"hint": "compute_bound"})),
        script("#SBATCH -B 2:*:1"),
    ] {
        assert_eq!(accepted_on(&spec).0, ApiVersion::ALL, "{:?}", spec.custom);
    }
}

#[test]
fn what_the_version_dependent_options_write() {
    let j = on(V0045, &script("#SBATCH --hint=memory_bound"))
        .unwrap()
        .job;
    assert_eq!(
        (j.cores_per_socket, j.threads_per_core, j.cpu_binding_flags),
        (Some(1), Some(1), vec![CpuBindFlag::ToCores])
    );
    let j = on(V0040, &script("#SBATCH -B 2:8:1")).unwrap().job;
    assert_eq!(
        (j.sockets_per_node, j.cores_per_socket, j.threads_per_core),
        (Some(2), Some(8), Some(1))
    );
    assert_eq!(
        on(V0046, &with_options(json!({"exclusive": "topo"})))
            .unwrap()
            .job
            .shared,
        Some(Shared::Topo)
    );
    assert_eq!(
        on(V0043, &with_options(json!({"mem-bind": "verbose,sort"})))
            .unwrap()
            .job
            .memory_binding_type,
        [MemBindType::Verbose, MemBindType::Sort]
    );
    // --hint excludes the options that set the same things, as in sbatch.
    for other in ["#SBATCH --cores-per-socket=2", "#SBATCH -B 2:4"] {
        let e = on(
            V0046,
            &script(&format!("#SBATCH --hint=nomultithread\n{other}")),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mutually exclusive"), "{e}");
    }
    let e = on(V0046, &script("#SBATCH -B 2 --sockets-per-node=2"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("-B/--extra-node-info and --sockets-per-node"),
        "{e}"
    );
}

#[test]
fn the_supported_list_is_the_versions() {
    // An option refused everywhere lists what the version in use supports.
    let e = on(V0042, &with_options(json!({"clusters": "a"})))
        .unwrap_err()
        .to_string();
    assert!(
        !e.contains("cores-per-socket") && e.contains("oom-kill-step"),
        "{e}"
    );
    let e = on(V0040, &with_options(json!({"clusters": "a"})))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cores-per-socket") && !e.contains("oom-kill-step"),
        "{e}"
    );
}

#[test]
fn every_fixture_renders_alike_on_every_version() {
    // The published plugin's tasks use no version-dependent option: the job is the same.
    for name in [
        "script_preprocess.json",
        "native_pyxis_gpu.json",
        "script_no_io.json",
    ] {
        let spec = task_spec(&load_request(name));
        let want = on(V0042, &spec).unwrap().job;
        for v in ApiVersion::ALL {
            assert_eq!(on(v, &spec).unwrap().job, want, "{name} on {v}");
        }
    }
}

/// Recorded on the 24.11 dev cluster (`tests/fixtures/slurmrestd/24.11_*cores-per-socket*`): a
/// v0.0.42 submit with `cores_per_socket` is accepted with only a warning and the job lacks the
/// field — the silent drop that refusing at render time prevents — while a v0.0.40 submit gives
/// the job `sbatch --cores-per-socket=1` gives. Recorded with `sbatch --hold --cores-per-socket=1`
/// and `POST /slurm/v0.0.4{0,2}/job/submit` of `{"job": {..., "hold": true, "cores_per_socket": 1}}`,
/// both jobs read back with `GET /slurm/v0.0.42/job/{id}`.
#[test]
fn recorded_cores_per_socket_is_dropped_by_v0042_and_kept_by_v0040() {
    let sample = |name: &str| -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/slurmrestd")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let v42 = sample("24.11_v0.0.42_submit-cores-per-socket-ignored.json");
    assert!(
        v42["job_id"].as_u64().is_some(),
        "v0.0.42 still makes the job"
    );
    assert!(
        v42["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["description"] == "Ignoring unknown field \"cores_per_socket\" of type 64 bit integer in DATA_PARSER_JOB_DESC_MSG"),
        "{v42}"
    );
    let v40 = sample("24.11_v0.0.40_submit-cores-per-socket.json");
    assert!(v40["job_id"].as_u64().is_some() && v40["errors"].as_array().unwrap().is_empty());
    let one = json!({"set": true, "infinite": false, "number": 1});
    for name in [
        "24.11_v0.0.42_job-get-cores-per-socket-sbatch.json",
        "24.11_v0.0.42_job-get-cores-per-socket-v0040-submit.json",
    ] {
        assert_eq!(sample(name)["jobs"][0]["cores_per_socket"], one, "{name}");
    }
    // And rendering refuses it for v0.0.42 rather than letting it be dropped.
    assert!(on(V0042, &with_options(json!({"cores-per-socket": 1.0}))).is_err());
    assert_eq!(
        on(V0040, &with_options(json!({"cores-per-socket": 1.0})))
            .unwrap()
            .job
            .cores_per_socket,
        Some(1)
    );
}

/// `--hint=memory_bound` and `-B S:C:T` as real sbatch (24.11) records them: the fields rendering
/// writes on a version with `cores_per_socket`. Recorded like the test above; a v0.0.40 submit of
/// exactly these rendered fields gave a job record equal to sbatch's in every compared field
/// (the `render_sbatch_diff` comparison, by hand, since the v0.0.40 encoder is the seam's).
#[test]
fn recorded_sbatch_jobs_match_what_renders_for_cores() {
    let sample = |name: &str| -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/slurmrestd")
            .join(name);
        serde_json::from_str::<Value>(&std::fs::read_to_string(&path).unwrap()).unwrap()["jobs"][0]
            .clone()
    };
    let num = |v: &Value| {
        v["set"]
            .as_bool()
            .unwrap()
            .then(|| v["number"].as_u64().unwrap() as u32)
    };
    for (directive, name) in [
        (
            "#SBATCH --hint=memory_bound",
            "24.11_v0.0.42_job-get-hint-memory-bound-sbatch.json",
        ),
        (
            "#SBATCH -B 1:2:1",
            "24.11_v0.0.42_job-get-extra-node-info-1-2-1-sbatch.json",
        ),
    ] {
        let sbatch = sample(name);
        let job = on(V0040, &script(directive)).unwrap().job;
        assert_eq!(
            (
                job.cores_per_socket,
                job.threads_per_core,
                job.sockets_per_node
            ),
            (
                num(&sbatch["cores_per_socket"]),
                num(&sbatch["threads_per_core"]),
                num(&sbatch["sockets_per_node"])
            ),
            "{directive}"
        );
        // sbatch's implicit task count (-B) shows as EXACT_TASK_COUNT_REQUESTED.
        let exact = sbatch["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "EXACT_TASK_COUNT_REQUESTED");
        assert_eq!(job.tasks.is_some(), exact, "{directive}");
        if let Some(t) = job.tasks {
            assert_eq!(Some(t), num(&sbatch["tasks"]), "{directive}");
        }
    }
}

/// What rendering accepts for a version, that version's encoder carries: every option item's
/// case (and each value that needs more) rendered for every version that can express it
/// reaches the submit body — the encoder neither refuses it nor drops it.
fn carried(v: ApiVersion, long: &str, value: Option<&str>) -> Result<(), String> {
    use slurm_connector::slurmrestd::convert::submit_body_json;
    let given = value.map(|s| json!(s)).unwrap_or(json!(true));
    let spec = with_options(json!({ long: given }));
    let job = on(v, &spec).map_err(|e| format!("render: {e}"))?.job;
    let body = submit_body_json(v, &job).map_err(|e| format!("encode: {e}"))?;
    let base = submit_body_json(v, &on(v, &with_options(json!({}))).unwrap().job).unwrap();
    if body == base && long != "export" {
        return Err("the body is the same as without it".into());
    }
    Ok(())
}

#[test]
fn every_option_rendered_for_a_version_reaches_its_submit_body() {
    let mut problems = Vec::new();
    for spec in slurm_connector::render::options::OPTIONS {
        let Some(m) = spec.mapped() else { continue };
        for v in ApiVersion::ALL
            .into_iter()
            .filter(|v| spec.versions().contains(*v))
        {
            let mut values = vec![m.case.given];
            values.extend(
                m.values_need
                    .iter()
                    .filter(|n| n.needs.versions.contains(v))
                    .map(|n| Some(n.example)),
            );
            for value in values {
                if let Err(e) = carried(v, spec.long, value) {
                    problems.push(format!("--{} {value:?} on {v}: {e}", spec.long));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `JobDescription.cores_per_socket` is sent by the v0.0.40, v0.0.45 and v0.0.46 encoders and
/// refused by v0.0.41-44's (rendering refuses the option there first).
#[test]
fn cores_per_socket_reaches_the_submit_body() {
    use slurm_connector::slurmrestd::convert::submit_body_json;
    for v in [V0040, V0045, V0046] {
        let job = on(v, &with_options(json!({"cores-per-socket": 4.0})))
            .unwrap()
            .job;
        assert_eq!(
            submit_body_json(v, &job).unwrap()["job"]["cores_per_socket"],
            4,
            "{v}"
        );
        for directive in ["#SBATCH --hint=memory_bound", "#SBATCH -B 1:2:1"] {
            let job = on(v, &script(directive)).unwrap().job;
            assert!(
                submit_body_json(v, &job).unwrap()["job"]["cores_per_socket"].is_number(),
                "{v} {directive}"
            );
        }
    }
    let mut job = on(V0040, &with_options(json!({"cores-per-socket": 4.0})))
        .unwrap()
        .job;
    for v in [V0041, V0042, V0043, V0044] {
        job.cores_per_socket = Some(4);
        let e = submit_body_json(v, &job).unwrap_err().to_string();
        assert!(
            e.contains("cores_per_socket") && e.contains(v.as_str()),
            "{e}"
        );
    }
}
