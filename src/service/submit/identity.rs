//! CreateTask's identity decision: which Slurm user a task's job runs as, under which
//! account, and whether its request stays within its rule's limits. Decided before anything is
//! submitted; a refusal submits nothing.
//!
//! The rules are the cluster's `identities` (`config/identity.rs`); the requester is read from the
//! request here. The rendered job description is what is checked, so a limit holds whichever way
//! the task asked (first-class `sbatch` fields, `sbatch_options`).

use crate::config::identity::{Identities, IdentityRule, Matched, Requester};
use crate::slurmrestd::JobDescription;
use crate::slurmrestd::job_description::Limit;

/// Who a task's job runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs<'a> {
    /// The cluster's `username` (no rule matched; the default runs it so).
    Deployment,
    /// A rule's user.
    Rule(&'a IdentityRule),
}

impl RunAs<'_> {
    /// The user `resource_meta` records (`None`: the deployment user).
    pub fn slurm_user(&self) -> Option<&str> {
        match self {
            RunAs::Deployment => None,
            RunAs::Rule(r) => Some(&r.slurm_user),
        }
    }
}

/// Why CreateTask refused a task.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error(
        "cluster {cluster}: no identity rule matches this task ({who}) and \
         `identity_default.action` is \"deny\"; ask the operator for a rule \
         `[[clusters.{cluster}.identities]]` mapping it to a Slurm user"
    )]
    Denied { cluster: String, who: String },
    #[error(
        "cluster {cluster}: {rule} allows {what} {limit}; this task asks for {asked}. Nothing was \
         submitted"
    )]
    Limit {
        cluster: String,
        rule: String,
        what: &'static str,
        limit: String,
        asked: String,
    },
    #[error(
        "cluster {cluster}: a task cannot choose its Slurm user: `{key}` = {asked:?}, but {rule} \
         runs this task as {user:?}; remove `{key}` from the task config (who runs what is the \
         operator's `identities` rules)"
    )]
    ChoseUser {
        cluster: String,
        key: &'static str,
        asked: String,
        rule: String,
        user: String,
    },
}

fn describe(r: &Requester) -> String {
    let mut parts = vec![
        format!("project {:?}", r.project),
        format!("domain {:?}", r.domain),
    ];
    if !r.service_account.is_empty() {
        parts.push(format!("service account {:?}", r.service_account));
    }
    if !r.execution_identity.is_empty() {
        parts.push(format!("execution identity {:?}", r.execution_identity));
    }
    parts.join(", ")
}

/// The rule (or the deployment user) for a request; `Denied` when the default denies.
pub fn decide<'a>(
    cluster: &str,
    ids: &'a Identities,
    who: &Requester,
) -> Result<RunAs<'a>, Refusal> {
    match ids.resolve(who) {
        Matched::Rule(r) => Ok(RunAs::Rule(r)),
        Matched::DeploymentUser => Ok(RunAs::Deployment),
        Matched::Denied => Err(Refusal::Denied {
            cluster: cluster.to_string(),
            who: describe(who),
        }),
    }
}

/// A task config that names a Slurm user (`connection.username`, the SSH plugin's key) other
/// than the one its rule chose is refused: only the operator's rules say who runs a job.
pub fn check_no_chosen_user(
    cluster: &str,
    custom: &crate::render::TaskConfig,
    rule: &IdentityRule,
) -> Result<(), Refusal> {
    let Some(c) = custom.slurm() else {
        return Ok(());
    };
    for (key, asked) in &c.connection.named_users {
        if !asked.is_empty() && *asked != rule.slurm_user {
            return Err(Refusal::ChoseUser {
                cluster: cluster.to_string(),
                key: key.field(),
                asked: asked.to_string(),
                rule: rule.describe(),
                user: rule.slurm_user.clone(),
            });
        }
    }
    Ok(())
}

