//! One test per refusal: each bad input gets an error that names the field or option.
//! Plus a "kitchen sink" job using every mapped option, checked against the v0.0.42 schema.

use crate::render_support;

use render_support::*;
use serde_json::{Value, json};
use slurm_connector::render::{InputValue, RenderConfig, RenderError, Rendered, TaskType, options};

fn script_spec(custom: Value) -> Draft {
    let mut spec = Draft::of(&load_request("script_no_io.json"));
    spec.custom = custom;
    spec
}

/// A fixture request, its `custom` still JSON for the test to edit.
fn task_spec(req: &Value) -> Draft {
    Draft::of(req)
}

fn script(body: &str) -> Draft {
    script_spec(json!({ "script": format!("#!/bin/bash\n{body}\necho hi\n") }))
}

fn with_options(opts: Value) -> Draft {
    script_spec(json!({ "script": "#!/bin/bash\necho hi\n", "sbatch_options": opts }))
}

fn render(spec: &Draft) -> Result<Rendered, RenderError> {
    spec.render_at(&config(), NOW)
}

fn err(spec: &Draft) -> String {
    render(spec).expect_err("should be refused").to_string()
}

fn job(spec: &Draft) -> Value {
    slurm_connector::slurmrestd::convert::submit_body_json(
        slurm_connector::slurmrestd::ApiVersion::V0042,
        &render(spec).unwrap().job,
    )
    .unwrap()["job"]
        .clone()
}

#[test]
fn reserved_options_are_refused_from_task_config() {
    for name in [
        "job-name", "output", "error", "chdir", "wrap", "uid", "gid", "job-n",
    ] {
        let e = err(&with_options(json!({ name: "x" })));
        assert!(
            e.contains("reserved") && e.contains("sbatch_options"),
            "{name}: {e}"
        );
    }
}

#[test]
fn reserved_directives_are_overridden_or_refused() {
    let j = job(&script(
        "#SBATCH -J mine\n#SBATCH -o /home/u/.ssh/authorized_keys\n#SBATCH --chdir=/tmp",
    ));
    let name = j["name"].as_str().unwrap();
    assert!(
        name.starts_with("flyte-") && name.contains("-nightly-") && !name.contains("mine"),
        "{name}"
    );
    assert!(
        j["standard_output"]
            .as_str()
            .unwrap()
            .starts_with("/shared/flyte/jobs/")
    );
    assert_eq!(j["current_working_directory"], "/shared/flyte/jobs");
    for d in ["#SBATCH --wrap=true", "#SBATCH --uid=0", "#SBATCH --gid=0"] {
        assert!(err(&script(d)).contains("script line 2"), "{d}");
    }
}

#[test]
fn option_names_and_values_are_validated() {
    assert!(err(&with_options(json!({"Partition": "x"}))).contains("^[a-z][a-z0-9-]*$"));
    assert!(err(&with_options(json!({"--time": "5"}))).contains("^[a-z]"));
    let e = err(&with_options(json!({"comment": "a\n#SBATCH --uid=0"})));
    assert!(e.contains("whitespace") && e.contains("--comment"), "{e}");
    assert!(err(&with_options(json!({"comment": "a b"}))).contains("whitespace"));
    let e = err(&with_options(json!({"no-such-option": "1"})));
    assert!(
        e.contains("no-such-option") && e.contains("not an sbatch option"),
        "{e}"
    );
    assert!(err(&with_options(json!({"time": true}))).contains("requires a value"));
    assert!(err(&with_options(json!({"hold": "yes"}))).contains("takes no value"));
    assert!(err(&with_options(json!({"me": "1"}))).contains("ambiguous"));
}

#[test]
fn unexpressible_options_are_refused_with_the_supported_list() {
    for (name, v) in [
        ("clusters", json!("a")),
        ("get-user-env", json!(true)),
        ("nodefile", json!("/tmp/nodes")),
        ("test-only", json!(true)),
        ("propagate", json!(true)),
        ("export-file", json!("/x")),
    ] {
        let e = err(&with_options(json!({ name: v })));
        assert!(
            e.contains(&format!("--{name}")) && e.contains("Supported options: account"),
            "{name}: {e}"
        );
    }
    let e = err(&script("#SBATCH --clusters=other"));
    assert!(
        e.contains("script line 2") && e.contains("--clusters"),
        "{e}"
    );
    assert!(err(&script("#SBATCH --export=NONE")).contains("env"));
    assert!(err(&script("#SBATCH --container-image=x")).contains("SPANK"));
}

