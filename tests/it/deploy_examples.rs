//! The deployment files and docs show configuration and a job; these tests put them through the
//! real code, so an example that the connector would refuse (or render differently from what the
//! docs say) fails here instead of in a user's first try:
//! - the dev-cluster example's sbatch script renders to the job its README describes, valid
//!   against the v0.0.42 job schema;
//! - the environment the example README lists (from `dev-cluster env`) loads;
//! - the TOML clusters file in docs/configuration.md and the one in the chart's CI values load.

use crate::render_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use render_support::{NOW, schema_problems};
use serde_json::{Value, json};
use slurm_connector::config::{AuthConfig, DeploymentConfig};
use slurm_connector::render::{
    ExecutionIdentity, InputValue, InterfaceKind, RenderConfig, TaskSpec, TaskType, render_at,
};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The example as flyteplugins-slurm's `SlurmScriptTask(..., plugin_config=Slurm(partition="debug"))`
/// writes it into `TaskTemplate.custom`.
fn example_spec() -> TaskSpec {
    TaskSpec {
        task_type: TaskType::SlurmScript,
        task_name: "preprocess_task.preprocess".into(),
        custom: render_support::slurm_config(json!({
            "script": read("deploy/examples/dev-cluster/preprocess.sbatch"),
            "sbatch": {"partition": "debug"},
            "outputs": {"shards": "directory", "stats": "file"},
            "output_upload": "connector",
            "connection": {},
            "secrets": {},
        }))
        .unwrap(),
        container: None,
        inputs: vec![
            ("n_shards".into(), InputValue::Int(4)),
            ("dataset".into(), InputValue::Str("imagenet-mini".into())),
        ],
        outputs: vec![
            ("shards".into(), InterfaceKind::Dir),
            ("stats".into(), InterfaceKind::File),
        ],
        output_prefix: "file:///tmp/slurm-outputs/r1/a0/0".into(),
        exec: ExecutionIdentity {
            org: "dev".into(),
            project: "flytesnacks".into(),
            domain: "development".into(),
            run_name: "r1".into(),
            action_name: "a0".into(),
            attempt: 0,
        },
        env_vars: BTreeMap::from([
            ("RUN_NAME".to_string(), "r1".to_string()),
            ("ACTION_NAME".to_string(), "a0".to_string()),
        ]),
        script_args: Vec::new(),
        shell_template: None,
        interruptible: false,
    }
}

