//! `slurm-connector check`: preflight every configured cluster before a rollout — reachable, token
//! accepted (by an authenticated call, never by ping), API version served, partitions visible,
//! job files reachable through staging, object store writable — as a ✓/✗ table.

use crate::config::claims::OnceOnly;
use std::path::Path;
use std::time::Duration;

use crate::config::{ClusterConfig, Coalesce, DeploymentConfig};
use crate::service::{Coalescing, client_auth};
use crate::slurmrestd::{Client, ClientConfig, ClientError, ClusterConf, RetryPolicy};
use crate::staging::settings::StagingSettings;

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub cluster: String,
    pub what: &'static str,
    pub ok: bool,
    pub detail: String,
}

pub(super) fn check(cluster: &str, what: &'static str, result: Result<String, String>) -> Check {
    let (ok, detail) = match result {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    Check {
        cluster: cluster.to_string(),
        what,
        ok,
        detail,
    }
}

/// Runs every check of one cluster; later checks are skipped (✗ with the reason) once slurmrestd
/// cannot be reached, since they would only repeat that error.
pub async fn check_cluster(
    c: &ClusterConfig,
    output_prefix: Option<&str>,
    coalesce: Coalesce,
    once_only: OnceOnly,
) -> Vec<Check> {
    let name = c.name.as_str();
    let mut out = Vec::new();
    let client = client_auth(c).map_err(|e| e.to_string()).and_then(|auth| {
        let mut cc = ClientConfig::new(name, c.restd_url.clone(), auth);
        cc.user_name = c.username.clone();
        cc.api_version = c.api_version;
        cc.ca_file = c.ca_file.clone();
        cc.retry = RetryPolicy::none();
        cc.connect_timeout = c.connect_timeout;
        // One try each, so a little more patience than serve's default per request.
        cc.request_timeout = c.request_timeout.max(Duration::from_secs(10));
        Client::new(cc).map_err(|e| e.to_string())
    });
    let client = match client {
        Ok(cl) => cl,
        Err(e) => {
            out.push(check(name, "credentials configured", Err(e)));
            return out;
        }
    };
    // The version first: every other call is made in it. Probing needs no valid token (an
    // unserved version is a 404 before auth), so a bad token is not reported as a bad version.
    match client.negotiate().await {
        Ok(n) => {
            out.push(check(
                name,
                "slurmrestd reachable",
                Ok(c.restd_url.to_string()),
            ));
            out.push(check(
                name,
                "API version",
                Ok(format!(
                    "{} (Slurm {}): {}",
                    n.version,
                    n.server.release.as_deref().unwrap_or("?"),
                    n.reason()
                )),
            ));
        }
        Err(e) => {
            let reachable = !matches!(
                e,
                ClientError::Unreachable { .. } | ClientError::Timeout { .. }
            );
            out.push(check(
                name,
                "slurmrestd reachable",
                if reachable {
                    Ok(c.restd_url.to_string())
                } else {
                    Err(format!("{e}; {}", prerequisite(&e)))
                },
            ));
            if reachable {
                out.push(check(name, "API version", Err(e.to_string())));
            }
            return out;
        }
    }
    // diag needs a token slurmctld accepts (ping answers 200 "not responding" to a bad one).
    match client.diag().await {
        Ok(_) => out.push(check(
            name,
            "token accepted",
            // meta.client.user is the socket peer slurmrestd saw, not the token's user.
            Ok(format!(
                "user {}",
                c.username.as_deref().unwrap_or("(the token's user)")
            )),
        )),
        Err(e) => {
            out.push(check(
                name,
                "token accepted",
                Err(format!("{e}; {}", prerequisite(&e))),
            ));
            return out;
        }
    }
    let accounting = accounting(&client).await;
    let served = accounting.served;
    out.push(check(name, "accounting (slurmdbd)", accounting.result));
    if let (true, Some(user)) = (served, c.username.as_deref()) {
        out.push(check(name, "job user known", job_user(&client, user).await));
    }
    if !c.identities.rules.is_empty() {
        out.push(check(
            name,
            "identity rules",
            crate::service::check_identities(name, &c.identities, &client)
                .await
                .map(|()| {
                    format!(
                        "{} rules, users {}",
                        c.identities.rules.len(),
                        c.identities.users().join(", ")
                    )
                }),
        ));
    }
    out.push(check(
        name,
        "partitions visible",
        match client.partitions().await {
            Ok(p) if p.is_empty() => Err("slurmctld lists no partition".into()),
            Ok(p) => {
                let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
                match &c.default_partition {
                    Some(d) if !names.contains(&d.as_str()) => Err(format!(
                        "default partition {d} is not among {}",
                        names.join(", ")
                    )),
                    _ => Ok(names.join(", ")),
                }
            }
            Err(e) => Err(e.to_string()),
        },
    ));
    if coalesce != Coalesce::Off {
        out.push(coalescing(name, coalesce, once_only, client.conf().await));
    }
    out.push(check(
        name,
        "working directory via staging",
        working_dir(c).await,
    ));
    if let Some(prefix) = output_prefix {
        out.push(check(
            name,
            "object store writable",
            object_store_writable(prefix).await,
        ));
    }
    out
}

/// Which of the cluster's prerequisites (docs/quickstart-kubernetes.md, step 1) an error of the
/// first calls points at, so an operator fixes the cluster's side instead of guessing.
fn prerequisite(e: &ClientError) -> &'static str {
    match e {
        ClientError::Unreachable { .. } | ClientError::Timeout { .. } => {
            "prerequisite: slurmrestd running (`slurmrestd -a rest_auth/jwt ADDRESS:PORT`) and \
             listening on an address this host can reach (not loopback only, no firewall between)"
        }
        // slurmrestd itself answers 401 when it takes no JWT, though one was sent.
        ClientError::NoToken { .. } => {
            "prerequisite: slurmrestd started with JWT authentication (`-a rest_auth/jwt`); a \
             token was sent and slurmrestd did not take it"
        }
        // slurmrestd passed the token on and slurmctld refused it (HTTP 511, error 1007).
        ClientError::Rejected { .. } => {
            "prerequisite: slurm.conf with `AuthAltTypes=auth/jwt` and \
             `AuthAltParameters=jwt_key=FILE`, FILE being the key this connector holds (or its \
             token minted from that key, unexpired); slurmctld.log says why it refused"
        }
        ClientError::Tls { .. } => "prerequisite: slurmrestd's certificate trusted here",
        _ => "see docs/quickstart-kubernetes.md, step 1",
    }
}

