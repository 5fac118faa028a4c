//! The Flyte 1 seam on the published plugin's fixtures (flytekitplugins-slurm 1.16.31).

use super::*;
use prost::Message;

/// A request made by flytekit and flytekitplugins-slurm 1.16.31 (`scripts/make-flyte1-fixtures.py`).
fn fixture(name: &str) -> admin::CreateTaskRequest {
    let path = format!(
        "{}/tests/fixtures/flyte1/{name}.pb",
        env!("CARGO_MANIFEST_DIR")
    );
    admin::CreateTaskRequest::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
}

/// `sbatch_options` as the renderer takes them: by name, each with its value.
fn options(kv: &[(&str, &str)]) -> Vec<(String, crate::render::custom::OptValue)> {
    kv.iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                crate::render::custom::OptValue::Value(v.to_string()),
            )
        })
        .collect()
}
#[test]
fn slurm_fn_becomes_a_function_task_with_its_options_and_identity() {
    let r = request(&fixture("slurm_fn_script")).unwrap();
    assert_eq!(r.spec.task_type, TaskType::Function);
    assert_eq!(r.spec.task_name, "flyte1_fixture_tasks.mean");
    assert_eq!(
        (
            r.spec.exec.project.as_str(),
            r.spec.exec.domain.as_str(),
            r.spec.exec.run_name.as_str(),
            r.spec.exec.action_name.as_str(),
            r.spec.exec.attempt
        ),
        ("flytesnacks", "development", "f1fixture01", "n0", 0)
    );
    // job-name is the connector's (the key is in it); the rest are sbatch's.
    let c = r.spec.custom.slurm().unwrap();
    assert_eq!(
        c.sbatch_options,
        options(&[("partition", "debug"), ("time", "00:10:00")])
    );
    assert_eq!(
        (
            c.connection.host.as_deref(),
            c.connection.named_users.is_empty()
        ),
        (Some("login.hpc.example.org"), true),
        "ssh_config's host picks the cluster; its username is SSH's and ignored"
    );
    assert!(c.script.as_deref().unwrap().contains("{task.fn}"));
    assert_eq!(r.service_account, "default");
    assert!(r.script_file.is_none() && r.secrets.is_empty());
    let args = &r.spec.container.as_ref().unwrap().args;
    assert!(args.windows(2).any(|w| w == ["--prev-checkpoint", ""]));

    let retry = request(&fixture("slurm_fn_retry")).unwrap();
    assert_eq!(retry.spec.exec.attempt, 1, "a retry is a new attempt");
}

#[test]
fn slurm_names_its_script_file_and_arguments() {
    let r = request(&fixture("slurm_script_path")).unwrap();
    assert_eq!(r.spec.task_type, TaskType::SlurmScript);
    assert_eq!(r.script_file.as_deref(), Some("/home/alice/jobs/train.sh"));
    assert_eq!(r.spec.script_args, ["--epochs", "3", "--tag", "run one"]);
    assert_eq!(
        r.spec.custom.slurm().unwrap().sbatch_options,
        options(&[("partition", "debug"), ("time", "00:05:00")]),
        "output is the connector's (GetTaskLogs reads it)"
    );
}

