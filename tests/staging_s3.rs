//! Outputs into a real S3-compatible server: moto's standalone server (`pip install
//! 'moto[server]'`, which provides `moto_server`), started on a loopback port by this test.
//! Without `moto_server` on PATH the test prints why and passes without checking, unless
//! `SLURM_CONNECTOR_REQUIRE_REAL` requires the `s3` tier (CI installs it and does).

mod common;
use common::free_port;
use common::skip::{Tier, skip};
use common::staging as support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;
use slurm_connector::staging::objstore;
use slurm_connector::staging::outputs::{self, output_uri};
use slurm_connector::staging::{
    Ceiling, DeclaredOutput, Dimensionality, OutputKind, TransferOutcome, UploadMode,
};
use support::Fixture;

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn find_on_path(exe: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(exe))
        .find(|p| p.is_file())
}

async fn start_moto(exe: &std::path::Path) -> (Moto, String) {
    let port = free_port();
    let child = Command::new(exe)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let moto = Moto(child);
    let endpoint = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if reqwest::get(format!("{endpoint}/")).await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "moto_server did not come up on {endpoint}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (moto, endpoint)
}

#[test]
fn outputs_upload_to_s3_through_both_backends() {
    let Some(exe) = find_on_path("moto_server") else {
        skip(
            Tier::S3,
            "moto_server is not on PATH; install it with: pip install 'moto[server]'",
        );
        return;
    };
    // object_store reads its S3 settings from the environment, as it will in production. Set
    // before the runtime (and any other thread) exists.
    // SAFETY: single-threaded at this point; this test binary has one test.
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_REGION", "us-east-1");
        std::env::set_var("AWS_ALLOW_HTTP", "true");
        std::env::set_var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_moto, endpoint) = start_moto(&exe).await;
        // SAFETY: object_store reads this only when a store is built, below; no other thread
        // touches the environment.
        unsafe { std::env::set_var("AWS_ENDPOINT", &endpoint) };
        let created = reqwest::Client::new()
            .put(format!("{endpoint}/outputs"))
            .send()
            .await
            .unwrap();
        assert!(
            created.status().is_success(),
            "create bucket: {}",
            created.status()
        );

        let fx = Fixture::new("s3");
        // 20 MiB: a multipart upload of three parts.
        let big: Vec<u8> = (0..20 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
        fx.write("/cluster/shared/j.outputs/model", &big);
        fx.write("/cluster/shared/j.outputs/ckpt/a.txt", "a");
        fx.write("/cluster/shared/j.outputs/ckpt/sub/b c#.txt", "bc");
        for (name, s) in fx.backends().await {
            let prefix = format!("s3://outputs/runs/{name}");
            let decls = vec![
                DeclaredOutput {
                    name: "model".into(),
                    kind: OutputKind::File,
                    upload: UploadMode::Connector,
                    written_to: "/cluster/shared/j.outputs/model".into(),
                    uri: output_uri(&prefix, "model"),
                },
                DeclaredOutput {
                    name: "ckpt".into(),
                    kind: OutputKind::Dir,
                    upload: UploadMode::Connector,
                    written_to: "/cluster/shared/j.outputs/ckpt".into(),
                    uri: output_uri(&prefix, "ckpt"),
                },
            ];
            let outcome = outputs::start(s.clone(), "5".into(), decls, Ok(Ceiling::Unlimited))
                .wait()
                .await;
            let TransferOutcome::Succeeded(blobs) = outcome else {
                panic!("{name}: {outcome:?}")
            };
            assert_eq!(blobs[0].uri, format!("{prefix}/model"));
            assert_eq!(blobs[1].dimensionality, Dimensionality::Multipart);

            let get = |uri: String| async move {
                let d = objstore::open(&uri).unwrap();
                d.store.get(&d.path).await.unwrap().bytes().await.unwrap()
            };
            assert!(
                get(format!("{prefix}/model")).await == big,
                "{name}: model bytes"
            );
            assert_eq!(&get(format!("{prefix}/ckpt/a.txt")).await[..], b"a");
            let odd = objstore::join_uri(&format!("{prefix}/ckpt"), "sub/b c#.txt");
            assert_eq!(&get(odd).await[..], b"bc");

            // upload "job": the objects just written count as uploaded; a missing one fails.
            let check = |uri: String, kind| DeclaredOutput {
                name: "m".into(),
                kind,
                upload: UploadMode::Job,
                written_to: String::new(),
                uri,
            };
            let ok = outputs::start(
                s.clone(),
                "5".into(),
                vec![
                    check(format!("{prefix}/model"), OutputKind::File),
                    check(format!("{prefix}/ckpt"), OutputKind::Dir),
                ],
                Ok(Ceiling::default()),
            )
            .wait()
            .await;
            assert!(
                matches!(ok, TransferOutcome::Succeeded(_)),
                "{name}: {ok:?}"
            );
            let missing = outputs::start(
                s.clone(),
                "5".into(),
                vec![check(format!("{prefix}/nothing"), OutputKind::Dir)],
                Ok(Ceiling::default()),
            )
            .wait()
            .await;
            let TransferOutcome::Failed(m) = missing else {
                panic!("{name}: {missing:?}")
            };
            assert!(m.contains("was not uploaded"), "{name}: {m}");
        }
        println!(
            "staging_s3: moto_server at {endpoint}: file, multipart and directory uploads verified"
        );
    });
}
