//! Faults on demand and request counters, through the handle and through `/mock/...`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mock_slurmrestd::{FaultConfig, MockConfig};
use serde_json::json;

const STATE: &str = "/slurm/v0.0.42/jobs/state/";

#[tokio::test]
async fn counters_per_operation_and_status() {
    let m = start().await;
    let id = m.submit(m.job("true")).await;
    m.call("GET", STATE, None).await;
    m.call("GET", "/slurm/v0.0.42/jobs/state/?job_id=1,2", None)
        .await;
    m.call("GET", &format!("/slurm/v0.0.42/job/{id}"), None)
        .await;
    m.call("GET", "/slurm/v0.0.42/job/99999", None).await;
    m.call_as("GET", "/slurm/v0.0.42/jobs/", None, &[]).await;
    m.call("GET", "/slurmdb/v0.0.42/jobs/", None).await;
    let s = m.h.stats();
    assert_eq!(s.count("submit"), 1);
    assert_eq!(s.count("jobs_state"), 2);
    assert_eq!(s.count_status("jobs_state", 400), 1);
    assert_eq!(s.count_status("job_get", 404), 1);
    assert_eq!(s.count_status("jobs", 401), 1);
    assert_eq!(s.count("slurmdb_jobs"), 1);
    assert_eq!(s.total(), 7);
    // Over HTTP too; admin calls are not counted.
    let http = m.call_as("GET", "/mock/stats", None, &[]).await.json();
    assert_eq!(http["operations"]["jobs_state"]["200"], 1);
    assert_eq!(
        m.call_as("POST", "/mock/reset-stats", None, &[])
            .await
            .status,
        204
    );
    assert_eq!(m.h.stats().total(), 0);
}

#[tokio::test]
async fn latency_and_slow_slurmdbd() {
    let m = start().await;
    m.h.faults().set(FaultConfig {
        latency_ms: 150,
        ..FaultConfig::default()
    });
    let t = Instant::now();
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(150));
    m.h.faults().set(FaultConfig {
        slurmdbd_latency_ms: 200,
        ..FaultConfig::default()
    });
    let t = Instant::now();
    m.call("GET", "/slurmdb/v0.0.42/jobs/", None).await;
    assert!(t.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn injected_statuses() {
    let m = start().await;
    m.h.faults().set(FaultConfig {
        fail_next: 2,
        error_statuses: vec![503],
        ..FaultConfig::default()
    });
    assert_eq!(m.call("GET", STATE, None).await.status, 503);
    assert_eq!(m.call("GET", STATE, None).await.status, 503);
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
    m.h.faults().set(FaultConfig {
        error_rate: 1.0,
        ..FaultConfig::default()
    });
    for _ in 0..5 {
        let s = m.call("GET", STATE, None).await.status;
        assert!([500, 502, 503].contains(&s), "{s}");
    }
    assert_eq!(m.h.stats().count_status("jobs_state", 200), 1);
    // Scoped to one operation.
    m.h.faults().set(FaultConfig {
        error_rate: 1.0,
        operations: vec!["submit".into()],
        ..FaultConfig::default()
    });
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
    let r = m
        .call(
            "POST",
            "/slurm/v0.0.42/job/submit",
            Some(&json!({"job": m.job("true")})),
        )
        .await;
    assert!(r.status >= 500 && r.text.is_empty());
    assert_eq!(
        m.call("GET", STATE, None).await.json()["jobs"],
        json!([]),
        "a failed submit created no job"
    );
}

#[tokio::test]
async fn dropped_connections() {
    let m = start().await;
    m.h.faults().set(FaultConfig {
        drop_next: 1,
        ..FaultConfig::default()
    });
    let err = m
        .http
        .get(m.url(STATE))
        .header("X-SLURM-USER-TOKEN", &m.token)
        .send()
        .await;
    assert!(
        err.is_err(),
        "the connection must be dropped without an answer"
    );
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
    assert_eq!(m.h.stats().count_status("jobs_state", 0), 1);
    // A lost answer after the submit was handled: the job exists, the client never saw its id.
    m.h.faults().set(FaultConfig {
        drop_next: 1,
        drop_after_handling: true,
        ..FaultConfig::default()
    });
    let body = json!({"job": m.job("true")});
    let r = m
        .http
        .post(m.url("/slurm/v0.0.42/job/submit"))
        .header("X-SLURM-USER-TOKEN", &m.token)
        .json(&body)
        .send()
        .await;
    assert!(r.is_err());
    let all = m.call("GET", STATE, None).await.json();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(m.h.stats().count_status("submit", 0), 1);
}

#[tokio::test]
async fn token_rejection_then_recovery() {
    let m = start().await;
    m.h.faults().set(FaultConfig {
        reject_next_tokens: 1,
        ..FaultConfig::default()
    });
    let r = m.call("GET", STATE, None).await;
    assert_eq!(r.status, 511);
    assert_eq!(r.json()["errors"][0]["error_number"], 1007);
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
    m.h.faults().set(FaultConfig {
        reject_tokens: true,
        ..FaultConfig::default()
    });
    assert_eq!(
        m.call("GET", "/slurmdb/v0.0.42/job/1", None).await.status,
        502
    );
    let ping = m.call("GET", "/slurm/v0.0.42/ping/", None).await;
    assert_eq!(ping.status, 200);
    assert_eq!(ping.json()["pings"][0]["pinged"], "DOWN");
    m.h.faults().clear();
    assert_eq!(
        m.call("GET", "/slurm/v0.0.42/ping/", None).await.json()["pings"][0]["pinged"],
        "UP"
    );
}

#[tokio::test]
async fn controller_down_for_a_while() {
    let m = start().await;
    m.h.faults()
        .controller_down_for(Duration::from_millis(1500));
    // As real 26.05 answered with slurmctld stopped (26.05_v0.0.45_ctld-down-*.json).
    let r = m.call("GET", STATE, None).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["errors"][0]["error_number"], -1);
    let r = m
        .call(
            "POST",
            "/slurm/v0.0.42/job/submit",
            Some(&json!({"job": m.job("true")})),
        )
        .await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["errors"][0]["error_number"], 1800);
    assert_eq!(
        r.json()["errors"][0]["description"],
        "Batch job submission failed"
    );
    assert_eq!(
        m.call("GET", "/slurm/v0.0.42/ping", None).await.json()["pings"][0]["pinged"],
        "DOWN"
    );
    // slurmdbd is a separate daemon.
    assert_eq!(
        m.call("GET", "/slurmdb/v0.0.42/jobs/", None).await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
}

