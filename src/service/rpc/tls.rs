//! TLS on the gRPC port, for a Flyte backend configured with `insecure: false` (its connector
//! client dials TLS with the system's roots and sends no client certificate, so server TLS, not
//! mTLS, is what a Flyte deployment can use; who may connect at all is the ingress policy's job).
//!
//! The certificate and key are read at start (a missing or unreadable file, a key that is not
//! the certificate's, stops the start naming the file and the reason) and again whenever their
//! contents change (cert-manager renews them in place: Kubernetes swaps the mounted Secret's
//! files), checked every [`RELOAD_EVERY`]. A renewal that does not load — half written, a key of
//! another certificate — keeps the current certificate serving and is logged; the next change
//! is tried again. New connections get the new certificate; open ones keep theirs.
//!
//! Hand-written around tokio-rustls rather than tonic's own `tls` feature: tonic's
//! `ServerTlsConfig` takes the identity once, so it cannot rotate without a restart.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::config::ServerTlsFiles;

/// How often the files are compared with what is serving. Kubernetes propagates a Secret's
/// update to the pod in about a minute; this adds at most its own period.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// A handshake that has not finished by then is dropped (a client that connects and sends
/// nothing would otherwise hold a slot for ever).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once; more connections wait in the listen backlog.
const HANDSHAKES_IN_FLIGHT: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS certificate file {path} (tls_cert_file / FLYTE_SLURM_TLS_CERT_FILE): {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("TLS key file {path} (tls_key_file / FLYTE_SLURM_TLS_KEY_FILE): {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("TLS: the key in {key} is not the key of the certificate in {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("TLS: {0}")]
    Config(String),
}

/// The files' bytes as last read: a change of either is a renewal to load.
#[derive(PartialEq, Eq)]
struct Snapshot {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Snapshot {
    fn read(files: &ServerTlsFiles) -> Result<Snapshot, TlsError> {
        let read = |path: &Path| std::fs::read(path).map_err(|e| e.to_string());
        Ok(Snapshot {
            cert: read(&files.cert).map_err(|reason| TlsError::Cert {
                path: files.cert.clone(),
                reason,
            })?,
            key: read(&files.key).map_err(|reason| TlsError::Key {
                path: files.key.clone(),
                reason,
            })?,
        })
    }

    /// The certificate chain with its key, checked to belong together.
    fn certified(
        &self,
        files: &ServerTlsFiles,
        provider: &CryptoProvider,
    ) -> Result<CertifiedKey, TlsError> {
        let cert_err = |reason: String| TlsError::Cert {
            path: files.cert.clone(),
            reason,
        };
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| cert_err(format!("not PEM certificates: {e}")))?;
        if chain.is_empty() {
            return Err(cert_err(
                "holds no `-----BEGIN CERTIFICATE-----` block".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(|e| TlsError::Key {
            path: files.key.clone(),
            reason: format!("no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        })?;
        CertifiedKey::from_der(chain, key, provider).map_err(|e| TlsError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            reason: e.to_string(),
        })
    }
}

/// The certificate every new handshake gets: swapped whole on a renewal.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// TLS for the gRPC listener, loaded and checked.
pub struct ServerTls {
    files: ServerTlsFiles,
    provider: Arc<CryptoProvider>,
    current: Arc<Current>,
    acceptor: TlsAcceptor,
}

impl ServerTls {
    /// Reads and checks the files: any problem stops the start.
    pub fn load(files: &ServerTlsFiles) -> Result<ServerTls, TlsError> {
        // The provider reqwest's rustls already brings in (no second crypto library).
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let certified = Snapshot::read(files)?.certified(files, &provider)?;
        let current = Arc::new(Current(RwLock::new(Arc::new(certified))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        // gRPC is HTTP/2 only, and grpc-go (Flyte's backend) refuses a TLS server that does not
        // select h2 by ALPN.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(ServerTls {
            files: files.clone(),
            provider,
            current,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// What is serving, for the start-up log: the files and the chain's length.
    pub fn describe(&self) -> String {
        let n = self
            .current
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .cert
            .len();
        format!(
            "certificate {} ({n} in the chain), key {}, re-read when they change",
            self.files.cert.display(),
            self.files.key.display()
        )
    }

    /// Reloads the certificate when its files change, until `stop` resolves.
    pub async fn watch(self: Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        let mut last = Snapshot::read(&self.files).ok();
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        tick.tick().await;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            if let Some(now) = self.reload_if_changed(last.as_ref()) {
                last = Some(now);
            }
        }
    }

    /// One look at the files: `Some(snapshot)` when they differ from `last` (loaded or not: a
    /// renewal that does not load is not retried until the files change again).
    fn reload_if_changed(&self, last: Option<&Snapshot>) -> Option<Snapshot> {
        let now = match Snapshot::read(&self.files) {
            Ok(s) => s,
            Err(e) => {
                // Mid-swap a file can be missing for an instant: the next look sees it.
                tracing::debug!(error = %e, "TLS files not readable now; serving the current certificate");
                return None;
            }
        };
        if last == Some(&now) {
            return None;
        }
        match now.certified(&self.files, &self.provider) {
            Ok(certified) => {
                *self.current.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(certified);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded: new connections get it");
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS files changed but do not load; still serving the previous certificate");
            }
        }
        Some(now)
    }

    /// The listener's connections, each through its TLS handshake (several at once, so a slow
    /// client does not hold up the others); failed handshakes are dropped.
    pub fn incoming(
        &self,
        listener: TcpListener,
    ) -> impl Stream<Item = io::Result<TlsConn>> + Send + 'static {
        let acceptor = self.acceptor.clone();
        tokio_stream::wrappers::TcpListenerStream::new(listener)
            .map(move |accepted| {
                let acceptor = acceptor.clone();
                async move {
                    let tcp = accepted?;
                    // Small unary RPCs: see the plaintext listener in `serve.rs`.
                    let _ = tcp.set_nodelay(true);
                    let peer = tcp.peer_addr().ok();
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => Ok(Some(TlsConn(tls))),
                        Ok(Err(e)) => {
                            tracing::debug!(?peer, error = %e, "TLS handshake failed");
                            Ok(None)
                        }
                        Err(_) => {
                            tracing::debug!(?peer, "TLS handshake timed out");
                            Ok(None)
                        }
                    }
                }
            })
            .buffer_unordered(HANDSHAKES_IN_FLIGHT)
            .filter_map(|r: io::Result<Option<TlsConn>>| async move { r.transpose() })
    }
}

/// One TLS connection, as tonic's server takes it (its peer address for the request's
/// `remote_addr`).
pub struct TlsConn(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for TlsConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    #[test]
    fn a_missing_or_wrong_file_names_the_file_and_the_reason() {
        let dir = std::env::temp_dir().join(format!("sc-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = files(&dir);
        let e = ServerTls::load(&f).err().unwrap().to_string();
        assert!(
            e.contains("tls.crt")
                && e.contains("FLYTE_SLURM_TLS_CERT_FILE")
                && e.contains("No such file"),
            "{e}"
        );
        std::fs::write(&f.cert, "not a certificate").unwrap();
        std::fs::write(&f.key, "not a key").unwrap();
        let e = ServerTls::load(&f).err().unwrap().to_string();
        assert!(
            e.contains("tls.crt") && e.contains("no `-----BEGIN CERTIFICATE-----`"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
