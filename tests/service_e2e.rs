//! The connector end to end: a real gRPC client against `serve_with`, in front of
//! mock-slurmrestd (which really runs the batch scripts). Every fixture is created and tracked
//! to a terminal phase; a repeated CreateTask (also after a restart) submits nothing new; a
//! slurmrestd outage produces no GetTask error and no wrong terminal phase; the tracker makes
//! one `jobs/state` request per tick however many GetTasks arrive.

mod common;
use common::mock::Mock;
use common::request::request_names;
use common::server::Server;
use common::{RequestExt, get_req, mock_request};

use std::time::Duration;

use mock_slurmrestd::{FaultConfig, MockConfig};
use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::connector_metadata_service_client::ConnectorMetadataServiceClient;
use slurm_connector::proto::connector::{
    DeleteTaskRequest, GetTaskLogsRequest, GetTaskMetricsRequest, GetTaskRequest,
    ListConnectorsRequest, Resource, get_task_logs_response,
};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::serve_with;
use tonic::transport::Channel;

async fn mock() -> Mock {
    Mock::start("e2e", Duration::from_secs(600), FaultConfig::default()).await
}

/// The mock cluster polled every 200 ms, with a login node for the log links.
fn deployment(env: &Mock) -> DeploymentConfig {
    let mut c = env.cluster(env.static_auth(), None);
    c.ssh_hosts = vec!["login1".into()];
    common::mock::deployment(c, Duration::from_millis(200))
}

/// GetTask's resource; these tests expect GetTask never to fail.
async fn resource(c: &mut AsyncConnectorServiceClient<Channel>, meta: &[u8]) -> Resource {
    c.get_task(get_req(meta))
        .await
        .expect("GetTask never fails")
        .into_inner()
        .resource
        .expect("GetTask answers a resource")
}