#[test]
fn a_shell_task_renders_its_script_filled_in_and_reads_its_outputs_where_it_wrote_them() {
    let r = request(&fixture("slurm_shell")).unwrap();
    assert_eq!(r.spec.task_type, TaskType::SlurmScript);
    assert!(r.script_file.is_none());
    assert_eq!(
        r.spec.inputs,
        vec![
            ("greeting".into(), InputValue::Str("hello world".into())),
            ("n".into(), InputValue::Int(3)),
        ]
    );
    assert_eq!(
        r.spec.shell_template.as_ref().unwrap().output_locations,
        vec![
            (
                "report".into(),
                "/home/alice/results/{inputs.greeting}.txt".into()
            ),
            (
                "shards".into(),
                "/home/alice/results/shards-{inputs.n}".into()
            ),
        ]
    );
    let cfg = crate::render::RenderConfig {
        working_dir: Some("/home/alice/flyte".into()),
        ..Default::default()
    };
    let rendered = crate::render::render(&r.spec, &cfg).unwrap();
    let script = &rendered.job.script;
    assert!(
        script.contains("echo greeting 'hello world', 3 shards, home \"${HOME:-none}\"\n"),
        "{script}"
    );
    assert!(
        script.contains("> '/home/alice/results/hello world.txt'\n"),
        "{script}"
    );
    assert!(
        script.contains("mkdir -p /home/alice/results/shards-3\n"),
        "{script}"
    );
    assert!(
        !script.contains(".outputs"),
        "no job outputs folder: the outputs are where the script writes them: {script}"
    );
    // The script's `#SBATCH --time=2` read, and sbatch_config's `time` over it, as on the
    // agent's `sbatch --time 00:05:00 SCRIPT` command line.
    assert_eq!(
        rendered.job.time_limit,
        Some(crate::slurmrestd::job_description::Limit::Finite(5))
    );
    let outs: Vec<(&str, &str, &str)> = rendered
        .declared_outputs
        .iter()
        .map(|o| (o.name.as_str(), o.written_to.as_str(), o.uri.as_str()))
        .collect();
    let prefix =
        "s3://my-s3-bucket/metadata/propeller/flytesnacks-development-f1fixture01/n0/data/0";
    assert_eq!(
        outs,
        vec![
            (
                "report",
                "/home/alice/results/hello world.txt",
                &*format!("{prefix}/report")
            ),
            (
                "shards",
                "/home/alice/results/shards-3",
                &*format!("{prefix}/shards")
            ),
        ]
    );
    assert_eq!(
        rendered.declared_outputs[1].kind,
        crate::render::OutputKind::Dir
    );
}

#[test]
fn a_shell_task_config_that_does_not_fit_its_interface_is_refused_by_name() {
    let with = |edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut req = fixture("slurm_shell");
        let t = req.template.as_mut().unwrap();
        let mut custom = match struct_to_json(t.custom.as_ref().unwrap()) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        edit(&mut custom);
        t.custom = Some(crate::proto::json_to_struct(&Value::Object(custom)));
        request(&req).unwrap_err().to_string()
    };
    for (edit, want) in [
        (
            Box::new(|c: &mut serde_json::Map<String, Value>| {
                c["output_locs"].as_array_mut().unwrap().pop();
            }) as Box<dyn Fn(&mut serde_json::Map<String, Value>)>,
            "`output_locs`: the task interface's output `shards` has no location",
        ),
        (
            Box::new(|c| c["output_locs"][0]["var"] = "nope".into()),
            "`output_locs[0].var`: the task interface has no output `nope`",
        ),
        (
            Box::new(|c| c["output_locs"][1]["var"] = "report".into()),
            "output `report` is located twice",
        ),
        (
            Box::new(|c| c["output_locs"][0]["where"] = "x".into()),
            "`output_locs[0].where`",
        ),
        (
            Box::new(|c| c["output_locs"][0]["location"] = "".into()),
            "`output_locs[0].location`: must be a non-empty string",
        ),
        (
            Box::new(|c| c["python_input_types"]["epochs"] = "int".into()),
            "`python_input_types.epochs`: the request has no such input",
        ),
        (
            Box::new(|c| c["script"] = "#!/bin/bash\n".into()),
            "`script`: is empty",
        ),
        (
            Box::new(|c| {
                c.insert("batch_script_path".into(), "/x.sh".into());
            }),
            "`batch_script_path`: not a key flytekitplugins-slurm writes for a `slurm` task \
             with an inline script",
        ),
    ] {
        let e = with(&*edit);
        assert!(e.contains(want), "want {want}: {e}");
    }
}

#[test]
fn what_the_plugin_never_writes_is_refused_by_name() {
    let with = |key: &str, v: prost_types::Value| {
        let mut req = fixture("slurm_script_path");
        let t = req.template.as_mut().unwrap();
        t.custom.as_mut().unwrap().fields.insert(key.into(), v);
        request(&req).unwrap_err().to_string()
    };
    let s = |t: &str| prost_types::Value {
        kind: Some(prost_types::value::Kind::StringValue(t.into())),
    };
    let e = with("output_locs", s("x"));
    assert!(
        e.contains("`output_locs`") && e.contains("a `slurm` task (SlurmTask)"),
        "{e}"
    );
    let e = with("sbatch", s("x"));
    assert!(
        e.contains("`sbatch`") && e.contains("batch_script_path"),
        "{e}"
    );
    let e = with("batch_script_path", s("train.sh"));
    assert!(e.contains("absolute path"), "{e}");

    let mut req = fixture("slurm_fn_plain");
    req.template.as_mut().unwrap().r#type = "sensor".into();
    assert_eq!(
        request(&req).unwrap_err(),
        Flyte1Error::TaskType("sensor".into())
    );
    let mut req = fixture("slurm_fn_plain");
    req.task_execution_metadata = None;
    assert_eq!(request(&req).unwrap_err(), Flyte1Error::NoExecutionId);
}

