//! A firewall on loopback: a TCP forwarder in front of a server that can start dropping packets.
//! Dropped packets are made, without privileges, from a listener that stops accepting, its
//! accept queue filled: Linux drops a SYN to a listener whose queue is full, so a client's connect
//! times out (no refusal, no answer). The connections already forwarded hang: nothing more
//! passes either way, and none is closed, as behind a firewall that drops packets.

use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Firewall {
    pub addr: SocketAddr,
    _listener: Arc<TcpListener>,
    dropping: watch::Sender<bool>,
    accepting: Option<JoinHandle<()>>,
    forwards: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The connections that fill the accept queue while dropping, held open.
    filler: Vec<TcpStream>,
}

impl Firewall {
    /// Forwards every connection to `upstream` until [`Firewall::drop_packets`].
    pub async fn forwarding(upstream: SocketAddr) -> Firewall {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        // Room for a burst of connects while forwarding (a full queue drops SYNs: a connect
        // timeout before the firewall is on), few enough to fill once nothing accepts.
        let listener = Arc::new(socket.listen(64).unwrap());
        let (dropping, _) = watch::channel(false);
        let forwards = Arc::new(Mutex::new(Vec::new()));
        let accepting = {
            let (listener, forwards, dropping) =
                (listener.clone(), forwards.clone(), dropping.subscribe());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let mut hole = dropping.clone();
                    let forward = tokio::spawn(async move {
                        let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                            return;
                        };
                        let dropped = tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                            _ = hole.wait_for(|d| *d) => true,
                        };
                        if dropped {
                            // Both ends stay open and silent until the firewall goes.
                            std::future::pending::<()>().await;
                        }
                    });
                    forwards.lock().unwrap().push(forward);
                }
            })
        };
        Firewall {
            addr,
            _listener: listener,
            dropping,
            accepting: Some(accepting),
            forwards,
            filler: Vec::new(),
        }
    }

    /// Drops packets from now on: nothing is accepted or forwarded any more, and a connect to
    /// [`Firewall::addr`] times out (checked: panics otherwise).
    pub async fn drop_packets(&mut self) {
        if let Some(a) = self.accepting.take() {
            a.abort();
            let _ = a.await;
        }
        self.dropping.send_replace(true);
        let addr = self.addr;
        self.filler = tokio::task::spawn_blocking(move || {
            let mut held = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                    Ok(s) => held.push(s),
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return held,
                    Err(e) => panic!("filling the accept queue of {addr}: {e}"),
                }
                assert!(
                    Instant::now() < deadline && held.len() < 256,
                    "connects to {addr} never timed out ({} taken into its queue)",
                    held.len()
                );
            }
        })
        .await
        .unwrap();
    }

    /// A firewall that drops everything from the start (nothing behind it).
    pub async fn dropping() -> Firewall {
        // Forwarding to a port nobody listens on, never reached: nothing is accepted.
        let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut f = Firewall::forwarding(nowhere).await;
        f.drop_packets().await;
        f
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        if let Some(a) = self.accepting.take() {
            a.abort();
        }
        for f in self.forwards.lock().unwrap().drain(..) {
            f.abort();
        }
    }
}
