//! Who can reach the gRPC port, as far as the connector can know it: where it listens, whether it
//! speaks TLS, and what the deployment declares restricts its ingress (`FLYTE_SLURM_INGRESS_POLICY`:
//! a NetworkPolicy is invisible from inside the pod). Identity rules choose whom a job runs as
//! from the request, so they are sound only while nothing but Flyte's backend can send one:
//! `serve` refuses to start with rules on an open port (whichever route the rules came by: the
//! decision is made on the loaded configuration), unless the operator accepts that risk by name
//! (`FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS`); `check` shows the same as a ✗.

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
    /// `FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS`: the operator serves rules on an open port anyway.
    pub open_rules_accepted: bool,
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

    /// Why `serve` must not start: rules exposed, and the risk not accepted by name.
    pub fn refusal(&self) -> Option<String> {
        (self.identity_rules_exposed() && !self.open_rules_accepted).then(|| {
            let listen = self
                .listen
                .map_or_else(|| "its address unknown".to_string(), |a| a.to_string());
            format!(
                "{} identity rules decide whom jobs run as, but the gRPC port ({listen}) listens                  beyond loopback and no ingress restriction is declared: any client that reaches                  it could have jobs run as the rules' users. Restrict the port to Flyte's backend                  and declare it: the Helm chart does both with networkPolicy.enabled=true (the                  default; it sets FLYTE_SLURM_INGRESS_POLICY); a restriction outside the chart (a                  service mesh's authorization policy, a namespace with a default-deny policy) is                  declared with FLYTE_SLURM_INGRESS_POLICY=\"<what restricts it>\". To serve the                  rules on an open port anyway, set FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS=true",
                self.identity_rules
            )
        })
    }
}

impl DeploymentConfig {
    pub fn protections(&self, listen: Option<SocketAddr>) -> Protections {
        Protections {
            listen,
            tls: self.server_tls.is_some(),
            ingress_policy: self.ingress_policy.clone(),
            open_rules_accepted: self.anyone_may_run_as_rule_users,
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
            open_rules_accepted: false,
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

    #[test]
    fn exposed_rules_are_refused_unless_the_risk_is_accepted_by_name() {
        let p = |ingress: Option<&str>, accepted: bool| Protections {
            listen: Some("0.0.0.0:8000".parse().unwrap()),
            tls: false,
            ingress_policy: ingress.map(str::to_string),
            identity_rules: 3,
            open_rules_accepted: accepted,
        };
        let why = p(None, false).refusal().expect("refused");
        for fix in [
            "3 identity rules",
            "0.0.0.0:8000",
            "networkPolicy.enabled=true",
            "FLYTE_SLURM_INGRESS_POLICY",
            "FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS=true",
        ] {
            assert!(why.contains(fix), "{fix}: {why}");
        }
        assert_eq!(p(Some("NetworkPolicy x"), false).refusal(), None);
        assert_eq!(p(None, true).refusal(), None);
        assert!(
            p(None, true).identity_rules_exposed(),
            "accepted, still exposed"
        );
    }
}
