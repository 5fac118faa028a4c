//! Outage drills for the alerts (issue 55): the chart's shipped PrometheusRule, run by promtool
//! over the metrics two connector replicas themselves exported while a mock cluster had one
//! outage. Each drill scrapes both replicas' `/metrics` at a steady pace, labels the samples as
//! the chart's ServiceMonitor would (`namespace`, `job`, `instance`), and hands them to
//! `promtool test rules` as one sample a minute, so a drill of seconds covers the rules' windows
//! and `for:` durations. Which alerts fired is read from promtool's `ALERTS` series:
//!
//! - slurmdbd down (slurmrestd answers its `/slurmdb/` paths 502): only
//!   SlurmConnectorSlurmdbdUnavailable fires, never SlurmConnectorSlurmctldErrors;
//! - slurmrestd behind a firewall that starts dropping packets (connects time out):
//!   SlurmConnectorSlurmrestdUnreachable fires within its `for:` of the first connect timeout
//!   (plus the scrape a new series needs for a rate), and neither slurmctld's nor slurmdbd's
//!   alert does;
//! - slurmctld throttling (late answers and 502s, as under `rl_enable`): neither
//!   SlurmConnectorSlurmrestdUnreachable nor SlurmConnectorSlurmctldErrors fires.
//!
//! The rules come from `deploy/validate_chart.py --prometheus-rules` (the chart rendered by Helm's
//! own engine with ci/observability-values.yaml); promtool from Debian's `prometheus` package.
//! Without either the drills skip, and fail where CI requires the `promtool` tier.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use crate::common;
use common::blackhole::Firewall;
use common::drill::*;
use common::skip::{Tier, skip};
use mock_slurmrestd::FaultConfig;

/// The labels the chart's ServiceMonitor scrape adds (release `slurm-connector` in `flyte`, as
/// `validate_chart.py --prometheus-rules` renders the rules).
const NAMESPACE: &str = "flyte";
const JOB: &str = "slurm-connector";
const POLL: Duration = Duration::from_millis(500);

/// promtool and the chart's rules (a promtool rule file), or the reason a drill cannot run.
fn tools() -> Result<(PathBuf, String), String> {
    let promtool = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
        .ok_or("promtool is not on PATH (Debian's `prometheus` package ships it)")?;
    let python = std::env::var("SLURM_CONNECTOR_PYTHON").map_err(|_| {
        "SLURM_CONNECTOR_PYTHON is unset (a python with helm-python-sdk: deploy/validate-chart.sh's venv)"
    })?;
    let out = std::process::Command::new(&python)
        .arg("deploy/validate_chart.py")
        .arg("--prometheus-rules")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{python} deploy/validate_chart.py --prometheus-rules failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((promtool, String::from_utf8(out.stdout).unwrap()))
}

/// One scrape of every replica: series (with the scrape's labels) -> value.
type Sample = BTreeMap<String, f64>;

/// Two replicas of the connector on one cluster, and what was scraped of them.
struct Drill {
    servers: Vec<Server>,
    samples: Vec<Sample>,
    every: Duration,
}

impl Drill {
    async fn start(cluster: slurm_connector::config::ClusterConfig, every: Duration) -> Drill {
        let mut servers = Vec::new();
        for _ in 0..2 {
            servers.push(Server::start(deployment(cluster.clone(), POLL)).await);
        }
        Drill {
            servers,
            samples: Vec::new(),
            every,
        }
    }

