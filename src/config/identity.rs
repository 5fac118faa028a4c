//! Who a cluster's jobs run as: the `[[clusters.NAME.identities]]` rules of the config file and
//! `[clusters.NAME.identity_default]`.
//!
//! ```toml
//! [[clusters.hpc1.identities]]     # first match wins
//! project = "ml"                   # matchers: project, domain, service_account, execution_identity
//! domain = "production"
//! slurm_user = "alice"             # who the job runs as
//! account = "physics"              # --account, unless the task asks for one of `accounts`
//! partitions = ["gpu", "debug"]    # allowed; empty/absent = any
//! qos = ["normal"]
//! max_nodes = 4
//! max_gpus = 8
//! max_time = "24:00:00"
//!
//! [clusters.hpc1.identity_default]
//! action = "deny"                  # or "run_as_deployment_user" (the default)
//! ```
//!
//! What is checked here is what can be checked without the cluster (names, limits, root); the
//! service checks at start that each user exists on the cluster and is not its SlurmUser.

use std::path::PathBuf;

use serde::Deserialize;

use crate::slurmrestd::job_description::Limit;

/// A rule as written in the file (unknown keys are an error).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRule {
    project: Option<String>,
    domain: Option<String>,
    service_account: Option<String>,
    execution_identity: Option<String>,
    slurm_user: Option<String>,
    account: Option<String>,
    #[serde(default)]
    accounts: Vec<String>,
    #[serde(default)]
    partitions: Vec<String>,
    #[serde(default)]
    qos: Vec<String>,
    max_nodes: Option<u32>,
    max_gpus: Option<u32>,
    max_time: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDefault {
    action: String,
}

/// What happens to a task no rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DefaultAction {
    /// Today's behaviour: the job runs as the cluster's `username` (the deployment user).
    #[default]
    RunAsDeploymentUser,
    /// Refused with PERMISSION_DENIED.
    Deny,
}

/// One rule: which requests it matches and what their jobs may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRule {
    /// 1-based position in the file: errors and refusals name the rule by it.
    pub number: usize,
    pub project: Option<String>,
    pub domain: Option<String>,
    pub service_account: Option<String>,
    pub execution_identity: Option<String>,
    pub slurm_user: String,
    pub account: Option<String>,
    /// Other accounts a task may ask for (`--account`) instead of `account`.
    pub accounts: Vec<String>,
    pub partitions: Vec<String>,
    pub qos: Vec<String>,
    pub max_nodes: Option<u32>,
    pub max_gpus: Option<u32>,
    /// Minutes.
    pub max_time: Option<u32>,
    /// `max_time` as written, for messages.
    pub max_time_text: Option<String>,
}

/// A cluster's identity rules. Empty (no rule, the default action): every job runs as the
/// deployment user, as before identities existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identities {
    pub rules: Vec<IdentityRule>,
    pub default: DefaultAction,
    /// `user_jwt_dir`: a folder of `<user>` token files the site keeps fresh, one per Slurm user
    /// of the rules (instead of minting or proxying).
    pub user_jwt_dir: Option<PathBuf>,
    /// The cluster's SlurmUser (`slurm_daemon_user`, default `slurm`): no rule may map to it.
    /// slurmrestd does not tell it, so the deployment says it.
    pub slurm_daemon_user: String,
}

impl Default for Identities {
    fn default() -> Identities {
        Identities {
            rules: Vec::new(),
            default: DefaultAction::default(),
            user_jwt_dir: None,
            slurm_daemon_user: super::DEFAULT_SLURM_DAEMON_USER.to_string(),
        }
    }
}

/// What a request says about who sent it (see docs/security.md for which of these the platform
/// vouches for: project and domain come from the execution's id; the service account and the
/// execution identity are what the task's author wrote in its security context).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    pub project: String,
    pub domain: String,
    pub service_account: String,
    pub execution_identity: String,
}

/// How a request was matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched<'a> {
    Rule(&'a IdentityRule),
    /// No rule matched and the default runs it as the deployment user.
    DeploymentUser,
    /// No rule matched and the default denies.
    Denied,
}

impl IdentityRule {
    /// `identities[2] (project = "ml", domain = "production")`: how messages name the rule.
    pub fn describe(&self) -> String {
        let mut m = Vec::new();
        for (k, v) in [
            ("project", &self.project),
            ("domain", &self.domain),
            ("service_account", &self.service_account),
            ("execution_identity", &self.execution_identity),
        ] {
            if let Some(v) = v {
                m.push(format!("{k} = {v:?}"));
            }
        }
        if m.is_empty() {
            format!("identities[{}] (matches every task)", self.number)
        } else {
            format!("identities[{}] ({})", self.number, m.join(", "))
        }
    }

