use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::super::*;
use super::load;

#[test]
fn no_slurmrestd_means_embedded() {
    let c = load(&[]).unwrap();
    assert!(c.embedded);
    assert!(c.clusters.is_empty());
    assert_eq!(c.poll_interval, Duration::from_secs(5));
}

#[test]
fn env_builds_the_default_cluster() {
    let c = load(&[
        ("FLYTE_SLURM_RESTD_URL", "http://restd:6820"),
        ("FLYTE_SLURM_USERNAME", "flyte"),
        ("FLYTE_SLURM_JWT", "SLURM_JWT=abc.def.ghi"),
        ("FLYTE_SLURM_WORKING_DIR", "/shared/jobs/"),
        (
            "FLYTE_SLURM_SHARED_MOUNTS",
            "/shared=/mnt/shared,/shared/jobs=/mnt/jobs",
        ),
        ("FLYTE_SLURM_POLL_INTERVAL", "2s"),
        ("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES", "512MiB"),
    ])
    .unwrap();
    assert!(!c.embedded);
    let d = c.select_cluster(None, None).unwrap();
    assert_eq!(d.name, "default");
    // One cluster: every SSH-era task's login host runs there, listed or not.
    assert_eq!(
        c.select_cluster(None, Some("login.old-ssh-site"))
            .unwrap()
            .name,
        "default"
    );
    assert_eq!(d.restd_url.as_str(), "http://restd:6820/");
    assert_eq!(d.api_version, None, "chosen per cluster unless pinned");
    assert_eq!(d.auth, Some(AuthConfig::Token(Secret::new("abc.def.ghi"))));
    assert_eq!(d.working_dir.as_deref(), Some("/shared/jobs"));
    assert_eq!(d.shared_mounts[0].0, "/shared/jobs", "longest prefix first");
    assert_eq!(c.poll_interval, Duration::from_secs(2));
    assert_eq!(c.upload_max_bytes, UploadLimit::Bytes(512 << 20));
    // The token never shows in Debug output of the whole config.
    assert!(!format!("{c:?}").contains("abc.def"));
}

