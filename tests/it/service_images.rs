//! Pre-staged images through the whole service, in front of mock-slurmrestd: the cluster's image
//! map (`[[clusters.NAME.images]]`) turns the task's registry image into a file on the shared
//! filesystem, and CreateTask refuses a mapped file that the connector can see is missing —
//! before anything is submitted. A mapped path the connector cannot see (outside its shared
//! roots) is submitted, and the job itself stops with a message naming the file and the rule.

use crate::common;
use common::mock::Mock;
use common::mock_request;
use common::server::Server;

use std::path::Path;
use std::time::{Duration, Instant};

use slurm_connector::config::DeploymentConfig;
use slurm_connector::config::images::{FileImageRule, ImageMap};

/// The fixture's task image (`native_pyxis_gpu`: Pyxis, GPUs) is `ghcr.io/acme/train:2026.11`.
const FIXTURE: &str = "native_pyxis_gpu.pb";

fn deployment(env: &Mock, images_dir: &Path) -> DeploymentConfig {
    let mut c = env.cluster(env.static_auth(), None);
    c.shared_mounts = vec![(env.dir.display().to_string(), env.dir.clone())];
    c.images = ImageMap::from_file(
        "images",
        vec![FileImageRule {
            pattern: "ghcr.io/acme/*".into(),
            pyxis: Some(format!("{}/{{flat}}.sqsh", images_dir.display())),
            apptainer: None,
        }],
    )
    .unwrap();
    common::mock::deployment(c, Duration::from_millis(200))
}

fn submitted_jobs(env: &Mock) -> usize {
    std::fs::read_dir(env.jobs())
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".out"))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_mapped_image_file_that_is_missing_is_refused_at_create_task() {
    let env = Mock::start(
        "images-missing",
        Duration::from_secs(300),
        Default::default(),
    )
    .await;
    let images = env.dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let server = Server::start(deployment(&env, &images)).await;
    let mut c = server.client().await;

    let e = c.create_task(mock_request(FIXTURE)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let want = images.join("acme+train+2026.11.sqsh");
    let m = e.message();
    assert!(m.contains(&want.display().to_string()), "{m}");
    assert!(m.contains("ghcr.io/acme/train:2026.11"), "{m}");
    assert!(m.contains("`ghcr.io/acme/*`"), "{m}");
    assert!(m.contains("does not exist"), "{m}");
    // Nothing reached Slurm.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(submitted_jobs(&env), 0);

    // Staged: the same request goes through.
    std::fs::write(&want, b"hsqs").unwrap();
    let meta = c
        .create_task(mock_request(FIXTURE))
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    assert!(!meta.is_empty());
    // (The count above can see a job: this one's log appears.)
    let deadline = Instant::now() + Duration::from_secs(30);
    while submitted_jobs(&env) == 0 {
        assert!(
            Instant::now() < deadline,
            "the staged task's job never wrote its log"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn a_mapped_path_outside_the_shared_roots_is_checked_by_the_job() {
    let env = Mock::start(
        "images-unseen",
        Duration::from_secs(300),
        Default::default(),
    )
    .await;
    // Not under the shared mounts: the connector cannot look, so it submits.
    let unseen = Path::new("/nonexistent-slurm-connector-images");
    let server = Server::start(deployment(&env, unseen)).await;
    let mut c = server.client().await;
    c.create_task(mock_request(FIXTURE))
        .await
        .expect("submitted: the connector cannot see the path");
    // The mock runs the rendered script: its check stops the job before srun, saying why.
    let want = format!(
        "slurm-connector: the pre-staged image {}/acme+train+2026.11.sqsh (mapped from `ghcr.io/acme/train:2026.11` by the image rule `ghcr.io/acme/*`) does not exist on this node",
        unseen.display()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = std::fs::read_dir(env.jobs())
            .ok()
            .into_iter()
            .flatten()
            .any(|e| std::fs::read_to_string(e.unwrap().path()).is_ok_and(|t| t.contains(&want)));
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no job log says `{want}`: {:?}",
            std::fs::read_dir(env.jobs()).map(|d| d
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect::<Vec<_>>())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.stop().await;
    env.stop().await;
}
