//! Golden tests: every real CreateTaskRequest fixture (made with the published flyteplugins-slurm)
//! renders to the committed submit body. `UPDATE_GOLDEN=1 cargo test --test it render_golden::`
//! rewrites the golden files; review the diff before committing.

use crate::render_support;

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

/// The fixtures' registry images mapped by a cluster's image rules: the script names the
/// pre-staged file (and checks it on the node first); an image no rule maps renders as above.
#[test]
fn mapped_images_render_the_pre_staged_file() {
    use slurm_connector::config::images::{FileImageRule, ImageMap};
    let mut cfg = config();
    cfg.images = ImageMap::from_file(
        "images",
        vec![FileImageRule {
            pattern: "ghcr.io/acme/*".into(),
            pyxis: Some("/shared/images/{flat}.sqsh".into()),
            apptainer: Some("/shared/images/{flat}.sif".into()),
        }],
    )
    .unwrap();
    let render = |name: &str, cfg: &slurm_connector::render::RenderConfig| {
        let spec = task_spec(&load_request(name));
        render_at(&spec, cfg, NOW).unwrap()
    };
    let guard = |path: &str, reference: &str| {
        format!(
            "if [ ! -e {path} ]; then echo 'slurm-connector: the pre-staged image {path} (mapped from `{reference}` by the image rule `ghcr.io/acme/*`) does not exist on this node; stage it there or fix the rule' >&2; exit 1; fi\nsrun "
        )
    };

    let pyxis = render("native_pyxis_gpu.json", &cfg);
    let script = pyxis.job.script.as_str();
    let sqsh = "/shared/images/acme+train+2026.11.sqsh";
    assert!(
        script.contains(&format!("'--container-image={sqsh}'")),
        "{script}"
    );
    assert!(
        script.contains(&guard(sqsh, "ghcr.io/acme/train:2026.11")),
        "{script}"
    );
    assert_eq!(pyxis.staged_image.as_ref().unwrap().path, sqsh);

    let app = render("native_apptainer_gpu.json", &cfg);
    let script = app.job.script.as_str();
    let sif = "/shared/images/acme+eval+1.4.sif";
    assert!(script.contains(&format!(" {sif} bash -c ")), "{script}");
    assert!(!script.contains("docker://"), "{script}");
    assert!(
        script.contains(&guard(sif, "ghcr.io/acme/eval:1.4")),
        "{script}"
    );

    // Unmapped: the golden rendering, byte for byte, and nothing to check.
    let plain = render("native_pyxis_gpu.json", &config());
    let mut other = config();
    other.images = ImageMap::from_file(
        "images",
        vec![FileImageRule {
            pattern: "docker.io/*".into(),
            pyxis: Some("/shared/images/{flat}.sqsh".into()),
            apptainer: None,
        }],
    )
    .unwrap();
    let unmapped = render("native_pyxis_gpu.json", &other);
    assert_eq!(unmapped.job, plain.job);
    assert!(unmapped.staged_image.is_none());
    assert!(
        unmapped
            .job
            .script
            .contains("'--container-image=ghcr.io#acme/train:2026.11'")
    );
}