/// Checks `job` against `rule` and completes it: the rule's account (unless the task asked for
/// one it allows), its first partition/QOS when the task named none and the rule lists some,
/// and its `max_time` as the time limit when the task set none (so the ceiling holds).
pub fn admit(cluster: &str, rule: &IdentityRule, job: &mut JobDescription) -> Result<(), Refusal> {
    let limit = |what: &'static str, limit: String, asked: String| Refusal::Limit {
        cluster: cluster.to_string(),
        rule: rule.describe(),
        what,
        limit,
        asked,
    };
    let list = |v: &[String]| format!("[{}]", v.join(", "));

    match &job.account {
        None => job.account = rule.account.clone(),
        Some(a) => {
            let allowed: Vec<String> = rule
                .account
                .iter()
                .chain(rule.accounts.iter())
                .cloned()
                .collect();
            if !allowed.is_empty() && !allowed.contains(a) {
                return Err(limit(
                    "the accounts",
                    list(&allowed),
                    format!("account {a:?}"),
                ));
            }
        }
    }
    if !rule.partitions.is_empty() {
        match &job.partition {
            None => job.partition = rule.partitions.first().cloned(),
            Some(p) => {
                // sbatch takes a comma-separated list of partitions: each must be allowed.
                if let Some(bad) = p
                    .split(',')
                    .find(|x| !rule.partitions.iter().any(|a| a == x))
                {
                    return Err(limit(
                        "the partitions",
                        list(&rule.partitions),
                        format!("partition {bad:?}"),
                    ));
                }
            }
        }
    }
    if !rule.qos.is_empty() {
        match &job.qos {
            None => job.qos = rule.qos.first().cloned(),
            Some(q) if !rule.qos.contains(q) => {
                return Err(limit("the QOS", list(&rule.qos), format!("qos {q:?}")));
            }
            Some(_) => {}
        }
    }
    let nodes = max_nodes_of(job);
    if let Some(max) = rule.max_nodes
        && nodes > max
    {
        return Err(limit(
            "at most",
            format!("{max} nodes (max_nodes)"),
            format!("{nodes} nodes"),
        ));
    }
    if let Some(max) = rule.max_gpus {
        let gpus = gpus_of(job, nodes);
        if gpus > max {
            return Err(limit(
                "at most",
                format!("{max} GPUs (max_gpus)"),
                format!("{gpus} GPUs"),
            ));
        }
    }
    if let Some(max) = rule.max_time {
        let text = rule.max_time_text.clone().unwrap_or_default();
        match job.time_limit {
            None => job.time_limit = Some(Limit::Finite(max)),
            Some(Limit::Finite(m)) if m <= max => {}
            Some(Limit::Finite(m)) => {
                return Err(limit(
                    "a time limit of at most",
                    format!("{text} (max_time)"),
                    format!("{} ({m} minutes)", minutes_text(m)),
                ));
            }
            Some(Limit::Infinite) => {
                return Err(limit(
                    "a time limit of at most",
                    format!("{text} (max_time)"),
                    "no time limit".into(),
                ));
            }
        }
    }
    Ok(())
}

fn minutes_text(m: u32) -> String {
    let (d, h, min) = (m / 1440, (m % 1440) / 60, m % 60);
    if d > 0 {
        format!("{d}-{h:02}:{min:02}:00")
    } else {
        format!("{h:02}:{min:02}:00")
    }
}