#[test]
fn errors_name_the_variable_and_the_fix() {
    let e = load(&[("FLYTE_SLURM_RESTD_URL", "restd:6820")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("FLYTE_SLURM_RESTD_URL") && e.contains("http://"),
        "{e}"
    );
    let e = load(&[("FLYTE_SLURM_USERNAME", "flyte")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("FLYTE_SLURM_RESTD_URL") && e.contains("FLYTE_SLURM_USERNAME"),
        "{e}"
    );
    let e = load(&[
        ("FLYTE_SLURM_RESTD_URL", "http://r:1"),
        ("FLYTE_SLURM_POLL_INTERVAL", "soon"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("FLYTE_SLURM_POLL_INTERVAL") && e.contains("5s"),
        "{e}"
    );
    let e = load(&[
        ("FLYTE_SLURM_RESTD_URL", "http://r:1"),
        ("FLYTE_SLURM_JWT", "tok-value-xyz"),
        ("FLYTE_SLURM_JWT_FILE", "/run/tok"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("FLYTE_SLURM_JWT and FLYTE_SLURM_JWT_FILE"),
        "{e}"
    );
    assert!(
        !e.contains("tok-value-xyz"),
        "a token must never appear in an error: {e}"
    );
    let e = load(&[
        ("FLYTE_SLURM_RESTD_URL", "http://r:1"),
        ("FLYTE_SLURM_JWT_KEY_FILE", "/k"),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("FLYTE_SLURM_USERNAME"), "{e}");
    let e = load(&[
        ("FLYTE_SLURM_RESTD_URL", "http://r:1"),
        ("FLYTE_SLURM_WORKING_DIR", "jobs"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("FLYTE_SLURM_WORKING_DIR") && e.contains("absolute"),
        "{e}"
    );
    let e = load(&[
        ("FLYTE_SLURM_RESTD_URL", "http://r:1"),
        ("FLYTE_SLURM_API_VERSION", "42"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("FLYTE_SLURM_API_VERSION") && e.contains("auto") && e.contains("v0.0.46"),
        "{e}"
    );
}

#[test]
fn malformed_upload_ceiling_is_kept_for_the_task_to_fail_on() {
    let c = load(&[("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES", "lots")]).unwrap();
    assert!(
        matches!(c.upload_max_bytes, UploadLimit::Malformed(ref m) if m.contains("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES"))
    );
    let c = load(&[("FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES", "0")]).unwrap();
    assert_eq!(c.upload_max_bytes, UploadLimit::Unlimited);
}

#[test]
fn task_credentials_follow_the_policy() {
    let mut c = load(&[("FLYTE_SLURM_RESTD_URL", "http://r:1")]).unwrap();
    let mut secrets = HashMap::new();
    secrets.insert("ssh_private_key".to_string(), "-----BEGIN".to_string());
    assert_eq!(
        c.task_credential(&secrets).unwrap(),
        None,
        "SSH-era secrets are ignored"
    );
    secrets.insert(
        TASK_TOKEN_SECRET.to_string(),
        "SLURM_JWT=user.token".to_string(),
    );
    let e = c.task_credential(&secrets).unwrap_err();
    assert!(
        e.contains("FLYTE_SLURM_ALLOW_TASK_CREDENTIALS") && !e.contains("user.token"),
        "{e}"
    );
    c.allow_task_credentials = true;
    assert_eq!(
        c.task_credential(&secrets).unwrap(),
        Some(Secret::new("user.token"))
    );
}

#[test]
fn units() {
    assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
    assert!(parse_duration("-1").is_err());
    assert_eq!(parse_bytes("100").unwrap(), 100);
    assert_eq!(parse_bytes("500MB").unwrap(), 500_000_000);
    assert_eq!(parse_bytes("2GB").unwrap(), 2_000_000_000);
    assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
    assert!(parse_bytes("5 parsecs").is_err());
}

#[test]
fn log_links_are_parsed_and_a_bad_one_names_the_variable() {
    let env = |k: &str| match k {
        "FLYTE_SLURM_LOG_LINKS" => Some("OnDemand=https://ood.example/{job_id}".to_string()),
        _ => None,
    };
    let cfg = DeploymentConfig::load_with(&env, None).unwrap();
    assert_eq!(cfg.log_links.len(), 1);
    let bad = |k: &str| match k {
        "FLYTE_SLURM_LOG_LINKS" => Some("no-equals-sign".to_string()),
        _ => None,
    };
    let e = DeploymentConfig::load_with(&bad, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("FLYTE_SLURM_LOG_LINKS"), "{e}");
}

#[test]
fn job_files_retention() {
    let base = [("FLYTE_SLURM_RESTD_URL", "http://restd:6820")];
    assert_eq!(
        load(&base).unwrap().job_files_retention,
        Some(Duration::from_secs(7 * 86_400))
    );
    for (v, want) in [
        ("12h", Some(Duration::from_secs(43_200))),
        ("off", None),
        ("0", None),
    ] {
        let c = load(&[base[0], ("FLYTE_SLURM_JOB_FILES_RETENTION", v)]).unwrap();
        assert_eq!(c.job_files_retention, want, "{v}");
    }
    let e = load(&[base[0], ("FLYTE_SLURM_JOB_FILES_RETENTION", "a week")])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("FLYTE_SLURM_JOB_FILES_RETENTION=\"a week\""),
        "{e}"
    );
    assert!(e.contains("7d"), "{e}");
}

#[test]
fn submit_pacing_settings() {
    let base = [("FLYTE_SLURM_RESTD_URL", "http://restd:6820")];
    let c = load(&base).unwrap();
    assert_eq!(c.submit_wait, DEFAULT_SUBMIT_WAIT);
    assert_eq!(c.submits_in_flight, DEFAULT_SUBMITS_IN_FLIGHT);
    let c = load(&[base[0], ("FLYTE_SLURM_SUBMIT_WAIT", "0")]).unwrap();
    assert_eq!(
        c.submit_wait,
        Duration::ZERO,
        "0: every CreateTask answers deferred"
    );
    let c = load(&[base[0], ("FLYTE_SLURM_SUBMITS_IN_FLIGHT", "2")]).unwrap();
    assert_eq!(c.submits_in_flight, 2);
    assert_eq!(c.check_every, DEFAULT_CHECK_EVERY);
    let c = load(&[base[0], ("FLYTE_SLURM_CHECK_EVERY", "3s")]).unwrap();
    assert_eq!(c.check_every, Duration::from_secs(3));
    let c = load(&[base[0], ("FLYTE_SLURM_CHECK_EVERY", "0")]).unwrap();
    assert_eq!(c.check_every, Duration::ZERO, "0: each check at once");
    for bad in ["6s", "soon"] {
        let e = load(&[base[0], ("FLYTE_SLURM_CHECK_EVERY", bad)])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("FLYTE_SLURM_CHECK_EVERY="), "{bad}: {e}");
    }
    let e = load(&[base[0], ("FLYTE_SLURM_SUBMIT_WAIT", "12s")])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("FLYTE_SLURM_SUBMIT_WAIT=") && e.contains("10 s deadline"),
        "{e}"
    );
    for bad in ["0", "-1", "many"] {
        let e = load(&[base[0], ("FLYTE_SLURM_SUBMITS_IN_FLIGHT", bad)])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("FLYTE_SLURM_SUBMITS_IN_FLIGHT="),
            "{bad}: {e}"
        );
    }
}

#[test]
fn requeue_budget() {
    let base = [("FLYTE_SLURM_RESTD_URL", "http://restd:6820")];
    assert_eq!(load(&base).unwrap().requeue_budget, 3);
    for (v, want) in [("0", 0), ("7", 7), (" 2 ", 2)] {
        let c = load(&[base[0], ("FLYTE_SLURM_REQUEUE_BUDGET", v)]).unwrap();
        assert_eq!(c.requeue_budget, want, "{v}");
    }
    for bad in ["-1", "three", "1.5"] {
        let e = load(&[base[0], ("FLYTE_SLURM_REQUEUE_BUDGET", bad)])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("FLYTE_SLURM_REQUEUE_BUDGET="), "{bad}: {e}");
        assert!(e.contains("whole number of requeues"), "{bad}: {e}");
    }
}

#[test]
fn shutdown_grace() {
    assert_eq!(load(&[]).unwrap().shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
    for (v, want) in [
        ("5", 5_000),
        ("45s", 45_000),
        ("1m 30s", 90_000),
        ("0.5", 500),
    ] {
        let c = load(&[("FLYTE_SLURM_SHUTDOWN_GRACE", v)]).unwrap();
        assert_eq!(c.shutdown_grace, Duration::from_millis(want), "{v}");
    }
    for bad in ["0", "0s", "soon", "-3"] {
        let e = load(&[("FLYTE_SLURM_SHUTDOWN_GRACE", bad)])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("FLYTE_SLURM_SHUTDOWN_GRACE="), "{bad}: {e}");
    }
    let e = load(&[("FLYTE_SLURM_SHUTDOWN_GRACE", "0")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("above zero") && e.contains("terminationGracePeriodSeconds"),
        "{e}"
    );

    let path = Path::new("/etc/slurm-connector/clusters.toml");
    let c = file::parse(path, "shutdown_grace = \"25s\"\n").unwrap();
    assert_eq!(c.shutdown_grace, Duration::from_secs(25));
    let e = file::parse(path, "shutdown_grace = \"0\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`shutdown_grace`") && e.contains("above zero"),
        "{e}"
    );
}

#[test]
fn ca_file_from_the_environment() {
    let cfg = load(&[
        ("FLYTE_SLURM_RESTD_URL", "https://slurmrestd:6820"),
        ("FLYTE_SLURM_CA_FILE", "/etc/ssl/site-ca.pem"),
    ])
    .unwrap();
    assert_eq!(
        cfg.clusters["default"].ca_file.as_deref(),
        Some(std::path::Path::new("/etc/ssl/site-ca.pem"))
    );
}

/// TLS on the gRPC port takes both files or neither; half a pair names the missing one.
#[test]
fn tls_files_come_as_a_pair() {
    let d = load(&[
        ("FLYTE_SLURM_TLS_CERT_FILE", "/tls/tls.crt"),
        ("FLYTE_SLURM_TLS_KEY_FILE", "/tls/tls.key"),
        (
            "FLYTE_SLURM_INGRESS_POLICY",
            "NetworkPolicy slurm-connector",
        ),
    ])
    .unwrap();
    assert_eq!(
        d.server_tls,
        Some(ServerTlsFiles {
            cert: "/tls/tls.crt".into(),
            key: "/tls/tls.key".into()
        })
    );
    assert_eq!(
        d.ingress_policy.as_deref(),
        Some("NetworkPolicy slurm-connector")
    );
    let e = load(&[("FLYTE_SLURM_TLS_CERT_FILE", "/tls/tls.crt")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("FLYTE_SLURM_TLS_KEY_FILE"), "{e}");
    assert_eq!(load(&[]).unwrap().server_tls, None);
}