#[test]
fn bad_values_name_the_option() {
    for (o, v) in [
        ("time", "1h"),
        ("mem", "1.5G"),
        ("nodes", "3-2"),
        ("cpus-per-task", "0"),
        ("mail-type", "SOMETIMES"),
        ("open-mode", "x"),
        ("signal", "B:NOPE@60"),
        ("begin", "soon"),
        ("exclusive", "always"),
        ("kill-on-invalid-dep", "maybe"),
        ("gpus", "many"),
        ("array", "1..3"),
        ("hint", "memory_bound"),
    ] {
        let e = err(&with_options(json!({ o: v })));
        assert!(
            e.contains(&format!("`--{o}`")) && e.contains(v),
            "{o}={v}: {e}"
        );
    }
}

#[test]
fn memory_options_are_mutually_exclusive_across_sources() {
    let mut spec = script("#SBATCH --mem-per-cpu=2G");
    spec.custom["sbatch"] = json!({"mem": "8G"});
    let e = err(&spec);
    assert!(
        e.contains("--mem (Slurm config field `sbatch.mem`)")
            && e.contains("--mem-per-cpu (script line 2"),
        "{e}"
    );
    // The same option from two sources is not a conflict: the later source wins.
    let mut spec = script("#SBATCH --mem=2G");
    spec.custom["sbatch"] = json!({"mem": "8G"});
    assert_eq!(job(&spec)["memory_per_node"]["number"], 8192);
}

#[test]
fn precedence_script_then_first_class_then_sbatch_options() {
    let mut spec = script("#SBATCH -p from-script\n#SBATCH -t 5\n#SBATCH --qos=s");
    spec.custom["sbatch"] = json!({"partition": "from-field", "time_limit": "10"});
    spec.custom["sbatch_options"] = json!({"time": "15", "requeue": true});
    let j = job(&spec);
    assert_eq!(j["partition"], "from-field");
    assert_eq!(j["time_limit"]["number"], 15);
    assert_eq!(j["qos"], "s");
    assert_eq!(j["requeue"], true);
    // --no-requeue and --requeue write one field: the later wins.
    let mut spec = script("#SBATCH --requeue");
    spec.custom["sbatch_options"] = json!({"no-requeue": true});
    assert_eq!(job(&spec)["requeue"], false);
}

#[test]
fn config_errors_name_the_key() {
    assert!(
        err(&script_spec(
            json!({"script": "#!/bin/bash\n", "sbatchh": {}})
        ))
        .contains("`sbatchh`")
    );
    let spec =
        script_spec(json!({"script": "#!/bin/bash\n", "connection": {"host": "h", "port": 22.0}}));
    assert!(render(&spec).is_ok(), "SSH-era keys are ignored");
    assert!(err(&script_spec(json!({"script": "  \n"}))).contains("`script`"));
    assert!(
        err(&script_spec(
            json!({"script": "#!/bin/bash\n", "env": {"BAD-NAME": "1"}})
        ))
        .contains("BAD-NAME")
    );
    let e = err(&script_spec(
        json!({"script": "#!/bin/bash\n", "env": {"FLYTE_OUTPUT_X": "/etc"}}),
    ));
    assert!(e.contains("FLYTE_OUTPUT_X"), "{e}");
    let e = err(&script_spec(
        json!({"script": "#!/bin/bash\n", "modules": ["-f"]}),
    ));
    assert!(e.contains("modules"), "{e}");
}