#[test]
fn dev_cluster_example_renders_the_job_its_readme_describes() {
    let cfg = RenderConfig {
        working_dir: Some("/shared/flyte".into()),
        ..RenderConfig::default()
    };
    let r = render_at(&example_spec(), &cfg, NOW).expect("the example script must render");
    let body = slurm_connector::slurmrestd::convert::submit_body_json(
        slurm_connector::slurmrestd::ApiVersion::V0042,
        &r.job,
    )
    .unwrap();
    let job = &body["job"];
    let problems = schema_problems(job);
    assert!(problems.is_empty(), "{problems:#?}");

    // README: `--ntasks=1 --cpus-per-task=2 --mem=256M --time=0-00:10`, partition `debug`,
    // running in /shared/flyte.
    assert_eq!(job["partition"], "debug");
    assert_eq!(job["tasks"], 1);
    assert_eq!(job["cpus_per_task"], 2);
    assert_eq!(job["memory_per_node"]["number"], 256);
    assert_eq!(job["time_limit"]["number"], 10);
    assert_eq!(job["current_working_directory"], "/shared/flyte");
    assert_eq!(
        job["standard_output"],
        Value::String(format!("/shared/flyte/{}.out", r.job_name))
    );

    // Inputs and outputs as the script reads them.
    let env: Vec<&str> = job["environment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let outputs = format!("/shared/flyte/{}.outputs", r.job_name);
    for want in [
        "FLYTE_INPUT_DATASET=imagenet-mini".to_string(),
        "FLYTE_INPUT_N_SHARDS=4".to_string(),
        format!("FLYTE_OUTPUT_SHARDS={outputs}/shards"),
        format!("FLYTE_OUTPUT_STATS={outputs}/stats"),
    ] {
        assert!(env.contains(&want.as_str()), "{want} missing from {env:#?}");
    }
    let declared: Vec<(&str, &str)> = r
        .declared_outputs
        .iter()
        .map(|o| (o.name.as_str(), o.uri.as_str()))
        .collect();
    assert_eq!(
        declared,
        vec![
            ("shards", "file:///tmp/slurm-outputs/r1/a0/0/shards"),
            ("stats", "file:///tmp/slurm-outputs/r1/a0/0/stats"),
        ]
    );
    // The user's script body reaches the job unchanged.
    assert!(
        job["script"]
            .as_str()
            .unwrap()
            .contains(r#"printf '{"dataset": "%s", "rows": %s}\n'"#),
        "script body missing"
    );
}

/// The variables the example README lists, as `dev-cluster env` prints them for 24.11.
#[test]
fn dev_cluster_environment_from_the_readme_loads() {
    let readme = read("deploy/examples/dev-cluster/README.md");
    let mut vars = BTreeMap::new();
    for line in readme.lines() {
        // | `FLYTE_SLURM_X` | `value` | why |
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() >= 3 && cells[1].starts_with("`FLYTE_SLURM_") {
            vars.insert(
                cells[1].trim_matches('`').to_string(),
                cells[2].trim_matches('`').to_string(),
            );
        }
    }
    assert_eq!(
        vars.len(),
        6,
        "the README's variable table changed: {vars:?}"
    );
    let cfg = DeploymentConfig::load_with(&|k| vars.get(k).cloned(), None)
        .expect("the README's environment must load");
    assert!(!cfg.embedded);
    let c = cfg.select_cluster(None, None).unwrap();
    assert_eq!(c.restd_url.as_str(), "http://127.0.0.1:6820/");
    assert_eq!(c.username.as_deref(), Some("flyte"));
    assert_eq!(c.working_dir.as_deref(), Some("/shared/flyte"));
    assert!(matches!(c.auth, Some(AuthConfig::KeyFile { .. })));
    assert_eq!(
        c.shared_mounts,
        vec![(
            "/shared".to_string(),
            PathBuf::from("/var/cache/slurm-dev-cluster/24.11/root/shared")
        )]
    );
}

fn load_toml(text: &str, env: &[(&str, &str)]) -> DeploymentConfig {
    let dir = std::env::temp_dir().join(format!("deploy-examples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{:x}.toml", text.len()));
    std::fs::write(&path, text).unwrap();
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let got = DeploymentConfig::load_with(&|k| env.get(k).cloned(), Some(&path));
    let _ = std::fs::remove_file(&path);
    got.unwrap_or_else(|e| panic!("{e}\n--- file ---\n{text}"))
}

#[test]
fn clusters_file_in_the_configuration_docs_loads() {
    let doc = read("docs/configuration.md");
    let start = doc.find("```toml\n").expect("a ```toml block") + "```toml\n".len();
    let text = &doc[start..start + doc[start..].find("```").unwrap()];
    let cfg = load_toml(text, &[]);
    assert_eq!(cfg.default_cluster, "hpc1");
    assert_eq!(cfg.cluster_names(), "hpc1, hpc2");
    assert_eq!(
        cfg.cluster_for_ssh_host("LOGIN1.hpc1.example")
            .map(|c| c.name.as_str()),
        Some("hpc1")
    );
    assert!(matches!(
        cfg.clusters["hpc2"].auth,
        Some(AuthConfig::TokenFile(_))
    ));
}

#[test]
fn clusters_file_in_the_chart_ci_values_loads_with_the_charts_environment() {
    let values = read("deploy/helm/slurm-connector/ci/clusters-file-values.yaml");
    // The block under `content: |`, de-indented.
    let mut lines = values
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("content: |"));
    lines.next();
    let block: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .collect();
    let text: String = block
        .iter()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("[clusters.hpc1]"), "{text}");
    // What the chart sets next to the file for these values (validate_chart.py renders it).
    let cfg = load_toml(
        &text,
        &[
            ("FLYTE_SLURM_CLUSTER_NAME", "hpc1"),
            ("FLYTE_SLURM_SHARED_MOUNTS", "/shared=/mnt/hpc1-shared"),
            ("FLYTE_SLURM_ALLOW_TASK_CREDENTIALS", "false"),
        ],
    );
    assert_eq!(cfg.default_cluster, "hpc1");
    assert_eq!(cfg.clusters.len(), 2);
    assert_eq!(
        cfg.clusters["hpc1"].shared_mounts,
        vec![("/shared".to_string(), PathBuf::from("/mnt/hpc1-shared"))]
    );
}
