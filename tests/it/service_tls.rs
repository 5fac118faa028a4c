//! TLS on the gRPC port (`FLYTE_SLURM_TLS_CERT_FILE` / `_KEY_FILE`): a client that trusts the
//! certificate's CA gets a TLS connection speaking h2 (what grpc-go, Flyte's backend, requires by
//! ALPN); a plaintext client gets no answer; a renewed certificate is served to new connections
//! without a restart, and a renewal that does not load leaves the current one serving; a missing
//! file stops the start naming it. The RPCs over TLS are the conformance suite's
//! (`conformance::official_stubs_over_tls`, the official Python stubs).

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::mock::Mock;
use common::server::Server;
use common::tls::TestCa;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use slurm_connector::config::ServerTlsFiles;

/// A TLS handshake with `addr` trusting `ca`: the protocol ALPN chose and the leaf certificate.
async fn handshake(
    addr: std::net::SocketAddr,
    ca: &Path,
) -> std::io::Result<(Option<Vec<u8>>, CertificateDer<'static>)> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let (_, conn) = tls.get_ref();
    let leaf = conn.peer_certificates().unwrap()[0].clone().into_owned();
    Ok((conn.alpn_protocol().map(<[u8]>::to_vec), leaf))
}

fn der_of(pem: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(pem).unwrap()
}

/// Replaces `to` with `from`'s content the way Kubernetes updates a mounted Secret: the new file
/// appears whole (a rename), never half written.
fn swap_in(from: &Path, to: &Path) {
    let tmp: PathBuf = to.with_extension("new");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_port_speaks_tls_and_takes_a_renewed_certificate_without_a_restart() {
    let Some(ca) = TestCa::new("grpc") else {
        return;
    };
    let (first, first_key) = ca.server_cert("first");
    let (second, second_key) = ca.server_cert("second");
    let dir = common::fresh_dir("sc-tls-served");
    let files = ServerTlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    swap_in(&first, &files.cert);
    swap_in(&first_key, &files.key);
    let env = Mock::start("tls", Duration::from_secs(600), Default::default()).await;
    let mut d = env.deployment(Duration::from_millis(200));
    d.server_tls = Some(files.clone());
    let server = Server::start(d).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    let (alpn, leaf) = loop {
        match handshake(server.addr, &ca.ca).await {
            Ok(r) => break r,
            Err(e) => {
                assert!(Instant::now() < deadline, "no TLS handshake: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "gRPC needs h2 by ALPN");
    assert_eq!(leaf, der_of(&first));

    // A plaintext gRPC client gets no answer from the TLS port.
    let plain = tokio::time::timeout(
        Duration::from_secs(10),
        slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient::connect(
            format!("http://{}", server.addr),
        ),
    )
    .await;
    if let Ok(Ok(mut c)) = plain {
        let r =
            tokio::time::timeout(Duration::from_secs(10), c.get_task(common::get_req(b"{}"))).await;
        assert!(
            !matches!(r, Ok(Ok(_))),
            "a plaintext GetTask was answered on the TLS port"
        );
    }

    // /healthz on the metrics port, for probes that cannot speak TLS.
    let health = reqwest::get(format!("http://{}/healthz", server.metrics_addr))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap().trim(), "SERVING");

    // cert-manager renews: the files change in place, new connections get the new certificate.
    swap_in(&second_key, &files.key);
    swap_in(&second, &files.cert);
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (_, leaf) = handshake(server.addr, &ca.ca).await.unwrap();
        if leaf == der_of(&second) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not served within 40 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A renewal that does not load (a key of another certificate) keeps the current one.
    swap_in(&first_key, &files.key);
    tokio::time::sleep(slurm_connector::service::TLS_RELOAD_EVERY + Duration::from_secs(3)).await;
    let (_, leaf) = handshake(server.addr, &ca.ca).await.unwrap();
    assert_eq!(
        leaf,
        der_of(&second),
        "a broken renewal replaced the certificate"
    );

    server.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn a_missing_certificate_stops_the_start_naming_the_file() {
    let env = Mock::start("tls-missing", Duration::from_secs(600), Default::default()).await;
    let mut d = env.deployment(Duration::from_millis(200));
    let dir = common::fresh_dir("sc-tls-missing");
    d.server_tls = Some(ServerTlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    });
    let g = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let m = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = slurm_connector::service::serve_with(d, g, m, async {})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&dir.join("tls.crt").display().to_string())
            && e.contains("FLYTE_SLURM_TLS_CERT_FILE")
            && e.contains("No such file"),
        "{e}"
    );
    env.stop().await;
}