/// One status, both wires: the same phase value, message, log link, custom_info and output
/// blob (its URI and dimensionality) in Flyte 1's `Resource` as in Flyte 2's.
#[test]
fn a_status_reaches_both_wires_alike() {
    use crate::service::wire::status::{LogLink, SlurmJob};
    use crate::staging::{Dimensionality, OutputBlob};
    let status = TaskStatus {
        outputs: Some(vec![OutputBlob {
            name: "model".into(),
            uri: "s3://b/out/model".into(),
            dimensionality: Dimensionality::Multipart,
        }]),
        log_links: vec![LogLink {
            name: "Slurm".into(),
            uri: "https://logs/1".into(),
        }],
        job: Some(SlurmJob {
            cluster: "hpc".into(),
            job_id: crate::slurmrestd::JobId(5),
            job_name: "j".into(),
            element: None,
        }),
        ..TaskStatus::without_job(crate::domain::Phase::Succeeded, "done".into())
    };
    let v2 = crate::service::wire::convert::resource(status.clone());
    let v1 = resource(status);
    assert_eq!(v1.phase, core1::task_execution::Phase::Succeeded as i32);
    assert_eq!(v1.phase, v2.phase);
    assert_eq!(v1.message, "done");
    assert_eq!(v1.log_links[0].uri, "https://logs/1");
    assert!(v1.log_links[0].show_while_pending);
    assert_eq!(v1.custom_info, v2.custom_info);
    assert_eq!(
        struct_to_json(v1.custom_info.as_ref().unwrap())["job_id"],
        5.0
    );
    let out = v1.outputs.unwrap().literals;
    let Some(core1::literal::Value::Scalar(s)) = &out["model"].value else {
        panic!("{out:?}")
    };
    let Some(core1::scalar::Value::Blob(b)) = &s.value else {
        panic!("{s:?}")
    };
    assert_eq!(b.uri, "s3://b/out/model");
    let dims = b
        .metadata
        .as_ref()
        .unwrap()
        .r#type
        .as_ref()
        .unwrap()
        .dimensionality;
    assert_eq!(dims, core1::blob_type::BlobDimensionality::Multipart as i32);
    let v2_out = v2.outputs.unwrap().literals;
    assert_eq!(v2_out[0].name, "model");
}

/// flytekit writes `@task(interruptible=True)` into the template's metadata; propeller also
/// fills the execution's: either makes the task interruptible.
#[test]
fn interruptible_is_read_from_the_template_or_the_execution() {
    let plain = fixture("slurm_fn_script");
    assert!(!request(&plain).unwrap().spec.interruptible);
    let mut r = plain.clone();
    r.template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_default()
        .interruptible_value = Some(core1::task_metadata::InterruptibleValue::Interruptible(
        true,
    ));
    assert!(request(&r).unwrap().spec.interruptible);
    let mut r = plain;
    r.task_execution_metadata.as_mut().unwrap().interruptible = true;
    assert!(request(&r).unwrap().spec.interruptible);
}

/// `sbatch_config` reaches the renderer typed: options by name with the plugin's `str(val)`, and
/// `no-coalesce` (the connector's own key, not sbatch's) as the task's opt-out of coalescing.
#[test]
fn sbatch_config_is_typed_here_and_no_coalesce_is_the_tasks_opt_out() {
    let with = |v: Value| {
        let mut req = fixture("slurm_script_path");
        let t = req.template.as_mut().unwrap();
        let mut custom = match struct_to_json(t.custom.as_ref().unwrap()) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        custom.insert("sbatch_config".into(), v);
        t.custom = Some(crate::proto::json_to_struct(&Value::Object(custom)));
        request(&req)
    };
    let r = with(serde_json::json!({"no-coalesce": true, "mem": 2048, "--time": "5"})).unwrap();
    let c = r.spec.custom.slurm().unwrap();
    assert!(c.no_coalesce);
    assert_eq!(c.sbatch_options, options(&[("mem", "2048"), ("time", "5")]));
    let r = with(serde_json::json!({"no-coalesce": "False"})).unwrap();
    assert!(!r.spec.custom.slurm().unwrap().no_coalesce);
    let e = with(serde_json::json!({"no-coalesce": "sometimes"}))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sbatch_config.no-coalesce") && e.contains("True"),
        "{e}"
    );
}
