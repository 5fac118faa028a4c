//! Real tier: two live dev clusters side by side (own ports, own chroots), one `slurm-connector
//! serve` configured with both (`default_cluster` the one `dev-cluster run` exported, tasks
//! selecting the other with `custom.connection.cluster`). The default cluster's slurmctld is
//! stopped for a minute while tasks run on both:
//! - the other cluster's tasks are untouched: created, run and SUCCEEDED during the outage, their
//!   GetTask latency as before it (a slurmrestd that answers only after its 10 s connect timeout
//!   must not hold another cluster's answers), their phases never going back;
//! - the down cluster's tasks keep their last state (RUNNING) with a message naming that cluster
//!   as unreachable, and SUCCEED once it is back. 0 GetTask errors throughout.
//!
//! Needs a second cluster up beside the first, named by `SLURM_DEV_CLUSTER_OTHER_RELEASE` (its
//! `env` is read through `SLURM_DEV_CLUSTER_SCRIPT`); only the first one's slurmctld is stopped:
//! `dev-cluster --release 24.11 up; SLURM_DEV_CLUSTER_OTHER_RELEASE=24.11 dev-cluster --release
//! 26.05 --min-job-age 5 run cargo test --test real_two_clusters`

mod common;

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::RequestExt;
use common::drill::{Grpc, Phases, ServeProcess, get, percentiles};
use common::skip::{Tier, skip};
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::core::task_execution::Phase;

/// The whole test's bound (it takes ~2 min).
const DEADLINE: Duration = Duration::from_secs(6 * 60);
const OUTAGE: Duration = Duration::from_secs(60);