    fn matches(&self, r: &Requester) -> bool {
        let one = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        one(&self.project, &r.project)
            && one(&self.domain, &r.domain)
            && one(&self.service_account, &r.service_account)
            && one(&self.execution_identity, &r.execution_identity)
    }
}

impl Identities {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.default == DefaultAction::RunAsDeploymentUser
    }

    /// The first rule that matches, else the default.
    pub fn resolve(&self, r: &Requester) -> Matched<'_> {
        match self.rules.iter().find(|rule| rule.matches(r)) {
            Some(rule) => Matched::Rule(rule),
            None => match self.default {
                DefaultAction::RunAsDeploymentUser => Matched::DeploymentUser,
                DefaultAction::Deny => Matched::Denied,
            },
        }
    }

    /// Every Slurm user a rule maps to, once each, in rule order.
    pub fn users(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.rules {
            if !out.contains(&r.slurm_user.as_str()) {
                out.push(&r.slurm_user);
            }
        }
        out
    }
}

/// A Slurm user name as `useradd` accepts it (it reaches HTTP headers and paths).
fn valid_user(u: &str) -> bool {
    let mut chars = u.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        && u.len() <= 32
}

/// The file's rules and default, checked. `Err` names the rule and the fix.
pub(super) fn build(
    rules: Vec<FileRule>,
    default: Option<FileDefault>,
    slurm_daemon_user: &str,
) -> Result<Identities, String> {
    let mut out = Identities {
        slurm_daemon_user: slurm_daemon_user.to_string(),
        ..Identities::default()
    };
    if let Some(d) = default {
        out.default = match d.action.as_str() {
            "deny" => DefaultAction::Deny,
            "run_as_deployment_user" => DefaultAction::RunAsDeploymentUser,
            other => {
                return Err(format!(
                    "`identity_default.action` = {other:?}: use \"deny\" or \"run_as_deployment_user\""
                ));
            }
        }
    }
    for (i, f) in rules.into_iter().enumerate() {
        let number = i + 1;
        let at = format!("`identities[{number}]`");
        let slurm_user = f.slurm_user.ok_or_else(|| {
            format!("{at}: `slurm_user` is missing: name the Slurm user its tasks run as")
        })?;
        if !valid_user(&slurm_user) {
            return Err(format!(
                "{at}: `slurm_user` = {slurm_user:?} is not a user name (lower-case letters, \
                 digits, `_` and `-`, starting with a letter or `_`)"
            ));
        }
        if slurm_user == "root" {
            return Err(format!(
                "{at}: `slurm_user` = \"root\": a task must never run as root; map it to the \
                 user whose hours and files these are"
            ));
        }
        for (key, values) in [
            ("partitions", &f.partitions),
            ("qos", &f.qos),
            ("accounts", &f.accounts),
        ] {
            if let Some(bad) = values
                .iter()
                .find(|v| v.trim().is_empty() || v.contains(','))
            {
                return Err(format!(
                    "{at}: `{key}` holds {bad:?}: one name per entry, e.g. [\"gpu\", \"debug\"]"
                ));
            }
        }
        if !f.accounts.is_empty() && f.account.is_none() {
            return Err(format!(
                "{at}: `accounts` lists accounts a task may choose, but `account` (the one its \
                 jobs get when they name none) is missing"
            ));
        }
        if f.max_nodes == Some(0) {
            return Err(format!(
                "{at}: `max_nodes` = 0: a job needs a node; remove the key for no ceiling"
            ));
        }
        if slurm_daemon_user == slurm_user {
            return Err(format!(
                "{at}: `slurm_user` = {slurm_user:?} is the cluster's SlurmUser (`slurm_daemon_user`): \
                 its jobs could act on every user's jobs; map the rule to the user whose hours \
                 and files these are"
            ));
        }
        let max_time = match &f.max_time {
            None => None,
            Some(t) => match crate::domain::units::parse_time_limit(t) {
                Ok(Limit::Finite(m)) => Some(m),
                Ok(Limit::Infinite) => {
                    return Err(format!(
                        "{at}: `max_time` = {t:?} means no limit; remove the key instead"
                    ));
                }
                Err(e) => {
                    return Err(format!(
                        "{at}: `max_time` = {t:?}: {e}; write it as Slurm's --time, e.g. \"24:00:00\" or \"2-00:00:00\""
                    ));
                }
            },
        };
        out.rules.push(IdentityRule {
            number,
            project: f.project,
            domain: f.domain,
            service_account: f.service_account,
            execution_identity: f.execution_identity,
            slurm_user,
            account: f.account,
            accounts: f.accounts,
            partitions: f.partitions,
            qos: f.qos,
            max_nodes: f.max_nodes,
            max_gpus: f.max_gpus,
            max_time,
            max_time_text: f.max_time,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<Identities, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct T {
            #[serde(default)]
            identities: Vec<FileRule>,
            identity_default: Option<FileDefault>,
        }
        let t: T = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        build(t.identities, t.identity_default, "slurm")
    }

    fn req(project: &str, domain: &str) -> Requester {
        Requester {
            project: project.into(),
            domain: domain.into(),
            ..Requester::default()
        }
    }

    #[test]
    fn first_matching_rule_wins_and_the_default_applies_otherwise() {
        let ids = parse(
            r#"
            [[identities]]
            project = "ml"
            domain = "production"
            slurm_user = "alice"
            [[identities]]
            project = "ml"
            slurm_user = "bob"
            [identity_default]
            action = "deny"
            "#,
        )
        .unwrap();
        let user = |r: &Requester| match ids.resolve(r) {
            Matched::Rule(rule) => rule.slurm_user.clone(),
            other => format!("{other:?}"),
        };
        assert_eq!(user(&req("ml", "production")), "alice");
        assert_eq!(user(&req("ml", "development")), "bob");
        assert_eq!(user(&req("etl", "production")), "Denied");
        assert_eq!(ids.users(), ["alice", "bob"]);
    }

    #[test]
    fn service_account_and_execution_identity_match_too() {
        let ids = parse(
            r#"
            [[identities]]
            service_account = "ml-runner"
            execution_identity = "alice@example.org"
            slurm_user = "alice"
            "#,
        )
        .unwrap();
        let mut r = req("any", "any");
        assert_eq!(ids.resolve(&r), Matched::DeploymentUser);
        r.service_account = "ml-runner".into();
        assert_eq!(ids.resolve(&r), Matched::DeploymentUser, "both must match");
        r.execution_identity = "alice@example.org".into();
        assert!(matches!(ids.resolve(&r), Matched::Rule(x) if x.slurm_user == "alice"));
    }

    #[test]
    fn unknown_keys_root_and_bad_values_are_errors_naming_the_rule() {
        let e = parse("[[identities]]\nslurm_user = \"alice\"\nprojekt = \"ml\"\n").unwrap_err();
        assert!(e.contains("projekt"), "{e}");
        let e = parse(
            "[[identities]]\nslurm_user = \"alice\"\n[[identities]]\nslurm_user = \"root\"\n",
        )
        .unwrap_err();
        assert!(e.contains("identities[2]") && e.contains("root"), "{e}");
        let e = parse("[[identities]]\nslurm_user = \"slurm\"\n").unwrap_err();
        assert!(e.contains("SlurmUser"), "{e}");
        let e = parse("[[identities]]\nproject = \"ml\"\n").unwrap_err();
        assert!(
            e.contains("identities[1]") && e.contains("slurm_user"),
            "{e}"
        );
        let e = parse("[[identities]]\nslurm_user = \"alice\"\nmax_time = \"soon\"\n").unwrap_err();
        assert!(e.contains("max_time") && e.contains("24:00:00"), "{e}");
        let e = parse("[identity_default]\naction = \"allow\"\n").unwrap_err();
        assert!(e.contains("run_as_deployment_user"), "{e}");
        let e = parse("[[identities]]\nslurm_user = \"Alice; rm\"\n").unwrap_err();
        assert!(e.contains("not a user name"), "{e}");
    }

    #[test]
    fn max_time_is_minutes_and_describe_names_the_matchers() {
        let ids = parse(
            "[[identities]]\nproject = \"ml\"\nslurm_user = \"alice\"\nmax_time = \"1-00:00:00\"\n",
        )
        .unwrap();
        assert_eq!(ids.rules[0].max_time, Some(24 * 60));
        assert_eq!(ids.rules[0].describe(), "identities[1] (project = \"ml\")");
    }
}
