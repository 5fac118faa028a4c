//! The claim store (`service::claim`, issue 52) on the backends that need no emulator: a local
//! filesystem (`file://`, object_store's `LocalFileSystem`, as an output prefix opens it) and
//! object_store's in-memory store, through the suite every backend runs
//! (`common::claim::suite`); the start-up probe passing on both and refusing a client that will
//! not write conditionally; a store failure told apart from a conflict. S3 and Azure:
//! tests/emulators/claim.rs.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use slurm_connector::render::ExecutionIdentity;
use slurm_connector::service::claim::{self, ClaimError, ClaimStore, Record, State};

use crate::common;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn local_filesystem_claims_have_one_winner() {
    let root = common::fresh_dir("claim-local");
    runtime().block_on(common::claim::suite("file://", |name| {
        let prefix = format!("file://{}/runs/{name}/a0", root.display());
        let claim = ClaimStore::under_output_prefix(&prefix).unwrap();
        assert_eq!(
            claim.uri(),
            format!("{prefix}/.slurm-connector/claim"),
            "under the output prefix"
        );
        claim
    }));
    // The records are files a person can read, in the claim's folder.
    let dir = root.join("runs/once/a0/.slurm-connector/claim");
    let text = std::fs::read_to_string(dir.join("0000000001.json")).unwrap();
    assert!(text.contains(r#""state":"submitting""#), "{text}");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn in_memory_claims_have_one_winner() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    runtime().block_on(common::claim::suite("memory", |name| {
        ClaimStore::new(
            store.clone(),
            Path::from(format!("runs/{name}/.slurm-connector/claim")),
            format!("memory:///runs/{name}/.slurm-connector/claim"),
        )
    }));
}

#[test]
fn a_connector_owned_prefix_keys_claims_by_identity() {
    let root = common::fresh_dir("claim-owned");
    let prefix = format!("file://{}/claims-root", root.display());
    let id = |action: &str| ExecutionIdentity {
        project: "p".into(),
        domain: "d".into(),
        run_name: "r1".into(),
        action_name: action.into(),
        ..ExecutionIdentity::default()
    };
    let a = ClaimStore::under_connector_prefix(&prefix, &id("a0")).unwrap();
    let again = ClaimStore::under_connector_prefix(&prefix, &id("a0")).unwrap();
    let b = ClaimStore::under_connector_prefix(&prefix, &id("a1")).unwrap();
    assert_eq!(a.uri(), again.uri());
    assert_ne!(a.uri(), b.uri());
    let rest = a.uri().strip_prefix(&format!("{prefix}/claims/")).unwrap();
    assert!(
        rest.len() == 64 && rest.bytes().all(|c| c.is_ascii_hexdigit()),
        "{rest}"
    );
    runtime().block_on(async {
        a.create(Record::new("r", State::Deleted)).await.unwrap();
        assert!(
            b.read().await.unwrap().is_none(),
            "another identity's claim"
        );
        assert!(again.read().await.unwrap().is_some());
    });
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn the_probe_passes_on_the_local_filesystem_and_in_memory_and_cleans_up() {
    let root = common::fresh_dir("claim-probe");
    runtime().block_on(async {
        claim::probe(&format!("file://{}/outputs", root.display()))
            .await
            .unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let c = ClaimStore::new(store.clone(), Path::from("probe/x"), "memory:///probe/x");
        claim::probe_at(&c).await.unwrap();
        assert!(
            c.read().await.unwrap().is_none(),
            "the probe's record removed"
        );
    });
    let probe_dir = root.join("outputs/.slurm-connector/probe");
    let left: Vec<_> = std::fs::read_dir(&probe_dir)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .collect();
    assert!(left.is_empty(), "probe objects left: {left:?}");
    std::fs::remove_dir_all(root).unwrap();
}

/// object_store's S3 client with conditional put disabled (what `AWS_CONDITIONAL_PUT=disabled`
/// sets, for S3-compatible servers without `If-None-Match`) refuses create-if-absent before any
/// request: the probe refuses that store, naming it and the fix. The endpoint is a closed port,
/// so nothing else could have made it pass.
#[test]
fn the_probe_refuses_a_store_that_will_not_write_conditionally() {
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("outputs")
        .with_region("us-east-1")
        .with_endpoint(format!("http://127.0.0.1:{}", common::free_port()))
        .with_allow_http(true)
        .with_access_key_id("AKIDEXAMPLE")
        .with_secret_access_key("probe-secret-key")
        .with_conditional_put(object_store::aws::S3ConditionalPut::Disabled)
        .with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        })
        .build()
        .unwrap();
    let c = ClaimStore::new(
        Arc::new(s3),
        Path::from("runs/.slurm-connector/probe/x"),
        "s3://outputs/runs/.slurm-connector/probe/x",
    );
    let e = runtime().block_on(claim::probe_at(&c)).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ClaimError::NotConditional { .. }), "{msg}");
    for part in [
        "s3://outputs/runs/.slurm-connector/probe/x",
        "does not honour conditional writes",
        "run a single replica",
    ] {
        assert!(msg.contains(part), "{part:?} in {msg}");
    }
    assert!(!msg.contains("probe-secret-key"), "{msg}");
}