/// The most nodes a job may get: `N` or the upper end of `N-M` (1 when it names none).
fn max_nodes_of(job: &JobDescription) -> u32 {
    job.nodes
        .as_deref()
        .and_then(|n| n.rsplit('-').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(1)
}

/// The GPUs a job asks for in all: per job, per node × nodes, per task × tasks.
fn gpus_of(job: &JobDescription, nodes: u32) -> u32 {
    let tasks = job.tasks.unwrap_or(1).max(1);
    gpu_count(job.tres_per_job.as_deref())
        + gpu_count(job.tres_per_node.as_deref()) * nodes
        + gpu_count(job.tres_per_task.as_deref()) * tasks
        + gpu_count(job.tres_per_socket.as_deref())
            * nodes
            * job.sockets_per_node.unwrap_or(1).max(1)
}

/// The GPUs in a TRES list (`gres/gpu:2`, `gres/gpu:a100:2`, `gpu:1`, `gres/gpu`: 1).
fn gpu_count(tres: Option<&str>) -> u32 {
    tres.unwrap_or_default()
        .split(',')
        .filter_map(|t| {
            let t = t.trim().strip_prefix("gres/").unwrap_or(t.trim());
            let mut parts = t.split(':');
            (parts.next()? == "gpu").then(|| {
                parts
                    .next_back()
                    .and_then(|n| n.parse::<u32>().ok())
                    .unwrap_or(1)
            })
        })
        .sum()
}

/// `working_dir` with `{user}` replaced by the job's Slurm user.
pub fn working_dir_for(
    template: Option<&str>,
    user: Option<&str>,
) -> Result<Option<String>, String> {
    let Some(t) = template else {
        return Ok(None);
    };
    if !t.contains("{user}") {
        return Ok(Some(t.to_string()));
    }
    match user {
        Some(u) => Ok(Some(t.replace("{user}", u))),
        None => Err(format!(
            "`working_dir` {t:?} names `{{user}}`, but this task runs as the deployment user and \
             the cluster has no `username` (FLYTE_SLURM_USERNAME) to put there; set it"
        )),
    }
}

/// The start-up check of a cluster's rules against the cluster: each rule's user exists in
/// slurmdbd, is neither Operator nor Administrator there (its jobs could act on every user's), and
/// has the rule's accounts; with `user_jwt_dir`, its token file is there. Without slurmdbd there
/// is no job-independent way to ask whether a user exists (slurmctld answers reads for any user
/// name), so that part is skipped with a warning. (Without slurmdbd, Slurm 24.11 accepts a job of
/// an unknown user and holds it for ever as UserId=99, JobHeldAdmin; 26.05 refuses its submit,
/// error 6010: `tests/real_identity.rs`.) Unreachable at
/// start: checked never (logged), like the version.
pub async fn check_at_start(
    cluster: &str,
    ids: &Identities,
    client: &crate::slurmrestd::Client,
) -> Result<(), String> {
    if ids.rules.is_empty() {
        return Ok(());
    }
    if let Some(dir) = &ids.user_jwt_dir {
        for r in &ids.rules {
            let f = dir.join(&r.slurm_user);
            if !f.is_file() {
                return Err(format!(
                    "{}: Slurm user {:?} has no token file {} in `user_jwt_dir`; put the user's \
                     JWT there (`scontrol token username={} lifespan=...`)",
                    r.describe(),
                    r.slurm_user,
                    f.display(),
                    r.slurm_user
                ));
            }
        }
    }
    let mut seen: std::collections::HashMap<String, crate::slurmrestd::users::UserRecord> =
        std::collections::HashMap::new();
    for r in &ids.rules {
        let rec = match seen.get(&r.slurm_user) {
            Some(rec) => rec.clone(),
            None => match client.slurm_user_record(&r.slurm_user, None).await {
                Ok(Some(rec)) => {
                    seen.insert(r.slurm_user.clone(), rec.clone());
                    rec
                }
                Ok(None) => {
                    return Err(format!(
                        "{}: Slurm user {:?} does not exist in the cluster's accounting \
                         (slurmdbd): create it (`sacctmgr add user {} account=...`) or map the \
                         rule to an existing user",
                        r.describe(),
                        r.slurm_user,
                        r.slurm_user
                    ));
                }
                Err(crate::slurmrestd::ClientError::Http { status: 404, .. }) => {
                    tracing::warn!(
                        cluster,
                        "slurmrestd serves no slurmdb (no accounting): the users of the identity rules cannot be checked at start; a job of a user Slurm cannot resolve is held for ever (24.11: UserId=99, JobHeldAdmin) or refused at submit (26.05: error 6010): make sure each rule's user exists on the cluster"
                    );
                    return Ok(());
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(cluster, error = %e, "cannot check the identity rules' users at start");
                    return Ok(());
                }
                Err(e) => return Err(format!("checking the identity rules' users: {e}")),
            },
        };
        if rec.admin_level != "None" {
            return Err(format!(
                "{}: Slurm user {:?} is a Slurm {} (administrator_level): its jobs' credentials \
                 could act on every user's jobs; map the rule to an unprivileged user",
                r.describe(),
                r.slurm_user,
                rec.admin_level
            ));
        }
        for a in r.account.iter().chain(r.accounts.iter()) {
            if !rec.accounts.contains(a) {
                return Err(format!(
                    "{}: Slurm user {:?} has no association with account {a:?} (it has: {}); \
                     add it (`sacctmgr add user {} account={a}`) or fix the rule",
                    r.describe(),
                    r.slurm_user,
                    if rec.accounts.is_empty() {
                        "none".to_string()
                    } else {
                        rec.accounts.join(", ")
                    },
                    r.slurm_user
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> IdentityRule {
        IdentityRule {
            number: 1,
            project: Some("ml".into()),
            domain: None,
            service_account: None,
            execution_identity: None,
            slurm_user: "alice".into(),
            account: Some("physics".into()),
            accounts: vec!["shared".into()],
            partitions: vec!["gpu".into(), "debug".into()],
            qos: vec!["normal".into()],
            max_nodes: Some(4),
            max_gpus: Some(8),
            max_time: Some(24 * 60),
            max_time_text: Some("24:00:00".into()),
        }
    }

    #[test]
    fn a_job_within_its_rule_gets_the_rule_s_account_partition_qos_and_time() {
        let mut job = JobDescription::default();
        admit("hpc1", &rule(), &mut job).unwrap();
        assert_eq!(job.account.as_deref(), Some("physics"));
        assert_eq!(job.partition.as_deref(), Some("gpu"));
        assert_eq!(job.qos.as_deref(), Some("normal"));
        assert_eq!(job.time_limit, Some(Limit::Finite(1440)));
        let mut job = JobDescription {
            account: Some("shared".into()),
            partition: Some("debug".into()),
            nodes: Some("2-4".into()),
            tres_per_node: Some("gres/gpu:a100:2".into()),
            time_limit: Some(Limit::Finite(60)),
            ..JobDescription::default()
        };
        admit("hpc1", &rule(), &mut job).unwrap();
        assert_eq!(job.account.as_deref(), Some("shared"));
    }

    #[test]
    fn refusals_name_the_rule_the_limit_and_the_value() {
        let refuse = |job: JobDescription| {
            let mut job = job;
            let e = admit("hpc1", &rule(), &mut job).unwrap_err();
            assert_eq!(
                tonic::Status::from(crate::service::ServiceError::from(e.clone())).code(),
                tonic::Code::InvalidArgument
            );
            e.to_string()
        };
        let e = refuse(JobDescription {
            partition: Some("bigmem".into()),
            ..JobDescription::default()
        });
        assert!(
            e.contains("identities[1] (project = \"ml\")")
                && e.contains("[gpu, debug]")
                && e.contains("\"bigmem\""),
            "{e}"
        );
        let e = refuse(JobDescription {
            qos: Some("high".into()),
            ..JobDescription::default()
        });
        assert!(e.contains("[normal]") && e.contains("\"high\""), "{e}");
        let e = refuse(JobDescription {
            nodes: Some("5".into()),
            ..JobDescription::default()
        });
        assert!(
            e.contains("4 nodes (max_nodes)") && e.contains("5 nodes"),
            "{e}"
        );
        let e = refuse(JobDescription {
            nodes: Some("3".into()),
            tres_per_node: Some("gres/gpu:3".into()),
            ..JobDescription::default()
        });
        assert!(
            e.contains("8 GPUs (max_gpus)") && e.contains("9 GPUs"),
            "{e}"
        );
        let e = refuse(JobDescription {
            time_limit: Some(Limit::Finite(1441)),
            ..JobDescription::default()
        });
        assert!(
            e.contains("24:00:00 (max_time)") && e.contains("1-00:01:00"),
            "{e}"
        );
        let e = refuse(JobDescription {
            time_limit: Some(Limit::Infinite),
            ..JobDescription::default()
        });
        assert!(e.contains("no time limit"), "{e}");
        let e = refuse(JobDescription {
            account: Some("chem".into()),
            ..JobDescription::default()
        });
        assert!(
            e.contains("[physics, shared]") && e.contains("\"chem\""),
            "{e}"
        );
    }

    #[test]
    fn deny_is_permission_denied_and_names_the_requester() {
        let ids = Identities {
            default: crate::config::identity::DefaultAction::Deny,
            ..Identities::default()
        };
        let who = Requester {
            project: "etl".into(),
            domain: "production".into(),
            ..Requester::default()
        };
        let e = decide("hpc1", &ids, &who).unwrap_err();
        assert_eq!(
            tonic::Status::from(crate::service::ServiceError::from(e.clone())).code(),
            tonic::Code::PermissionDenied
        );
        assert!(e.to_string().contains("project \"etl\""), "{e}");
    }

    #[test]
    fn a_task_naming_another_user_is_refused() {
        let config = |custom| {
            crate::render::TaskConfig::parse(crate::render::TaskType::SlurmScript, &custom).unwrap()
        };
        let custom = config(serde_json::json!({"connection": {"username": "bob"}}));
        let e = check_no_chosen_user("hpc1", &custom, &rule()).unwrap_err();
        assert!(
            e.to_string().contains("cannot choose its Slurm user"),
            "{e}"
        );
        let same = config(serde_json::json!({"connection": {"username": "alice"}}));
        check_no_chosen_user("hpc1", &same, &rule()).unwrap();
    }

    #[test]
    fn working_dir_names_the_user() {
        assert_eq!(
            working_dir_for(Some("/shared/{user}/.flyte/jobs"), Some("bob")).unwrap(),
            Some("/shared/bob/.flyte/jobs".into())
        );
        assert!(working_dir_for(Some("/shared/{user}"), None).is_err());
        assert_eq!(gpu_count(Some("gres/gpu,gres/gpu:v100:2,license/x:1")), 3);
    }
}
