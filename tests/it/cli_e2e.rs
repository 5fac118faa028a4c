//! The newcomer's path, as the README tells it: `slurm-connector serve` with its embedded default,
//! then one `slurm-connector submit` — through the real binary, end to end (render → submit →
//! track → stage outputs → logs).

use std::process::{Child, Command, Output, Stdio};

use crate::common;
use common::free_port;
use std::time::{Duration, Instant};

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long one `slurm-connector submit` may take here (they take a few seconds): `submit` polls
/// until its job ends, so a stalled job would otherwise hang the test, and CI, for ever.
const CLI_LIMIT: Duration = Duration::from_secs(180);

/// `output()`, bounded by `CLI_LIMIT` (`common::output_within`).
trait OutputWithin {
    fn output_within(&mut self, within: Duration) -> Output;
}

impl OutputWithin for Command {
    fn output_within(&mut self, within: Duration) -> Output {
        common::output_within_sync(self, within)
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_slurm-connector")
}

/// The binary with none of the caller's cluster settings (CI exports the dev cluster's), so it
/// runs the embedded default as a newcomer's would.
fn connector() -> Command {
    let mut cmd = Command::new(bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("FLYTE_SLURM_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn start_serve(data: &std::path::Path) -> (Serve, u16) {
    let port = free_port();
    let child = connector()
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-listen",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .env("FLYTE_SLURM_DATA_DIR", data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let serve = Serve(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    (serve, port)
}

#[test]
fn serve_embedded_then_submit_a_script_with_outputs() {
    let data = std::env::temp_dir().join(format!("sc-cli-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (_serve, port) = start_serve(&data);
    let script = data.join("hello.sbatch");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH --time=5\necho \"hello $FLYTE_INPUT_WHO\"\n\
         echo \"result for $FLYTE_INPUT_WHO\" > \"$FLYTE_OUTPUT_GREETING\"\n\
         mkdir -p \"$FLYTE_OUTPUT_PARTS\"; echo a > \"$FLYTE_OUTPUT_PARTS/a.txt\"\n",
    )
    .unwrap();
    let out = connector()
        .args([
            "submit",
            script.to_str().unwrap(),
            "--connector",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args([
            "--input",
            "who=world",
            "--output",
            "greeting=file",
            "--output",
            "parts=dir",
            "--poll",
            "1",
        ])
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .output_within(CLI_LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "submit failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("SUCCEEDED"), "{stdout}");
    assert!(
        stdout.contains("hello world"),
        "the logs are shown: {stdout}"
    );
    // The outputs landed in the embedded default's local object store.
    let greeting = stdout
        .lines()
        .find_map(|l| l.strip_prefix("output greeting = file://"))
        .unwrap_or_else(|| panic!("no greeting output in {stdout}"));
    assert!(
        greeting.starts_with(data.join("objects").to_str().unwrap()),
        "{greeting}"
    );
    assert_eq!(
        std::fs::read_to_string(greeting).unwrap(),
        "result for world\n"
    );
    let parts = stdout
        .lines()
        .find_map(|l| l.strip_prefix("output parts = file://"))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("{parts}/a.txt")).unwrap(),
        "a\n"
    );
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_failing_script_fails_submit_with_the_stderr_tail() {
    let data = std::env::temp_dir().join(format!("sc-cli-e2e-fail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (_serve, port) = start_serve(&data);
    let script = data.join("boom.sbatch");
    std::fs::write(&script, "#!/bin/bash\necho 'something broke' >&2\nexit 3\n").unwrap();
    let out = connector()
        .args([
            "submit",
            script.to_str().unwrap(),
            "--connector",
            &format!("http://127.0.0.1:{port}"),
            "--poll",
            "1",
        ])
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .output_within(CLI_LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAILED") && stdout.contains("exit code 3"),
        "{stdout}"
    );
    assert!(
        stdout.contains("something broke"),
        "stderr tail in the message: {stdout}"
    );
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn detach_then_cancel_ends_the_job_cancelled() {
    let data = std::env::temp_dir().join(format!("sc-cli-e2e-cancel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (_serve, port) = start_serve(&data);
    let script = data.join("long.sbatch");
    std::fs::write(&script, "#!/bin/bash\necho started\nsleep 300\n").unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let out = connector()
        .args([
            "submit",
            script.to_str().unwrap(),
            "--connector",
            &url,
            "--detach",
        ])
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .output_within(CLI_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let meta = stdout
        .lines()
        .find_map(|l| l.strip_prefix("created: "))
        .unwrap()
        .to_string();
    let out = connector()
        .args(["submit", "--connector", &url, "--cancel", &meta])
        .output_within(CLI_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The backend's view: GetTask reaches ABORTED.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let phase = rt.block_on(async {
        use slurm_connector::proto::connector::GetTaskRequest;
        use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
        let mut c = AsyncConnectorServiceClient::connect(url.clone()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut req = tonic::Request::new(GetTaskRequest { resource_meta: meta.clone().into_bytes(), ..Default::default() });
            req.set_timeout(Duration::from_secs(10));
            let r = c
                .get_task(req)
                .await
                .unwrap()
                .into_inner()
                .resource
                .unwrap();
            if r.phase == slurm_connector::proto::core::task_execution::Phase::Aborted as i32 || Instant::now() > deadline {
                return r.phase;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    assert_eq!(
        phase,
        slurm_connector::proto::core::task_execution::Phase::Aborted as i32
    );
    // Cancelling again is fine: DeleteTask is idempotent.
    let again = connector()
        .args(["submit", "--connector", &url, "--cancel", &meta])
        .output_within(CLI_LIMIT);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn render_prints_the_submit_body_and_refuses_bad_tasks() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requests");
    let out = connector()
        .args([
            "render",
            "--request",
            fixtures.join("script_preprocess.json").to_str().unwrap(),
        ])
        .output_within(CLI_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The script's #SBATCH lines became JSON fields (slurmrestd ignores them in the script).
    assert_eq!(body["job"]["cpus_per_task"], 2);
    assert_eq!(body["job"]["partition"], "cpu");
    assert!(
        body["job"]["environment"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "FLYTE_INPUT_N_SHARDS=4")
    );

    // A reserved option: refused with the error CreateTask would return, nothing printed.
    let mut req: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures.join("script_preprocess.json")).unwrap(),
    )
    .unwrap();
    req["template"]["custom"]["sbatch_options"] =
        serde_json::json!({"output": "/home/u/.ssh/authorized_keys"});
    let bad = std::env::temp_dir().join(format!("sc-render-bad-{}.json", std::process::id()));
    std::fs::write(&bad, serde_json::to_vec(&req).unwrap()).unwrap();
    let out = connector()
        .args(["render", "--request", bad.to_str().unwrap()])
        .output_within(CLI_LIMIT);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("output"), "names the option: {err}");

    // --api-version: the options are checked for that version, whose name the refusal carries.
    req["template"]["custom"]["sbatch_options"] = serde_json::json!({"oom-kill-step": true});
    std::fs::write(&bad, serde_json::to_vec(&req).unwrap()).unwrap();
    let render = |version: &str| {
        connector()
            .args([
                "render",
                "--request",
                bad.to_str().unwrap(),
                "--api-version",
                version,
            ])
            .output()
            .unwrap()
    };
    let out = render("v0.0.42");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["job"]["oom_kill_step"], 1);
    let out = render("v0.0.41");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`--oom-kill-step` needs a job description field that v0.0.41 lacks")
            && err.contains("v0.0.42+ have it"),
        "{err}"
    );
    let out = render("v0.0.39");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("v0.0.39") && err.contains("v0.0.40"), "{err}");
    let _ = std::fs::remove_file(&bad);
}

#[test]
fn render_applies_the_identity_rules() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requests");
    let dir = std::env::temp_dir().join(format!("sc-render-id-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("c.toml");
    // script_preprocess asks for partition `cpu` and account `ml`.
    let write = |partitions: &str| {
        std::fs::write(
            &config,
            format!(
                "[clusters.hpc1]\nrestd_url = \"http://127.0.0.1:9\"\njwt_file = \"/nonexistent\"\n\
                 working_dir = \"/shared/{{user}}/jobs\"\n[[clusters.hpc1.identities]]\n\
                 slurm_user = \"alice\"\naccount = \"physics\"\naccounts = [\"ml\"]\n\
                 partitions = {partitions}\n"
            ),
        )
        .unwrap()
    };
    let render = || {
        connector()
            .args([
                "render",
                "--request",
                fixtures.join("script_preprocess.json").to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    write("[\"cpu\"]");
    let out = render();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["job"]["account"], "ml", "one of the rule's `accounts`");
    assert_eq!(
        body["job"]["current_working_directory"],
        "/shared/alice/jobs"
    );
    write("[\"debug\"]");
    let out = render();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("identities[1]") && err.contains("partition \"cpu\""),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--version` says which build answers: the version, the git commit (this checkout's HEAD, or
/// `unknown` outside one) and the slurmrestd API versions, as `slurm_connector_build_info` does.
#[test]
fn version_names_the_commit_and_the_api_versions() {
    use slurm_connector::build_info::{API_VERSIONS, GIT_HASH, VERSION};
    let out = connector().arg("--version").output_within(CLI_LIMIT);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!("slurm-connector {VERSION} (git {GIT_HASH}; slurmrestd {API_VERSIONS})")
    );
    assert!(API_VERSIONS.starts_with("v0.0.40") && API_VERSIONS.ends_with("v0.0.46"));
    // Built in a checkout: the commit is HEAD's (a stale hash would mislead an operator).
    if let Ok(head) = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        && head.status.success()
    {
        assert_eq!(GIT_HASH, String::from_utf8_lossy(&head.stdout).trim());
    }
}

/// The embedded default runs every job's script on this machine as the user who started it, so
/// with no `--listen` it binds loopback only (gRPC and metrics): 127.0.0.1 answers, another
/// address of this machine (127.0.0.2: the loopback range is all the network a test may use
/// here) is refused, and the banner says so. Binds the default ports 8000 and 9090.
#[test]
fn serve_embedded_listens_on_loopback_only() {
    for port in [8000, 9090] {
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_err() {
            panic!(
                "port {port} is in use here: the embedded default's own port; free it to run this test"
            );
        }
    }
    let data = std::env::temp_dir().join(format!("sc-cli-loopback-{}", std::process::id()));
    let log = data.with_extension("log");
    let child = connector()
        .arg("serve")
        .env("FLYTE_SLURM_DATA_DIR", &data)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _serve = Serve(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", 8000)).is_err() {
        assert!(
            Instant::now() < deadline,
            "serve did not listen on 127.0.0.1:8000"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::net::TcpStream::connect(("127.0.0.1", 9090)).expect("metrics on 127.0.0.1:9090");
    for port in [8000, 9090] {
        let other = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 2], port)),
            Duration::from_secs(5),
        );
        assert!(
            other.is_err(),
            "the embedded default answered on 127.0.0.2:{port}: it must listen on 127.0.0.1 only"
        );
    }
    let banner = std::fs::read_to_string(&log).unwrap();
    assert!(
        banner.contains("gRPC 127.0.0.1:8000") && banner.contains("loopback only"),
        "{banner}"
    );
    drop(_serve);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_file(&log);
}

/// Logs as operators collect them: stderr that is a file (a pod's log) gets plain text, no ANSI
/// codes; `FLYTE_SLURM_LOG_FORMAT=json` gets one JSON object a line with the event's fields at
/// the top level (`cluster` among them); an unknown format stops the start naming the variable.
#[test]
fn logs_are_plain_text_off_a_terminal_and_json_on_request() {
    let run = |format: Option<&str>| -> String {
        let data = std::env::temp_dir().join(format!(
            "sc-cli-logs-{}-{}",
            std::process::id(),
            format.unwrap_or("text")
        ));
        let log = data.with_extension("log");
        let port = free_port();
        let mut cmd = connector();
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
            .env("FLYTE_SLURM_DATA_DIR", &data)
            .env_remove("NO_COLOR")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(f) = format {
            cmd.env("FLYTE_SLURM_LOG_FORMAT", f);
        }
        let serve = Serve(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "serve did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(serve);
        let text = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_dir_all(&data);
        let _ = std::fs::remove_file(&log);
        text
    };
    let text = run(None);
    assert!(text.contains("INFO") && text.contains("cluster"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "ANSI codes in a log file:\n{text}"
    );

    let json = run(Some("json"));
    let events: Vec<serde_json::Value> = json
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!events.is_empty(), "no JSON line in:\n{json}");
    assert!(
        events
            .iter()
            .all(|e| e["level"].is_string() && e["message"].is_string()),
        "{json}"
    );
    assert!(
        events.iter().any(|e| e["cluster"] == "embedded"),
        "no event with a top-level cluster field:\n{json}"
    );

    let out = connector()
        .arg("--version")
        .env("FLYTE_SLURM_LOG_FORMAT", "yaml")
        .output_within(CLI_LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("FLYTE_SLURM_LOG_FORMAT=\"yaml\""),
        "{out:?}"
    );
}
