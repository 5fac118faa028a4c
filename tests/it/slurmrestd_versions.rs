//! Contract tests of the facade in every API version: a wiremock slurmrestd serves exactly the
//! versions a real release serves (as recorded) and replays that release's recorded answers; the
//! client must choose the newest version both sides speak (or the pinned one), call that
//! version's paths, and read the same domain values from each version's shapes.

use crate::common;

use std::time::Duration;

use common::{Recorded, serving};
use slurm_connector::slurmrestd::{
    ApiVersion, Auth, BaseState, CancelOutcome, Client, ClientConfig, ClientError, JobDescription,
    JobId, RetryPolicy, Secret,
};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer};

/// The releases recorded, with the versions each serves (measured; see
/// tests/fixtures/slurmrestd/README.md).
const RELEASES: &[(&str, &[&str])] = &[
    ("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]),
    ("26.05", &["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]),
    ("26.11rc1", &["v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"]),
];

fn client(server: &MockServer, pinned: Option<ApiVersion>) -> Client {
    let mut cfg = ClientConfig::new(
        "testcluster",
        server.uri().parse().unwrap(),
        Auth::Static {
            token: Secret::new("eyJhbGciOiJIUzI1NiJ9.e30.c2ln"),
        },
    );
    cfg.api_version = pinned;
    cfg.retry = RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(10),
    };
    cfg.request_timeout = Duration::from_secs(2);
    Client::new(cfg).unwrap()
}

fn job() -> JobDescription {
    JobDescription {
        name: "flyte-test".into(),
        script: "#!/bin/bash\necho hi\n".into(),
        current_working_directory: "/tmp".into(),
        environment: vec![("PATH".into(), "/bin:/usr/bin".into())],
        ..Default::default()
    }
}

/// Answers `method path_regex` with the recording `<release>_<version>_<case>`.
async fn replay(server: &MockServer, verb: &str, path_re: &str, name: &str) {
    Mock::given(method(verb))
        .and(path_regex(path_re))
        .respond_with(Recorded::load(name).response())
        .mount(server)
        .await;
}

#[tokio::test]
async fn each_release_gets_its_newest_version_and_every_operation_works_in_it() {
    for (release, versions) in RELEASES {
        let newest = *versions.last().unwrap();
        let server = serving(release, versions).await;
        let c = client(&server, None);
        let n = c.negotiate().await.unwrap();
        assert_eq!(n.version.as_str(), newest, "{release}");
        assert_eq!(
            n.served.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
            *versions,
            "{release}"
        );
        assert!(!n.pinned);
        assert!(n.reason().contains(newest), "{}", n.reason());

        let rec = |case: &str| format!("{release}_{newest}_{case}");
        replay(
            &server,
            "POST",
            &format!("^/slurm/{newest}/job/submit$"),
            &rec("submit-minimal-ok"),
        )
        .await;
        replay(
            &server,
            "GET",
            &format!("^/slurm/{newest}/jobs/state/$"),
            &rec("jobs-state-repeated"),
        )
        .await;
        replay(
            &server,
            "GET",
            &format!("^/slurm/{newest}/job/[0-9]+$"),
            &rec("job-get-one"),
        )
        .await;
        replay(
            &server,
            "DELETE",
            &format!("^/slurm/{newest}/job/[0-9]+$"),
            &rec("delete-finished"),
        )
        .await;
        replay(
            &server,
            "GET",
            &format!("^/slurmdb/{newest}/job/[0-9]+$"),
            &rec("slurmdb-job-get"),
        )
        .await;

        let id = c.submit(&job()).await.unwrap();
        let expected = Recorded::load(&rec("submit-minimal-ok")).body["job_id"]
            .as_u64()
            .unwrap();
        assert_eq!(id, JobId(expected as u32), "{release}");

        let states = c.states(&[JobId(1), JobId(2)]).await.unwrap();
        assert_eq!(states.len(), 3, "{release}: {states:?}");
        assert!(states.values().any(|s| s.base == BaseState::Running));

        let recorded_id = Recorded::load(&rec("job-get-one")).body["jobs"][0]["job_id"]
            .as_u64()
            .unwrap() as u32;
        let info = c.job(JobId(recorded_id)).await.unwrap().expect("the job");
        assert_eq!(info.user.as_deref(), Some("flyte"), "{release}");

        assert_eq!(
            c.cancel(JobId(recorded_id), None).await.unwrap(),
            CancelOutcome::AlreadyFinished,
            "{release} {newest}"
        );

        let acct_id = Recorded::load(&rec("slurmdb-job-get")).body["jobs"][0]["job_id"]
            .as_u64()
            .unwrap() as u32;
        let acct = c
            .accounting_job(JobId(acct_id))
            .await
            .unwrap()
            .expect("slurmdbd's record");
        assert!(acct.state.is_finished(), "{release}");

        // Every call went to the chosen version's paths, none to another version's.
        for r in server.received_requests().await.unwrap() {
            let p = r.url.path();
            assert!(
                p.ends_with("/ping/") || p.contains(&format!("/{newest}/")),
                "{release}: {p} is not in {newest}"
            );
        }
    }
}

/// The oldest versions in use: 24.11 pinned to v0.0.40 and v0.0.41 (23.11 and 24.05 serve no
/// newer). Their DELETE answers carry no per-job status, so a finished job reads as cancelled.
#[tokio::test]
async fn pinned_older_versions_are_used_and_cancel_reads_their_shape() {
    for v in ["v0.0.40", "v0.0.41"] {
        let server = serving("24.11", &["v0.0.40", "v0.0.41", "v0.0.42"]).await;
        let c = client(&server, Some(v.parse().unwrap()));
        let n = c.negotiate().await.unwrap();
        assert_eq!(n.version.as_str(), v);
        assert!(n.pinned && n.reason().contains("pinned"), "{}", n.reason());
        replay(
            &server,
            "DELETE",
            &format!("^/slurm/{v}/job/[0-9]+$"),
            &format!("24.11_{v}_delete-finished"),
        )
        .await;
        replay(
            &server,
            "POST",
            &format!("^/slurm/{v}/job/submit$"),
            &format!("24.11_{v}_submit-minimal-ok"),
        )
        .await;
        assert_eq!(
            c.cancel(JobId(9), None).await.unwrap(),
            CancelOutcome::Cancelled
        );
        c.submit(&job()).await.unwrap();
    }
}

#[tokio::test]
async fn a_pinned_version_the_cluster_lacks_is_refused_listing_what_it_serves() {
    let server = serving("26.11rc1", &["v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"]).await;
    let c = client(&server, Some(ApiVersion::V0042));
    let e = c.negotiate().await.unwrap_err();
    assert!(matches!(e, ClientError::VersionNotServed { .. }), "{e:?}");
    let text = e.to_string();
    for want in [
        "v0.0.42",
        "v0.0.43, v0.0.44, v0.0.45, v0.0.46",
        "api_version",
        "testcluster",
    ] {
        assert!(text.contains(want), "{want} missing from: {text}");
    }
    // And nothing is submitted in a version the cluster lacks.
    assert!(c.submit(&job()).await.is_err());
    let submits = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.url.path().ends_with("/job/submit"))
        .count();
    assert_eq!(submits, 0);
}

#[tokio::test]
async fn a_cluster_serving_none_of_ours_is_refused_with_both_sides() {
    // A Slurm whose only version is one this connector does not speak.
    let server = serving("26.11rc1", &[]).await;
    Mock::given(method("GET"))
        .and(path("/slurm/v0.0.39/ping/"))
        .respond_with(Recorded::load("24.11_v0.0.42_token-badsig-ping").response())
        .with_priority(1)
        .mount(&server)
        .await;
    let e = client(&server, None).negotiate().await.unwrap_err();
    assert!(matches!(e, ClientError::NoCommonVersion { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("v0.0.40") && text.contains("v0.0.46"),
        "{text}"
    );
    assert!(text.contains("it does serve v0.0.39"), "{text}");
}

/// slurmrestd may be upgraded while the connector runs: once the chosen version's paths answer
/// "Invalid or unknown URL path" (or slurmrestd was unreachable), the next call looks at its
/// versions again and moves to the new newest one. The call that met the 404 fails (the
/// tracker's next tick, or Flyte's retry, repeats it); nothing is submitted in a guessed version.
#[tokio::test]
async fn after_the_cluster_was_upgraded_the_version_is_chosen_again() {
    let server = serving("26.05", &["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]).await;
    let c = client(&server, None);
    assert_eq!(c.negotiate().await.unwrap().version, ApiVersion::V0045);

    // The "upgrade": the same slurmrestd now serves 26.11's versions only.
    server.reset().await;
    for v in ["v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"] {
        let answer = if v == "v0.0.46" {
            Recorded::load("26.11rc1_v0.0.46_jobs-state-one").response()
        } else {
            wiremock::ResponseTemplate::new(404)
                .insert_header("Content-Type", "text/plain")
                .set_body_string("Invalid or unknown URL path")
        };
        Mock::given(method("GET"))
            .and(path(format!("/slurm/{v}/ping/")))
            .respond_with(answer)
            .mount(&server)
            .await;
    }
    replay(
        &server,
        "GET",
        "^/slurm/v0.0.46/jobs/state/$",
        "26.11rc1_v0.0.46_jobs-state-repeated",
    )
    .await;
    let first = c.states(&[JobId(1)]).await;
    assert!(
        matches!(first, Err(ClientError::Http { status: 404, .. })),
        "{first:?}"
    );
    let states = c.states(&[JobId(1)]).await.unwrap();
    assert_eq!(states.len(), 3);
    assert_eq!(c.api_version(), Some(ApiVersion::V0046));
}