/// The `accounting (slurmdbd)` line, and whether slurmdb answers (the job user's line needs it).
struct Accounting {
    served: bool,
    result: Result<String, String>,
}

/// slurmdbd is optional: without it the connector degrades (docs/operations.md) but works, so a
/// cluster without slurmdb is a ✓ that says what degrades; slurmdb served but not answering is a
/// ✗ (slurmdbd down, or its database: jobs that leave slurmctld cannot be looked up).
async fn accounting(client: &Client) -> Accounting {
    // The last minute's jobs of every user: a small answer, and no user filter, which slurmdbd
    // refuses (422, error 2166) for a user it does not know: that is the next line's to say.
    let since = chrono::Utc::now().timestamp() - 60;
    match client.accounting_jobs_since(since, None).await {
        Ok(_) => Accounting {
            served: true,
            result: Ok("slurmdbd answers".into()),
        },
        Err(ClientError::Http { status: 404, .. }) => Accounting {
            served: false,
            result: Ok(
                "not served (slurmrestd without openapi/slurmdbd, or no slurmdbd): jobs are \
                 still run and tracked; a job that leaves slurmctld is resolved from its \
                 exit-status marker, GetTaskMetrics has no usage figures and identity rules' \
                 users are not checked (docs/operations.md)"
                    .into(),
            ),
        },
        Err(e) => Accounting {
            served: false,
            result: Err(format!(
                "{e}; slurmrestd serves accounting but slurmdbd did not answer: is slurmdbd \
                 running, with `AuthAltTypes=auth/jwt` in slurmdbd.conf?"
            )),
        },
    }
}