#[test]
fn working_dir_rules() {
    let spec = script("");
    let none = RenderConfig {
        working_dir: None,
        ..config()
    };
    assert!(matches!(
        spec.render_at(&none, NOW),
        Err(RenderError::NoWorkingDir)
    ));
    let mut task_wd =
        script_spec(json!({"script": "#!/bin/bash\n", "working_dir": "/scratch/me/"}));
    assert_eq!(
        task_wd
            .render_at(&none, NOW)
            .unwrap()
            .stdout_path
            .rsplit_once('/')
            .unwrap()
            .0,
        "/scratch/me"
    );
    // The deployment's directory wins over the task's.
    assert!(
        render(&task_wd)
            .unwrap()
            .stdout_path
            .starts_with("/shared/flyte/jobs/")
    );
    task_wd.custom["working_dir"] = json!(".flyte/jobs");
    assert!(
        task_wd
            .render_at(&none, NOW)
            .unwrap_err()
            .to_string()
            .contains("`working_dir`")
    );
}

#[test]
fn inputs_and_outputs() {
    let mut spec = task_spec(&load_request("script_preprocess.json"));
    spec.inputs.push((
        "xs".into(),
        InputValue::Unsupported {
            type_name: "collection".into(),
        },
    ));
    assert!(err(&spec).contains("input `xs`"));

    let mut spec = task_spec(&load_request("script_preprocess.json"));
    spec.custom["outputs"]["stats"] = json!("directory");
    assert!(err(&spec).contains("output `stats`"));

    let mut spec = task_spec(&load_request("script_preprocess.json"));
    spec.custom["outputs"]["extra"] = json!("file");
    assert!(err(&spec).contains("output `extra`"));

    let mut spec = task_spec(&load_request("script_preprocess.json"));
    spec.custom["script"] = json!("#!/usr/bin/env python3\nprint(1)\n");
    assert!(err(&spec).contains("not a shell"));
}

#[test]
fn native_task_refusals() {
    let mut spec = task_spec(&load_request("native_pyxis_gpu.json"));
    spec.custom["script"] = json!("#!/bin/bash\n");
    assert!(err(&spec).contains("`script`"));

    let mut spec = task_spec(&load_request("native_pyxis_gpu.json"));
    spec.container = None;
    assert!(err(&spec).contains("container"));

    let mut spec = task_spec(&load_request("native_pyxis_gpu.json"));
    spec.custom["container"]["srun_args"] = json!(["-N2"]);
    assert!(err(&spec).contains("container.srun_args"));

    let mut spec = task_spec(&load_request("native_pyxis_gpu.json"));
    spec.custom["container"]["runtime"] = json!("docker");
    assert!(err(&spec).contains("container.runtime"));

    let mut spec = task_spec(&load_request("native_pyxis_gpu.json"));
    spec.task_type = TaskType::SlurmScript;
    assert!(err(&spec).contains("`script`"));

    // One entrypoint run writes one result: a native task is no job array.
    let mut spec = task_spec(&load_request("native_pyxis_gpu.json"));
    spec.custom["sbatch_options"] = json!({"array": "0-3"});
    let e = err(&spec);
    assert!(
        e.contains("`array`") && e.contains("`--array=0-3`") && e.contains("map task"),
        "{e}"
    );
}

/// A job array of a script task: per-element logs (`%A_%a`, Slurm fills them in) and
/// exit-status markers (`%a`, the shell fills it in), every index expression Slurm takes.
#[test]
fn a_script_array_gets_per_element_files() {
    let r = render(&script("#SBATCH --array=0-9%3")).unwrap();
    assert_eq!(r.job.array.as_deref(), Some("0-9%3"));
    assert!(r.stdout_path.ends_with("_%A_%a.out"), "{}", r.stdout_path);
    assert!(r.stderr_path.ends_with("_%A_%a.err"), "{}", r.stderr_path);
    assert_eq!(
        r.job.standard_error.as_deref(),
        Some(r.stderr_path.as_str())
    );
    assert!(
        r.job.script.contains("_\"${SLURM_ARRAY_TASK_ID}\".exit"),
        "{}",
        r.job.script
    );
    // Not an array: one file each, as before.
    let r = render(&script("")).unwrap();
    assert!(r.stdout_path.ends_with(".out") && !r.stdout_path.contains('%'));
    for bad in ["9-1", "0-4:0", "0-9%0", "x"] {
        let e = err(&with_options(json!({ "array": bad })));
        assert!(e.contains("`--array`") && e.contains(bad), "{bad}: {e}");
    }
}

