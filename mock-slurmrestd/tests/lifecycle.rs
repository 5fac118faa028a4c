//! Lifecycle: every state transition with real (sub-second) scripts.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use mock_slurmrestd::MockConfig;
use serde_json::{Value, json};

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn pending_running_completed_with_output() {
    let m = start().await;
    let id = m
        .submit(m.job("echo out-$SLURM_JOB_ID; echo err >&2; sleep 0.3"))
        .await;
    let running = m.wait_state(id, "RUNNING").await;
    assert_eq!(running["nodes"], "node1");
    assert!(running["job_resources"].is_object());
    let done = m.wait_state(id, "COMPLETED").await;
    assert_eq!(done["exit_code"]["status"], json!(["SUCCESS"]));
    assert_eq!(
        done["exit_code"]["return_code"],
        json!({"set": true, "infinite": false, "number": 0})
    );
    let out = done["standard_output"].as_str().unwrap();
    assert_eq!(out, format!("{}/slurm-{id}.out", m.cwd()));
    assert_eq!(done["standard_error"], out);
    assert_eq!(read(out), format!("out-{id}\nerr\n"));
    assert!(
        done["end_time"]["number"].as_i64().unwrap()
            >= done["start_time"]["number"].as_i64().unwrap()
    );
}

#[tokio::test]
async fn environment_is_exactly_submitted_plus_slurm() {
    let m = start().await;
    let mut job = m.job("env > env.txt");
    job["environment"] = json!(["PATH=/bin:/usr/bin", "FOO=bar baz", "LANG=C"]);
    job["name"] = json!("envjob");
    job["cpus_per_task"] = json!(2);
    let id = m.submit(job).await;
    m.wait_state(id, "COMPLETED").await;
    let env = read(&format!("{}/env.txt", m.cwd()));
    let vars: BTreeSet<String> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k.to_string())
        .collect();
    for v in &vars {
        let ok = v.starts_with("SLURM")
            || ["PATH", "FOO", "LANG", "PWD", "SHLVL", "_"].contains(&v.as_str());
        assert!(ok, "unexpected variable {v} in the job environment:\n{env}");
    }
    assert!(env.contains("FOO=bar baz\n"));
    assert!(env.contains(&format!("SLURM_JOB_ID={id}\n")));
    assert!(env.contains("SLURM_JOB_NAME=envjob\n"));
    assert!(env.contains(&format!("SLURM_SUBMIT_DIR={}\n", m.cwd())));
    assert!(env.contains("SLURM_CPUS_PER_TASK=2\n"));
    assert!(env.contains("SLURM_JOB_USER=flyte\n"));
    assert!(env.contains("SLURM_NTASKS=1\n"));
    assert!(env.contains("SLURM_JOB_PARTITION=debug\n"));
    assert!(env.contains("SLURM_CLUSTER_NAME=mock\n"));
    assert!(
        !env.contains("HOME="),
        "the mock's own environment must not leak"
    );
}

#[tokio::test]
async fn failed_exit_code() {
    let m = start().await;
    let id = m.submit(m.job("exit 3")).await;
    let rec = m.wait_state(id, "FAILED").await;
    assert_eq!(rec["exit_code"]["status"], json!(["ERROR"]));
    assert_eq!(rec["exit_code"]["return_code"]["number"], 3);
    let db = m
        .call("GET", &format!("/slurmdb/v0.0.42/job/{id}"), None)
        .await
        .json();
    assert_eq!(db["jobs"][0]["state"]["current"], json!(["FAILED"]));
    assert_eq!(db["jobs"][0]["exit_code"]["return_code"]["number"], 3);
}

#[tokio::test]
async fn bad_cwd_and_missing_shebang_fail_like_real() {
    let m = start().await;
    let mut job = m.job("true");
    job["current_working_directory"] = json!("/nonexistent/dir");
    let id = m.submit(job).await;
    let rec = m.wait_state(id, "FAILED").await;
    assert_eq!(rec["exit_code"]["signal"]["id"]["number"], 53);
    let mut job = m.job("true");
    job["script"] = json!("touch should-not-exist\n");
    let id = m.submit(job).await;
    let rec = m.wait_state(id, "FAILED").await;
    assert_eq!(rec["exit_code"]["return_code"]["number"], 8);
    assert!(!std::path::Path::new(&format!("{}/should-not-exist", m.cwd())).exists());
}

#[tokio::test]
async fn sbatch_directives_are_ignored() {
    let m = start().await;
    let id = m
        .submit(m.job("#SBATCH --job-name=x\n#SBATCH --time=7\n#SBATCH --cpus-per-task=2\ntrue"))
        .await;
    let rec = m.record(id).await;
    assert_eq!(rec["name"], "");
    assert_eq!(
        rec["time_limit"],
        json!({"set": false, "infinite": true, "number": 0})
    );
    assert_eq!(rec["cpus_per_task"]["number"], 1);
}