    /// Creates `n` tasks with `script(i)`, alternating between the replicas (attempts from
    /// `first`); GetTask of each, as Flyte's backend polls, until the drill ends.
    async fn create(&self, first: u32, n: usize, script: impl Fn(usize) -> String) {
        for i in 0..n {
            let server = &self.servers[i % 2];
            let mut c = server.client().await;
            let meta = create(&mut c, request(first + i as u32, &script(i)))
                .await
                .unwrap_or_else(|e| panic!("CreateTask {i}: {e}"));
            tokio::spawn(async move {
                loop {
                    let _ = get(&mut c, &meta).await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
        }
    }

    /// `n` scrapes, `every` apart.
    async fn scrape(&mut self, n: usize) {
        for _ in 0..n {
            let started = tokio::time::Instant::now();
            let mut sample = Sample::new();
            for (i, s) in self.servers.iter().enumerate() {
                let text = reqwest::get(format!("http://{}/metrics", s.metrics_addr))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                let scrape = format!(
                    r#"namespace="{NAMESPACE}",job="{JOB}",instance="slurm-connector-{i}""#
                );
                for line in text.lines().filter(|l| !l.starts_with('#')) {
                    let Some((series, value)) = line.rsplit_once(' ') else {
                        continue;
                    };
                    let series = match series.split_once('{') {
                        Some((name, rest)) if rest.starts_with('}') => {
                            format!("{name}{{{scrape}}}")
                        }
                        Some((name, rest)) => format!("{name}{{{scrape},{rest}"),
                        None => format!("{series}{{{scrape}}}"),
                    };
                    sample.insert(series, value.parse().unwrap());
                }
            }
            self.samples.push(sample);
            tokio::time::sleep_until(started + self.every).await;
        }
    }

    /// The sum over scrape `at` of `name`'s series whose labels contain each of `labels`.
    fn at(&self, at: usize, name: &str, labels: &[&str]) -> f64 {
        self.samples[at]
            .iter()
            .filter(|(s, _)| s.starts_with(&format!("{name}{{")))
            .filter(|(s, _)| labels.iter().all(|l| s.contains(l)))
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b)
    }

    /// [`Drill::at`] the last scrape.
    fn last(&self, name: &str, labels: &[&str]) -> f64 {
        self.at(self.samples.len() - 1, name, labels)
    }

    /// The first scrape where `name{labels}` had counted anything: its series exists from then
    /// on, and a rate over it is there from the next scrape (as in a real Prometheus).
    fn first(&self, name: &str, labels: &[&str]) -> Option<usize> {
        (0..self.samples.len()).find(|&i| self.at(i, name, labels) > 0.0)
    }

    /// Runs `promtool test rules` over the samples (one a minute, the first at 0m) with one
    /// `ALERTS` query per check: (PromQL over `ALERTS`, at minute, the `alertname`s it must
    /// return). Panics with promtool's report when a check fails.
    fn promtool(&self, (promtool, rules): &(PathBuf, String), checks: &[(&str, usize, &[&str])]) {
        let series: BTreeSet<&String> = self.samples.iter().flat_map(|s| s.keys()).collect();
        let input: Vec<serde_json::Value> = series
            .iter()
            .map(|name| {
                let values: Vec<String> = self
                    .samples
                    .iter()
                    .map(|s| s.get(*name).map_or("_".to_string(), |v| v.to_string()))
                    .collect();
                serde_json::json!({ "series": name, "values": values.join(" ") })
            })
            .collect();
        let tests: Vec<serde_json::Value> = checks
            .iter()
            .map(|(expr, minute, alerts)| {
                serde_json::json!({
                    "expr": expr,
                    "eval_time": format!("{minute}m"),
                    "exp_samples": alerts.iter().map(|a| serde_json::json!({
                        "labels": format!(r#"{{alertname="{a}"}}"#),
                        "value": 1,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let dir = common::fresh_dir("alert-drill");
        std::fs::write(dir.join("rules.json"), rules).unwrap();
        let test = serde_json::json!({
            "rule_files": ["rules.json"],
            "evaluation_interval": "1m",
            "tests": [{ "interval": "1m", "input_series": input, "promql_expr_test": tests }],
        });
        std::fs::write(
            dir.join("drill.json"),
            serde_json::to_string_pretty(&test).unwrap(),
        )
        .unwrap();
        let out = std::process::Command::new(promtool)
            .args(["test", "rules", "drill.json"])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool test rules {}: {}{}",
            dir.join("drill.json").display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    async fn stop(self) {
        for s in self.servers {
            s.stop().await;
        }
    }
}

/// The alerts that were firing at any evaluation of the last `minutes`, among `alerts` (a regex
/// of names), one sample per alert name.
fn fired(alerts: &str, minutes: usize) -> String {
    format!(
        r#"count by (alertname) (max_over_time(ALERTS{{alertstate="firing",alertname=~"{alerts}"}}[{minutes}m]))"#
    )
}

/// What the scrapes before the fault take: the counters exist and rates have two points.
const BEFORE: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmdbd_down_fires_only_the_slurmdbd_alert() {
    let tools = match tools() {
        Ok(t) => t,
        Err(reason) => return skip(Tier::Promtool, reason),
    };
    // SlurmdbdUnavailable's 15 minutes of `for:` after the first failed read, which comes within
    // a scrape or two of the outage, and the scrape a new series needs before it has a rate.
    const FOR: usize = 15;
    const DURING: usize = FOR + 5;
    let mock = Mock::start(
        "alerts-dbd",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let mut drill = Drill::start(
        mock.cluster(mock.static_auth(), None),
        Duration::from_secs(1),
    )
    .await;
    // Jobs ending all through the outage: each one's accounting is read from slurmdbd every
    // tick until it comes (up to accounting_wait, 60 s), as `accounting_usages`; a few running
    // on, polled from slurmctld.
    drill
        .create(0, 16, |i| format!("#!/bin/bash\nsleep {}\n", 4 + i))
        .await;
    drill.scrape(BEFORE).await;
    mock.handle.faults().set(FaultConfig {
        slurmdbd_down: true,
        ..FaultConfig::default()
    });
    drill.scrape(DURING).await;

    let dbd_502 = drill.last(
        "slurm_connector_slurmrestd_requests_total",
        &[r#"daemon="slurmdbd""#, r#"status="502""#],
    );
    let usages_502 = drill.last(
        "slurm_connector_slurmrestd_requests_total",
        &[r#"operation="accounting_usages""#, r#"status="502""#],
    );
    let ctld_5xx = ["500", "502", "503", "504"]
        .iter()
        .map(|s| {
            drill.last(
                "slurm_connector_slurmrestd_requests_total",
                &[r#"daemon="slurmctld""#, &format!(r#"status="{s}""#)],
            )
        })
        .fold(0.0, |a, b| a + b);
    println!(
        "DRILL alerts slurmdbd down: {dbd_502} slurmdbd 502s ({usages_502} of accounting_usages), \
         {ctld_5xx} slurmctld 5xx, {} scrapes",
        drill.samples.len()
    );
    assert!(
        usages_502 > 0.0,
        "the tracker's accounting reads never met slurmdbd down"
    );
    assert_eq!(ctld_5xx, 0.0);
    let end = drill.samples.len() - 1;
    let first = drill
        .first(
            "slurm_connector_slurmrestd_requests_total",
            &[r#"daemon="slurmdbd""#, r#"status="502""#],
        )
        .unwrap();
    assert!(
        first + 1 + FOR <= end,
        "slurmdbd's first 502 came at scrape {first}, too late for the alert's `for:` by scrape {end}"
    );
    drill.promtool(
        &tools,
        &[
            (
                &fired(".*", end + 1),
                end,
                &["SlurmConnectorSlurmdbdUnavailable"],
            ),
            (
                r#"count by (alertname) (ALERTS{alertstate="firing"})"#,
                end,
                &["SlurmConnectorSlurmdbdUnavailable"],
            ),
        ],
    );
    drill.stop().await;
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packet_dropping_firewall_fires_slurmrestd_unreachable() {
    let tools = match tools() {
        Ok(t) => t,
        Err(reason) => return skip(Tier::Promtool, reason),
    };
    // SlurmrestdUnreachable's 10 minutes of `for:`, counted from the first connect that timed
    // out. Before it, each kept-alive connection of a replica's pool waits out its request
    // timeout once (status="timeout": a connection made, the firewall not known yet), as behind
    // a real firewall; so the drill scrapes until the first connect timeout, then the `for:` and
    // two more. Timeouts of a second or less (FLYTE_SLURM_CONNECT_TIMEOUT,
    // FLYTE_SLURM_REQUEST_TIMEOUT), so that with a scrape a "minute" the failures come as often
    // within the rules' windows as the defaults' (3 s, 8 s) do within real minutes.
    const FOR: usize = 10;
    const POOL_DRAINED_WITHIN: usize = 20;
    let mock = Mock::start(
        "alerts-fw",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let mut firewall = Firewall::forwarding(
        mock.handle
            .url()
            .trim_start_matches("http://")
            .parse()
            .unwrap(),
    )
    .await;
    let cluster = slurm_connector::config::ClusterConfig {
        restd_url: url::Url::parse(&firewall.url()).unwrap(),
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_secs(1),
        ..mock.cluster(mock.static_auth(), None)
    };
    let mut drill = Drill::start(cluster, Duration::from_secs(2)).await;
    drill
        .create(100, 8, |_| "#!/bin/bash\nsleep 600\n".to_string())
        .await;
    drill.scrape(BEFORE).await;
    let onset = drill.samples.len();
    for status in ["unreachable", "timeout", "closed"] {
        assert_eq!(
            drill.last(
                "slurm_connector_slurmrestd_requests_total",
                &[&format!(r#"status="{status}""#)],
            ),
            0.0,
            "requests were {status} before the firewall dropped anything"
        );
    }
    firewall.drop_packets().await;
    let unreachable_at = |d: &Drill| {
        d.last(
            "slurm_connector_slurmrestd_requests_total",
            &[r#"status="unreachable""#],
        )
    };
    while unreachable_at(&drill) == 0.0 && drill.samples.len() < onset + POOL_DRAINED_WITHIN {
        drill.scrape(1).await;
    }
    drill.scrape(FOR + 2).await;

    let unreachable = drill.last(
        "slurm_connector_slurmrestd_requests_total",
        &[r#"status="unreachable""#],
    );
    let late = drill.last(
        "slurm_connector_slurmrestd_requests_total",
        &[r#"status="timeout""#],
    );
    let throttled = drill.last("slurm_connector_submit_throttle_signals", &[]);
    println!(
        "DRILL alerts firewall: {unreachable} requests found no connection (connect timeouts), \
         {late} timed out on connections made before, {throttled} throttle signals, {} scrapes",
        drill.samples.len()
    );
    assert!(unreachable > 0.0, "no request met the firewall");
    assert_eq!(throttled, 0.0, "connect timeouts were taken for throttling");
    let end = drill.samples.len() - 1;
    let first = drill
        .first(
            "slurm_connector_slurmrestd_requests_total",
            &[r#"status="unreachable""#],
        )
        .unwrap();
    println!(
        "DRILL alerts firewall: the first connect timeout {} scrapes ({:?}) into the outage",
        first - onset,
        drill.every * (first - onset) as u32
    );
    // The scrape a new series needs before it has a rate.
    let firing_by = first + 1 + FOR;
    assert!(
        firing_by <= end,
        "the first connect timeout came at scrape {first}, too late for the alert's `for:` by scrape {end}"
    );
    drill.promtool(
        &tools,
        &[
            // Firing within its `for:` of the first connect timeout.
            (
                r#"count by (alertname) (ALERTS{alertstate="firing",alertname="SlurmConnectorSlurmrestdUnreachable"})"#,
                firing_by,
                &["SlurmConnectorSlurmrestdUnreachable"],
            ),
            (
                &fired(
                    "SlurmConnectorSlurmctldErrors|SlurmConnectorSlurmdbdUnavailable",
                    end + 1,
                ),
                end,
                &[],
            ),
        ],
    );
    drill.stop().await;
    drop(firewall);
    mock.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmctld_throttling_fires_no_outage_alert() {
    let tools = match tools() {
        Ok(t) => t,
        Err(reason) => return skip(Tier::Promtool, reason),
    };
    // Longer than both outage alerts' 10 minutes of `for:`.
    const DURING: usize = 14;
    let mock = Mock::start(
        "alerts-rl",
        Duration::from_secs(600),
        FaultConfig::default(),
    )
    .await;
    let mut drill = Drill::start(
        mock.cluster(mock.static_auth(), None),
        Duration::from_millis(1500),
    )
    .await;
    drill
        .create(200, 4, |_| "#!/bin/bash\nsleep 600\n".to_string())
        .await;
    drill.scrape(BEFORE).await;
    // slurmctld's rate limiting as slurmrestd shows it: BACKOFF, which slurmrestd retries by
    // itself, so answers come late (over the 2 s that counts as throttled) or as a 502.
    mock.handle.faults().set(FaultConfig {
        latency_ms: 2500,
        error_rate: 0.4,
        error_statuses: vec![502],
        operations: ["submit", "jobs_state", "jobs", "job_update"]
            .map(String::from)
            .to_vec(),
        ..FaultConfig::default()
    });
    // Tasks keep coming meanwhile, as a busy site's do: their submits meet the throttling.
    let creating = {
        let mut c = drill.servers[0].client().await;
        tokio::spawn(async move {
            for i in 0.. {
                let _ = create(&mut c, request(300 + i, "#!/bin/bash\ntrue\n")).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    drill.scrape(DURING).await;
    creating.abort();

    let ctld_502 = drill.last(
        "slurm_connector_slurmrestd_requests_total",
        &[r#"daemon="slurmctld""#, r#"status="502""#],
    );
    let throttled = drill.last("slurm_connector_submit_throttle_signals", &[]);
    let unreachable = drill.last(
        "slurm_connector_slurmrestd_requests_total",
        &[r#"status="unreachable""#],
    );
    println!(
        "DRILL alerts throttling: {ctld_502} slurmctld 502s, {throttled} throttle signals, \
         {unreachable} unreachable, {} scrapes",
        drill.samples.len()
    );
    assert!(
        ctld_502 > 0.0 && throttled > 0.0,
        "the drill did not throttle"
    );
    assert_eq!(unreachable, 0.0);
    let end = drill.samples.len() - 1;
    drill.promtool(
        &tools,
        &[(
            &fired(
                "SlurmConnectorSlurmrestdUnreachable|SlurmConnectorSlurmctldErrors",
                end + 1,
            ),
            end,
            &[],
        )],
    );
    drill.stop().await;
    mock.stop().await;
}