/// The user jobs run as must exist: Slurm accepts a job of an unknown user, which then never
/// starts (a pending `UserId=99` on 24.11). Known only through slurmdbd.
async fn job_user(client: &Client, user: &str) -> Result<String, String> {
    match client.slurm_user_record(user, None).await {
        Ok(Some(rec)) if rec.accounts.is_empty() => Err(format!(
            "Slurm user {user} has no account association: its jobs are refused; add one \
             (`sacctmgr add user {user} account=ACCOUNT`)"
        )),
        Ok(Some(rec)) => Ok(format!(
            "{user}, accounts {} (default {})",
            rec.accounts.join(", "),
            if rec.default_account.is_empty() {
                "none"
            } else {
                &rec.default_account
            }
        )),
        Ok(None) => Err(format!(
            "Slurm user {user} does not exist in the cluster's accounting: its jobs would \
             never start; create it (`sacctmgr add user {user} account=ACCOUNT`) or set \
             FLYTE_SLURM_USERNAME to an existing user"
        )),
        // A slurmrestd that serves job records but no user records (an older build, or a
        // stand-in): nothing to check against, which is no fault of the cluster.
        Err(ClientError::Http { status: 404, .. }) => Ok(format!(
            "{user} (not checked: slurmrestd serves no slurmdbd user records)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The working directory of every user jobs may run as (`{user}`: one per user).
async fn working_dir(c: &ClusterConfig) -> Result<String, String> {
    let template = c
        .working_dir
        .as_deref()
        .ok_or("FLYTE_SLURM_WORKING_DIR is not set")?;
    if !template.contains("{user}") {
        return working_dir_of(c, template).await;
    }
    let mut users: Vec<&str> = c.username.as_deref().into_iter().collect();
    for u in c.identities.users() {
        if !users.contains(&u) {
            users.push(u);
        }
    }
    let mut out = Vec::new();
    for u in users {
        let dir = template.replace("{user}", u);
        out.push(working_dir_of(c, &dir).await?);
    }
    if out.is_empty() {
        return Err(format!(
            "working_dir {template:?} names {{user}}, but there is no `username` and no identity rule"
        ));
    }
    Ok(out.join("; "))
}

async fn working_dir_of(c: &ClusterConfig, dir: &str) -> Result<String, String> {
    let settings = StagingSettings::from_cluster(c)
        .map_err(|e| e.to_string())?
        .ok_or("no staging: set FLYTE_SLURM_SHARED_MOUNTS or FLYTE_SLURM_STAGER_URL")?;
    let staging = settings.build().map_err(|e| e.to_string())?;
    match staging.stat(dir).await.map_err(|e| e.to_string())? {
        Some(s) if s.kind == crate::staging::EntryKind::Dir => {}
        Some(_) => return Err(format!("{dir} is not a directory")),
        None => return Err(format!("{dir} does not exist on the shared filesystem")),
    }
    // Writable: where the filesystem is mounted here, try it; a stager only reads and removes.
    if let Ok(roots) = crate::staging::confine::Roots::new(
        c.shared_mounts
            .iter()
            .map(|(cluster, local)| crate::staging::Mount {
                cluster_prefix: cluster.into(),
                local_path: local.clone(),
            })
            .collect(),
    ) && let Ok(mapped) = roots.map(dir)
    {
        let probe = mapped
            .local
            .join(format!(".slurm-connector-check-{}", std::process::id()));
        std::fs::write(&probe, b"check")
            .map_err(|e| format!("{dir} is not writable from here: {e}"))?;
        let _ = std::fs::remove_file(&probe);
        return Ok(format!("{dir} (writable)"));
    }
    Ok(format!("{dir} (exists; through the stager)"))
}

async fn object_store_writable(prefix: &str) -> Result<String, String> {
    use object_store::ObjectStoreExt;
    let probe = crate::staging::objstore::join_uri(
        prefix,
        &format!(".slurm-connector-check-{}", std::process::id()),
    );
    let dest = crate::staging::objstore::open(&probe).map_err(|e| e.to_string())?;
    dest.store
        .put(&dest.path, bytes::Bytes::from_static(b"check").into())
        .await
        .map_err(|e| {
            format!(
                "cannot write {probe}: {}",
                crate::staging::objstore::redact(&e)
            )
        })?;
    let _ = dest.store.delete(&dest.path).await;
    Ok(prefix.to_string())
}

/// Prints the table; returns whether every check passed.
pub fn print(checks: &[Check]) -> bool {
    let width = checks.iter().map(|c| c.cluster.len()).max().unwrap_or(0);
    for c in checks {
        println!(
            "{} {:width$}  {:<30} {}",
            if c.ok { "✓" } else { "✗" },
            c.cluster,
            c.what,
            c.detail
        );
    }
    checks.iter().all(|c| c.ok)
}

/// All configured clusters (none configured: nothing to check, which is itself a ✗).
pub async fn run(
    config: Option<&Path>,
    output_prefix: Option<&str>,
) -> Result<bool, crate::config::ConfigError> {
    let deployment = DeploymentConfig::load(config)?;
    let mut checks = Vec::new();
    if deployment.clusters.is_empty() {
        checks.push(Check {
            cluster: "-".into(),
            what: "a cluster is configured",
            ok: false,
            detail: "set FLYTE_SLURM_RESTD_URL (and a token or key) or give --config".into(),
        });
    }
    for c in deployment.clusters.values() {
        checks.extend(
            check_cluster(
                c,
                output_prefix,
                deployment.coalesce,
                deployment.claims.once_only,
            )
            .await,
        );
    }
    if !deployment.clusters.is_empty() {
        checks.push(claims(&deployment.claims).await);
        checks.extend(check_port(&deployment, listen_of_serve()));
        if deployment.coalesce == Coalesce::Off {
            checks.push(check(
                "-",
                "coalescing",
                Ok("off (FLYTE_SLURM_COALESCE_WINDOW=off): every task is a job of its own".into()),
            ));
        }
    }
    Ok(print(&checks))
}

/// The `claims` line: the check `serve` makes before it starts (`claim::check_at_start`), so a
/// store without conditional writes is found by `check` as `serve` would refuse it.
async fn claims(settings: &crate::config::claims::ClaimSettings) -> Check {
    let result = crate::service::claim::check_at_start(settings)
        .await
        .map(|found| format!("{found}; lease {}s", settings.lease.as_secs()))
        .map_err(|e| e.to_string());
    check("-", "claims", result)
}

/// The `coalescing` line of a cluster: what the connector decides with the setting and the
/// cluster's slurm.conf (`service::Coalescing`, the same decision `serve` makes), and the limits
/// a batch keeps to (arrays carry their elements' keys where slurmdbd keeps them, so no setting
/// risks running an element twice).
pub fn coalescing(
    name: &str,
    setting: Coalesce,
    once_only: OnceOnly,
    conf: Result<Option<ClusterConf>, ClientError>,
) -> Check {
    let (decided, unread) = match conf {
        Ok(conf) => (Coalescing::decide(setting, conf.as_ref(), once_only), None),
        Err(e) => (Coalescing::decide(setting, None, once_only), Some(e)),
    };
    let mut detail = decided.describe(crate::service::coalesce_cap(None));
    if let Some(e) = unread {
        detail.push_str(&format!(
            " (slurm.conf not readable through slurmrestd: {e})"
        ));
    }
    check(name, "coalescing", Ok(detail))
}

/// Where `serve` listens, as this process can know it: `FLYTE_SLURM_LISTEN`, else `serve`'s
/// default for a configured deployment (`check` runs beside `serve`, e.g. `kubectl exec`, and
/// cannot see its arguments).
fn listen_of_serve() -> std::net::SocketAddr {
    std::env::var("FLYTE_SLURM_LISTEN")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(super::serve::DEFAULT_LISTEN)
}

/// The gRPC port's rows: its certificate loads (with TLS), and identity rules are not served on a
/// port anyone can reach (docs/security.md).
pub fn check_port(d: &DeploymentConfig, listen: std::net::SocketAddr) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(files) = &d.server_tls {
        out.push(check(
            "-",
            "TLS on the gRPC port",
            crate::service::ServerTls::load(files)
                .map(|t| t.describe())
                .map_err(|e| e.to_string()),
        ));
    }
    let p = d.protections(Some(listen));
    let reach = match (&p.ingress_policy, p.loopback()) {
        (_, true) => format!("{listen}: loopback only"),
        (Some(policy), false) => format!("{listen}, restricted by {policy}"),
        (None, false) => format!("{listen}, no ingress restriction declared"),
    };
    out.push(check(
        "-",
        "who can reach the gRPC port",
        if let Some(why) = p.refusal() {
            Err(format!("{reach}: serve refuses to start: {why}"))
        } else if p.identity_rules_exposed() {
            Err(format!(
                "{reach}, yet {} identity rules decide whom jobs run as: any client that reaches \
                 the port can have jobs run as their users (accepted by \
                 FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS=true)",
                p.identity_rules
            ))
        } else {
            Ok(format!("{reach}; TLS {}", if p.tls { "on" } else { "off" }))
        },
    ));
    out
}