#[test]
fn no_env_value_reaches_the_script_text() {
    let mut spec = task_spec(&load_request("script_preprocess.json"));
    spec.custom["env"] = json!({"SECRET_TOKEN": "s3cr3t-value-7781"});
    spec.env_vars
        .insert("OTHER".into(), "backend-value-9931".into());
    let r = render(&spec).unwrap();
    for needle in ["s3cr3t-value-7781", "backend-value-9931", "imagenet-mini"] {
        assert!(
            !r.job.script.contains(needle),
            "{needle} leaked into the script"
        );
        assert!(r.job.environment.iter().any(|(_, v)| v == needle));
    }
}

/// Every mapped option at once, from a script: the JSON must match the v0.0.42 schema field by
/// field, and every mapped option must have set something.
#[test]
fn kitchen_sink_matches_the_schema() {
    let directives = KITCHEN_SINK;
    let j = job(&script(directives.trim_end()));
    let problems = schema_problems(&j);
    assert!(problems.is_empty(), "{problems:#?}\n{j:#}");
    for (k, v) in [
        (
            "tres_per_node",
            json!("gres/gpu:a100:4,gres/nvme:1,gres/gpu:2"),
        ),
        ("tres_per_task", json!("cpu=8,license/x:1,gres/gpu:1")),
        ("tres_per_job", json!("gres/gpu:a100:8")),
        ("memory_per_tres", json!("gres/gpu:16384")),
        ("cpus_per_tres", json!("gres/gpu:4")),
        ("excluded_nodes", json!(["bad[1-2]"])),
        ("required_nodes", json!(["good[1-4]"])),
        ("shared", json!(["user"])),
        (
            "mail_type",
            json!([
                "BEGIN",
                "END",
                "FAIL",
                "REQUEUE",
                "TIME=90%",
                "STAGE_OUT",
                "INVALID_DEPENDENCY"
            ]),
        ),
        (
            "comment",
            // The task's own, as sbatch sets it: the key is in the name.
            json!("mine"),
        ),
        (
            "begin_time",
            json!({"set": true, "infinite": false, "number": NOW + 3600}),
        ),
        (
            "time_limit",
            json!({"set": true, "infinite": false, "number": 1440}),
        ),
        ("kill_warning_flags", json!(["RESERVATION_JOB"])),
        (
            "distribution_plane_size",
            json!({"set": true, "infinite": false, "number": 4}),
        ),
        ("delay_boot", json!(300)),
        ("wait_for_switch", json!(600)),
        ("kill_on_node_fail", json!(false)),
        ("requeue", json!(false)),
    ] {
        assert_eq!(j[k], v, "{k}");
    }
    // Options that exclude ones above, in a second job.
    let others = "#SBATCH --mem=4G --oversubscribe --requeue --tres-bind=gres/gpu:closest --ntasks-per-core=1 --threads-per-core=2";
    let j2 = job(&script(others));
    assert!(
        schema_problems(&j2).is_empty(),
        "{:#?}",
        schema_problems(&j2)
    );
    assert_eq!(j2["shared"], json!(["oversubscribe"]));
    assert_eq!(j2["requeue"], json!(true));
    assert_eq!(j2["memory_per_node"]["number"], json!(4096));
    let j3 = job(&script("#SBATCH --mem-per-cpu=500 -B 2:*:1"));
    assert!(schema_problems(&j3).is_empty());
    assert_eq!(j3["memory_per_cpu"]["number"], json!(500));
    assert_eq!(
        (&j3["sockets_per_node"], &j3["threads_per_core"]),
        (&json!(2), &json!(1))
    );
    // Every option mapped in this version must have been exercised above.
    let text = format!("{directives}\n{others}\n--mem-per-cpu -B ");
    for spec in options::OPTIONS
        .iter()
        .filter(|s| s.supported_in(config().api_version))
    {
        let short = spec.short.map(|c| format!("-{c} ")).unwrap_or_default();
        assert!(
            text.contains(&format!("--{}", spec.long))
                || (!short.is_empty() && text.contains(&short)),
            "kitchen sink misses --{}",
            spec.long
        );
    }
}
