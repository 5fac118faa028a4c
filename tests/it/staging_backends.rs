//! The staging interface through both backends — local mount, and the stager sidecar over
//! loopback — with the same assertions: operations, the path-escape corpus, the stager's token.

use crate::common;
use common::staging as support;

use futures::StreamExt;
use slurm_connector::staging::backend::EntryKind;
use slurm_connector::staging::transfer::TransferCtl;
use slurm_connector::staging::{Staging, StagingError};
use support::{Fixture, PREFIX, TOKEN};

async fn read_all(s: &dyn Staging, path: &str) -> Result<Vec<u8>, StagingError> {
    let mut stream = s.read(path).await?;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_behave_the_same_in_both_backends() {
    let fx = Fixture::new("ops");
    fx.write("/cluster/shared/jobs/a.out", "one\ntwo\nthree\n");
    fx.write("/cluster/shared/jobs/out/d/x.bin", vec![7u8; 1000]);
    fx.write("/cluster/shared/jobs/out/d/sub/y.txt", "y");
    fx.write("/cluster/shared/jobs/out/d/with space#1.txt", "s");
    // A symlink to a file inside the root is fine, and walked as a file.
    fx.symlink(
        fx.local("/cluster/shared/jobs/a.out"),
        "/cluster/shared/jobs/out/d/link.out",
    );
    for (name, s) in fx.backends().await {
        let st = s.stat("/cluster/shared/jobs/a.out").await.unwrap().unwrap();
        assert_eq!((st.kind, st.size), (EntryKind::File, 14), "{name}");
        assert!(st.modified_unix.unwrap() > 1_600_000_000, "{name}");
        let d = s.stat("/cluster/shared/jobs/out/d").await.unwrap().unwrap();
        assert_eq!(d.kind, EntryKind::Dir, "{name}");
        assert_eq!(
            s.stat("/cluster/shared/nope").await.unwrap(),
            None,
            "{name}"
        );

        assert_eq!(
            s.tail("/cluster/shared/jobs/a.out", 2)
                .await
                .unwrap()
                .unwrap(),
            "two\nthree",
            "{name}"
        );
        assert_eq!(
            s.tail("/cluster/shared/nope", 2).await.unwrap(),
            None,
            "{name}"
        );

        let walked: Vec<(String, u64)> = s
            .walk("/cluster/shared/jobs/out/d")
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.relative, e.size))
            .collect();
        assert_eq!(
            walked,
            vec![
                ("link.out".to_string(), 14),
                ("sub/y.txt".to_string(), 1),
                ("with space#1.txt".to_string(), 1),
                ("x.bin".to_string(), 1000),
            ],
            "{name}"
        );
        assert!(
            s.walk("/cluster/shared/jobs/a.out")
                .await
                .unwrap_err()
                .is_refused(),
            "{name}"
        );

        assert_eq!(
            read_all(s.as_ref(), "/cluster/shared/jobs/a.out")
                .await
                .unwrap(),
            b"one\ntwo\nthree\n"
        );
        assert!(
            read_all(s.as_ref(), "/cluster/shared/nope")
                .await
                .unwrap_err()
                .is_not_found(),
            "{name}"
        );
        assert!(
            read_all(s.as_ref(), "/cluster/shared/jobs")
                .await
                .unwrap_err()
                .is_refused(),
            "{name}"
        );
    }
    // remove: file, tree, missing; then gone for both views.
    for (name, s) in fx.backends().await {
        fx.write(&format!("/cluster/shared/rm-{name}/f"), "x");
        fx.write(&format!("/cluster/shared/rm-{name}/t/u/v"), "x");
        assert!(
            s.remove(&format!("/cluster/shared/rm-{name}/f"))
                .await
                .unwrap(),
            "{name}"
        );
        assert!(
            s.remove(&format!("/cluster/shared/rm-{name}/t"))
                .await
                .unwrap(),
            "{name}"
        );
        assert!(
            !s.remove(&format!("/cluster/shared/rm-{name}/t"))
                .await
                .unwrap(),
            "{name}"
        );
        assert!(
            !fx.local(&format!("/cluster/shared/rm-{name}/t")).exists(),
            "{name}"
        );
        let e = s.remove(PREFIX).await.unwrap_err();
        assert!(e.is_refused(), "{name}: removing the root itself: {e}");
    }
}

