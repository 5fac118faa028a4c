use super::*;

fn job() -> JobDescription {
    JobDescription {
        name: "n".into(),
        script: "#!/bin/bash\n".into(),
        current_working_directory: "/tmp".into(),
        environment: vec![("PATH".into(), "/bin".into())],
        ..JobDescription::default()
    }
}

#[test]
fn every_version_encodes_a_plain_job_with_the_same_fields() {
    let reference = submit_body_json(ApiVersion::V0042, &job()).unwrap();
    for v in ApiVersion::ALL {
        let body = submit_body_json(v, &job()).unwrap();
        assert_eq!(body, reference, "{v}");
    }
}

/// What a version's spec does not list, the encoder refuses, naming the field, the value and
/// the version, instead of sending it (slurmrestd would answer with a warning and no job).
#[test]
fn values_and_fields_a_version_lacks_are_refused_not_sent() {
    let mut j = job();
    j.shared = Some(Shared::Topo);
    let e = submit_body_json(ApiVersion::V0040, &j)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`shared` = topo") && e.contains("v0.0.40"),
        "{e}"
    );
    assert!(submit_body_json(ApiVersion::V0041, &j).is_ok());

    let mut j = job();
    j.flags = vec![JobFlag::StepmgrEnabled];
    assert!(submit_body_json(ApiVersion::V0040, &j).is_err());
    assert!(submit_body_json(ApiVersion::V0046, &j).is_ok());

    let mut j = job();
    j.memory_binding_type = vec![MemBindType::Sort];
    assert!(submit_body_json(ApiVersion::V0043, &j).is_ok());
    let e = submit_body_json(ApiVersion::V0044, &j)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("memory_binding_type") && e.contains("v0.0.44"),
        "{e}"
    );

    let mut j = job();
    j.oom_kill_step = Some(true);
    for v in [ApiVersion::V0040, ApiVersion::V0041] {
        let e = submit_body_json(v, &j).unwrap_err().to_string();
        assert!(
            e.contains("`oom_kill_step`") && e.contains(v.as_str()),
            "{e}"
        );
    }
    let body = submit_body_json(ApiVersion::V0042, &j).unwrap();
    assert_eq!(body["job"]["oom_kill_step"], 1);
}

/// v0.0.40 takes the plane size as a plain integer; later versions as a no-val struct.
#[test]
fn plane_size_takes_each_versions_shape() {
    let mut j = job();
    j.distribution_plane_size = Some(4);
    assert_eq!(
        submit_body_json(ApiVersion::V0040, &j).unwrap()["job"]["distribution_plane_size"],
        4
    );
    assert_eq!(
        submit_body_json(ApiVersion::V0046, &j).unwrap()["job"]["distribution_plane_size"],
        serde_json::json!({"set": true, "infinite": false, "number": 4})
    );
}

#[test]
fn tres_strings() {
    let t = parse_tres_str("cpu=2,mem=8000M,node=1,billing=2,gres/gpu=1");
    assert_eq!(t.len(), 5);
    assert_eq!(t[1].kind, "mem");
    assert_eq!(t[1].count, 8000);
    assert_eq!(t[4].kind, "gres");
    assert_eq!(t[4].name, "gpu");
    assert_eq!(parse_tres_str("mem=2G")[0].count, 2048);
    assert_eq!(parse_tres_str("mem=512K")[0].count, 1);
    assert!(parse_tres_str("garbage").is_empty());
}

#[test]
fn build_rs_generates_every_version_the_domain_names() {
    let build = include_str!("../../../build.rs");
    for v in ApiVersion::ALL {
        assert!(build.contains(&format!("\"{v}\"")), "build.rs lacks {v}");
    }
}
