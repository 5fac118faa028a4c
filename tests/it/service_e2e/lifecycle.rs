//! Every fixture through CreateTask to a terminal phase, and CreateTask repeated or retried after a restart submitting nothing new.

use super::*;

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
        // The header (no token: there is nothing to follow), then the body.
        let first = logs.message().await.unwrap().unwrap();
        let Some(get_task_logs_response::Part::Header(h)) = first.part else {
            panic!("header expected first")
        };
        assert_eq!(h.token, "");
        let second = logs.message().await.unwrap().unwrap();
        let Some(get_task_logs_response::Part::Body(b)) = second.part else {
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
