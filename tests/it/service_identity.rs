//! Identity rules through the whole service, in front of mock-slurmrestd (which checks tokens and
//! `X-SLURM-USER-NAME` as slurmrestd does, and records each job's user):
//! - a mapped project's job is submitted as the rule's user (its own minted token), with the
//!   `resource_meta` records the user, and DeleteTask acts as that user;
//! - an unmapped task under the default runs as the deployment user, its meta without a user
//!   (what every meta written before identities looks like);
//! - a mapped task bringing its own `slurm_jwt`, or naming another user in `connection.username`,
//!   is refused with INVALID_ARGUMENT and nothing is submitted.

use crate::common;
use common::drill::{self, Mock, Server, create, delete_req, job_id};
use common::identity::rule;
use common::request::RequestExt;

use std::time::Duration;

use slurm_connector::config::AuthConfig;
use slurm_connector::slurmrestd::{Auth, Client, ClientConfig, JobId};

async fn env(tag: &str) -> (Mock, Server, common::server::Grpc) {
    let mock = Mock::start(tag, Duration::from_secs(600), Default::default()).await;
    let mut cluster = mock.cluster(
        AuthConfig::KeyFile {
            path: mock.key_file(),
            lifetime: Duration::from_secs(600),
        },
        Some("flyte"),
    );
    cluster.identities.rules = vec![rule("ml", "alice", "physics")];
    let mut d = drill::deployment(cluster, Duration::from_millis(200));
    d.allow_task_credentials = true;
    let server = Server::start(d).await;
    let g = server.client().await;
    (mock, server, g)
}

/// The mock's record of a job, read as the deployment user.
async fn job_user(mock: &Mock, id: JobId) -> Option<String> {
    let c = Client::new(ClientConfig::new(
        "mock",
        url::Url::parse(&mock.handle.url()).unwrap(),
        Auth::Static {
            token: slurm_connector::config::Secret::new(mock.token()),
        },
    ))
    .unwrap();
    c.job(id).await.unwrap().and_then(|j| j.user)
}

#[tokio::test]
async fn a_mapped_task_runs_as_its_user_and_an_unmapped_one_as_the_deployment_user() {
    let (mock, server, mut g) = env("id-mapped").await;
    let meta = create(
        &mut g,
        drill::request(1, "#!/bin/bash\nsleep 5\n").project("ml"),
    )
    .await
    .unwrap();
    let m: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(m["slurm_user"], "alice");
    assert_eq!(
        job_user(&mock, JobId(job_id(&meta))).await.as_deref(),
        Some("alice")
    );
    // As alice (her minted token and user name); the real tier shows it from a restarted
    // connector with a proxied user.
    g.delete_task(delete_req(&meta))
        .await
        .expect("DeleteTask as alice");

    let meta = create(
        &mut g,
        drill::request(2, "#!/bin/bash\ntrue\n").project("etl"),
    )
    .await
    .unwrap();
    let m: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert!(m.get("slurm_user").is_none(), "{m}");
    assert_eq!(
        job_user(&mock, JobId(job_id(&meta))).await.as_deref(),
        Some("flyte")
    );
    server.stop().await;
    mock.stop().await;
}

#[tokio::test]
async fn a_mapped_task_cannot_bring_its_own_token_or_name_another_user() {
    let (mock, server, mut g) = env("id-refused").await;
    let mut req = drill::request(3, "#!/bin/bash\ntrue\n").project("ml");
    req.connection
        .get_or_insert_with(Default::default)
        .secrets
        .insert(
            "slurm_jwt".into(),
            mock.handle.mint_token("bob", Duration::from_secs(600)),
        );
    let e = create(&mut g, req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("slurm_jwt") && e.message().contains("\"alice\""),
        "{}",
        e.message()
    );

    let mut req = drill::request(4, "#!/bin/bash\ntrue\n").project("ml");
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    let conn = custom
        .fields
        .entry("connection".into())
        .or_insert_with(|| prost_types::Value {
            kind: Some(prost_types::value::Kind::StructValue(Default::default())),
        });
    if let Some(prost_types::value::Kind::StructValue(s)) = &mut conn.kind {
        s.fields.insert(
            "username".into(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue("bob".into())),
            },
        );
    }
    let e = create(&mut g, req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("cannot choose its Slurm user"),
        "{}",
        e.message()
    );
    assert_eq!(
        mock.handle.stats().count("submit"),
        0,
        "a refusal submits nothing"
    );
    server.stop().await;
    mock.stop().await;
}
