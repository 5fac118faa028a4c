//! Contract tests per API version: for every recorded (release, data_parser version) pair
//! (24.11 x v0.0.40-42, 26.05 x v0.0.42-45, 26.11rc1 x v0.0.43-46) the mock, imitating that
//! release, answers each recorded request of that version with the recorded status, content type
//! and shape (same keys, same types), error numbers and warnings verbatim, and `meta` naming the
//! version and the release; plus the recorded 404 of versions a release does not serve.

mod common;
// Root files of integration tests look for modules next to them, hence the path.
#[path = "versions/recorded_pairs.rs"]
mod recorded_pairs;
use recorded_pairs::run_pair;

use common::*;
use mock_slurmrestd::{ApiVersion, MockConfig, SlurmVersion};
use serde_json::{Value, json};

fn release_of(prefix: &str) -> SlurmVersion {
    match prefix {
        "24.11" => SlurmVersion::V24_11,
        "26.05" => SlurmVersion::V26_05,
        "26.11rc1" => SlurmVersion::V26_11,
        other => panic!("no release {other}"),
    }
}

/// The job id in a sample's URL (its last number).
fn recorded_id(sample: &Value) -> u32 {
    let url = sample["request"]["url"].as_str().unwrap();
    url.rsplit(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .expect("an id in the URL")
}

/// A mock imitating `release`, serving every version, with its helpers talking `api`.
async fn mock_for(release: SlurmVersion, api: &'static str) -> Mock {
    let mut m = start_with(MockConfig {
        slurm_version: release,
        ..config()
    })
    .await;
    m.api = api;
    m
}

fn try_fixture(name: &str) -> Option<Value> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.json"));
    p.exists().then(|| fixture(name))
}

macro_rules! pair {
    ($test:ident, $rel:literal, $api:literal) => {
        #[tokio::test]
        async fn $test() {
            run_pair($rel, $api).await;
        }
    };
}

pair!(r24_11_v0_0_40, "24.11", "v0.0.40");
pair!(r24_11_v0_0_41, "24.11", "v0.0.41");
pair!(r24_11_v0_0_42, "24.11", "v0.0.42");
pair!(r26_05_v0_0_42, "26.05", "v0.0.42");
pair!(r26_05_v0_0_43, "26.05", "v0.0.43");
pair!(r26_05_v0_0_44, "26.05", "v0.0.44");
pair!(r26_05_v0_0_45, "26.05", "v0.0.45");
pair!(r26_11_v0_0_43, "26.11rc1", "v0.0.43");
pair!(r26_11_v0_0_44, "26.11rc1", "v0.0.44");
pair!(r26_11_v0_0_45, "26.11rc1", "v0.0.45");
pair!(r26_11_v0_0_46, "26.11rc1", "v0.0.46");

/// The recorded answers for versions a release does not serve: 404 text (401 first without a
/// token), for slurmctld and slurmdb paths alike.
#[tokio::test]
async fn unserved_versions_answer_like_the_real_one() {
    for (rel, unserved) in [
        (
            "24.11",
            ["v0.0.38", "v0.0.39", "v0.0.43", "v0.0.46", "v0.0.47"],
        ),
        (
            "26.05",
            ["v0.0.38", "v0.0.40", "v0.0.41", "v0.0.46", "v0.0.47"],
        ),
        (
            "26.11rc1",
            ["v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.47"],
        ),
    ] {
        let release = release_of(rel);
        let m = start_with(MockConfig {
            jwt_key: KEY.to_vec(),
            ..MockConfig::imitating(release)
        })
        .await;
        for v in unserved {
            for case in [
                "ping-unserved",
                "slurmdb-jobs-unserved",
                "job-get-unserved",
                "ping-unserved-no-token",
            ] {
                let sample = fixture(&format!("{rel}_{v}_{case}"));
                let headers: &[(&str, &str)] = if case.ends_with("no-token") {
                    &[("X-SLURM-USER-NAME", "flyte")]
                } else {
                    &[
                        ("X-SLURM-USER-NAME", "flyte"),
                        ("X-SLURM-USER-TOKEN", &m.token),
                    ]
                };
                let got = replay(&m, &sample, &[], Some(headers)).await;
                check(&sample, &got, &format!("{rel} {v} {case}"));
            }
        }
        // Any other unknown path (the root, an endpoint that does not exist) alike.
        for case in ["root-path", "unknown-endpoint"] {
            let sample = fixture(&format!("{rel}_any_{case}"));
            let got = replay(&m, &sample, &[], None).await;
            check(&sample, &got, &format!("{rel} {case}"));
        }
        // Every version the release serves answers its ping.
        for v in release.api_versions() {
            let r = m.call("GET", &format!("/slurm/{v}/ping/"), None).await;
            assert_eq!(r.status, 200, "{rel} {v}");
            assert_eq!(
                r.json()["meta"]["plugin"]["data_parser"],
                format!("data_parser/{v}")
            );
        }
    }
}

