//! Identity rules as the tests write them (issue 15): one project mapped to one Slurm user and
//! account, every limit open; a test sets the limits it is about.

use slurm_connector::config::identity::IdentityRule;

/// `[[identities]] project = PROJECT, slurm_user = USER, account = ACCOUNT` as rule number 1
/// (`identities[0]`; a list of them is renumbered by its place).
pub fn rule(project: &str, user: &str, account: &str) -> IdentityRule {
    IdentityRule {
        number: 1,
        project: Some(project.to_string()),
        domain: None,
        service_account: None,
        execution_identity: None,
        slurm_user: user.to_string(),
        account: Some(account.to_string()),
        accounts: Vec::new(),
        partitions: Vec::new(),
        qos: Vec::new(),
        max_nodes: None,
        max_gpus: None,
        max_time: None,
        max_time_text: None,
    }
}