/// The other cluster's `dev-cluster env`, as a map.
async fn other_env(c: &support::Cluster) -> Option<HashMap<String, String>> {
    let Some(release) = support::var("SLURM_DEV_CLUSTER_OTHER_RELEASE") else {
        skip(
            Tier::TwoClusters,
            "SLURM_DEV_CLUSTER_OTHER_RELEASE is not set: bring a second dev cluster up beside the \
             first (`dev-cluster --release 24.11 up`) and name its release there",
        );
        return None;
    };
    assert_ne!(
        release, c.release,
        "SLURM_DEV_CLUSTER_OTHER_RELEASE must name another release than the exported cluster's"
    );
    let out = common::output_within(
        tokio::process::Command::new(&c.script).args([
            "--release",
            &release,
            "--cache",
            &c.cache,
            "env",
        ]),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        out.status.success(),
        "the {release} cluster is not up (SLURM_DEV_CLUSTER_OTHER_RELEASE): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `export K=V`, V quoted by printf %q: the dev cluster's values hold no characters it escapes.
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn cluster_toml(name: &str, env: &HashMap<String, String>) -> String {
    let get = |k: &str| {
        env.get(k)
            .unwrap_or_else(|| panic!("{k} missing from {name}'s env"))
    };
    let (prefix, local) = get("FLYTE_SLURM_SHARED_MOUNTS")
        .split_once('=')
        .expect("FLYTE_SLURM_SHARED_MOUNTS is prefix=path");
    format!(
        "[clusters.{name}]\nrestd_url = {:?}\nusername = {:?}\njwt_key_file = {:?}\n\
         working_dir = {:?}\nshared_mounts = {{ {prefix:?} = {local:?} }}\n",
        get("FLYTE_SLURM_RESTD_URL"),
        get("FLYTE_SLURM_USERNAME"),
        get("FLYTE_SLURM_JWT_KEY_FILE"),
        get("FLYTE_SLURM_WORKING_DIR"),
    )
}

fn task(tag: &str, i: usize, secs: u32, cluster: Option<&str>) -> CreateTaskRequest {
    let mut r = common::request("script_no_io.pb");
    r.template
        .as_mut()
        .unwrap()
        .custom
        .as_mut()
        .unwrap()
        .fields
        .remove("sbatch");
    let r = r
        .script(&format!("#!/bin/bash\nsleep {secs}\n"))
        .run_name(&support::unique(&format!("{tag}{i}")));
    match cluster {
        Some(c) => r.connection_cluster(c),
        None => r,
    }
}

async fn create(g: &mut Grpc, req: CreateTaskRequest) -> Vec<u8> {
    common::drill::create(g, req)
        .await
        .unwrap_or_else(|e| panic!("CreateTask: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_down_leaves_the_other_untouched() {
    let Some(c) = support::cluster() else { return };
    let Some(other) = other_env(&c).await else {
        return;
    };
    let mine: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("FLYTE_SLURM_") || k.starts_with("SLURM_DEV_CLUSTER_"))
        .collect();
    let other_name = other["SLURM_DEV_CLUSTER_NAME"].clone();
    let dir = common::fresh_dir("two-clusters");
    let config = dir.join("clusters.toml");
    std::fs::write(
        &config,
        format!(
            "default_cluster = {:?}\npoll_interval = \"1s\"\n\n{}\n{}",
            c.name,
            cluster_toml(&c.name, &mine),
            cluster_toml(&other_name, &other)
        ),
    )
    .unwrap();
    let port = common::free_port();
    let serve = ServeProcess::spawn(
        port,
        &[
            ("FLYTE_SLURM_CONFIG", config.display().to_string()),
            ("FLYTE_SLURM_JOB_FILES_RETENTION", "off".into()),
        ],
        &dir.join("serve.log"),
    );
    serve.wait_listening();
    let mut g = common::drill::connect(([127, 0, 0, 1], port).into()).await;
    let began = Instant::now();
    let until = began + DEADLINE;

    // The default cluster's tasks run through the outage; the other's run before it (the
    // baseline of their GetTask latency) and during it.
    let mut down_tasks = Vec::new();
    for i in 0..4 {
        down_tasks.push(create(&mut g, task("down", i, 25, None)).await);
    }
    let phases = Arc::new(Mutex::new(Phases::default()));
    let follow = |g: &Grpc, metas: Vec<Vec<u8>>, tag: &'static str| {
        let (g, phases) = (g.clone(), phases.clone());
        tokio::spawn(async move {
            let (mut lat, mut errors, mut named) = (Vec::new(), Vec::new(), 0usize);
            let mut g = g;
            let mut done = vec![false; metas.len()];
            while done.iter().any(|d| !d) {
                assert!(
                    Instant::now() < until,
                    "{tag} tasks not terminal by {DEADLINE:?}"
                );
                for (i, m) in metas.iter().enumerate() {
                    if done[i] {
                        continue;
                    }
                    let (r, l) = get(&mut g, m).await;
                    lat.push((Instant::now(), l));
                    match r {
                        Ok(r) => {
                            let p = Phase::of(r.phase);
                            named += usize::from(r.message.contains("unreachable"));
                            phases.lock().unwrap().see(
                                i + if tag == "down" { 1000 } else { 0 },
                                p,
                                Phase::Succeeded,
                                &r.message,
                            );
                            done[i] = p.is_terminal();
                        }
                        Err(e) => errors.push(format!("{tag} task {i}: {e}")),
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            (lat, errors, named)
        })
    };
    let base_metas: Vec<_> = {
        let mut v = Vec::new();
        for i in 0..4 {
            v.push(create(&mut g, task("base", i, 2, Some(&other_name))).await);
        }
        v
    };
    let baseline = follow(&g, base_metas, "other").await.unwrap();
    common::drill::wait_all(
        &mut g,
        &down_tasks,
        &[Phase::Running],
        Duration::from_secs(60),
    )
    .await;
    let down_follower = follow(&g, down_tasks.clone(), "down");

    // A minute without the default cluster's slurmctld.
    c.dev_cluster(&["daemon", "stop", "slurmctld"]).await;
    let outage_began = Instant::now();
    let mut during = Vec::new();
    for i in 0..6 {
        during.push(create(&mut g, task("during", i, 2, Some(&other_name))).await);
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let during_follow = follow(&g, during, "other").await.unwrap();
    let other_done_in = outage_began.elapsed();
    // The down cluster's tasks late in the outage: their last state, naming the cluster. (Not
    // at once: the tracker calls the cluster unreachable when a tick's `jobs/state` failed, and
    // slurmrestd answers that only after its 10 s connect timeout, the client's request timeout
    // and retries first: ~25 s measured.)
    tokio::time::sleep((OUTAGE * 3 / 4).saturating_sub(outage_began.elapsed())).await;
    let mut stale = Vec::new();
    for m in &down_tasks {
        let (r, _) = get(&mut g, m).await;
        let r = r.expect("GetTask of a task of the down cluster");
        stale.push((Phase::of(r.phase), r.message));
    }
    tokio::time::sleep(OUTAGE.saturating_sub(outage_began.elapsed())).await;
    c.dev_cluster(&["daemon", "start", "slurmctld"]).await;
    let outage = outage_began.elapsed();
    let (down_lat, down_errors, down_named) = down_follower.await.unwrap();

    let ms = |v: &[(Instant, Duration)]| percentiles(v.iter().map(|(_, l)| *l).collect());
    let (b50, b99, bmax) = ms(&baseline.0);
    let (d50, d99, dmax) = ms(&during_follow.0);
    let (x50, x99, xmax) = ms(&down_lat);
    eprintln!(
        "DRILL two clusters: {} (default) slurmctld down {:.0}s; {} tasks of {other_name} \
         created and SUCCEEDED during it in {:.0}s; GetTask of {other_name} p50/p99/max before \
         {b50:?}/{b99:?}/{bmax:?}, during {d50:?}/{d99:?}/{dmax:?}; of {} (down) {x50:?}/{x99:?}/{xmax:?}, \
         {down_named} answers naming it unreachable; errors {}; {:.0}s in all",
        c.name,
        outage.as_secs_f64(),
        6,
        other_done_in.as_secs_f64(),
        c.name,
        baseline.1.len() + during_follow.1.len() + down_errors.len(),
        began.elapsed().as_secs_f64()
    );
    let wrong = phases.lock().unwrap().wrong.clone();
    assert!(wrong.is_empty(), "wrong or regressing phases: {wrong:#?}");
    for errors in [&baseline.1, &during_follow.1, &down_errors] {
        assert!(errors.is_empty(), "GetTask errors: {errors:#?}");
    }
    assert!(
        other_done_in < OUTAGE,
        "the other cluster's tasks did not all end during the outage ({other_done_in:?})"
    );
    // Untouched: well within Flyte's 10 s, and no slower than a second (the down cluster's
    // slurmrestd answers after 10 s: one wait on it would show here).
    assert!(
        dmax < Duration::from_secs(1),
        "GetTask of {other_name} during the outage: max {dmax:?}"
    );
    for (p, m) in &stale {
        assert_eq!(*p, Phase::Running, "a task of the down cluster: {m}");
        assert!(
            m.contains(&format!("cluster {}", c.name)) && m.contains("unreachable"),
            "a task of the down cluster says which cluster is unreachable: {m}"
        );
    }
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
}