/// A configured subset: only those versions are served; `meta.slurm.release` of each names a
/// release that serves it even when the configured release does not.
#[tokio::test]
async fn configured_versions_only() {
    let m = start_with(MockConfig {
        api_versions: vec![ApiVersion::V0_0_42, ApiVersion::V0_0_46],
        ..config()
    })
    .await;
    for (v, served, release) in [
        ("v0.0.40", false, ""),
        ("v0.0.42", true, "24.11.5"),
        ("v0.0.45", false, ""),
        ("v0.0.46", true, "26.11.0-0rc1"),
    ] {
        let r = m.call("GET", &format!("/slurm/{v}/ping/"), None).await;
        if served {
            assert_eq!(r.status, 200, "{v}");
            assert_eq!(r.json()["meta"]["slurm"]["release"], release, "{v}");
        } else {
            assert_eq!(r.status, 404, "{v}");
            assert_eq!(
                r.text,
                "Unable find requested URL. Please view /openapi/v3 for API reference."
            );
        }
    }
    // Counted under the operation whatever the version, unserved ones included, and per version.
    let stats = m.h.stats();
    assert_eq!(stats.count("ping"), 4);
    assert_eq!(stats.count_version("v0.0.46"), 1);
    assert_eq!(stats.count_version("v0.0.40"), 1);
    assert_eq!(stats.count_version("v0.0.43"), 0);
    assert!(
        mock_slurmrestd::MockServer::start(
            MockConfig {
                api_versions: vec![],
                ..config()
            },
            "127.0.0.1:0".parse().unwrap()
        )
        .await
        .is_err()
    );
}

/// Each version accepts exactly its own job_desc_msg fields: one it does not know gets the
/// real "unknown field" warning (as recorded for `no_such_field` on every version) and is
/// ignored; the job is still created.
#[tokio::test]
async fn job_desc_fields_are_per_version() {
    let m = start().await;
    // (field, value, the versions whose job_desc_msg has it: diffed from the real specs)
    let cases: [(&str, Value, &[&str]); 7] = [
        (
            "oom_kill_step",
            json!(1),
            &["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"],
        ),
        (
            "cores_per_socket",
            json!(1),
            &["v0.0.40", "v0.0.45", "v0.0.46"],
        ),
        ("container_type", json!("x"), &["v0.0.45"]),
        ("runtime", json!("x"), &["v0.0.46"]),
        ("resv_mpi_ports", json!(1), &["v0.0.41"]),
        ("oversubscribe", json!(true), &["v0.0.40", "v0.0.41"]),
        (
            "segment_size",
            json!(1),
            &[
                "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46",
            ],
        ),
    ];
    for v in ApiVersion::ALL {
        let v = v.as_str();
        for (field, value, known_in) in &cases {
            let mut job = m.job("true");
            job[*field] = value.clone();
            let r = m
                .call(
                    "POST",
                    &format!("/slurm/{v}/job/submit"),
                    Some(&json!({ "job": job })),
                )
                .await;
            assert_eq!(r.status, 200, "{v} {field}: {}", r.text);
            let body = r.json();
            assert!(body["job_id"].is_u64(), "{v} {field}: {}", r.text);
            let known = known_in.contains(&v);
            let ty = if value.is_string() {
                "string"
            } else if value.is_boolean() {
                "boolean"
            } else {
                "64 bit integer"
            };
            let want = if known {
                json!([])
            } else {
                json!([{"description": format!("Ignoring unknown field \"{field}\" of type {ty} in DATA_PARSER_JOB_DESC_MSG"),
                        "source": format!("#/job/{field}/")}])
            };
            assert_eq!(body["warnings"], want, "{v} {field}");
        }
    }
}

