//! Local object-store emulators the staging tests start on a loopback port (moto's S3 server,
//! which also serves GCS's XML API, and Azurite), and the output round trip they all run through
//! the production code path (`outputs::start` on both staging backends,
//! `objstore::open`/`upload_reader` underneath).
//!
//! `.ci/run` installs the emulators and puts them on PATH; a test that cannot find its emulator
//! skips through `common::skip`, which fails instead when CI requires the tier.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;
use slurm_connector::staging::objstore;
use slurm_connector::staging::outputs::{self, output_uri};
use slurm_connector::staging::{
    Ceiling, DeclaredOutput, Dimensionality, OutputKind, TransferOutcome, UploadMode,
};

use super::staging::Fixture;

/// An emulator process, killed when the test ends (also on a panic).
pub struct Emulator {
    child: Child,
    /// Its working folder (Azurite writes its debug log and extents beside it), removed on drop.
    dir: PathBuf,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `exe` in one of PATH's folders.
pub fn find_on_path(exe: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(exe))
        .find(|p| p.is_file())
}

/// Starts `exe args` in a fresh folder and waits until `endpoint` answers any HTTP request (an
/// error status counts: the server is up), for at most a minute.
pub async fn start(name: &str, exe: &Path, args: &[String], endpoint: &str) -> Emulator {
    let dir = super::fresh_dir(name);
    let child = Command::new(exe)
        .args(args)
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
    let emulator = Emulator { child, dir };
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("{endpoint}/")).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "{name} did not come up on {endpoint} within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    emulator
}

/// moto's standalone server (`moto_server`, from `pip install 'moto[server]'`) on `endpoint`'s
/// port, with an empty bucket `bucket` made through its S3 API (object_store creates none).
pub async fn moto(exe: &Path, port: u16, bucket: &str) -> Emulator {
    let endpoint = format!("http://127.0.0.1:{port}");
    let args = ["-H", "127.0.0.1", "-p", &port.to_string()].map(String::from);
    let moto = start("moto", exe, &args, &endpoint).await;
    create_bucket(&endpoint, bucket).await;
    moto
}

