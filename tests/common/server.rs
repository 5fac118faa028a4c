//! The connector in the test process: `serve_with` (the code `slurm-connector serve` runs) on
//! loopback ports, a gRPC client for it, and a clean stop. Shared by the service, staging and
//! fault-drill tests and the benches (`common::server`).

use std::time::{Duration, Instant};

use slurm_connector::config::DeploymentConfig;
use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::service::serve_with;
use tonic::transport::Channel;

pub type Grpc = AsyncConnectorServiceClient<Channel>;

pub struct Server {
    pub addr: std::net::SocketAddr,
    /// Prometheus `/metrics`.
    pub metrics_addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start(d: DeploymentConfig) -> Server {
        let g = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let m = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, metrics_addr) = (g.local_addr().unwrap(), m.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve_with(d, g, m, async {
                rx.await.ok();
            })
            .await
            .expect("serve");
        });
        Server {
            addr,
            metrics_addr,
            stop: Some(tx),
            task,
        }
    }

    pub async fn client(&self) -> Grpc {
        connect(self.addr).await
    }

    /// The sum of every series of metric `name` on `/metrics` whose labels contain each of
    /// `labels` (e.g. `operation="accounting_usages"`); 0 when none is there yet.
    #[allow(dead_code)] // not every test binary reads metrics
    pub async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let text = reqwest::get(format!("http://{}/metrics", self.metrics_addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                    && labels.iter().all(|want| l.contains(want))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub async fn stop(mut self) {
        self.stop.take().unwrap().send(()).ok();
        self.task.await.unwrap();
    }
}

/// A client of the connector at `addr`, waiting (up to 30 s) for it to listen.
pub async fn connect(addr: std::net::SocketAddr) -> Grpc {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(c) = AsyncConnectorServiceClient::connect(format!("http://{addr}")).await {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "connector did not listen on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