#[tokio::test]
async fn slurmdbd_down() {
    let m = start().await;
    m.h.faults().set(FaultConfig {
        slurmdbd_down: true,
        ..FaultConfig::default()
    });
    let r = m.call("GET", "/slurmdb/v0.0.42/job/1", None).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["errors"][0]["error_number"], 7000);
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
}

#[tokio::test]
async fn faults_over_http_and_from_config() {
    let m = start_with(MockConfig {
        faults: FaultConfig {
            fail_next: 1,
            ..FaultConfig::default()
        },
        ..config()
    })
    .await;
    assert!(m.call("GET", STATE, None).await.status >= 500);
    let set = m
        .call_as(
            "POST",
            "/mock/faults",
            Some(&json!({"fail_next": 1, "error_statuses": [502]})),
            &[],
        )
        .await;
    assert_eq!(set.status, 200);
    assert_eq!(set.json()["fail_next"], 1);
    assert_eq!(m.call("GET", STATE, None).await.status, 502);
    let bad = m
        .call_as(
            "POST",
            "/mock/faults",
            Some(&json!({"no_such_fault": 1})),
            &[],
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.text.contains("no_such_fault"));
    m.call_as(
        "POST",
        "/mock/faults",
        Some(&json!({"controller_down_secs": 30})),
        &[],
    )
    .await;
    assert_eq!(m.call("GET", STATE, None).await.status, 500);
    assert_eq!(
        m.call_as("DELETE", "/mock/faults", None, &[]).await.status,
        204
    );
    assert_eq!(m.call("GET", STATE, None).await.status, 200);
    assert_eq!(
        m.call_as("GET", "/mock/faults", None, &[]).await.json()["controller_down_secs"],
        0
    );
}
