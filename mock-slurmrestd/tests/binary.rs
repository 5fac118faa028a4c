//! The `mock-slurmrestd` binary: `--api-versions` and `--slurm-version` as a user passes them.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::KEY;

struct Running {
    child: Child,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &std::path::Path, args: &[&str]) -> Running {
    let key = dir.join("jwt.key");
    std::fs::write(&key, KEY).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-slurmrestd"))
        .args(["--listen", "127.0.0.1:0", "--jwt-key"])
        .arg(&key)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "mock-slurmrestd listening on http://127.0.0.1:PORT (API versions ...)"
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    Running { child, url }
}

async fn ping_status(url: &str, version: &str) -> u16 {
    let token = mock_slurmrestd::mint_token(KEY, "flyte", std::time::Duration::from_secs(60));
    reqwest::Client::new()
        .get(format!("{url}/slurm/{version}/ping/"))
        .header("X-SLURM-USER-TOKEN", token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn api_versions_flag_selects_the_served_versions() {
    let dir = tempfile::tempdir().unwrap();
    let m = spawn(
        dir.path(),
        &[
            "--api-versions",
            "v0.0.46,v0.0.42",
            "--slurm-version",
            "26.05",
        ],
    );
    assert_eq!(ping_status(&m.url, "v0.0.42").await, 200);
    assert_eq!(ping_status(&m.url, "v0.0.46").await, 200);
    assert_eq!(ping_status(&m.url, "v0.0.43").await, 404);
    assert_eq!(ping_status(&m.url, "v0.0.40").await, 404);

    // Without the flag: every version.
    let all = spawn(dir.path(), &[]);
    for v in mock_slurmrestd::ApiVersion::ALL {
        assert_eq!(ping_status(&all.url, v.as_str()).await, 200, "{v}");
    }
}

#[test]
fn a_bad_api_version_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("jwt.key");
    std::fs::write(&key, KEY).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mock-slurmrestd"))
        .args(["--listen", "127.0.0.1:0", "--jwt-key"])
        .arg(&key)
        .args(["--api-versions", "v0.0.42,v0.0.39"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"v0.0.39\""), "{err}");
    assert!(err.contains("v0.0.46"), "{err}");
}