/// The path-escape corpus: each path, through each operation, in both backends, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_corpus_is_refused_in_both_backends() {
    let fx = Fixture::new("escape");
    let secret = fx.tmp.path().join("outside/secret");
    fx.write("/cluster/shared/jobs/ok.txt", "ok");
    fx.symlink(&secret, "/cluster/shared/jobs/link-to-secret");
    fx.symlink(
        fx.tmp.path().join("outside"),
        "/cluster/shared/jobs/dirlink-out",
    );
    fx.symlink("/etc", "/cluster/shared/jobs/etc");
    fx.symlink("../../outside/secret", "/cluster/shared/jobs/relative-link");
    // Directories that look fine but contain an escaping symlink (file, or directory).
    fx.write("/cluster/shared/jobs/out1/fine.txt", "fine");
    fx.symlink(&secret, "/cluster/shared/jobs/out1/sneaky");
    fx.write("/cluster/shared/jobs/out2/fine.txt", "fine");
    fx.symlink(
        fx.tmp.path().join("outside"),
        "/cluster/shared/jobs/out2/nested/subdir-link",
    );
    // A symlink loop inside the root must not hang a walk.
    fx.symlink(
        fx.local("/cluster/shared/jobs/out3"),
        "/cluster/shared/jobs/out3/loop",
    );
    fx.write("/cluster/shared/jobs/out3/f", "f");
    let shared_parent = fx.tmp.path().display().to_string();

    let corpus = [
        "/cluster/shared/../outside/secret".to_string(),
        "/cluster/shared/jobs/../../outside/secret".to_string(),
        "../outside/secret".to_string(),
        "jobs/ok.txt".to_string(),
        "/etc/shadow".to_string(),
        "/etc/passwd".to_string(),
        format!("{shared_parent}/outside/secret"),
        format!("{shared_parent}/shared/jobs/ok.txt"), // the local path, not a cluster path
        "/cluster/shared2/jobs/ok.txt".to_string(),
        "/cluster".to_string(),
        "/cluster/shared/jobs/link-to-secret".to_string(),
        "/cluster/shared/jobs/dirlink-out/secret".to_string(),
        "/cluster/shared/jobs/etc/passwd".to_string(),
        "/cluster/shared/jobs/relative-link".to_string(),
        String::new(),
    ];
    for (name, s) in fx.backends().await {
        for p in &corpus {
            let ctl = TransferCtl::new().0;
            let results: Vec<(&str, Result<(), StagingError>)> = vec![
                ("stat", s.stat(p).await.map(drop)),
                ("tail", s.tail(p, 5).await.map(drop)),
                ("read", read_all(s.as_ref(), p).await.map(drop)),
                ("walk", s.walk(p).await.map(drop)),
                (
                    "upload",
                    s.upload_file(p, &fx.store_uri("leak"), &ctl)
                        .await
                        .map(drop),
                ),
            ];
            for (op, r) in results {
                match r {
                    Err(e) if e.is_refused() => {
                        let msg = e.to_string();
                        assert!(!msg.contains("TOP SECRET"), "{name} {op} {p:?}: {msg}");
                        // Messages show cluster paths, not where a symlink led.
                        if p.starts_with(PREFIX) {
                            assert!(!msg.contains(&shared_parent), "{name} {op} {p:?}: {msg}");
                        }
                    }
                    other => panic!("{name}: {op} {p:?} was not refused: {other:?}"),
                }
            }
        }
        for dir in ["/cluster/shared/jobs/out1", "/cluster/shared/jobs/out2"] {
            let e = s.walk(dir).await.unwrap_err();
            assert!(e.is_refused(), "{name}: walk {dir}: {e}");
        }
        let looped = s.walk("/cluster/shared/jobs/out3").await.unwrap();
        assert_eq!(looped.len(), 1, "{name}: {looped:?}");
        // Removing through an escaping directory symlink is refused; removing a symlink that
        // points out removes the link only.
        assert!(
            s.remove("/cluster/shared/jobs/dirlink-out/secret")
                .await
                .unwrap_err()
                .is_refused()
        );
        assert!(
            s.remove("/cluster/shared/../outside/secret")
                .await
                .unwrap_err()
                .is_refused()
        );
        assert!(secret.exists(), "{name}");
    }
    assert!(!fx.store_path("leak").exists());
    let s = fx.local_backend();
    assert!(
        s.remove("/cluster/shared/jobs/link-to-secret")
            .await
            .unwrap()
    );
    assert!(
        secret.exists(),
        "removing a link must not remove its target"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stager_requires_its_token_and_never_shows_it() {
    use slurm_connector::staging::SidecarStaging;
    use slurm_connector::staging::stager::Token;
    let fx = Fixture::new("auth");
    fx.write("/cluster/shared/f", "x");
    let (good, url) = fx.sidecar_with_url().await;
    assert!(
        !format!("{good:?}").contains(TOKEN),
        "token in Debug output"
    );
    assert!(good.stat("/cluster/shared/f").await.unwrap().is_some());
    let wrong_file = fx.tmp.path().join("wrong.token");
    std::fs::write(&wrong_file, "test-token-7f3a9d").unwrap();
    let wrong = SidecarStaging::with_token(&url, Token::from_file(&wrong_file).unwrap()).unwrap();
    let e = wrong
        .stat("/cluster/shared/f")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bearer token") && !e.contains(TOKEN) && !e.contains("7f3a9d"),
        "{e}"
    );
    let health = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
    let raw = reqwest::get(format!("{url}/v1/stat?path=/cluster/shared/f"))
        .await
        .unwrap();
    assert_eq!(raw.status(), 401);
    // Bad token files are refused at startup, naming the variable.
    std::fs::write(&wrong_file, "").unwrap();
    let e = SidecarStaging::new(&url, &wrong_file)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("FLYTE_SLURM_STAGER_TOKEN_FILE"), "{e}");
    let e = SidecarStaging::new("not a url", &fx.tmp.path().join("stager.token"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("FLYTE_SLURM_STAGER_URL"), "{e}");
}
