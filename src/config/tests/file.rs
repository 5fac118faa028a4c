use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::*;
use super::env;

const FILE: &str = r#"
default_cluster = "hpc1"
poll_interval = "3s"
requeue_budget = 5

[clusters.hpc1]
restd_url = "http://restd.hpc1:6820"
username = "flyte"
jwt_key_file = "/etc/slurm/jwt.key"
working_dir = "/shared/flyte"
shared_mounts = { "/shared" = "/mnt/hpc1" }
ssh_hosts = ["login1.hpc1"]

[clusters.hpc2]
restd_url = "http://restd.hpc2:6820"
api_version = "v0.0.41"
jwt_file = "/run/secrets/hpc2.jwt"
"#;

#[test]
fn file_with_several_clusters_and_env_overrides() {
    let dir = std::env::temp_dir().join(format!("cfgtest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    std::fs::write(&path, FILE).unwrap();
    let c = DeploymentConfig::load_with(
        &env(&[
            ("FLYTE_SLURM_CLUSTER_NAME", "hpc2"),
            ("FLYTE_SLURM_WORKING_DIR", "/scratch/flyte"),
        ]),
        Some(&path),
    )
    .unwrap();
    assert_eq!(c.clusters.len(), 2);
    assert_eq!(c.poll_interval, Duration::from_secs(3));
    assert_eq!(c.requeue_budget, 5);
    // The environment names hpc2 and overrides its working dir; it becomes the default.
    assert_eq!(c.default_cluster, "hpc2");
    assert_eq!(
        c.clusters["hpc2"].working_dir.as_deref(),
        Some("/scratch/flyte")
    );
    assert_eq!(
        c.clusters["hpc2"].api_version,
        Some(crate::slurmrestd::ApiVersion::V0041)
    );
    assert!(matches!(
        c.clusters["hpc1"].auth,
        Some(AuthConfig::KeyFile { .. })
    ));
    // A task selects by configured name only.
    assert_eq!(c.select_cluster(Some("hpc1"), None).unwrap().name, "hpc1");
    let e = c
        .select_cluster(Some("http://evil:6820"), None)
        .unwrap_err();
    assert!(
        e.contains("connection.cluster") && e.contains("hpc1, hpc2"),
        "{e}"
    );
    // A stock task's SSH login host selects the cluster listing it in ssh_hosts (whatever the
    // case), a cluster's own name selects it, and the cluster a task names wins over its host.
    assert_eq!(
        c.select_cluster(None, Some("Login1.HPC1")).unwrap().name,
        "hpc1"
    );
    assert_eq!(c.select_cluster(None, Some("hpc1")).unwrap().name, "hpc1");
    assert_eq!(
        c.select_cluster(Some("hpc2"), Some("login1.hpc1"))
            .unwrap()
            .name,
        "hpc2"
    );
    // No host, or an empty one: the default cluster.
    assert_eq!(c.select_cluster(None, None).unwrap().name, "hpc2");
    assert_eq!(c.select_cluster(None, Some(" ")).unwrap().name, "hpc2");
    // With several clusters, a host that maps to none is refused, naming the host and the fix:
    // the default cluster could be the wrong machine.
    let e = c
        .select_cluster(None, Some("login9.elsewhere"))
        .unwrap_err();
    assert!(
        e.contains("connection.host")
            && e.contains("login9.elsewhere")
            && e.contains("ssh_hosts")
            && e.contains("hpc1, hpc2"),
        "{e}"
    );
    // Python-plugin resource_meta hosts map to clusters.
    assert_eq!(c.cluster_for_ssh_host("LOGIN1.hpc1").unwrap().name, "hpc1");
    assert!(c.cluster_for_ssh_host("elsewhere").is_none());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn file_errors_name_the_key() {
    let p = Path::new("/etc/x.toml");
    let e = file::parse(p, "[clusters.a]\nrestd_url = \"http://a\"\ntoken = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("token") && e.contains("/etc/x.toml"), "{e}");
    let e = file::parse(p, "[clusters.a]\nrestd_url = \"ftp://a\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cluster `a`") && e.contains("restd_url"), "{e}");
    let e = file::parse(
        p,
        "[clusters.a]\nrestd_url = \"http://a\"\njwt_key_file = \"/k\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("username"), "{e}");
}

#[test]
fn several_clusters_need_a_default() {
    let dir = std::env::temp_dir().join(format!("cfgtest2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    std::fs::write(&path, FILE.replace("default_cluster = \"hpc1\"", "")).unwrap();
    let e = DeploymentConfig::load_with(&env(&[]), Some(&path))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("default_cluster") && e.contains("hpc1, hpc2"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn file_shared_mounts_follow_the_same_rules() {
    let p = Path::new("/etc/flyte/slurm.toml");
    let ok = file::parse(
        p,
        "[clusters.a]\nrestd_url = \"http://a\"\nshared_mounts = { \"/shared/\" = \"/mnt/s/\" }\n",
    )
    .unwrap();
    assert_eq!(
        ok.clusters["a"].shared_mounts,
        vec![("/shared".to_string(), PathBuf::from("/mnt/s"))]
    );
    for bad in [
        "{ \"/shared\" = \"/mnt/../etc\" }",
        "{ \"shared\" = \"/mnt/s\" }",
    ] {
        let e = file::parse(
            p,
            &format!("[clusters.a]\nrestd_url = \"http://a\"\nshared_mounts = {bad}\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("shared_mounts") && e.contains("without `..`"),
            "{e}"
        );
    }
}

#[test]
fn file_image_rules_are_read_per_cluster_and_checked() {
    use crate::domain::site::Runtime;
    let p = Path::new("/etc/flyte/slurm.toml");
    let cfg = file::parse(
        p,
        r#"
[clusters.a]
restd_url = "http://a"

[[clusters.a.images]]
match = "ghcr.io/org/*"
pyxis = "/shared/images/{flat}.sqsh"
apptainer = "/shared/images/{flat}.sif"
"#,
    )
    .unwrap();
    let staged = cfg.clusters["a"]
        .images
        .resolve("ghcr.io/org/train:1.0", Runtime::Pyxis)
        .unwrap()
        .unwrap();
    assert_eq!(staged.path, "/shared/images/org+train+1.0.sqsh");
    for (bad, want) in [
        (
            "match = \"x/*\"\npyxis = \"/i/{nope}\"\n",
            "images[0].pyxis",
        ),
        ("match = \"x/*\"\nsif = \"/i/x\"\n", "unknown field `sif`"),
        ("pyxis = \"/i/x\"\n", "missing field `match`"),
    ] {
        let e = file::parse(
            p,
            &format!("[clusters.a]\nrestd_url = \"http://a\"\n[[clusters.a.images]]\n{bad}"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(want), "{bad}: {e}");
    }
}

#[test]
fn file_identities_in_the_documented_shape() {
    let p = std::path::Path::new("/etc/flyte-slurm.toml");
    let cfg = file::parse(
        p,
        r#"
        [clusters.hpc1]
        restd_url = "https://slurmrestd.hpc1:6820"
        username = "flyte"
        jwt_key_file = "/etc/slurm/jwt_hs256.key"
        working_dir = "/shared/{user}/.flyte/jobs"
        ca_file = "/etc/ssl/site-ca.pem"

        [[clusters.hpc1.identities]]     # first match wins
        project = "ml"
        domain = "production"
        slurm_user = "alice"
        account = "physics"
        partitions = ["gpu", "debug"]
        qos = ["normal"]
        max_nodes = 4
        max_gpus = 8
        max_time = "24:00:00"

        [clusters.hpc1.identity_default]
        action = "deny"
        "#,
    )
    .unwrap();
    let c = &cfg.clusters["hpc1"];
    assert_eq!(c.identities.rules.len(), 1);
    assert_eq!(c.identities.rules[0].slurm_user, "alice");
    assert_eq!(c.identities.rules[0].max_time, Some(1440));
    assert_eq!(c.identities.default, identity::DefaultAction::Deny);
    assert_eq!(
        c.ca_file.as_deref(),
        Some(std::path::Path::new("/etc/ssl/site-ca.pem"))
    );
    assert_eq!(c.working_dir.as_deref(), Some("/shared/{user}/.flyte/jobs"));

    let e = file::parse(
        p,
        "[clusters.hpc1]\nrestd_url = \"http://a\"\n[[clusters.hpc1.identities]]\nslurm_user = \"alice\"\nmax_node = 4\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unknown field `max_node`") && e.contains("max_nodes"),
        "{e}"
    );
    let e = file::parse(
        p,
        "[clusters.hpc1]\nrestd_url = \"http://a\"\nslurm_daemon_user = \"slurmd\"\n[[clusters.hpc1.identities]]\nslurm_user = \"slurmd\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("identities[1]") && e.contains("SlurmUser"),
        "{e}"
    );
}