/// `GET job/{id}/requeue` (v0.0.45+), against the 26.05 recordings: a running or finished job
/// goes back to PENDING (BeginTime, restart_cnt + 1) and runs again; unknown 404 / 2017,
/// pending 422 / 2024; older versions have no such path.
#[tokio::test]
async fn requeue_26_05_v0_0_45() {
    requeue_like(SlurmVersion::V26_05, "26.05", "v0.0.45").await;
}

#[tokio::test]
async fn requeue_26_11_v0_0_45() {
    requeue_like(SlurmVersion::V26_11, "26.11rc1", "v0.0.45").await;
}

#[tokio::test]
async fn requeue_26_11_v0_0_46() {
    requeue_like(SlurmVersion::V26_11, "26.11rc1", "v0.0.46").await;
}

async fn requeue_like(release: SlurmVersion, rel: &str, api: &'static str) {
    let m = mock_for(release, api).await;
    let name = |case: &str| format!("{rel}_{api}_{case}");
    let run = m.submit(m.job("sleep 30")).await;
    m.wait_state(run, "RUNNING").await;
    let sample = fixture(&name("job-requeue-running"));
    let ids = [(recorded_id(&sample), run)];
    let r = contract(&m, &name("job-requeue-running"), &ids).await;
    assert_eq!(r["status"], json!([]));
    let after = contract(&m, &name("job-get-after-requeue-0s"), &ids).await;
    let rec = &after["jobs"][0];
    assert_eq!(rec["job_state"], json!(["PENDING"]));
    assert_eq!(rec["state_reason"], "BeginTime");
    assert_eq!(rec["restart_cnt"], 1);
    assert!(rec["job_resources"].is_null());
    contract(&m, &name("jobs-state-after-requeue-0s"), &ids).await;
    // Still waiting out its BeginTime a moment later (the real one 5 s later, of 120).
    let later = contract(&m, &name("job-get-after-requeue-5s"), &ids).await;
    assert_eq!(later["jobs"][0]["state_reason"], "BeginTime");
    // Eligible again after two (test) minutes, then it really runs again.
    let again = m.wait_state(run, "RUNNING").await;
    assert_eq!(again["restart_cnt"], 1);

    let fin = m.submit(m.job("true")).await;
    m.wait_state(fin, "COMPLETED").await;
    let sample = fixture(&name("job-requeue-finished"));
    contract(
        &m,
        &name("job-requeue-finished"),
        &[(recorded_id(&sample), fin)],
    )
    .await;
    let after = fixture(&name("job-get-after-requeue-finished"));
    let rec = contract(
        &m,
        &name("job-get-after-requeue-finished"),
        &[(recorded_id(&after), fin)],
    )
    .await["jobs"][0]
        .clone();
    assert_eq!(rec["job_state"], json!(["PENDING"]));
    assert_eq!(rec["restart_cnt"], 1);
    m.wait_state(fin, "COMPLETED").await;

    for case in ["job-requeue-unknown", "job-requeue-pending"] {
        let sample = fixture(&name(case));
        let pend = m
            .submit(json!({"hold": true, "script": "#!/bin/bash\ntrue\n",
                "environment": ["PATH=/bin:/usr/bin"], "current_working_directory": m.cwd()}))
            .await;
        // The unknown case keeps its recorded id (999999).
        let rec_pend = recorded_id(&sample);
        let ids = if case.ends_with("unknown") {
            vec![]
        } else {
            vec![(rec_pend, pend)]
        };
        let got = replay(&m, &sample, &ids, None).await;
        check(&sample, &got, &name(case));
        let mut want = sample["response"]["body"]["errors"].clone();
        if !ids.is_empty() {
            want = serde_json::from_str(
                &want
                    .to_string()
                    .replace(&format!("JobID={rec_pend} "), &format!("JobID={pend} ")),
            )
            .unwrap();
        }
        assert_eq!(got.json()["errors"], want, "{case}");
    }
    let r = m
        .call("GET", &format!("/slurm/v0.0.44/job/{run}/requeue"), None)
        .await;
    assert_eq!(r.status, 404, "no requeue before v0.0.45");
    assert_eq!(m.h.stats().count("job_requeue"), 5);
}

