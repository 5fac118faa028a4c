//! `slurm-connector serve` refuses identity rules on a port anyone may reach (issue 55), by
//! every route a clusters file comes by: `--config`, and `FLYTE_SLURM_CONFIG` (which the chart's
//! `objectStore.env`, `objectStore.envFrom`, `connector.extraEnvFrom` and any other environment
//! source all end as). Only a declared ingress restriction (`FLYTE_SLURM_INGRESS_POLICY`, which the
//! chart sets when it renders its NetworkPolicy) or the operator's flag naming the risk
//! (`FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS=true`) lets it start.
//!
//! The gRPC address is 192.0.2.1 (TEST-NET-1: beyond loopback, and no address of this machine),
//! so nothing ever listens: a refused start says why, and a start let through fails one step
//! later, binding that address, which tells the two apart without opening a port.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common;

const OPEN: &str = "192.0.2.1:8000";

/// A clusters file, with or without identity rules.
fn clusters_file(dir: &Path, rules: bool) -> PathBuf {
    let token = dir.join("token");
    std::fs::write(&token, "a.b.c").unwrap();
    let mut text = format!(
        "[clusters.hpc1]\nrestd_url = \"http://127.0.0.1:9\"\njwt_file = \"{}\"\n\
         working_dir = \"/shared/{{user}}/jobs\"\n",
        token.display()
    );
    if rules {
        text.push_str(
            "[[clusters.hpc1.identities]]\nproject = \"ml\"\nslurm_user = \"alice\"\n\
             account = \"physics\"\n",
        );
    }
    let path = dir.join(if rules { "rules.toml" } else { "plain.toml" });
    std::fs::write(&path, text).unwrap();
    path
}

/// `serve` on [`OPEN`] with `args` and `env` only (none of the caller's FLYTE_SLURM_*).
fn serve(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-connector"));
    for (k, _) in std::env::vars() {
        if k.starts_with("FLYTE_SLURM_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(["serve", "--listen", OPEN, "--metrics-listen", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied());
    common::output_within_sync(&mut cmd, Duration::from_secs(60))
}

fn refused(out: &Output) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    !out.status.success()
        && err.contains("1 identity rules decide whom jobs run as")
        && err.contains(OPEN)
        && err.contains("networkPolicy.enabled=true")
        && err.contains("FLYTE_SLURM_INGRESS_POLICY")
        && err.contains("FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS=true")
}

/// Past the refusal: the start went on to bind the gRPC address (and failed there).
fn let_through(out: &Output) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    !out.status.success()
        && err.contains(&format!("cannot listen on {OPEN} (gRPC)"))
        && !err.contains("identity rules decide")
}

#[test]
fn identity_rules_without_an_ingress_policy_are_refused_by_every_route() {
    let dir = common::fresh_dir("sc-ingress");
    let rules = clusters_file(&dir, true);
    let rules = rules.to_str().unwrap();

    let by_flag = serve(&["--config", rules], &[]);
    assert!(
        refused(&by_flag),
        "--config: {}",
        String::from_utf8_lossy(&by_flag.stderr)
    );
    let by_env = serve(&[], &[("FLYTE_SLURM_CONFIG", rules)]);
    assert!(
        refused(&by_env),
        "FLYTE_SLURM_CONFIG: {}",
        String::from_utf8_lossy(&by_env.stderr)
    );
    // An empty declaration declares nothing.
    let empty = serve(
        &[],
        &[
            ("FLYTE_SLURM_CONFIG", rules),
            ("FLYTE_SLURM_INGRESS_POLICY", ""),
        ],
    );
    assert!(
        refused(&empty),
        "empty policy: {}",
        String::from_utf8_lossy(&empty.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_declared_policy_or_the_named_risk_lets_identity_rules_start() {
    let dir = common::fresh_dir("sc-ingress-ok");
    let rules = clusters_file(&dir, true);
    let rules = rules.to_str().unwrap();
    for (what, env) in [
        (
            "the chart's policy",
            vec![
                ("FLYTE_SLURM_CONFIG", rules),
                (
                    "FLYTE_SLURM_INGRESS_POLICY",
                    "NetworkPolicy slurm-connector: gRPC port 8000 from namespace flyte",
                ),
            ],
        ),
        (
            "the named risk",
            vec![
                ("FLYTE_SLURM_CONFIG", rules),
                ("FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS", "true"),
            ],
        ),
    ] {
        let out = serve(&[], &env);
        assert!(
            let_through(&out),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // No rules: nothing to refuse.
    let plain = clusters_file(&dir, false);
    let out = serve(&["--config", plain.to_str().unwrap()], &[]);
    assert!(
        let_through(&out),
        "no rules: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The flag is a boolean: anything else is an error naming it, not a quiet "no".
    let out = serve(
        &[],
        &[
            ("FLYTE_SLURM_CONFIG", rules),
            ("FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS", "sure"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("FLYTE_SLURM_ANYONE_MAY_RUN_AS_RULE_USERS"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
