//! Contract tests: the mock's answer to each recorded request has the recorded status, the same
//! content type and the same JSON keys and types as the real slurmrestd's (samples in
//! tests/fixtures, copied from shared/design/slurmrestd-samples).

mod common;

use std::time::Duration;

use common::*;
use mock_slurmrestd::SlurmVersion;
use serde_json::json;

/// A finished job, and two long-running ones.
async fn setup(m: &Mock) -> (u32, u32, u32) {
    let done = m.submit(m.job("true")).await;
    m.wait_state(done, "COMPLETED").await;
    let r1 = m.submit(m.job("sleep 30")).await;
    let r2 = m.submit(json!({"name": "x", "time_limit": 7, "cpus_per_task": 2,
        "script": "#!/bin/bash\nsleep 30\n", "environment": ["PATH=/bin:/usr/bin"], "current_working_directory": m.cwd()})).await;
    m.wait_state(r1, "RUNNING").await;
    m.wait_state(r2, "RUNNING").await;
    (done, r1, r2)
}

#[tokio::test]
async fn submit_cases_match_24_11() {
    let m = start().await;
    for name in [
        "submit-minimal-ok",
        "submit-script-only",
        "submit-script-cwd",
        "submit-script-cwd-emptyenv",
        "submit-script-env",
        "submit-bad-partition",
        "submit-toplevel-script",
        "submit-explicit-fields",
        "submit-explicit-novalstruct",
        "submit-sbatch-directives",
        "submit-no-shebang",
        "submit-bad-cwd",
        "submit-env-noPATH",
    ] {
        let sample = fixture(&format!("24.11_v0.0.42_{name}"));
        let got = replay(&m, &sample, &[], None).await;
        check(&sample, &got, name);
        // Error numbers and messages exactly as recorded.
        assert_eq!(
            got.json()["errors"],
            sample["response"]["body"]["errors"].clone(),
            "{name}: errors"
        );
        assert_eq!(
            got.json().get("job_id").is_some(),
            sample["response"]["body"].get("job_id").is_some(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn submit_traps_wrong_type_and_unknown_field() {
    let m = start().await;
    for name in ["submit-cpus-per-task-as-object", "submit-unknown-field"] {
        let sample = fixture(&format!("24.11_v0.0.42_{name}"));
        // Sent as text: the warning quotes the value as written, so key order matters.
        let body = match name {
            "submit-cpus-per-task-as-object" => {
                r##"{"job":{"name":"obj","cpus_per_task":{"set":true,"number":2},"script":"#!/bin/bash\ntrue\n","environment":["A=B"],"current_working_directory":"CWD"}}"##
            }
            _ => {
                r##"{"job":{"script":"#!/bin/bash\ntrue\n","environment":["PATH=/bin:/usr/bin","LANG=C"],"current_working_directory":"CWD","no_such_field":1}}"##
            }
        };
        let got = m
            .post_text("/slurm/v0.0.42/job/submit", &body.replace("CWD", &m.cwd()))
            .await;
        check(&sample, &got, name);
        assert_eq!(
            got.json()["warnings"],
            sample["response"]["body"]["warnings"],
            "{name}: warnings verbatim"
        );
    }
    // The wrongly typed submit created no job: the next id is the unknown-field job's only.
    let all = m
        .call("GET", "/slurm/v0.0.42/jobs/state/", None)
        .await
        .json();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn submit_and_queries_match_26_05() {
    let m = start_version(SlurmVersion::V26_05).await;
    for name in [
        "submit-bad-partition",
        "submit-script-cwd",
        "submit-script-cwd-emptyenv",
        "submit-minimal-ok",
    ] {
        let sample = fixture(&format!("26.05_v0.0.42_{name}"));
        let got = replay(&m, &sample, &[], None).await;
        check(&sample, &got, name);
        assert_eq!(
            got.json()["errors"],
            sample["response"]["body"]["errors"],
            "{name}: errors"
        );
        assert_eq!(got.json()["meta"]["slurm"]["release"], "26.05.5");
    }
    let id = m.submit(m.job("true")).await;
    m.wait_state(id, "COMPLETED").await;
    contract(&m, "26.05_v0.0.42_job-get-one", &[(56, id)]).await;
    contract(&m, "26.05_v0.0.42_slurmdb-job-get", &[(56, id)]).await;
    contract(&m, "26.05_v0.0.42_jobs-state-csv", &[]).await;
    contract(&m, "26.05_v0.0.42_job-get-csv", &[]).await;
    contract(&m, "26.05_v0.0.42_delete-pending-csv", &[]).await;
    contract(&m, "26.05_v0.0.42_slurmdb-jobs-step-csv", &[]).await;
}

#[tokio::test]
async fn job_get_and_state_queries() {
    let m = start().await;
    let (done, r1, r2) = setup(&m).await;
    let ids = [(31, done), (37, r1), (38, r2)];
    let one = contract(&m, "24.11_v0.0.42_job-get-one", &ids).await;
    assert_eq!(one["jobs"][0]["job_id"], done);
    assert_eq!(
        one["jobs"][0]["standard_output"],
        format!("{}/slurm-{done}.out", m.cwd())
    );
    let running = contract(&m, "24.11_v0.0.42_job-get-explicit-fields", &ids).await;
    assert_eq!(
        running["jobs"][0]["time_limit"],
        json!({"set": true, "infinite": false, "number": 7})
    );
    assert_eq!(running["jobs"][0]["cpus"]["number"], 2);
    contract(&m, "24.11_v0.0.42_job-get-unknown", &ids).await;
    contract(&m, "24.11_v0.0.42_job-get-csv", &ids).await;
    contract(&m, "24.11_v0.0.42_job-get-garbage-id", &ids).await;
    let st = contract(&m, "24.11_v0.0.42_jobs-state-repeated", &ids).await;
    assert_eq!(
        st["jobs"],
        json!([{"job_id": done.to_string(), "state": ["COMPLETED"]},
        {"job_id": r1.to_string(), "state": ["RUNNING"]}, {"job_id": r2.to_string(), "state": ["RUNNING"]}])
    );
    contract(&m, "24.11_v0.0.42_jobs-state-one", &ids).await;
    let ku = contract(&m, "24.11_v0.0.42_jobs-state-known-unknown", &ids).await;
    assert_eq!(ku["jobs"].as_array().unwrap().len(), 1);
    let unk = contract(&m, "24.11_v0.0.42_jobs-state-unknown", &ids).await;
    assert_eq!(unk["jobs"], json!([]));
    contract(&m, "24.11_v0.0.42_jobs-state-csv", &ids).await;
    contract(&m, "24.11_v0.0.42_jobs-state-csv-encoded", &ids).await;
    let all = contract(&m, "24.11_v0.0.42_jobs-state-all", &ids).await;
    assert_eq!(all["jobs"].as_array().unwrap().len(), 3);
    let jobs = contract(&m, "24.11_v0.0.42_jobs-all", &ids).await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 3);
    // update_time in the future: nothing changed since.
    let later = now() + 3600;
    let quiet = m
        .call(
            "GET",
            &format!("/slurm/v0.0.42/jobs/?update_time={later}"),
            None,
        )
        .await;
    check(
        &fixture("24.11_v0.0.42_jobs-update-time-quiet"),
        &quiet,
        "jobs-update-time-quiet",
    );
    assert_eq!(quiet.json()["jobs"], json!([]));
    let since = m
        .call("GET", "/slurm/v0.0.42/jobs/?update_time=1", None)
        .await
        .json();
    assert_eq!(since["jobs"].as_array().unwrap().len(), 3);
}

/// A held array is one record of its pending remainder under the array's id, its task id unset
/// and its pending indices in `array_task_string` (24.11, `arrays-held-job-get`): not a record
/// for each element, which the connector's index reads as elements that started.
#[tokio::test]
async fn a_held_array_is_one_record_of_its_pending_remainder() {
    let m = start().await;
    let mut job = m.job("sleep 30");
    job["name"] = json!("arr-held");
    job["array"] = json!("0-3%2");
    job["hold"] = json!(true);
    let id = m.submit(job).await;
    let got = contract(&m, "24.11_v0.0.42_arrays-held-job-get", &[(2212, id)]).await;
    let jobs = got["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    let r = &jobs[0];
    assert_eq!(r["job_id"], id);
    assert_eq!(r["array_job_id"]["number"], id);
    assert_eq!(r["array_task_id"]["set"], false);
    assert_eq!(r["array_task_string"], "0-3%2");
    assert_eq!(r["state_reason"], "JobHeldUser");
}

#[tokio::test]
async fn delete_cases() {
    let m = start().await;
    let (done, r1, r2) = setup(&m).await;
    let ids = [(31, done), (37, r1), (38, r2)];
    let d = contract(&m, "24.11_v0.0.42_delete-running", &ids).await;
    assert_eq!(d["status"], json!([]));
    let after = m.wait_state(r1, "CANCELLED").await;
    assert_same_shape(
        &fixture("24.11_v0.0.42_job-get-after-cancel")["response"]["body"]["jobs"][0],
        &after,
        "after cancel",
    );
    assert_eq!(after["exit_code"]["status"], json!(["SIGNALED"]));
    assert_eq!(after["exit_code"]["signal"]["name"], "TERM");
    let fin = contract(&m, "24.11_v0.0.42_delete-finished", &ids).await;
    assert_eq!(fin["status"][0]["error"]["code"], 2021);
    assert_eq!(fin["status"][0]["job_id"]["number"], done);
    let unk = contract(&m, "24.11_v0.0.42_delete-unknown", &ids).await;
    assert_eq!(unk["status"][0]["error"]["code"], 2017);
    assert_eq!(unk["status"][0]["job_id"]["set"], false);
    contract(&m, "24.11_v0.0.42_delete-pending-csv", &ids).await;
    contract(&m, "24.11_v0.0.42_delete-signal-flag", &ids).await;
    let killed = m.wait_state(r2, "CANCELLED").await;
    assert_eq!(killed["exit_code"]["signal"]["name"], "KILL");
}

#[tokio::test]
async fn slurmdb_cases() {
    let m = start().await;
    let (done, r1, _r2) = setup(&m).await;
    m.call("DELETE", &format!("/slurm/v0.0.42/job/{r1}"), None)
        .await;
    m.wait_state(r1, "CANCELLED").await;
    let ids = [(31, done), (37, r1)];
    let one = contract(&m, "24.11_v0.0.42_slurmdb-job-get", &ids).await;
    assert_eq!(one["jobs"][0]["state"]["current"], json!(["COMPLETED"]));
    assert_eq!(one["jobs"][0]["name"], "allocation");
    assert_eq!(
        one["jobs"][0]["stdout"],
        format!("{}/slurm-%j.out", m.cwd())
    );
    contract(&m, "24.11_v0.0.42_slurmdb-job-unknown", &ids).await;
    contract(&m, "24.11_v0.0.42_slurmdb-jobs-step", &ids).await;
    let rep = contract(&m, "24.11_v0.0.42_slurmdb-jobs-step-repeated", &ids).await;
    assert_eq!(rep["jobs"][1]["state"]["current"], json!(["CANCELLED"]));
    assert_eq!(
        rep["jobs"][1]["steps"][0]["exit_code"]["signal"]["name"],
        "TERM"
    );
    contract(&m, "24.11_v0.0.42_slurmdb-jobs-step-csv", &ids).await;
    let bug = contract(&m, "24.11_v0.0.42_slurmdb-jobs-step-script", &ids).await;
    assert_eq!(bug["errors"][0]["error_number"], 1054);
    let param = contract(&m, "24.11_v0.0.42_slurmdb-jobs-job-param", &ids).await;
    assert_eq!(
        param["warnings"][0]["description"],
        "Ignoring unknown field \"job\" of type string in DATA_PARSER_JOB_CONDITION"
    );
    contract(&m, "24.11_v0.0.42_slurmdb-jobs-unknown", &ids).await;
}

#[tokio::test]
async fn token_cases() {
    let m = start().await;
    let (done, _r1, _r2) = setup(&m).await;
    let expired = token_with(
        json!({"sun": "flyte", "iat": now() - 100, "exp": now() - 10}),
        KEY,
    );
    let badsig = token_with(
        json!({"sun": "flyte", "exp": now() + 600}),
        b"some other key entirely",
    );
    let noexp = token_with(json!({"sun": "flyte", "iat": now()}), KEY);
    let slurm = token_with(json!({"sun": "slurm", "exp": now() + 600}), KEY);
    let root = token_with(json!({"sun": "root", "exp": now() + 600}), KEY);
    let hdr = |t: &str| {
        vec![("X-SLURM-USER-NAME", "flyte"), ("X-SLURM-USER-TOKEN", t)]
            .into_iter()
            .map(|(a, b)| (a, b.to_string()))
            .collect::<Vec<_>>()
    };
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        (
            "token-missing-jobs",
            vec![("X-SLURM-USER-NAME", "flyte".into())],
        ),
        ("token-expired-jobs", hdr(&expired)),
        ("token-expired-submit", hdr(&expired)),
        ("token-expired-delete", hdr(&expired)),
        ("token-expired-job-get", hdr(&expired)),
        ("token-no-exp-claim-jobs-state", hdr(&noexp)),
        ("token-badsig-ping", hdr(&badsig)),
        ("token-badsig-jobs", hdr(&badsig)),
        ("token-expired-slurmdb-jobs", hdr(&expired)),
        (
            "token-authorization-bearer-jobs-state",
            vec![("Authorization", format!("Bearer {}", m.token))],
        ),
        (
            "token-flyte-as-root-header-jobs",
            vec![
                ("X-SLURM-USER-NAME", "root".into()),
                ("X-SLURM-USER-TOKEN", m.token.clone()),
            ],
        ),
        ("token-slurm-impersonate-flyte-submit", hdr(&slurm)),
        (
            "token-root-no-username-submit",
            vec![("X-SLURM-USER-TOKEN", root.clone())],
        ),
    ];
    for (name, headers) in cases {
        let sample = fixture(&format!("24.11_v0.0.42_{name}"));
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let got = replay(&m, &sample, &[(1, done)], Some(&h)).await;
        check(&sample, &got, name);
        if sample["response"]["body"]
            .get("errors")
            .is_some_and(|e| !e.as_array().unwrap().is_empty())
        {
            assert_eq!(
                got.json()["errors"],
                sample["response"]["body"]["errors"],
                "{name}: errors verbatim"
            );
        }
    }
}

#[tokio::test]
async fn aged_out_jobs() {
    let m = start_with(mock_slurmrestd::MockConfig {
        min_job_age: Duration::from_millis(300),
        ..config()
    })
    .await;
    let id = m.submit(m.job("true")).await;
    m.wait_state(id, "COMPLETED").await;
    let t0 = std::time::Instant::now();
    loop {
        let r = m
            .call("GET", &format!("/slurm/v0.0.42/job/{id}"), None)
            .await;
        if r.status == 404 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "job never aged out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ids = [(24, id)];
    let g = contract(&m, "24.11_v0.0.42_aged-job-get", &ids).await;
    assert_eq!(g["errors"][0]["error_number"], 2017);
    let s = contract(&m, "24.11_v0.0.42_aged-jobs-state", &ids).await;
    assert_eq!(s["jobs"], json!([]));
    let d = contract(&m, "24.11_v0.0.42_aged-delete", &ids).await;
    assert_eq!(d["status"][0]["error"]["code"], 2017);
    let db = contract(&m, "24.11_v0.0.42_aged-slurmdb-job-get", &ids).await;
    assert_eq!(db["jobs"][0]["state"]["current"], json!(["COMPLETED"]));
    assert_eq!(db["jobs"][0]["job_id"], id);
}

/// No recorded sample: the partition list follows the v0.0.42 spec's `partition_info`.
#[tokio::test]
async fn partitions_and_diag() {
    let m = start_with(mock_slurmrestd::MockConfig {
        nodes: 2,
        cpus: 4,
        ..config()
    })
    .await;
    let p = m.call("GET", "/slurm/v0.0.42/partitions/", None).await;
    assert_eq!(p.status, 200);
    let p = p.json();
    assert_eq!(p["partitions"][0]["name"], "debug");
    assert_eq!(p["partitions"][0]["partition"]["state"], json!(["UP"]));
    assert_eq!(p["partitions"][0]["cpus"]["total"], 8);
    assert_eq!(p["partitions"][0]["nodes"]["configured"], "node[1-2]");
    let d = m.call("GET", "/slurm/v0.0.42/diag/", None).await.json();
    assert_eq!(d["statistics"]["jobs_submitted"], 0);
    assert_eq!(m.h.stats().count("partitions"), 1);
    let expired = token_with(json!({"sun": "flyte", "exp": now() - 5}), KEY);
    let r = m
        .call_as(
            "GET",
            "/slurm/v0.0.42/partitions/",
            None,
            &[("X-SLURM-USER-TOKEN", &expired)],
        )
        .await;
    assert_eq!(r.status, 511);
}
