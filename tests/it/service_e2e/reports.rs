//! What GetTaskLogs and GetTaskMetrics answer.

use super::*;

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

/// With no `FLYTE_SLURM_LOG_LINKS`, one link whose name carries the job id: both Flyte plugins
/// forward a RUNNING task's log links and drop its message, so this is where the UI shows it.
/// `off` turns it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_link_names_the_slurm_job() {
    let env = mock().await;
    for (setting, want_links) in [(None, 1), (Some("off"), 0)] {
        let vars: std::collections::BTreeMap<String, String> = setting
            .map(|v| ("FLYTE_SLURM_LOG_LINKS".to_string(), v.to_string()))
            .into_iter()
            .collect();
        let mut d = deployment(&env);
        d.log_links =
            slurm_connector::config::DeploymentConfig::load_with(&|k| vars.get(k).cloned(), None)
                .unwrap()
                .log_links;
        let server = Server::start(d).await;
        let mut c = server.client().await;
        let meta = c
            .create_task(mock_request("script_no_io.pb"))
            .await
            .unwrap()
            .into_inner()
            .resource_meta;
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
        assert_eq!(
            got.log_links.len(),
            want_links,
            "{setting:?}: {:?}",
            got.log_links
        );
        if want_links == 1 {
            let l = &got.log_links[0];
            assert_eq!(
                l.name,
                format!(
                    "Slurm job {} on {}",
                    m["job_id"],
                    m["cluster"].as_str().unwrap()
                )
            );
            assert_eq!(l.uri, format!("file://{}", m["stdout"].as_str().unwrap()));
            assert!(l.show_while_pending && l.ready, "{l:?}");
        }
        server.stop().await;
    }
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