async fn wait_terminal(c: &mut AsyncConnectorServiceClient<Channel>, meta: &[u8]) -> (i32, String) {
    for _ in 0..300 {
        let res = resource(c, meta).await;
        if Phase::of(res.phase).is_terminal() {
            return (res.phase, res.message);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no terminal phase within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_reaches_a_terminal_phase() {
    let env = mock().await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let mut md = ConnectorMetadataServiceClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let list = md
        .list_connectors(ListConnectorsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.connectors[0].name, "Slurm Connector");

    for name in request_names() {
        let meta = c
            .create_task(mock_request(&name))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .into_inner()
            .resource_meta;
        let m: serde_json::Value = serde_json::from_slice(&meta).unwrap();
        assert_eq!(m["v"], 1, "{name}");
        assert_eq!(m["cluster"], "mock");
        assert!(
            !String::from_utf8_lossy(&meta).contains("eyJ"),
            "no token in resource_meta"
        );
        let (phase, message) = wait_terminal(&mut c, &meta).await;
        // A failure says what happened first, in a stable form; then the job's state.
        let state_line = format!("Slurm job {} is ", m["job_id"]);
        assert!(
            message.starts_with(&state_line)
                || (message.starts_with('[')
                    && message.lines().nth(1).unwrap().starts_with(&state_line)),
            "{name}: {message}"
        );
        if name == "script_no_io.pb" {
            assert_eq!(phase, Phase::Succeeded as i32, "{name}: {message}");
        }
        // Native tasks need srun + a container runtime, which this machine lacks: they fail,
        // and the message says how. A non-zero exit is the task's own failure: retryable, so
        // the task's `retries` apply.
        if name.starts_with("native_") {
            assert_eq!(phase, Phase::RetryableFailed as i32, "{name}: {message}");
            assert!(
                message.starts_with(&format!("[FAILED] job {} exited with code ", m["job_id"])),
                "{message}"
            );
            assert!(message.contains("exit code"), "{message}");
        }
        // Logs: without staging, a clear line saying why.
        let mut logs = c
            .get_task_logs(GetTaskLogsRequest {
                resource_meta: meta.clone(),
                lines: 10,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let first = logs.message().await.unwrap().unwrap();
        let Some(get_task_logs_response::Part::Body(b)) = first.part else {
            panic!("body expected")
        };
        assert!(
            b.results[0].contains("no staging is configured"),
            "{:?}",
            b.results
        );
    }
    // Metrics are served in the Python connector's names.
    let text = reqwest::get(format!("http://{}/metrics", server.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("flyte_connector_requests_success_total{task_type=\"slurm_script\",operation=\"create\"}"), "{text}");
    assert!(
        text.contains("slurm_connector_slurmrestd_requests_total"),
        "{text}"
    );
    // What build answers: the version, the commit and the API versions, as `--version` says.
    use slurm_connector::build_info::{API_VERSIONS, GIT_HASH, VERSION};
    let build = format!(
        "slurm_connector_build_info{{version=\"{VERSION}\",git_hash=\"{GIT_HASH}\",api_versions=\"{API_VERSIONS}\"}} 1"
    );
    assert!(text.lines().any(|l| l == build), "no `{build}` in\n{text}");
    server.stop().await;
    env.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_create_task_submits_nothing_new_also_after_a_restart() {
    let env = mock().await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let req = mock_request("script_no_io.pb");
    let a = c
        .create_task(req.clone())
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    // Concurrent retries (the backend's CreateTask timed out while the first was in flight).
    let (b1, b2) = tokio::join!(
        {
            let mut c = c.clone();
            let r = req.clone();
            async move { c.create_task(r).await }
        },
        {
            let mut c = c.clone();
            let r = req.clone();
            async move { c.create_task(r).await }
        }
    );
    assert_eq!(b1.unwrap().into_inner().resource_meta, a);
    assert_eq!(b2.unwrap().into_inner().resource_meta, a);
    assert_eq!(env.handle.stats().count("submit"), 1);
    server.stop().await;

    // A new connector process: it finds the job on the cluster by its key.
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let again = c
        .create_task(req.clone())
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    assert_eq!(again, a);
    assert_eq!(
        env.handle.stats().count("submit"),
        1,
        "no second job after a restart"
    );
    // A different attempt is a different execution: it is submitted.
    let next = req.clone().attempt(1);
    let other = c
        .create_task(next)
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    assert_ne!(other, a);
    assert_eq!(env.handle.stats().count("submit"), 2);
    // The adopted job is tracked to its end by the new process.
    let (phase, _) = wait_terminal(&mut c, &a).await;
    assert_eq!(phase, Phase::Succeeded as i32);
    server.stop().await;
    env.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_task_retried_after_a_restart_and_after_its_job_aged_out_submits_nothing() {
    // A cluster whose finished jobs leave slurmctld almost at once (MinJobAge): only slurmdbd
    // still knows them when the new connector process gets the backend's retried CreateTask.
    let env = Mock::start_with(
        "e2e-aged",
        MockConfig {
            min_job_age: Duration::from_millis(200),
            ..MockConfig::default()
        },
    )
    .await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let req = mock_request("script_no_io.pb");
    let a = c
        .create_task(req.clone())
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let (phase, _) = wait_terminal(&mut c, &a).await;
    assert_eq!(phase, Phase::Succeeded as i32);
    server.stop().await;
    let job_id: u32 = serde_json::from_slice::<serde_json::Value>(&a).unwrap()["job_id"]
        .as_u64()
        .unwrap() as u32;
    // Wait until slurmctld has forgotten it (jobs/state no longer lists it).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let url = format!(
            "{}/slurm/v0.0.42/jobs/state/?job_id={job_id}",
            env.handle.url()
        );
        let body: serde_json::Value = reqwest::Client::new()
            .get(url)
            .header(
                "X-SLURM-USER-TOKEN",
                env.handle.mint_token("flyte", Duration::from_secs(60)),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if body["jobs"].as_array().is_some_and(|j| j.is_empty()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job never aged out"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let again = c.create_task(req).await.unwrap().into_inner().resource_meta;
    assert_eq!(again, a, "the job found in slurmdbd is returned");
    assert_eq!(env.handle.stats().count("submit"), 1, "no second job");
    let (phase, _) = wait_terminal(&mut c, &again).await;
    assert_eq!(
        phase,
        Phase::Succeeded as i32,
        "tracked to its end through slurmdbd"
    );
    server.stop().await;
    env.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_link_templates_become_task_logs() {
    let env = mock().await;
    let mut d = deployment(&env);
    d.log_links = slurm_connector::config::units::parse_log_links(
        "Job dashboard=https://ood.example/jobs/{cluster}/{job_id};stdout=https://files.example/view?path={stdout}",
    )
    .unwrap();
    let server = Server::start(d).await;
    let mut c = server.client().await;
    let req = mock_request("script_no_io.pb");
    let meta = c.create_task(req).await.unwrap().into_inner().resource_meta;
    let m: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    let got = c
        .get_task(GetTaskRequest {
            resource_meta: meta.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    let links: Vec<(String, String)> = got
        .log_links
        .iter()
        .map(|l| (l.name.clone(), l.uri.clone()))
        .collect();
    assert_eq!(
        links[0],
        (
            "Job dashboard".to_string(),
            format!("https://ood.example/jobs/mock/{}", m["job_id"])
        )
    );
    let stdout = m["stdout"].as_str().unwrap();
    assert_eq!(
        links[1].1,
        format!("https://files.example/view?path={stdout}"),
        "{links:?}"
    );
    server.stop().await;
    env.handle.shutdown().await;
}

/// The series of one GetTaskMetrics result: (labels, [(time, value)]).
fn series(r: &slurm_connector::proto::core::ExecutionMetricResult) -> Vec<serde_json::Value> {
    let data = slurm_connector::proto::struct_to_json(r.data.as_ref().unwrap());
    assert_eq!(data["resultType"], "matrix", "{data}");
    data["result"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_task_metrics_reports_the_jobs_usage_from_accounting() {
    let env = mock().await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let meta = c
        .create_task(mock_request("script_no_io.pb"))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let (phase, msg) = wait_terminal(&mut c, &meta).await;
    assert_eq!(phase, Phase::Succeeded as i32, "{msg}");
    let job_id = serde_json::from_slice::<serde_json::Value>(&meta).unwrap()["job_id"].to_string();

    let all = c
        .get_task_metrics(GetTaskMetricsRequest {
            resource_meta: meta.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    let names: Vec<&str> = all.iter().map(|r| r.metric.as_str()).collect();
    assert!(
        names.contains(&"elapsed_seconds") && names.contains(&"allocated_cpus"),
        "{names:?}"
    );
    let cpus = all.iter().find(|r| r.metric == "allocated_cpus").unwrap();
    let s = series(cpus);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["metric"]["job_id"], job_id);
    assert_eq!(s[0]["metric"]["source"], "slurmdbd");
    assert_eq!(s[0]["metric"]["state"], "COMPLETED");
    let v: f64 = s[0]["values"][0][1].as_str().unwrap().parse().unwrap();
    assert!(v >= 1.0, "{s:?}");

    // A window that ends before the job did holds no sample; a typo is refused by name.
    let early = c
        .get_task_metrics(GetTaskMetricsRequest {
            resource_meta: meta.clone(),
            queries: vec!["elapsed_seconds".into()],
            end_time: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(early.len(), 1);
    assert!(series(&early[0]).is_empty());
    let typo = c
        .get_task_metrics(GetTaskMetricsRequest {
            resource_meta: meta.clone(),
            queries: vec!["cpu_secs".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(typo.code(), tonic::Code::InvalidArgument);
    assert!(typo.message().contains("`cpu_secs`") && typo.message().contains("cpu_seconds"));
    server.stop().await;
    env.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmrestd_outage_gives_no_get_task_error_and_no_wrong_phase() {
    let env = mock().await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    // A job that runs through the outage.
    let req = mock_request("script_no_io.pb").script("#!/bin/bash\nsleep 4\necho done\n");
    let meta = c.create_task(req).await.unwrap().into_inner().resource_meta;
    for _ in 0..50 {
        let r = resource(&mut c, &meta).await;
        if r.phase == Phase::Running as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A 60 s outage, scaled down to 3 s, plus a slurmdbd outage.
    env.handle
        .faults()
        .controller_down_for(Duration::from_secs(3));
    let mut saw_unreachable = false;
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut calls = 0;
    while tokio::time::Instant::now() < until {
        let r = c
            .get_task(get_req(&meta))
            .await
            .expect("zero GetTask errors during the outage");
        let res = r.into_inner().resource.unwrap();
        assert!(
            !Phase::of(res.phase).is_terminal() || res.phase == Phase::Succeeded as i32,
            "wrong terminal phase: {}",
            res.message
        );
        saw_unreachable |= res.message.contains("unreachable since");
        calls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(calls > 10);
    assert!(
        saw_unreachable,
        "the message says slurmrestd is unreachable"
    );
    let (phase, message) = wait_terminal(&mut c, &meta).await;
    assert_eq!(phase, Phase::Succeeded as i32, "{message}");
    server.stop().await;
    env.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_jobs_state_request_per_tick_whatever_the_get_task_count() {
    let env = mock().await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let mut metas = Vec::new();
    for attempt in 0..8 {
        let req = mock_request("script_no_io.pb")
            .script("#!/bin/bash\nsleep 30\n")
            .attempt(attempt);
        metas.push(c.create_task(req).await.unwrap().into_inner().resource_meta);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.handle.reset_stats();
    let started = tokio::time::Instant::now();
    // 400 GetTasks over the 8 jobs.
    for round in 0..50 {
        let futs = metas.iter().map(|m| {
            let mut c = c.clone();
            let m = m.clone();
            async move { c.get_task(get_req(&m)).await.unwrap() }
        });
        futures::future::join_all(futs).await;
        if round % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let elapsed = started.elapsed();
    let stats = env.handle.stats();
    let ticks = (elapsed.as_millis() / 200) as u64 + 2;
    assert!(
        stats.count("jobs_state") <= ticks,
        "{} jobs/state requests for {ticks} ticks",
        stats.count("jobs_state")
    );
    assert_eq!(stats.count("job_get"), 0, "GetTask never asks per job");
    // Clean up: cancel is idempotent.
    for m in &metas {
        let d = DeleteTaskRequest {
            resource_meta: m.clone(),
            ..Default::default()
        };
        c.delete_task(d.clone()).await.unwrap();
        c.delete_task(d).await.unwrap();
    }
    let (phase, _) = wait_terminal(&mut c, &metas[0]).await;
    assert_eq!(phase, Phase::Aborted as i32);
    server.stop().await;
    env.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_invalid_argument_and_unknown_meta_is_an_error() {
    let env = mock().await;
    let server = Server::start(deployment(&env)).await;
    let mut c = server.client().await;
    let mut req = mock_request("script_no_io.pb");
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    custom.fields.insert(
        "sbatch_options".into(),
        prost_types::Value {
            kind: Some(prost_types::value::Kind::StructValue(prost_types::Struct {
                fields: [(
                    "output".to_string(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue(
                            "/home/u/.ssh/authorized_keys".into(),
                        )),
                    },
                )]
                .into_iter()
                .collect(),
            })),
        },
    );
    let e = c.create_task(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("reserved"), "{}", e.message());
    // A task may select a cluster only by a configured name.
    let mut req = mock_request("script_no_io.pb");
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    custom.fields.insert(
        "connection".into(),
        prost_types::Value {
            kind: Some(prost_types::value::Kind::StructValue(prost_types::Struct {
                fields: [(
                    "cluster".to_string(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue(
                            "http://evil:6820".into(),
                        )),
                    },
                )]
                .into_iter()
                .collect(),
            })),
        },
    );
    let e = c.create_task(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("not a cluster of this connector"),
        "{}",
        e.message()
    );
    assert_eq!(env.handle.stats().count("submit"), 0);

    let e = c.get_task(get_req(b"not json")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = c
        .get_task(get_req(
            br#"{"v":1,"cluster":"nope","job_id":1,"job_name":"x","stdout":"","stderr":""}"#,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    // Job 0 is no job (slurmrestd answers it with a 422): refused as the meta is read.
    let e = c
        .get_task(get_req(
            br#"{"v":1,"cluster":"mock","job_id":0,"job_name":"x","stdout":"","stderr":""}"#,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("`job_id` is 0"), "{}", e.message());
    // The Python plugin's meta (host → cluster through ssh_hosts) is tracked.
    let r = c
        .get_task(get_req(br#"{"job_id": "999999", "host": "login1", "username": "u", "port": 22, "stdout_path": "/x.out", "stderr_path": "/x.err"}"#))
        .await
        .unwrap()
        .into_inner();
    assert!(r.resource.unwrap().message.starts_with("Slurm job 999999"));
    server.stop().await;
    env.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_slurmrestd_errors_and_drops_give_no_get_task_error() {
    let env = mock().await;
    let mut d = deployment(&env);
    d.submit_wait = Duration::from_millis(500);
    let server = Server::start(d).await;
    let mut c = server.client().await;
    let req = mock_request("script_no_io.pb").script("#!/bin/bash\nsleep 3\necho done\n");
    // Served (an answer means the start, and its version negotiation, are done).
    let _ = c
        .get_task(get_req(
            br#"{"v":1,"cluster":"nope","job_id":1,"job_name":"x","stdout":"","stderr":""}"#,
        ))
        .await;
    // CreateTask while every request fails: not an error (the backend would spend an attempt
    // on it) but a deferred meta, QUEUED with the reason, and nothing submitted.
    env.handle.faults().set(mock_slurmrestd::FaultConfig {
        error_rate: 1.0,
        ..Default::default()
    });
    let meta = c
        .create_task(req.clone())
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let res = resource(&mut c, &meta).await;
    assert_eq!(res.phase, Phase::Queued as i32, "{}", res.message);
    assert!(
        res.message.starts_with("Not submitted yet"),
        "{}",
        res.message
    );
    assert_eq!(env.handle.stats().count("submit"), 0);
    env.handle.faults().clear();
    // The submit goes on by itself; a retried CreateTask joins it: one job. The mock counts a
    // submit when it arrives, the connector records it when the answer is back, so wait for
    // GetTask to see it rather than for the count (the CI run at fd4c32a lost that race).
    let again = c.create_task(req).await.unwrap().into_inner().resource_meta;
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let res = resource(&mut c, &meta).await;
        if !res.message.starts_with("Not submitted yet") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the deferred submit never happened: {}",
            res.message
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.handle.stats().count("submit"), 1);
    let _ = again;
    // Half the requests answer 500/502/503, a fifth are dropped: GetTask still never fails.
    env.handle.faults().set(mock_slurmrestd::FaultConfig {
        error_rate: 0.5,
        drop_rate: 0.2,
        ..Default::default()
    });
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        let res = c
            .get_task(get_req(&meta))
            .await
            .expect("zero GetTask errors while slurmrestd is flaky")
            .into_inner()
            .resource
            .unwrap();
        assert!(
            !Phase::of(res.phase).is_terminal() || res.phase == Phase::Succeeded as i32,
            "wrong terminal phase: {}",
            res.message
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.handle.faults().clear();
    let (phase, message) = wait_terminal(&mut c, &meta).await;
    assert_eq!(phase, Phase::Succeeded as i32, "{message}");
    server.stop().await;
    env.handle.shutdown().await;
}

/// Not a test: runs mock-slurmrestd and the connector on `SERVICE_CONFORMANCE_ADDR` (default
/// 127.0.0.1:18000) for `SERVICE_CONFORMANCE_SECS` (default 300), so
/// `tests/conformance/conformance.py --partition '' --address ...` can drive it.
/// `cargo test --test service_e2e -- --ignored --nocapture serve_for_conformance`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn serve_for_conformance() {
    let env = mock().await;
    let addr: std::net::SocketAddr = std::env::var("SERVICE_CONFORMANCE_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:18000".into())
        .parse()
        .unwrap();
    let secs: u64 = std::env::var("SERVICE_CONFORMANCE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let g = tokio::net::TcpListener::bind(addr).await.unwrap();
    let m = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!(
        "connector on {addr}, mock-slurmrestd on {}",
        env.handle.url()
    );
    serve_with(
        deployment(&env),
        g,
        m,
        tokio::time::sleep(Duration::from_secs(secs)),
    )
    .await
    .unwrap();
    env.handle.shutdown().await;
}

/// A stock task cannot name a cluster (the published plugin writes no `connection.cluster`), but
/// it does write its SSH login host: that host selects the cluster listing it in `ssh_hosts`.
/// A host no cluster lists is refused when several clusters could be meant, and nothing is
/// submitted anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_tasks_login_host_routes_it_to_the_cluster_listing_it() {
    let (a, b) = (mock().await, mock().await);
    let mut d = deployment(&a);
    let mut second = b.cluster(b.static_auth(), None);
    second.name = "hpc2".into();
    second.ssh_hosts = vec!["login.hpc2.example".into()];
    d.clusters.insert(second.name.clone(), second);
    let server = Server::start(d).await;
    let mut c = server.client().await;

    // CreateTask's resource_meta, and the cluster it names.
    async fn created(
        c: &mut common::server::Grpc,
        req: slurm_connector::proto::connector::CreateTaskRequest,
    ) -> (Vec<u8>, String) {
        let meta = c.create_task(req).await.unwrap().into_inner().resource_meta;
        let m: serde_json::Value = serde_json::from_slice(&meta).unwrap();
        (meta, m["cluster"].as_str().unwrap().to_string())
    }
    let routed = mock_request("script_no_io.pb")
        .run_name("r-routed-by-host")
        .connection_host("LOGIN.hpc2.example");
    let (meta, cluster) = created(&mut c, routed).await;
    assert_eq!(cluster, "hpc2");
    assert_eq!(b.handle.stats().count("submit"), 1);
    assert_eq!(a.handle.stats().count("submit"), 0);
    let (phase, msg) = wait_terminal(&mut c, &meta).await;
    assert_eq!(phase, Phase::Succeeded as i32, "{msg}");

    // The default cluster's own login host (listed: `login1`) and no host at all go to it.
    for (run, req) in [
        (
            "r-default-host",
            mock_request("script_no_io.pb").connection_host("login1"),
        ),
        ("r-no-host", mock_request("script_no_io.pb")),
    ] {
        assert_eq!(created(&mut c, req.run_name(run)).await.1, "mock", "{run}");
    }

    let e = c
        .create_task(
            mock_request("script_no_io.pb")
                .run_name("r-unknown-host")
                .connection_host("login.elsewhere.example"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("connection.host")
            && e.message().contains("login.elsewhere.example")
            && e.message().contains("ssh_hosts"),
        "{}",
        e.message()
    );
    assert_eq!(a.handle.stats().count("submit"), 2);
    assert_eq!(b.handle.stats().count("submit"), 1);
    server.stop().await;
    a.handle.shutdown().await;
    b.handle.shutdown().await;
}