/// A store that fails is an outage, not a contest: not a conflict, and named.
#[test]
fn a_store_failure_is_not_a_conflict() {
    let root = common::fresh_dir("claim-broken");
    // A file where the claim's folder would be: every write under it fails.
    std::fs::create_dir_all(root.join("runs/a0")).unwrap();
    std::fs::write(root.join("runs/a0/.slurm-connector"), b"in the way").unwrap();
    let c = ClaimStore::under_output_prefix(&format!("file://{}/runs/a0", root.display())).unwrap();
    let e = runtime()
        .block_on(c.create(Record::new("a", State::Deleted)))
        .unwrap_err();
    assert!(!e.is_conflict(), "{e}");
    assert!(matches!(e, ClaimError::Store { .. }), "{e:?}");
    assert!(e.to_string().contains(c.uri()), "{e}");
    let e = ClaimStore::under_output_prefix("ftp://host/x").unwrap_err();
    assert!(matches!(e, ClaimError::Location(_)), "{e}");
    std::fs::remove_dir_all(root).unwrap();
}

/// A create that meets the very record it writes (object_store retried a conditional PUT whose
/// first attempt had landed) is the writer's own win; a different record there is a conflict.
#[test]
fn a_retried_create_that_meets_its_own_record_wins() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = ClaimStore::new(
        store,
        Path::from("runs/a0/claim"),
        "memory:///runs/a0/claim",
    );
    runtime().block_on(async {
        let mine = Record::new(
            "a",
            State::Submitting {
                lease_secs: 60,
                marker: "fc-test".into(),
                replaces: None,
                index: None,
            },
        );
        let first = c.create(mine.clone()).await.unwrap();
        assert_eq!(c.create(mine.clone()).await.unwrap(), first);
        let h = c.advance(&first, mine.clone()).await.unwrap();
        assert_eq!(c.advance(&first, mine).await.unwrap(), h);
        let other = Record::new("b", State::Deleted);
        assert!(c.advance(&first, other).await.unwrap_err().is_conflict());
    });
}

/// The start-up check (`claim::check_at_start`, what `serve` runs before it contacts a cluster
/// and `check` prints): nothing is probed when claims go under output prefixes and no prefix is
/// named for it; the connector's own prefix, or the one named, is probed.
#[test]
fn the_start_check_probes_the_prefix_the_settings_name() {
    use slurm_connector::config::claims::{ClaimLocation, ClaimSettings};
    use slurm_connector::service::claim::StartCheck;
    let root = common::fresh_dir("claim-start");
    let own = format!("file://{}/connector", root.display());
    let raw = format!("file://{}/raw", root.display());
    runtime().block_on(async {
        let default = claim::check_at_start(&ClaimSettings::default())
            .await
            .unwrap();
        assert_eq!(default, StartCheck::NotProbed);
        assert!(default.to_string().contains("FLYTE_SLURM_CLAIMS_PROBE"));
        let owned = ClaimSettings {
            location: ClaimLocation::Prefix(own.clone()),
            ..ClaimSettings::default()
        };
        assert_eq!(
            claim::check_at_start(&owned).await.unwrap(),
            StartCheck::Conditional { prefix: own }
        );
        let named = ClaimSettings {
            probe: Some(raw.clone()),
            ..ClaimSettings::default()
        };
        assert_eq!(
            claim::check_at_start(&named).await.unwrap(),
            StartCheck::Conditional { prefix: raw }
        );
    });
    assert!(
        root.join("connector/.slurm-connector/probe").exists()
            && root.join("raw/.slurm-connector/probe").exists(),
        "both prefixes were written"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `serve` refuses to start with claims in a store that will not write conditionally (object
/// store's `AWS_CONDITIONAL_PUT=disabled`, as for an S3-compatible server without
/// `If-None-Match`), naming the store and the fix, before it contacts any cluster; `check`'s
/// `claims` row is a ✓ once a single replica is declared. Processes of their own:
/// the `AWS_*` environment is read by the process.
#[test]
fn serve_refuses_claims_in_a_store_without_conditional_writes_unless_single_replica() {
    use std::process::Command;
    let dir = common::fresh_dir("claim-serve");
    let token = dir.join("token");
    std::fs::write(&token, "a.b.c").unwrap();
    let file = dir.join("clusters.toml");
    std::fs::write(
        &file,
        format!(
            "[clusters.hpc1]\nrestd_url = \"http://127.0.0.1:{}\"\njwt_file = \"{}\"\n",
            common::free_port(),
            token.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str], single: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
        for (k, _) in std::env::vars() {
            if k.starts_with("FLYTE_SLURM_") || k.starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(args)
            .env("FLYTE_SLURM_CONFIG", &file)
            .env("FLYTE_SLURM_CLAIMS", "s3://outputs/claims")
            .env("FLYTE_SLURM_SINGLE_REPLICA", single.to_string())
            .env("AWS_CONDITIONAL_PUT", "disabled")
            .env(
                "AWS_ENDPOINT",
                format!("http://127.0.0.1:{}", common::free_port()),
            )
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
            .env("AWS_SECRET_ACCESS_KEY", "claims-secret-key");
        let out = common::output_within_sync(&mut cmd, std::time::Duration::from_secs(60));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let serve = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let (ok, _, err) = run(&serve, false);
    assert!(!ok, "{err}");
    for part in [
        "claims (FLYTE_SLURM_CLAIMS)",
        "s3://outputs/claims/.slurm-connector/probe/",
        "does not honour conditional writes",
        "run a single replica",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    assert!(!err.contains("claims-secret-key"), "{err}");

    let row = |stdout: &str| {
        stdout
            .lines()
            .find(|l| l.contains(" claims "))
            .unwrap_or_else(|| panic!("a claims row in {stdout}"))
            .to_string()
    };
    // `check` runs the same check (its row), here with the single replica declared.
    let (_, out, _) = run(&["check"], true);
    let accepted = row(&out);
    assert!(
        accepted.starts_with('✓')
            && accepted.contains("FLYTE_SLURM_SINGLE_REPLICA=true")
            && accepted.contains("lease 180s"),
        "{accepted}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
