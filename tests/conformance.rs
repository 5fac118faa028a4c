//! Conformance with a real client: the official `flyteidl2` + `grpcio` stubs from PyPI drive the
//! real `slurm-connector serve` binary (tests/conformance/conformance.py): ListConnectors, health,
//! CreateTask with every SDK fixture (and again: idempotent), GetTask to a terminal phase,
//! GetTaskLogs, DeleteTask, a cancel mid-run. On the embedded default, and on the real dev cluster
//! when its environment is exported. `.ci/run` provides the Python (SLURM_CONNECTOR_PYTHON).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;
use common::skip::{Tier, skip};

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python() -> Option<PathBuf> {
    match std::env::var_os("SLURM_CONNECTOR_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            skip(
                Tier::Python,
                "set SLURM_CONNECTOR_PYTHON to a python with `pip install flyteidl2 grpcio` \
                 (.ci/run does) to run the conformance script",
            );
            None
        }
    }
}

fn serve(envs: &[(&str, &str)], clear_cluster_env: bool) -> (Serve, u16, PathBuf) {
    let port = free_port();
    let data = std::env::temp_dir().join(format!("sc-conformance-{}-{port}", std::process::id()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .env("FLYTE_SLURM_POLL_INTERVAL", "1s")
        // The stubs check answers CreateTask gives when its submit is done (Slurm's refusal, a
        // repeated CreateTask's same job): the longest wait the backend's 10 s allows, so a
        // loaded machine's slow submit is not answered deferred (seen in a CI dry run; the
        // deferred protocol has tests of its own: service_replicas, real_replicas).
        .env("FLYTE_SLURM_SUBMIT_WAIT", "9s")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if clear_cluster_env {
        for (k, _) in std::env::vars() {
            if k.starts_with("FLYTE_SLURM_") && k != "FLYTE_SLURM_DATA_DIR" {
                cmd.env_remove(k);
            }
        }
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = Serve(cmd.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, port, data)
}

fn run_script(py: &Path, port: u16, extra: &[&str]) {
    run_script_with(py, port, &["--expect", "script_no_io=SUCCEEDED"], extra)
}

fn run_script_with(py: &Path, port: u16, expect: &[&str], extra: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(py)
        .arg(root.join("tests/conformance/conformance.py"))
        .args(["--address", &format!("127.0.0.1:{port}")])
        .args([
            "--fixtures",
            root.join("tests/fixtures/requests").to_str().unwrap(),
        ])
        .args(["--partition", ""])
        // The fixtures ask for 2 nodes / 32 CPUs; one small node runs them with these.
        .args([
            "--sbatch-option",
            "nodes=1",
            "--sbatch-option",
            "ntasks-per-node=1",
        ])
        .args(["--sbatch-option", "cpus-per-task=1"])
        .args(expect)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "conformance failed:\n{stdout}");
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        last.ends_with(" 0 failed") && !last.starts_with("0 passed"),
        "{last}"
    );
}

#[test]
fn official_stubs_against_the_embedded_default() {
    let Some(py) = python() else { return };
    let (_serve, port, data) = serve(&[], true);
    run_script(&py, port, &[]);
    let _ = std::fs::remove_dir_all(data);
}

/// The same suite over TLS, as Flyte's backend connects with `insecure: false` (TLS, the server
/// verified against trusted roots, no client certificate): the embedded default with
/// FLYTE_SLURM_TLS_CERT_FILE/_KEY_FILE, health included, and a plaintext client refused.
#[test]
fn official_stubs_over_tls() {
    let Some(py) = python() else { return };
    let Some(ca) = common::tls::TestCa::new("conformance") else {
        return;
    };
    let (cert, key) = ca.server_cert("localhost");
    let (_serve, port, data) = serve(
        &[
            ("FLYTE_SLURM_TLS_CERT_FILE", cert.to_str().unwrap()),
            ("FLYTE_SLURM_TLS_KEY_FILE", key.to_str().unwrap()),
        ],
        true,
    );
    run_script(&py, port, &["--tls-ca", ca.ca.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(data);
}

#[test]
fn official_stubs_against_the_real_dev_cluster() {
    let Some(py) = python() else { return };
    if std::env::var_os("SLURM_DEV_CLUSTER_ROOT").is_none()
        || std::env::var_os("FLYTE_SLURM_RESTD_URL").is_none()
    {
        skip(
            Tier::Cluster,
            "no dev cluster environment (eval \"$(deploy/dev-cluster/dev-cluster env)\")",
        );
        return;
    }
    let (_serve, port, _data) = serve(&[], false);
    // The dev cluster has no GPUs and declares no memory: what asks for them must be refused by
    // Slurm itself and surface as INVALID_ARGUMENT quoting Slurm's error.
    run_script(
        &py,
        port,
        &[
            // The node declares RealMemory=1 (MB): a script's `#SBATCH --mem=2G` cannot fit.
            "--sbatch-option",
            "mem=1",
            "--expect",
            "native_apptainer_gpu=REFUSED",
            "--expect",
            "native_pyxis_gpu=REFUSED",
            "--expect",
            "script_job_upload=REFUSED",
        ],
    );
}

/// Identity rules through the official stubs (issue 15): project `conf-ml` is mapped to Slurm
/// user alice (account physics) and runs as her; project `conf-etl` matches no rule and the
/// default denies: PERMISSION_DENIED. Needs the dev cluster's users (`lib/identities.sh`).
#[test]
fn official_stubs_drive_one_mapped_and_one_refused_task() {
    let Some(py) = python() else { return };
    if std::env::var_os("SLURM_DEV_CLUSTER_ROOT").is_none()
        || std::env::var_os("FLYTE_SLURM_RESTD_URL").is_none()
    {
        skip(
            Tier::Accounting,
            "no dev cluster environment (eval \"$(deploy/dev-cluster/dev-cluster env)\")",
        );
        return;
    }
    let url = std::env::var("FLYTE_SLURM_RESTD_URL").unwrap();
    let dir = std::env::temp_dir().join(format!("sc-conformance-id-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("connector.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[clusters.default]
restd_url = "{url}"

[[clusters.default.identities]]
project = "conf-ml"
slurm_user = "alice"
account = "physics"
partitions = ["debug"]

[clusters.default.identity_default]
action = "deny"
"#
        ),
    )
    .unwrap();
    let (_serve, port, _data) = serve(
        &[
            ("FLYTE_SLURM_CONFIG", config.to_str().unwrap()),
            ("FLYTE_SLURM_CLUSTER_NAME", "default"),
            // Each user's files in their own directory (`{user}`), readable by the connector.
            ("FLYTE_SLURM_WORKING_DIR", "/shared/{user}"),
        ],
        false,
    );
    run_script_with(
        &py,
        port,
        &[],
        &[
            "--only-identities",
            "--mapped",
            "conf-ml=alice",
            "--denied",
            "conf-etl",
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Flyte 1 through the official flyteidl 1.16 stubs (tests/conformance/conformance_flyte1.py):
/// ListAgents, CreateTask/GetTask/GetTaskLogs/DeleteTask of `slurm_fn` and `slurm`, a missing
/// script refused, a cancel mid-run. `data/shared` is the embedded cluster's shared filesystem.
fn run_flyte1_script(py: &Path, port: u16, script_dir: &str, host_dir: &str, partition: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(py)
        .arg(root.join("tests/conformance/conformance_flyte1.py"))
        .args(["--address", &format!("127.0.0.1:{port}")])
        .args([
            "--fixtures",
            root.join("tests/fixtures/flyte1").to_str().unwrap(),
        ])
        .args(["--script-dir", script_dir, "--host-script-dir", host_dir])
        .args(["--partition", partition])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "Flyte 1 conformance failed:\n{stdout}"
    );
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        last.ends_with(" 0 failed") && !last.starts_with("0 passed"),
        "{last}"
    );
}

#[test]
fn official_flyte1_stubs_against_the_embedded_default() {
    let Some(py) = python() else { return };
    let (_serve, port, data) = serve(&[], true);
    let dir = data.join("shared/flyte1-conformance");
    let dir = dir.to_str().unwrap();
    run_flyte1_script(&py, port, dir, dir, "");
    let _ = std::fs::remove_dir_all(data);
}

#[test]
fn official_flyte1_stubs_against_the_real_dev_cluster() {
    let Some(py) = python() else { return };
    let Some(root) = std::env::var_os("SLURM_DEV_CLUSTER_ROOT") else {
        skip(
            Tier::Cluster,
            "no dev cluster environment (eval \"$(deploy/dev-cluster/dev-cluster env)\")",
        );
        return;
    };
    if std::env::var_os("FLYTE_SLURM_RESTD_URL").is_none() {
        skip(Tier::Cluster, "FLYTE_SLURM_RESTD_URL is not set");
        return;
    }
    let (_serve, port, _data) = serve(&[], false);
    let dir = "/shared/flyte/flyte1-conformance";
    let host = PathBuf::from(root).join(dir.trim_start_matches('/'));
    run_flyte1_script(&py, port, dir, host.to_str().unwrap(), "debug");
}
