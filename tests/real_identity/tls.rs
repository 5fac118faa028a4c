//! The TLS test of tests/real_identity.rs (tier `tls`): stunnel4 in front of the dev cluster's
//! slurmrestd, with a CA made here; the connector works with `ca_file`, and without it is refused
//! naming the host and the reason.

use std::path::PathBuf;

use slurm_connector::slurmrestd::ClientError;

use super::*;

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A CA and a certificate for `localhost`/127.0.0.1 signed by it (`common::tls`), and stunnel4
/// terminating TLS on a free port in front of `backend`. Returns (port, CA file, the child).
fn tls_terminator(ca: &common::tls::TestCa, backend: u16) -> (u16, PathBuf, Child) {
    let (cert, key) = ca.server_cert("localhost");
    let dir = &ca.dir;
    let port = common::free_port();
    std::fs::write(
        dir.join("stunnel.conf"),
        format!(
            "foreground = yes\npid =\n[slurmrestd]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{backend}\n\
             cert = {cert}\nkey = {key}\n",
            cert = cert.display(),
            key = key.display()
        ),
    )
    .unwrap();
    let child = Child(
        std::process::Command::new("stunnel4")
            .arg(dir.join("stunnel.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("stunnel4"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "stunnel4 did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (port, ca.ca.clone(), child)
}

#[tokio::test]
async fn tls_with_a_private_ca_works_with_ca_file_and_is_refused_without() {
    let Some(c) = cluster() else { return };
    if !common::tls::on_path("stunnel4") {
        skip(
            Tier::Tls,
            "stunnel4 is not on PATH (`apt-get install -y stunnel4 openssl`)",
        );
        return;
    }
    let Some(test_ca) = common::tls::TestCa::new("id-tls") else {
        return;
    };
    let _one = SERIAL.lock().await;
    let (port, ca, _stunnel) = tls_terminator(&test_ca, c.url.port().unwrap());
    let mut d = deployment(
        &c,
        vec![rule("ml", "alice", "physics")],
        DefaultAction::Deny,
    );
    let url: url::Url = format!("https://localhost:{port}").parse().unwrap();

    // Without the CA: refused, naming the host and why, and `serve` does not start.
    let mut plain = d.clone();
    plain.clusters.get_mut(&c.name).unwrap().restd_url = url.clone();
    let rt = ClusterRuntime::build(
        plain.clusters[&c.name].clone(),
        TrackerConfig::default(),
        None,
        None,
    )
    .unwrap();
    let e = rt
        .client()
        .negotiate()
        .await
        .expect_err("an untrusted certificate");
    assert!(matches!(e, ClientError::Tls { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("localhost:{port}"))
            && msg.contains("ca_file")
            && msg.to_lowercase().contains("certificate"),
        "{msg}"
    );
    assert!(!e.is_transient(), "a certificate problem is not a hiccup");
    eprintln!("without ca_file: {msg}");
    let started = start_error(plain).await;
    assert!(started.contains(&format!("localhost:{port}")), "{started}");

    // With it: the connector runs a task through the terminator.
    let cl = d.clusters.get_mut(&c.name).unwrap();
    cl.restd_url = url;
    cl.ca_file = Some(ca);
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let meta = create(&mut g, request("tls", "ml", "#!/bin/bash\nid -un\n")).await;
    wait_phase(&mut g, &meta, Phase::Succeeded).await;
    assert_eq!(phase_of(&mut g, &meta).await, Phase::Succeeded);
    server.stop().await;
}
