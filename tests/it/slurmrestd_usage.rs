//! Contract tests of `Client::usage` (GetTaskMetrics' source): wiremock replays real slurmrestd
//! answers — slurmdbd's record first, slurmctld's when slurmdbd has none or is unreachable.

use crate::common;

use common::Recorded;
use slurm_connector::slurmrestd::{BaseState, Client, JobId};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

fn client(server: &MockServer) -> Client {
    common::replay_client(server, "testcluster", 2)
}

async fn mount(server: &MockServer, p: &str, sample: &str) {
    Mock::given(method("GET"))
        .and(path(p))
        .respond_with(Recorded::load(sample).response())
        .mount(server)
        .await;
}

#[tokio::test]
async fn usage_comes_from_slurmdbd_when_it_has_the_job() {
    for (release, id) in [("24.11", 31), ("26.05", 56)] {
        let server = common::serving("26.05", &["v0.0.42"]).await;
        mount(
            &server,
            &format!("/slurmdb/v0.0.42/job/{id}"),
            &format!("{release}_v0.0.42_slurmdb-job-get"),
        )
        .await;
        let u = client(&server)
            .usage(JobId(id))
            .await
            .unwrap()
            .expect("a record");
        let rec =
            Recorded::load(&format!("{release}_v0.0.42_slurmdb-job-get")).body["jobs"][0].clone();
        assert_eq!(u.source, "slurmdbd");
        assert_eq!(u.state.base, BaseState::Completed);
        assert_eq!(u.start_time, rec["time"]["start"].as_i64());
        assert_eq!(u.elapsed_secs, rec["time"]["elapsed"].as_i64());
        assert_eq!(u.cpu_total_secs, Some(0.0), "{release}");
        // This cluster gathers no step usage: no peak RSS rather than a made-up 0.
        assert_eq!(u.max_rss_bytes, None, "{release}");
        let cpus = u.allocated.iter().find(|t| t.kind == "cpu").unwrap();
        assert_eq!(cpus.count, 1);
        // energy is -2 ("not gathered") in the record: dropped.
        assert!(
            u.allocated.iter().all(|t| t.kind != "energy"),
            "{:?}",
            u.allocated
        );
    }
}

/// Recorded on 26.05 with `JobAcctGatherType=jobacct_gather/linux`: a batch step that burned
/// ~5 s of CPU and held a 150 MiB shell string (sacct: TotalCPU 00:05.062, MaxRSS 226744K).
#[tokio::test]
async fn usage_sums_the_steps_cpu_and_takes_the_peak_rss() {
    let server = common::serving("26.05", &["v0.0.42"]).await;
    let sample = "26.05_v0.0.42_slurmdb-job-get-usage";
    mount(&server, "/slurmdb/v0.0.42/job/1536", sample).await;
    let u = client(&server).usage(JobId(1536)).await.unwrap().unwrap();
    // The record's own time.total is 0: the figure is the steps' sum, as sacct's.
    assert_eq!(
        Recorded::load(sample).body["jobs"][0]["time"]["total"]["seconds"],
        0
    );
    let close = |got: Option<f64>, want: f64| (got.unwrap() - want).abs() < 1e-9;
    assert!(close(u.cpu_total_secs, 5.062902), "{u:?}");
    assert!(close(u.cpu_user_secs, 4.000178), "{u:?}");
    assert!(close(u.cpu_system_secs, 1.062724), "{u:?}");
    assert_eq!(u.max_rss_bytes, Some(226_744 * 1024));
    assert_eq!(u.elapsed_secs, Some(9));
}

#[tokio::test]
async fn usage_falls_back_to_slurmctld_and_is_none_when_neither_knows() {
    let server = common::serving("26.05", &["v0.0.42"]).await;
    mount(
        &server,
        "/slurmdb/v0.0.42/job/31",
        "24.11_v0.0.42_slurmdb-job-unknown",
    )
    .await;
    mount(
        &server,
        "/slurm/v0.0.42/job/31",
        "24.11_v0.0.42_job-get-one",
    )
    .await;
    mount(
        &server,
        "/slurmdb/v0.0.42/job/999999",
        "24.11_v0.0.42_slurmdb-job-unknown",
    )
    .await;
    mount(
        &server,
        "/slurm/v0.0.42/job/999999",
        "24.11_v0.0.42_job-get-unknown",
    )
    .await;
    let c = client(&server);
    let u = c.usage(JobId(31)).await.unwrap().expect("slurmctld's view");
    assert_eq!(u.source, "slurmctld");
    assert_eq!(u.cpu_total_secs, None);
    assert!(u.start_time.is_some());
    let tres: Vec<(String, i64)> = u
        .allocated
        .iter()
        .map(|t| (t.kind.clone(), t.count))
        .collect();
    assert_eq!(
        tres,
        [("cpu".into(), 1), ("node".into(), 1), ("billing".into(), 1)]
    );
    assert!(c.usage(JobId(999999)).await.unwrap().is_none());
}

#[tokio::test]
async fn an_unreachable_slurmdbd_still_gives_slurmctlds_view() {
    let server = common::serving("26.05", &["v0.0.42"]).await;
    // slurmdbd unreachable: every slurmdb path answers 503 (retried, then given up).
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex("^/slurmdb/"))
        .respond_with(wiremock::ResponseTemplate::new(503))
        .mount(&server)
        .await;
    for (id, sample) in [(31, "job-get-one"), (7, "job-get-unknown")] {
        let p = format!("/slurm/v0.0.42/job/{id}");
        mount(&server, &p, &format!("24.11_v0.0.42_{sample}")).await;
    }
    let c = client(&server);
    assert_eq!(
        c.usage(JobId(31)).await.unwrap().unwrap().source,
        "slurmctld"
    );
    // Unknown to slurmctld and slurmdbd unreachable: we cannot say "no such job".
    let e = c.usage(JobId(7)).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
}
