//! Golden tests: every real CreateTaskRequest fixture (made with the published flyteplugins-slurm)
//! renders to the committed submit body. `UPDATE_GOLDEN=1 cargo test --test render_golden`
//! rewrites the golden files; review the diff before committing.

mod render_support;

use render_support::*;
use serde_json::{Value, json};
use slurm_connector::render::{Rendered, render_at};
use slurm_connector::slurmrestd::ApiVersion;
use slurm_connector::slurmrestd::convert::submit_body_json;

fn summary(r: &Rendered) -> Value {
    json!({
        "job_name": r.job_name,
        "key": r.key,
        "stdout_path": r.stdout_path,
        "stderr_path": r.stderr_path,
        "declared_outputs": r.declared_outputs.iter().map(|o| json!({
            "name": o.name, "kind": format!("{:?}", o.kind), "upload": format!("{:?}", o.upload),
            "uri": o.uri, "written_to": o.written_to,
        })).collect::<Vec<_>>(),
        "submit_body": submit_body_json(ApiVersion::V0042, &r.job).unwrap(),
    })
}

#[test]
fn every_fixture_matches_its_golden_file() {
    let dir = fixtures_dir();
    let mut names: Vec<String> = std::fs::read_dir(dir.join("requests"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 6, "fixtures missing: {names:?}");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    for name in &names {
        let spec = task_spec(&load_request(name));
        let rendered = render_at(&spec, &config(), NOW).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = summary(&rendered);
        let problems = schema_problems(&got["submit_body"]["job"]);
        assert!(problems.is_empty(), "{name}: {problems:#?}");
        let golden = dir.join("golden").join(name);
        let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
        if update {
            std::fs::write(&golden, &text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
            panic!(
                "{}: no golden file; run with UPDATE_GOLDEN=1",
                golden.display()
            )
        });
        if want != text {
            failures.push(format!(
                "{name}: differs from {}\n--- got ---\n{text}",
                golden.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