/// `POST job/{id}`, as recorded: the body is the job description itself; wrapped in `{"job":..}`
/// nothing changes and each inner field is warned about; 200 `results: null` (v0.0.40 `[]`,
/// v0.0.40/41 with empty `job_id`/`step_id`/`job_submit_user_msg`), unknown 404 / 2017,
/// finished 2084.
#[tokio::test]
async fn job_update_like_the_real_one() {
    for (rel, api) in [
        ("24.11", "v0.0.40"),
        ("24.11", "v0.0.41"),
        ("24.11", "v0.0.42"),
        ("26.05", "v0.0.42"),
        ("26.05", "v0.0.45"),
        ("26.11rc1", "v0.0.43"),
        ("26.11rc1", "v0.0.46"),
    ] {
        let m = mock_for(release_of(rel), api).await;
        let name = |case: &str| format!("{rel}_{api}_{case}");
        for (case, flat) in [
            ("job-update", false),
            ("job-update-unknown", false),
            ("job-update-flat", true),
            ("job-update-flat-unknown", true),
        ] {
            let Some(sample) = try_fixture(&name(case)) else {
                continue;
            };
            let held = m
                .submit(
                    json!({"hold": true, "script": "#!/bin/bash\ntrue\n", "name": "upd",
                    "environment": ["PATH=/bin:/usr/bin"], "current_working_directory": m.cwd()}),
                )
                .await;
            let ids = if case.ends_with("unknown") {
                vec![]
            } else {
                vec![(recorded_id(&sample), held)]
            };
            let got = replay(&m, &sample, &ids, None).await;
            check(&sample, &got, &name(case));
            let (real, ours) = (&sample["response"]["body"], got.json());
            assert_eq!(ours["errors"], real["errors"], "{}", name(case));
            assert_eq!(ours["warnings"], real["warnings"], "{}", name(case));
            assert_eq!(ours["results"], real["results"], "{}", name(case));
            let rec = m.record(held).await;
            if flat && !case.ends_with("unknown") {
                // Applied: released and commented.
                assert_eq!(rec["comment"], "c", "{}", name(case));
                m.wait_state(held, "COMPLETED").await;
            } else {
                assert_eq!(rec["state_reason"], "JobHeldUser", "{}", name(case));
                assert_eq!(rec["comment"], "", "{}", name(case));
            }
        }
        if let Some(sample) = try_fixture(&name("job-update-flat-finished")) {
            let done = m.submit(m.job("true")).await;
            m.wait_state(done, "COMPLETED").await;
            let got = replay(&m, &sample, &[(recorded_id(&sample), done)], None).await;
            check(&sample, &got, &name("job-update-flat-finished"));
            assert_eq!(got.json()["errors"], sample["response"]["body"]["errors"]);
        }
    }
}