/// moto's server as [`moto`] starts it, but answering one request at a time (werkzeug's server
/// unthreaded, which also closes each connection after its answer). moto checks a conditional
/// PUT's `If-None-Match` and then writes, on a thread per request: two PUTs racing for one key
/// can both pass the check, where S3 makes the check and the write one step. Served one at a
/// time, moto stands for S3 in a test of concurrent conditional writes. Started through the
/// interpreter of `exe` (its `#!` line), with moto's own `main` and only `threaded` changed.
pub async fn moto_one_request_at_a_time(exe: &Path, port: u16, bucket: &str) -> Emulator {
    let endpoint = format!("http://127.0.0.1:{port}");
    let script = std::fs::read_to_string(exe).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let python = script
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("#!"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{}: no #! line naming its Python", exe.display()));
    let code = "import moto.server as s, werkzeug.serving as w\n\
                s.run_simple = lambda *a, **k: w.run_simple(*a, **{**k, 'threaded': False})\n\
                s.main()";
    let args = ["-c", code, "-H", "127.0.0.1", "-p", &port.to_string()].map(String::from);
    let moto = start("moto", Path::new(python), &args, &endpoint).await;
    create_bucket(&endpoint, bucket).await;
    moto
}

async fn create_bucket(endpoint: &str, bucket: &str) {
    let created = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(
        created.status().is_success(),
        "create bucket {bucket}: {}",
        created.status()
    );
}

/// The `ETag` of the object at `<endpoint>/<key>` on an S3-style server (moto checks no
/// signature on a HEAD); a multipart upload's ends in `-<parts>`.
pub async fn etag(endpoint: &str, key: &str) -> String {
    let head = reqwest::Client::new()
        .head(format!("{endpoint}/{key}"))
        .send()
        .await
        .unwrap();
    assert!(head.status().is_success(), "HEAD {key}: {}", head.status());
    head.headers()["etag"].to_str().unwrap().to_string()
}

/// 20 MiB: above `objstore::PART_SIZE` (8 MiB), so `upload_reader` sends it as a multipart upload
/// of three parts.
pub fn big_file() -> Vec<u8> {
    (0..20 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect()
}

/// The outputs of one job, as `outputs::start` receives them: a 20 MiB file and a directory of
/// several files, nested, one with a name that needs percent-encoding.
pub fn write_job_outputs(fx: &Fixture, big: &[u8]) {
    fx.write("/cluster/shared/j.outputs/model", big);
    fx.write("/cluster/shared/j.outputs/ckpt/a.txt", "a");
    fx.write("/cluster/shared/j.outputs/ckpt/sub/b c#.txt", "bc");
    fx.write(
        "/cluster/shared/j.outputs/ckpt/sub/deeper/c.json",
        "{\"c\":3}",
    );
}

fn declared(name: &str, kind: OutputKind, prefix: &str) -> DeclaredOutput {
    DeclaredOutput {
        name: name.into(),
        kind,
        upload: UploadMode::Connector,
        written_to: format!("/cluster/shared/j.outputs/{name}"),
        uri: output_uri(prefix, name),
    }
}

/// Uploads the job's outputs under `<base>/<backend>` through both staging backends (local and
/// the stager sidecar), reads every object back through `objstore::open`, checks the
/// `output_upload='job'` path (the objects exist, a missing one is reported), and that a
/// destination in the bucket/container `missing` (which does not exist) fails with a message
/// naming it. `secrets` must appear in no message.
pub async fn outputs_round_trip(base: &str, missing: &str, secrets: &[&str]) {
    let fx = Fixture::new("emulator");
    let big = big_file();
    write_job_outputs(&fx, &big);
    let scheme = base.split("://").next().unwrap();
    for (name, s) in fx.backends().await {
        let prefix = format!("{base}/{name}");
        let decls = vec![
            declared("model", OutputKind::File, &prefix),
            declared("ckpt", OutputKind::Dir, &prefix),
        ];
        let outcome = outputs::start(s.clone(), "5".into(), decls, Ok(Ceiling::Unlimited))
            .wait()
            .await;
        let TransferOutcome::Succeeded(blobs) = outcome else {
            panic!("{prefix}: {outcome:?}")
        };
        assert_eq!(blobs[0].uri, format!("{prefix}/model"));
        assert_eq!(blobs[1].dimensionality, Dimensionality::Multipart);

        let get = |uri: String| async move {
            let d = objstore::open(&uri).unwrap();
            let got = d.store.get(&d.path).await;
            got.unwrap_or_else(|e| panic!("get {uri}: {e}"))
                .bytes()
                .await
                .unwrap()
        };
        assert!(
            get(format!("{prefix}/model")).await == big,
            "{prefix}: model bytes"
        );
        assert_eq!(&get(format!("{prefix}/ckpt/a.txt")).await[..], b"a");
        let odd = objstore::join_uri(&format!("{prefix}/ckpt"), "sub/b c#.txt");
        assert_eq!(&get(odd).await[..], b"bc");
        assert_eq!(
            &get(format!("{prefix}/ckpt/sub/deeper/c.json")).await[..],
            b"{\"c\":3}"
        );
        // Exactly the directory's files, nothing else under it.
        let d = objstore::open(&format!("{prefix}/ckpt")).unwrap();
        let mut keys: Vec<String> =
            futures::StreamExt::collect::<Vec<_>>(d.store.list(Some(&d.path)))
                .await
                .into_iter()
                .map(|m| m.unwrap().location.to_string())
                .collect();
        keys.sort();
        // Each key as objstore::open makes it from the file's URI (the odd name round-trips).
        let want: Vec<String> = ["a.txt", "sub/b c#.txt", "sub/deeper/c.json"]
            .map(|rel| {
                let uri = objstore::join_uri(&format!("{prefix}/ckpt"), rel);
                objstore::open(&uri).unwrap().path.to_string()
            })
            .to_vec();
        assert_eq!(keys, want, "{prefix}/ckpt");

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
            "{prefix}: {ok:?}"
        );
        let not_there = outputs::start(
            s.clone(),
            "5".into(),
            vec![check(format!("{prefix}/nothing"), OutputKind::Dir)],
            Ok(Ceiling::default()),
        )
        .wait()
        .await;
        let TransferOutcome::Failed(m) = not_there else {
            panic!("{prefix}: {not_there:?}")
        };
        assert!(m.contains("was not uploaded"), "{prefix}: {m}");

        // A bucket/container that does not exist: the file (single PUT) and the large file
        // (multipart) each fail with a message that names it.
        for (output, kind) in [("ckpt", OutputKind::Dir), ("model", OutputKind::File)] {
            let decl = declared(output, kind, &format!("{scheme}://{missing}/runs/{name}"));
            let outcome = outputs::start(s.clone(), "5".into(), vec![decl], Ok(Ceiling::default()))
                .wait()
                .await;
            let TransferOutcome::Failed(m) = outcome else {
                panic!("{scheme}://{missing}: {outcome:?}")
            };
            println!("{name}, missing bucket, {output}: {m}");
            assert!(
                m.contains(&format!("'{missing}' does not exist")),
                "{name}: the message names the missing bucket: {m}"
            );
            for secret in secrets {
                assert!(
                    !m.contains(secret),
                    "{name}: a credential in the message: {m}"
                );
            }
        }
    }
}
