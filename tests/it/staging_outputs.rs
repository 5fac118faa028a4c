//! Declared outputs through both backends into a `file://` object store: blobs, failures as
//! data (missing, oversized, malformed ceiling, escaping symlinks, unwritable store), cancel.

use crate::common;
use common::staging as support;

use std::time::Duration;

use slurm_connector::config::{DeploymentConfig, UploadLimit};
use slurm_connector::staging::outputs::{self, output_uri};
use slurm_connector::staging::{
    Ceiling, DeclaredOutput, Dimensionality, OutputKind, Staging, StagingError, TransferOutcome,
    UploadMode,
};
use support::Fixture;

/// A malformed FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES as the service hands it to the transfer: the
/// configuration keeps the message, the service fails the upload with it.
fn malformed_ceiling(value: &str) -> Result<Ceiling, StagingError> {
    let cfg = DeploymentConfig::load_with(
        &|k| (k == "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES").then(|| value.to_string()),
        None,
    )
    .unwrap();
    match cfg.upload_max_bytes {
        UploadLimit::Malformed(message) => Err(StagingError::Config {
            var: "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES",
            message,
        }),
        other => panic!("{value:?} parsed as {other:?}"),
    }
}

fn decl(
    name: &str,
    kind: OutputKind,
    upload: UploadMode,
    written_to: &str,
    uri: String,
) -> DeclaredOutput {
    DeclaredOutput {
        name: name.into(),
        kind,
        upload,
        written_to: written_to.into(),
        uri,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_land_in_a_file_store_with_the_right_blobs() {
    let fx = Fixture::new("outputs");
    let big: Vec<u8> = (0..20 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect(); // > one part
    fx.write("/cluster/shared/j.outputs/model", &big);
    fx.write("/cluster/shared/j.outputs/ckpt/a.txt", "a");
    fx.write("/cluster/shared/j.outputs/ckpt/sub/b c.txt", "bc");
    fx.write("/cluster/shared/j.outputs/ckpt/empty", "");
    // Many small files: each is its own upload (a long poll each through the sidecar).
    for i in 0..200 {
        fx.write(
            &format!("/cluster/shared/j.outputs/ckpt/many/f{i:03}"),
            format!("{i}"),
        );
    }
    for (name, s) in fx.backends().await {
        let prefix = fx.store_uri(&format!("run-{name}"));
        let decls = vec![
            decl(
                "model",
                OutputKind::File,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/model",
                output_uri(&prefix, "model"),
            ),
            decl(
                "ckpt",
                OutputKind::Dir,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/ckpt/",
                output_uri(&prefix, "ckpt"),
            ),
        ];
        let t = outputs::start(
            s.clone(),
            "42".into(),
            decls,
            Ok(Ceiling::Bytes(50_000_000)),
        );
        let outcome = t.wait().await;
        let TransferOutcome::Succeeded(blobs) = outcome else {
            panic!("{name}: {outcome:?}")
        };
        assert_eq!(blobs.len(), 2);
        assert_eq!(
            (blobs[0].name.as_str(), blobs[0].dimensionality),
            ("model", Dimensionality::Single)
        );
        assert_eq!(blobs[0].uri, format!("{prefix}/model"));
        assert_eq!(
            (blobs[1].name.as_str(), blobs[1].dimensionality),
            ("ckpt", Dimensionality::Multipart)
        );
        assert_eq!(blobs[1].uri, format!("{prefix}/ckpt"));
        let many: u64 = (0..200).map(|i: u32| i.to_string().len() as u64).sum();
        let total = big.len() as u64 + 3 + many;
        assert_eq!(t.progress(), (total, total), "{name}");
        let base = fx.store_path(&format!("run-{name}"));
        assert!(
            std::fs::read(base.join("model")).unwrap() == big,
            "{name}: model content"
        );
        assert_eq!(
            std::fs::read_to_string(base.join("ckpt/a.txt")).unwrap(),
            "a"
        );
        assert_eq!(
            std::fs::read_to_string(base.join("ckpt/sub/b c.txt")).unwrap(),
            "bc"
        );
        assert_eq!(std::fs::read(base.join("ckpt/empty")).unwrap(), b"");
        assert_eq!(
            std::fs::read_to_string(base.join("ckpt/many/f199")).unwrap(),
            "199"
        );
        assert_eq!(
            std::fs::read_dir(base.join("ckpt/many")).unwrap().count(),
            200
        );
    }
}

/// Any replica's GetTask uploads a finished job's outputs (each keeps its transfers in memory),
/// so the second replica to ask finds them published: it does not write the final keys again.
/// An object older than the job's file (an earlier attempt's) is replaced. Both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_another_replica_published_is_not_uploaded_again() {
    let fx = Fixture::new("published");
    fx.write("/cluster/shared/j.outputs/model", "the model");
    for (name, s) in fx.backends().await {
        let prefix = fx.store_uri(&format!("run-{name}"));
        let decls = vec![decl(
            "model",
            OutputKind::File,
            UploadMode::Connector,
            "/cluster/shared/j.outputs/model",
            output_uri(&prefix, "model"),
        )];
        let upload = || {
            outputs::start(
                s.clone(),
                "42".into(),
                decls.clone(),
                Ok(Ceiling::Bytes(1_000_000)),
            )
        };
        let first = upload().wait().await;
        assert!(
            matches!(first, TransferOutcome::Succeeded(_)),
            "{name}: {first:?}"
        );
        let target = fx.store_path(&format!("run-{name}")).join("model");
        // Mark the published object (same size, written after the job's file): a second
        // replica's upload leaves it as it is.
        std::fs::write(&target, "THE MODEL").unwrap();
        let second = upload().wait().await;
        assert!(
            matches!(second, TransferOutcome::Succeeded(_)),
            "{name}: {second:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "THE MODEL",
            "{name}: not rewritten"
        );
        // The job's file is newer than the object (a rerun wrote it): uploaded again.
        tokio::time::sleep(Duration::from_millis(20)).await;
        fx.write("/cluster/shared/j.outputs/model", "the model");
        let third = upload().wait().await;
        assert!(
            matches!(third, TransferOutcome::Succeeded(_)),
            "{name}: {third:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "the model",
            "{name}: replaced"
        );
    }
}

async fn failed_message(
    s: std::sync::Arc<dyn Staging>,
    decls: Vec<DeclaredOutput>,
    ceiling: Result<Ceiling, StagingError>,
) -> String {
    match outputs::start(s, "42".into(), decls, ceiling).wait().await {
        TransferOutcome::Failed(m) => m,
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_failures_are_terminal_messages() {
    let fx = Fixture::new("outfail");
    fx.write("/cluster/shared/j.outputs/big", vec![1u8; 2000]);
    fx.write("/cluster/shared/j.outputs/dir/f", vec![1u8; 600]);
    fx.write("/cluster/shared/j.outputs/dir/g", vec![1u8; 600]);
    fx.write("/cluster/shared/j.outputs/sneaky/ok", "ok");
    fx.symlink(
        fx.tmp.path().join("outside/secret"),
        "/cluster/shared/j.outputs/sneaky/s",
    );
    std::fs::write(fx.store_path("uploaded-by-job"), "x").unwrap();
    std::fs::create_dir_all(fx.store_path("dir-by-job")).unwrap();
    std::fs::write(fx.store_path("dir-by-job/part0"), "x").unwrap();
    for (name, s) in fx.backends().await {
        let uri = |n: &str| fx.store_uri(&format!("{name}/{n}"));
        // Missing output: named, with the path and the env var.
        let m = failed_message(
            s.clone(),
            vec![decl(
                "metrics",
                OutputKind::File,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/metrics",
                uri("metrics"),
            )],
            Ok(Ceiling::default()),
        )
        .await;
        assert!(
            m.contains("Output 'metrics' of Slurm job 42 was not written")
                && m.contains("/cluster/shared/j.outputs/metrics")
                && m.contains("FLYTE_OUTPUT_METRICS"),
            "{name}: {m}"
        );
        // Kind mismatch.
        let m = failed_message(
            s.clone(),
            vec![decl(
                "big",
                OutputKind::Dir,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/big",
                uri("big"),
            )],
            Ok(Ceiling::default()),
        )
        .await;
        assert!(m.contains("declared as a directory"), "{name}: {m}");
        // Oversized file, and a directory whose total is oversized.
        let m = failed_message(
            s.clone(),
            vec![decl(
                "big",
                OutputKind::File,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/big",
                uri("big"),
            )],
            Ok(Ceiling::Bytes(1000)),
        )
        .await;
        assert!(
            m.contains("Output 'big' of Slurm job 42 is 2 kB, above the 1 kB")
                && m.contains("output_upload='job'")
                && m.contains("FLYTE_OUTPUT_BIG"),
            "{name}: {m}"
        );
        let m = failed_message(
            s.clone(),
            vec![decl(
                "dir",
                OutputKind::Dir,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/dir",
                uri("dir"),
            )],
            Ok(Ceiling::Bytes(1000)),
        )
        .await;
        assert!(
            m.contains("Output 'dir' of Slurm job 42 is 1.2 kB")
                && m.contains("output_upload='job'"),
            "{name}: {m}"
        );
        assert!(
            !fx.store_path(&format!("{name}/big")).exists()
                && !fx.store_path(&format!("{name}/dir")).exists()
        );
        // Unlimited moves it.
        let ok = outputs::start(
            s.clone(),
            "42".into(),
            vec![decl(
                "big",
                OutputKind::File,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/big",
                uri("big"),
            )],
            Ok(Ceiling::Unlimited),
        )
        .wait()
        .await;
        assert!(
            matches!(ok, TransferOutcome::Succeeded(_)),
            "{name}: {ok:?}"
        );
        // A malformed ceiling fails the task, naming the variable.
        let m = failed_message(
            s.clone(),
            vec![decl(
                "big",
                OutputKind::File,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/big",
                uri("big2"),
            )],
            malformed_ceiling("100 megs"),
        )
        .await;
        assert!(
            m.contains("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES") && m.contains("100 megs"),
            "{name}: {m}"
        );
        // A directory output with an escaping symlink is refused, naming the output.
        let m = failed_message(
            s.clone(),
            vec![decl(
                "sneaky",
                OutputKind::Dir,
                UploadMode::Connector,
                "/cluster/shared/j.outputs/sneaky",
                uri("sneaky"),
            )],
            Ok(Ceiling::default()),
        )
        .await;
        assert!(
            m.contains("Output 'sneaky'") && m.contains("refused"),
            "{name}: {m}"
        );
        // upload "job": present → blob; missing → named failure; bad URI → named failure.
        let ok = outputs::start(
            s.clone(),
            "42".into(),
            vec![
                decl(
                    "f",
                    OutputKind::File,
                    UploadMode::Job,
                    "",
                    fx.store_uri("uploaded-by-job"),
                ),
                decl(
                    "d",
                    OutputKind::Dir,
                    UploadMode::Job,
                    "",
                    fx.store_uri("dir-by-job"),
                ),
            ],
            Ok(Ceiling::default()),
        )
        .wait()
        .await;
        let TransferOutcome::Succeeded(blobs) = ok else {
            panic!("{name}: {ok:?}")
        };
        assert_eq!(blobs[1].dimensionality, Dimensionality::Multipart);
        let m = failed_message(
            s.clone(),
            vec![decl(
                "model",
                OutputKind::File,
                UploadMode::Job,
                "",
                fx.store_uri("never-uploaded"),
            )],
            Ok(Ceiling::default()),
        )
        .await;
        assert!(
            m.contains("Output 'model' of Slurm job 42 was not uploaded")
                && m.contains("never-uploaded"),
            "{name}: {m}"
        );
        let m = failed_message(
            s.clone(),
            vec![decl(
                "model",
                OutputKind::File,
                UploadMode::Job,
                "",
                "ftp://nowhere/x".into(),
            )],
            Ok(Ceiling::default()),
        )
        .await;
        assert!(
            m.contains("Output 'model'") && m.contains("ftp://nowhere/x"),
            "{name}: {m}"
        );
    }
}

/// An environmental failure (the destination cannot be written) is a FAILED message, not an
/// error that repeats on every poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_destination_fails_as_data() {
    let fx = Fixture::new("envfail");
    fx.write("/cluster/shared/o/f", "data");
    // A regular file where the destination's parent directory should be.
    std::fs::write(fx.store_path("blocker"), "x").unwrap();
    for (name, s) in fx.backends().await {
        let m = failed_message(
            s,
            vec![decl(
                "f",
                OutputKind::File,
                UploadMode::Connector,
                "/cluster/shared/o/f",
                fx.store_uri("blocker/f"),
            )],
            Ok(Ceiling::default()),
        )
        .await;
        assert!(
            m.starts_with("Uploading /cluster/shared/o/f to"),
            "{name}: {m}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_an_upload_in_flight() {
    let fx = Fixture::new("cancel");
    // Sparse: 4 GiB of zeros that take no disk to read.
    let f = std::fs::File::create(fx.local("/cluster/shared/huge")).unwrap();
    f.set_len(4 << 30).unwrap();
    for (name, s) in fx.backends().await {
        let dest = format!("huge-{name}");
        let t = outputs::start(
            s,
            "42".into(),
            vec![decl(
                "huge",
                OutputKind::File,
                UploadMode::Connector,
                "/cluster/shared/huge",
                fx.store_uri(&dest),
            )],
            Ok(Ceiling::Unlimited),
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while t.progress().0 == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: no progress"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(t.progress().1, 4 << 30);
        t.cancel();
        t.cancel(); // idempotent
        assert_eq!(t.wait().await, TransferOutcome::Cancelled, "{name}");
        assert!(
            t.progress().0 < 4 << 30,
            "{name}: finished before the cancel"
        );
        // The multipart upload was aborted: no object at the destination.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!fx.store_path(&dest).exists(), "{name}");
    }
}