#[tokio::test]
async fn timeout() {
    // One time_limit minute lasts 400 ms in tests.
    let m = start().await;
    let mut job = m.job("echo started; sleep 10");
    job["time_limit"] = json!({"set": true, "number": 1});
    let id = m.submit(job).await;
    let rec = m.wait_state(id, "TIMEOUT").await;
    assert_eq!(rec["exit_code"]["status"], json!(["SIGNALED"]));
    assert_eq!(rec["exit_code"]["signal"]["name"], "TERM");
    assert_eq!(read(rec["standard_output"].as_str().unwrap()), "started\n");
}

#[tokio::test]
async fn cancel_pending_and_running() {
    let m = start_with(MockConfig {
        cpus: 1,
        ..config()
    })
    .await;
    let run = m
        .submit(m.job("trap 'echo got-term; exit 0' TERM; echo trapped; sleep 10 & wait"))
        .await;
    let pend = m.submit(m.job("true")).await;
    m.wait_stdout(run, "trapped\n").await;
    m.wait_reason(pend, "Resources").await;
    let d = m
        .call("DELETE", &format!("/slurm/v0.0.42/job/{pend}"), None)
        .await
        .json();
    assert_eq!(d["status"], json!([]));
    let p = m.wait_state(pend, "CANCELLED").await;
    assert_eq!(p["exit_code"]["status"], json!(["SUCCESS"]));
    assert!(p["start_time"]["number"].as_i64().unwrap() > 0);
    assert_eq!(p["start_time"], p["end_time"]);
    assert!(p["job_resources"].is_null(), "never ran: no resources");
    m.call("DELETE", &format!("/slurm/v0.0.42/job/{run}"), None)
        .await;
    let r = m.wait_state(run, "CANCELLED").await;
    assert_eq!(r["exit_code"]["return_code"]["number"], 0);
    assert_eq!(
        read(r["standard_output"].as_str().unwrap()),
        "trapped\ngot-term\n"
    );
    let again = m
        .call("DELETE", &format!("/slurm/v0.0.42/job/{run}"), None)
        .await
        .json();
    assert_eq!(again["status"][0]["error"]["code"], 2021);
}

#[tokio::test]
async fn kill_wait_escalates_to_sigkill() {
    // A kill wait long enough that the state query below lands inside it even on a loaded
    // machine (the shared 300 ms one did not, once, in CI).
    let m = start_with(MockConfig {
        kill_wait: Duration::from_secs(3),
        ..common::config()
    })
    .await;
    let id = m
        .submit(m.job("trap '' TERM; echo trapped; sleep 10 & wait; sleep 10"))
        .await;
    m.wait_stdout(id, "trapped\n").await;
    m.call("DELETE", &format!("/slurm/v0.0.42/job/{id}"), None)
        .await;
    let st = m
        .call(
            "GET",
            &format!("/slurm/v0.0.42/jobs/state/?job_id={id}"),
            None,
        )
        .await
        .json();
    assert_eq!(st["jobs"][0]["state"], json!(["CANCELLED", "COMPLETING"]));
    let rec = m.wait_state(id, "CANCELLED").await;
    assert_eq!(rec["exit_code"]["signal"]["name"], "KILL");
}

