//! Helpers of tests/real_identity.rs: the dev cluster (with accounting) under identity rules, the
//! tasks' requests, CreateTask/DeleteTask/GetTask calls, and what sacct, the connector's /metrics
//! and a failed start say.

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use slurm_connector::config::DeploymentConfig;
use slurm_connector::config::identity::{DefaultAction, IdentityRule};
use slurm_connector::proto::connector::{CreateTaskRequest, DeleteTaskRequest, TaskCategory};
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::slurmrestd::JobId;

use crate::common;
use crate::common::request::RequestExt;
use crate::common::server::{Grpc, Server};
use crate::common::skip::{Tier, skip};
use crate::{connector, support};

/// One test at a time: the sdiag count and "nothing was submitted" look at the whole cluster.
pub static SERIAL: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

pub fn cluster() -> Option<support::Cluster> {
    let c = support::cluster()?;
    if !c.accounting {
        skip(
            Tier::Accounting,
            "the dev cluster runs without slurmdbd; identity tests read sacct (`up` without --no-accounting)",
        );
        return None;
    }
    Some(c)
}

/// The dev cluster with `rules` (numbered in order) and `default`, each user's files in
/// `/shared/<user>`.
pub fn deployment(
    c: &support::Cluster,
    rules: Vec<IdentityRule>,
    default: DefaultAction,
) -> DeploymentConfig {
    let mut d = connector::deployment(c, 3);
    let cl = d.clusters.get_mut(&c.name).unwrap();
    cl.working_dir = Some("/shared/{user}".into());
    cl.identities.rules = rules
        .into_iter()
        .enumerate()
        .map(|(i, r)| IdentityRule { number: i + 1, ..r })
        .collect();
    cl.identities.default = default;
    d
}

pub fn request(tag: &str, project: &str, script: &str) -> CreateTaskRequest {
    connector::request(tag, script).project(project)
}

/// Adds `sbatch_options` entries to the task.
pub fn with_options(mut req: CreateTaskRequest, opts: &[(&str, &str)]) -> CreateTaskRequest {
    use prost_types::value::Kind;
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    let mut s = prost_types::Struct::default();
    for (k, v) in opts {
        s.fields.insert(
            k.to_string(),
            prost_types::Value {
                kind: Some(Kind::StringValue(v.to_string())),
            },
        );
    }
    custom.fields.insert(
        "sbatch_options".into(),
        prost_types::Value {
            kind: Some(Kind::StructValue(s)),
        },
    );
    req
}

pub fn meta_json(meta: &[u8]) -> serde_json::Value {
    serde_json::from_slice(meta).unwrap()
}

pub async fn create(g: &mut Grpc, req: CreateTaskRequest) -> Vec<u8> {
    g.create_task(req)
        .await
        .unwrap_or_else(|e| panic!("CreateTask: {e}"))
        .into_inner()
        .resource_meta
}

pub async fn delete(g: &mut Grpc, meta: &[u8]) {
    g.delete_task(DeleteTaskRequest {
        resource_meta: meta.to_vec(),
        task_category: Some(TaskCategory {
            name: "slurm_script".into(),
            version: 0,
        }),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("DeleteTask: {e}"));
}

/// `sacct`'s `User|Account` of a job, once slurmdbd has it.
pub async fn sacct_user_account(c: &support::Cluster, id: JobId) -> (String, String) {
    let start = Instant::now();
    loop {
        let out = c
            .dev_cluster(&[
                "exec",
                "sacct",
                "-j",
                &id.to_string(),
                "-X",
                "-n",
                "-P",
                "-o",
                "user,account",
            ])
            .await;
        if let Some((u, a)) = out.lines().next().and_then(|l| l.split_once('|'))
            && !u.is_empty()
        {
            return (u.to_string(), a.to_string());
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "sacct has no job {id}: {out:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub async fn phase_of(g: &mut Grpc, meta: &[u8]) -> Phase {
    Phase::try_from(connector::get(g, meta).await.phase).unwrap()
}

pub async fn wait_phase(g: &mut Grpc, meta: &[u8], want: Phase) {
    let r = connector::poll_until(
        g,
        meta,
        120,
        |r| r.phase == want as i32 || connector::terminal(r),
        |_| {},
    )
    .await;
    assert_eq!(Phase::try_from(r.phase).unwrap(), want, "{}", r.message);
}

/// `slurm_connector_poll_tick_seconds_count` of the cluster, from the connector's /metrics.
pub async fn ticks(server: &Server, cluster: &str) -> u64 {
    let cluster = format!("cluster=\"{cluster}\"");
    server
        .metric("slurm_connector_poll_tick_seconds_count", &[&cluster])
        .await as u64
}

/// A token file holding a SlurmUser token (`dev-cluster token slurm`): the privileged mode.
pub async fn slurm_token_file(c: &support::Cluster) -> PathBuf {
    let dir = common::fresh_dir("sc-id-token");
    let f = dir.join("slurm.jwt");
    let token = c.dev_cluster(&["token", "slurm", "3600"]).await;
    std::fs::write(&f, token.trim()).unwrap();
    f
}

pub async fn start_error(d: DeploymentConfig) -> String {
    let g = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let m = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    match tokio::time::timeout(
        Duration::from_secs(60),
        slurm_connector::service::serve_with(d, g, m, async {}),
    )
    .await
    .expect("serve_with returns")
    {
        Ok(()) => panic!("serve started with a bad identity rule"),
        Err(e) => e.to_string(),
    }
}
