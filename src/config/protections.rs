//! Who can reach the gRPC port, as far as the connector can know it: where it listens, whether it
//! speaks TLS, and what the deployment declares restricts its ingress (`FLYTE_SLURM_INGRESS_POLICY`:
//! a NetworkPolicy is invisible from inside the pod). Identity rules choose whom a job runs as
//! from the request, so they are sound only while nothing but Flyte's backend can send one: `serve`
//! says at start which protections are on, and `check` shows a ✗ for rules on an open port.

use std::net::SocketAddr;

use super::DeploymentConfig;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protections {
    /// The gRPC listen address, when known (`check` runs beside `serve`, not in it).
    pub listen: Option<SocketAddr>,
    pub tls: bool,
    pub ingress_policy: Option<String>,
    /// Identity rules over every cluster.
    pub identity_rules: usize,
}

impl Protections {
    /// Reachable from this machine only.
    pub fn loopback(&self) -> bool {
        self.listen.is_some_and(|a| a.ip().is_loopback())
    }

    /// Identity rules decide whom jobs run as, while any client that reaches the port may ask:
    /// it listens beyond loopback and nothing declares its ingress restricted. TLS does not
    /// change this (Flyte's client sends no certificate, so TLS cannot tell who asks).
    pub fn identity_rules_exposed(&self) -> bool {
        self.identity_rules > 0 && !self.loopback() && self.ingress_policy.is_none()
    }
}

impl DeploymentConfig {
    pub fn protections(&self, listen: Option<SocketAddr>) -> Protections {
        Protections {
            listen,
            tls: self.server_tls.is_some(),
            ingress_policy: self.ingress_policy.clone(),
            identity_rules: self
                .clusters
                .values()
                .map(|c| c.identities.rules.len())
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_exposed_only_on_an_open_undeclared_port() {
        let p = |listen: &str, ingress: Option<&str>, rules: usize| Protections {
            listen: Some(listen.parse().unwrap()),
            tls: true,
            ingress_policy: ingress.map(str::to_string),
            identity_rules: rules,
        };
        assert!(p("0.0.0.0:8000", None, 2).identity_rules_exposed());
        assert!(!p("0.0.0.0:8000", Some("NetworkPolicy x"), 2).identity_rules_exposed());
        assert!(!p("127.0.0.1:8000", None, 2).identity_rules_exposed());
        assert!(!p("[::1]:8000", None, 2).identity_rules_exposed());
        assert!(!p("0.0.0.0:8000", None, 0).identity_rules_exposed());
        let unknown = Protections {
            listen: None,
            ..p("0.0.0.0:8000", None, 1)
        };
        assert!(
            unknown.identity_rules_exposed(),
            "an unknown listen address is not loopback"
        );
    }
}