#[tokio::test]
async fn resources_priority_and_hold() {
    let m = start_with(MockConfig {
        cpus: 2,
        ..config()
    })
    .await;
    // The first two run until the test lets them end: fixed sleeps ended before a loaded
    // machine saw the states asserted below.
    let gate = |name: &str| std::path::Path::new(&m.cwd()).join(name);
    let gated = |name: &str| {
        let mut j = m.job(&format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done",
            gate(name).display()
        ));
        j["cpus_per_task"] = json!(2);
        j
    };
    let mut big = m.job("sleep 0.2");
    big["cpus_per_task"] = json!(2);
    let a = m.submit(gated("gate-a")).await;
    let b = m.submit(gated("gate-b")).await;
    let c = m.submit(big).await;
    m.wait_state(a, "RUNNING").await;
    m.wait_reason(b, "Resources").await;
    m.wait_reason(c, "Priority").await;
    assert_eq!(m.state(a).await, "RUNNING");
    let mut held = m.job("true");
    held["hold"] = json!(true);
    let h = m.submit(held).await;
    std::fs::write(gate("gate-a"), "").unwrap();
    m.wait_state(b, "RUNNING").await;
    std::fs::write(gate("gate-b"), "").unwrap();
    m.wait_state(c, "COMPLETED").await;
    let rec = m.record(h).await;
    assert_eq!(rec["job_state"], json!(["PENDING"]));
    assert_eq!(rec["state_reason"], "JobHeldUser");
    assert_eq!(rec["priority"]["number"], 0);
    assert!(rec["job_resources"].is_null());
    // Released through the update endpoint (like `scontrol release`), it runs.
    let r = m
        .call(
            "POST",
            &format!("/slurm/v0.0.42/job/{h}"),
            Some(&json!({"hold": false, "comment": "released"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Recorded: a successful update answers `results: null`.
    assert_eq!(r.json()["results"], json!(null));
    let rec = m.wait_state(h, "COMPLETED").await;
    assert_eq!(rec["comment"], "released");
    let r = m
        .call(
            "POST",
            "/slurm/v0.0.42/job/99999",
            Some(&json!({"hold": false})),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["errors"][0]["error_number"], 2017);
    assert_eq!(m.h.stats().count("job_update"), 2);
}

#[tokio::test]
async fn oversized_job_is_rejected() {
    let m = start().await;
    let mut job = m.job("true");
    job["cpus_per_task"] = json!(64);
    let r = m
        .call(
            "POST",
            "/slurm/v0.0.42/job/submit",
            Some(&json!({"job": job})),
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["errors"][0]["error_number"], 2014);
}

#[tokio::test]
async fn afterok_dependency() {
    let m = start().await;
    // The predecessor runs until the test lets it end (a fixed sleep ended before a loaded
    // machine saw the dependent pending, and the wait for `Dependency` never matched).
    let gate = std::path::Path::new(&m.cwd()).join("afterok-gate");
    let a = m
        .submit(m.job(&format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done",
            gate.display()
        )))
        .await;
    let mut jb = m.job("true");
    jb["dependency"] = json!(format!("afterok:{a}"));
    let b = m.submit(jb).await;
    let rec = m.wait_reason(b, "Dependency").await;
    assert_eq!(rec["job_state"], json!(["PENDING"]));
    assert_eq!(m.state(a).await, "RUNNING");
    std::fs::write(&gate, "").unwrap();
    m.wait_state(b, "COMPLETED").await;
    // A failed predecessor: never satisfied.
    let f = m.submit(m.job("exit 1")).await;
    let mut jc = m.job("true");
    jc["dependency"] = json!(format!("afterok:{f}"));
    let c = m.submit(jc).await;
    m.wait_state(f, "FAILED").await;
    let rec = m.wait_reason(c, "DependencyNeverSatisfied").await;
    assert_eq!(rec["job_state"], json!(["PENDING"]));
    // Unknown job in a dependency is refused at submit.
    let mut jd = m.job("true");
    jd["dependency"] = json!("afterok:99999");
    let r = m
        .call(
            "POST",
            "/slurm/v0.0.42/job/submit",
            Some(&json!({"job": jd})),
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["errors"][0]["error"], "Job dependency problem");
}

/// An array as real Slurm 24.11 shows it (`tests/fixtures/slurmrestd/24.11_v0.0.42_arrays-*`
/// in the connector): the submit answers the array's id; jobs/state lists every element, under
/// the array's id while pending and `<own id>_<index>` once started, the last element keeping
/// the array's id; a release, job/{array id}, slurmdb `jobs?step=<array id>` and DELETE
/// job/{array id} cover every element.
#[tokio::test]
async fn array_job() {
    let m = start().await;
    let mut job = m.job(
        "sleep 0.3; echo task=$SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID count=$SLURM_ARRAY_TASK_COUNT",
    );
    job["array"] = json!("0-2");
    job["standard_output"] = json!("arr-%A_%a.out");
    job["hold"] = json!(true);
    let a = m.submit(job).await;
    let state_ids = |st: &Value| -> Vec<String> {
        let mut v: Vec<String> = st["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                format!(
                    "{} {}",
                    j["job_id"].as_str().unwrap(),
                    j["state"][0].as_str().unwrap()
                )
            })
            .collect();
        v.sort();
        v
    };
    let path = format!("/slurm/v0.0.42/jobs/state/?job_id={a}");
    let held = m.call("GET", &path, None).await.json();
    assert_eq!(
        state_ids(&held),
        [0, 1, 2].map(|i| format!("{a}_{i} PENDING")),
        "pending: all under the array's id"
    );
    let r = m
        .call(
            "POST",
            &format!("/slurm/v0.0.42/job/{a}"),
            Some(&json!({"hold": false})),
        )
        .await;
    assert_eq!(r.status, 200, "released through the array's id");
    // Own ids: the last element keeps the array's, the others follow it.
    let own = |i: u32| if i == 2 { a } else { a + 1 + i };
    for i in 0..3u32 {
        let rec = m.wait_state(own(i), "COMPLETED").await;
        assert_eq!(rec["array_job_id"]["number"], a);
        assert_eq!(rec["array_task_id"]["number"], i);
        let out = format!("{}/arr-{a}_{i}.out", m.cwd());
        assert_eq!(rec["standard_output"], out);
        assert_eq!(read(&out), format!("task={i} of {a} count=3\n"));
    }
    let finished = m.call("GET", &path, None).await.json();
    let mut want = vec![
        format!("{}_0 COMPLETED", a + 1),
        format!("{}_1 COMPLETED", a + 2),
        format!("{a}_2 COMPLETED"),
    ];
    want.sort();
    assert_eq!(state_ids(&finished), want);
    let accounting = m
        .call("GET", &format!("/slurmdb/v0.0.42/jobs/?step={a}"), None)
        .await
        .json();
    let mut got: Vec<(u64, u64)> = accounting["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["array"]["task_id"]["number"].as_u64().unwrap(),
                j["job_id"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    let a64 = u64::from(a);
    assert_eq!(got, [(0, a64 + 1), (1, a64 + 2), (2, a64)]);
    // slurmdb job/{array id} too.
    let one = m
        .call("GET", &format!("/slurmdb/v0.0.42/job/{a}"), None)
        .await
        .json();
    assert_eq!(one["jobs"].as_array().unwrap().len(), 3);

    // DELETE job/{array id}: every element, running or pending.
    let mut job = m.job("sleep 30");
    job["array"] = json!("0-3%2");
    let b = m.submit(job).await;
    m.wait_state(b + 1, "RUNNING").await;
    let r = m
        .call("DELETE", &format!("/slurm/v0.0.42/job/{b}"), None)
        .await;
    assert_eq!(r.status, 200);
    for id in b..b + 4 {
        m.wait_state(id, "CANCELLED").await;
    }
}

#[tokio::test]
async fn filename_patterns_and_impersonation() {
    let m = start().await;
    let slurm = token_with(json!({"sun": "slurm", "exp": now() + 600}), KEY);
    let mut job = m.job("echo hi; echo oops >&2");
    job["name"] = json!("pat");
    job["standard_output"] = json!("%x-%u-%j.out");
    job["standard_error"] = json!("%x-%%-%j.err");
    job["comment"] = json!("flyte task abc");
    let r = m
        .call_as(
            "POST",
            "/slurm/v0.0.42/job/submit",
            Some(&json!({"job": job})),
            &[
                ("X-SLURM-USER-NAME", "alice"),
                ("X-SLURM-USER-TOKEN", &slurm),
            ],
        )
        .await;
    let id = r.json()["job_id"].as_u64().unwrap() as u32;
    let rec = m.wait_state(id, "COMPLETED").await;
    assert_eq!(rec["user_name"], "alice");
    assert_eq!(rec["comment"], "flyte task abc");
    assert_eq!(read(&format!("{}/pat-alice-{id}.out", m.cwd())), "hi\n");
    assert_eq!(read(&format!("{}/pat-%-{id}.err", m.cwd())), "oops\n");
}

#[tokio::test]
async fn aging_moves_jobs_to_accounting() {
    let m = start_with(MockConfig {
        min_job_age: Duration::from_millis(200),
        ..config()
    })
    .await;
    let id = m.submit(m.job("true")).await;
    m.wait_state(id, "COMPLETED").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let st = m
        .call(
            "GET",
            &format!("/slurm/v0.0.42/jobs/state/?job_id={id}"),
            None,
        )
        .await
        .json();
    assert_eq!(st["jobs"], json!([]));
    let all = m
        .call("GET", &format!("/slurmdb/v0.0.42/jobs/?step={id}"), None)
        .await
        .json();
    assert_eq!(all["jobs"][0]["job_id"], id);
    assert_eq!(all["jobs"][0]["state"]["current"], json!(["COMPLETED"]));
    assert_eq!(
        all["jobs"][0]["steps"][0]["step"]["id"],
        format!("{id}.batch")
    );
}

#[tokio::test]
async fn job_ids_continue_after_restart_with_a_state_dir() {
    let state = tempfile::tempdir().unwrap();
    let cfg = MockConfig {
        state_dir: Some(state.path().to_path_buf()),
        ..config()
    };
    let m = start_with(cfg.clone()).await;
    let a = m.submit(m.job("true")).await;
    m.h.shutdown().await;
    let m2 = start_with(cfg).await;
    let b = m2.submit(m2.job("true")).await;
    assert_eq!(b, a + 1, "ids are never reused across restarts");
    // The previous run's jobs are gone (like aged-out ones).
    let r = m2
        .call("GET", &format!("/slurm/v0.0.42/job/{a}"), None)
        .await;
    assert_eq!(r.status, 404);
}
