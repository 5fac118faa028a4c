//! `slurm-connector check --connector URL`: a running connector as Flyte's backend meets it, from
//! wherever this runs (`check.rs` checks the clusters from the connector's side).

use std::time::Duration;

use super::check::{Check, check};

/// How long each call of [`check_connector`] may take: a NetworkPolicy that does not admit the
/// caller drops its packets, which shows as no answer at all, not as a refusal.
const CONNECTOR_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// `check --connector URL`: what Flyte's backend would meet, from where this runs. gRPC reachable
/// and SERVING (`grpc.health.v1`), then each protocol's metadata service names the task types it
/// serves: Flyte 2's `ConnectorMetadataService` and Flyte 1's `AgentMetadataService`. A host name
/// that resolves to several addresses (the chart's headless Service: one per ready pod) is checked
/// at each address, as Flyte's `round_robin` calls each; a name that does not resolve is a ✗ of
/// its own. Run in the connector's pod (`kubectl exec`), it checks that pod's own server; run by
/// `helm test` (a pod with Flyte's backend's labels), the NetworkPolicy too (`docs/deploy.md`).
/// Plain-text gRPC only, as the chart serves inside the cluster; a `https://` URL is a ✗ that
/// says so.
pub async fn check_connector(url: &str) -> Vec<Check> {
    const WHO: &str = "connector";
    let endpoint = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    if endpoint.starts_with("https://") {
        return vec![check(
            WHO,
            "gRPC reachable",
            Err(format!(
                "{endpoint}: check speaks plain-text gRPC only (the chart's in-cluster Service); \
                 for a TLS port use `grpcurl -cacert CA HOST:PORT grpc.health.v1.Health/Check`"
            )),
        )];
    }
    let authority = endpoint
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let addrs: Vec<std::net::SocketAddr> = match tokio::net::lookup_host(&authority).await {
        Ok(a) => {
            let mut a: Vec<_> = a.collect();
            a.sort();
            a.dedup();
            a
        }
        Err(e) => {
            return vec![check(
                WHO,
                "address resolves",
                Err(format!(
                    "{authority}: {e}: give HOST:PORT; for the chart's headless Service \
                     <release>-headless.<namespace>.svc.cluster.local:8000 (`kubectl get svc` \
                     lists it; a Service with no ready pod resolves to nothing)"
                )),
            )];
        }
    };
    let host = authority.rsplit_once(':').map_or(&*authority, |(h, _)| h);
    if addrs.len() <= 1
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok()
    {
        return check_one(&endpoint, WHO).await;
    }
    check_each(host, &addrs).await
}

/// The checks at each of the addresses `host` resolved to, after a line listing them.
pub async fn check_each(host: &str, addrs: &[std::net::SocketAddr]) -> Vec<Check> {
    let listed: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let mut out = vec![check(
        "connector",
        "address resolves",
        Ok(format!(
            "{host}: {} addresses (one per ready pod of a headless Service): {}",
            addrs.len(),
            listed.join(", ")
        )),
    )];
    for a in &listed {
        out.extend(check_one(&format!("http://{a}"), a).await);
    }
    out
}

/// The three checks against one address (`who` is the first column: the address when a name
/// stood for several).
async fn check_one(endpoint: &str, who: &str) -> Vec<Check> {
    use crate::proto::connector::ListConnectorsRequest;
    use crate::proto::connector::connector_metadata_service_client::ConnectorMetadataServiceClient;
    use crate::proto::flyte1::admin::ListAgentsRequest;
    use crate::proto::flyte1::service::agent_metadata_service_client::AgentMetadataServiceClient;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let endpoint = endpoint.to_string();
    let channel = match tonic::transport::Endpoint::from_shared(endpoint.clone()) {
        Ok(e) => {
            e.connect_timeout(CONNECTOR_CALL_TIMEOUT)
                .timeout(CONNECTOR_CALL_TIMEOUT)
                .connect()
                .await
        }
        Err(e) => {
            return vec![check(
                who,
                "gRPC reachable",
                Err(format!(
                    "{endpoint} is not a URL ({e}): give HOST:PORT or http://HOST:PORT"
                )),
            )];
        }
    };
    let channel = match channel {
        Ok(c) => c,
        Err(e) => {
            return vec![check(
                who,
                "gRPC reachable",
                Err(unreachable_reason(&endpoint, &e.to_string())),
            )];
        }
    };
    let mut out = Vec::new();
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await;
    match health {
        Ok(r) => {
            let status = r.into_inner().status();
            out.push(check(
                who,
                "gRPC reachable",
                if status == tonic_health::pb::health_check_response::ServingStatus::Serving {
                    Ok(format!("{endpoint}: SERVING"))
                } else {
                    Err(format!(
                        "{endpoint}: {status:?} (shutting down, or no cluster reachable at start; \
                         its log says which)"
                    ))
                },
            ));
        }
        Err(s) => {
            out.push(check(
                who,
                "gRPC reachable",
                Err(unreachable_reason(&endpoint, &s.to_string())),
            ));
            return out;
        }
    }
    let flyte2 = ConnectorMetadataServiceClient::new(channel.clone())
        .list_connectors(ListConnectorsRequest {})
        .await
        .map(|r| {
            r.into_inner()
                .connectors
                .iter()
                .flat_map(|c| c.supported_task_categories.iter().map(|t| t.name.clone()))
                .collect::<Vec<_>>()
        });
    out.push(check(
        who,
        "Flyte 2 connector service",
        served(flyte2, "ConnectorMetadataService"),
    ));
    let flyte1 = AgentMetadataServiceClient::new(channel)
        .list_agents(ListAgentsRequest {})
        .await
        .map(|r| {
            r.into_inner()
                .agents
                .iter()
                .flat_map(|a| a.supported_task_categories.iter().map(|t| t.name.clone()))
                .collect::<Vec<_>>()
        });
    out.push(check(
        who,
        "Flyte 1 agent service",
        served(flyte1, "AgentMetadataService"),
    ));
    out
}

/// The task types a metadata service listed, or why it did not answer.
fn served(r: Result<Vec<String>, tonic::Status>, service: &str) -> Result<String, String> {
    match r {
        Ok(types) if types.is_empty() => Err(format!("{service} lists no task type")),
        Ok(types) => Ok(format!("task types {}", types.join(", "))),
        Err(s) => Err(format!("{service}: {:?} {}", s.code(), s.message())),
    }
}

/// Why a connection failed, in the terms of what to fix: no answer at all is what a
/// NetworkPolicy that does not admit this pod looks like; a refusal is a wrong address or port.
fn unreachable_reason(endpoint: &str, error: &str) -> String {
    let lower = error.to_lowercase();
    if lower.contains("timed out") || lower.contains("timeout") || lower.contains("deadline") {
        format!(
            "{endpoint}: no answer within {}s: a NetworkPolicy that does not admit this pod drops \
             its packets (the chart's admits Flyte's backend pods only: `helm test` runs this \
             in a pod with their labels, docs/deploy.md), or the host is down ({error})",
            CONNECTOR_CALL_TIMEOUT.as_secs()
        )
    } else {
        format!(
            "{endpoint}: {error} (a refusal is a wrong host or port, or no connector listening \
             there: `kubectl get endpoints` for the Service)"
        )
    }
}
