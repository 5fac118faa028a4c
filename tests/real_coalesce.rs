//! Real tier: a `flyte.map`-shaped fan-out coalesced into job arrays
//! (`FLYTE_SLURM_COALESCE_WINDOW`) through the connector's gRPC service on the dev cluster:
//! - 200 CreateTasks of one `slurm_script` task, 50 in flight, each its own execution: a few
//!   held submits (at most one array per 50 elements), every task its own element, its own log
//!   with its own environment; one element exiting 3 is the only RETRYABLE_FAILED, its message
//!   its own stderr; a retried CreateTask of an element finds it; the retry of the failed one
//!   (attempt 1) is a job of its own;
//! - a map of the plugin's preprocess task: each element's uploaded outputs follow its own inputs;
//! - DeleteTask of one element leaves the others running;
//! - a map under slurmctld's rate limiting is answered at once, each task its element;
//! - the default (`auto`) coalesces on every release with slurmdbd, the keys in the array's
//!   comment where slurm.conf shows slurmdbd keeping it, else in its name;
//! - elements are found after their array left slurmctld, by a connector that never saw them;
//! - an array that loses its keys to another replica's array left held releases that one.
//!
//! Skipped (with the reason) when the dev-cluster environment is not exported.

mod common;
use common::RequestExt;
use common::server::Server;

#[path = "real_slurm/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "real_slurm/connector.rs"]
mod connector;
use connector::{deployment, get, poll_until, request, terminal};

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::core::task_execution::Phase;
use slurm_connector::service::{Decoded, ResourceMeta, decode_meta};

const WINDOW: Duration = Duration::from_millis(200);

fn meta_of(meta: &[u8]) -> ResourceMeta {
    match decode_meta(meta).unwrap() {
        Decoded::Ours(m) => m,
        Decoded::Python { .. } => panic!(),
    }
}

fn run_name(req: &mut CreateTaskRequest) -> String {
    common::request::execution_id(req).name.clone()
}

/// Every element prints its own run name; the one whose run is named `*-fail-*` fails.
const SCRIPT: &str = "#!/bin/bash\n#SBATCH --time=2\n\
    case \"$FLYTE_INTERNAL_EXECUTION_ID\" in *-fail-*) echo \"$FLYTE_INTERNAL_EXECUTION_ID broke\" >&2; exit 3;; esac\n\
    echo \"ran $FLYTE_INTERNAL_EXECUTION_ID\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_of_200_is_a_few_arrays_and_every_element_is_its_own_task() {
    let Some(c) = support::cluster() else { return };
    let mut d = deployment(&c, 3);
    d.coalesce = slurm_connector::config::Coalesce::Window(WINDOW);
    let server = Server::start(d).await;
    let g = server.client().await;
    let n = 200;
    let mut reqs: Vec<(String, CreateTaskRequest)> = (0..n)
        .map(|i| {
            let tag = if i == 7 {
                format!("map-fail-{i}")
            } else {
                format!("map-{i}")
            };
            let mut r = request(&tag, SCRIPT);
            (run_name(&mut r), r)
        })
        .collect();
    let retry_of_fail = reqs[7].1.clone();
    let by_run: std::collections::HashMap<String, CreateTaskRequest> =
        reqs.iter().cloned().collect();
    let created: Vec<(String, Vec<u8>)> = futures::stream::iter(reqs.drain(..))
        .map(|(run, req)| {
            let mut g = g.clone();
            async move {
                let meta = g
                    .create_task(req)
                    .await
                    .unwrap_or_else(|e| panic!("CreateTask of {run}: {e}"))
                    .into_inner()
                    .resource_meta;
                (run, meta)
            }
        })
        .buffer_unordered(50)
        .collect()
        .await;
    let metas: Vec<(String, ResourceMeta, Vec<u8>)> = created
        .into_iter()
        .map(|(run, raw)| (run, meta_of(&raw), raw))
        .collect();
    // A CreateTask that reaches the connector just after its batch went out, with none after it
    // within the quiet gap, goes out as a job of its own (a batch of one costs slurmctld what a
    // job does); on a loaded machine the gRPC arrivals of a round of 50 can straggle so. And a
    // submit slower than the submit wait is answered deferred (job 0), found by GetTask later.
    // Both are right answers; what the map must show is that nearly all of it coalesced.
    let arrays: BTreeSet<u32> = metas
        .iter()
        .filter(|(_, m, _)| m.element.is_some())
        .map(|(_, m, _)| m.job_id.0)
        .collect();
    let not_elements: Vec<(&String, &ResourceMeta)> = metas
        .iter()
        .filter(|(_, m, _)| m.element.is_none())
        .map(|(run, m, _)| (run, m))
        .collect();
    assert!(
        not_elements.len() <= n / 10,
        "at most {} of {n} tasks outside an array (stragglers, deferred): {not_elements:?}",
        n / 10
    );
    // Goal: at most one submit per 50 elements (issue 27; 50 in flight), or per 22 where the
    // keys go in the array's name (`render::NAME_KEYS_MAX`: 24.11 shows no slurm.conf); twice
    // that is allowed for a loaded machine whose CreateTasks straggle past the window.
    let keys_in_comment = c
        .client(c.minted(&c.user), Some(&c.user))
        .conf()
        .await
        .unwrap()
        .is_some_and(|c| c.keeps_job_comments());
    let per_array = if keys_in_comment {
        50
    } else {
        slurm_connector::render::NAME_KEYS_MAX
    };
    assert!(
        arrays.len() <= 2 * n.div_ceil(per_array),
        "{} arrays for {n} elements, at most {per_array} an array: {arrays:?}",
        arrays.len()
    );
    eprintln!(
        "{n} tasks: {} job arrays {arrays:?}, {} outside an array",
        arrays.len(),
        not_elements.len()
    );

    // A retried CreateTask finds its element.
    let (again_run, first, _) = metas
        .iter()
        .find(|(run, m, _)| m.element.is_some() && !run.contains("-fail-"))
        .expect("an element");
    let mut g2 = g.clone();
    let found = meta_of(
        &g2.create_task(by_run[again_run].clone())
            .await
            .unwrap()
            .into_inner()
            .resource_meta,
    );
    assert_eq!((found.job_id, found.element), (first.job_id, first.element));

    // Followed 50 at a time, as the backend polls its tasks.
    let ends: Vec<_> = futures::stream::iter(&metas)
        .map(|(_, _, raw)| {
            let mut g = g.clone();
            async move { poll_until(&mut g, raw, 300, terminal, |_| {}).await }
        })
        .buffered(50)
        .collect()
        .await;
    // Every task's terminal answer carries what it used (issue 39): the map's totals are
    // sacct's, and the connector read them in one slurmdbd request per tick, none per GetTask.
    let accounting = accounting_totals(&ends);
    let ids: BTreeSet<u32> = metas.iter().map(|(_, m, _)| m.job_id.0).collect();
    let sacct = sacct_totals(&c, &ids).await;
    eprintln!("accounting of {n} tasks: connector {accounting:?}, sacct {sacct:?}");
    for (what, ours, theirs) in [
        ("ElapsedRaw", accounting.0, sacct.0),
        ("CPUTimeRAW", accounting.1, sacct.1),
    ] {
        assert!(
            (ours - theirs).abs() <= 0.01 * theirs.max(1.0),
            "{what}: the tasks' accounting sums to {ours}, sacct to {theirs}"
        );
    }
    let reads = server
        .metric(
            "slurm_connector_slurmrestd_requests_total",
            &["operation=\"accounting_usages\""],
        )
        .await;
    let ticks = server
        .metric("slurm_connector_poll_tick_seconds_count", &[])
        .await;
    let gets = server
        .metric(
            "flyte_connector_requests_success_total",
            &["operation=\"get\""],
        )
        .await;
    eprintln!("slurmdbd accounting reads: {reads} over {ticks} poll ticks and {gets} GetTasks");
    assert!(
        reads >= 1.0 && reads <= ticks,
        "{reads} accounting reads for {ticks} ticks: at most one a tick, whatever GetTask does"
    );
    for ((run, m, _), r) in metas.iter().zip(ends) {
        if run.contains("-fail-") {
            assert_eq!(
                r.phase,
                Phase::RetryableFailed as i32,
                "{run}: {}",
                r.message
            );
            assert!(
                r.message.contains(&format!("{run} broke")),
                "its own stderr: {}",
                r.message
            );
        } else {
            assert_eq!(r.phase, Phase::Succeeded as i32, "{run}: {}", r.message);
            let out = c.workdir_local.join(format!("{}.out", m.job_name));
            let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{out:?}: {e}"));
            assert_eq!(
                text,
                format!("ran {run}\n"),
                "its own log, its own environment"
            );
        }
    }

    // The failed element's retry (attempt 1) goes out alone.
    let retry = retry_of_fail.attempt(1);
    let mut g3 = g.clone();
    let m = meta_of(
        &g3.create_task(retry)
            .await
            .unwrap()
            .into_inner()
            .resource_meta,
    );
    assert_eq!(m.element, None, "a retry is a job of its own");
    assert!(!arrays.contains(&m.job_id.0));
    server.stop().await;
}

/// The fields of `custom_info.accounting` with a figure (besides its source and job count).
fn accounting_fields(r: &slurm_connector::proto::connector::Resource) -> serde_json::Value {
    let info = slurm_connector::proto::struct_to_json(r.custom_info.as_ref().expect("custom_info"));
    info.get("accounting")
        .cloned()
        .unwrap_or_else(|| panic!("no accounting in {info}: {}", r.message))
}

/// The tasks' summed `elapsed_seconds` and `cpu_seconds_allocated`, each task carrying at least
/// six accounting figures and the message line.
fn accounting_totals(ends: &[slurm_connector::proto::connector::Resource]) -> (f64, f64) {
    let mut totals = (0.0, 0.0);
    for r in ends {
        let a = accounting_fields(r);
        let figures = a
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, v)| !["source", "jobs"].contains(&k.as_str()) && !v.is_null())
            .count();
        assert!(figures >= 6, "{figures} accounting figures: {a}");
        assert!(
            r.message.contains("Slurm accounting: "),
            "the message says it: {}",
            r.message
        );
        totals.0 += a["elapsed_seconds"].as_f64().unwrap();
        totals.1 += a["cpu_seconds_allocated"].as_f64().unwrap();
    }
    totals
}

/// sacct's ElapsedRaw and CPUTimeRAW summed over the jobs (and every element of the arrays)
/// `ids`, once slurmdbd has them all.
async fn sacct_totals(c: &support::Cluster, ids: &BTreeSet<u32>) -> (f64, f64) {
    let list = ids
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let out = c
        .dev_cluster(&[
            "exec",
            "sacct",
            "-j",
            &list,
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,ElapsedRaw,CPUTimeRAW",
        ])
        .await;
    out.lines().fold((0.0, 0.0), |(e, cpu), l| {
        let f: Vec<&str> = l.split('|').collect();
        assert_eq!(f.len(), 3, "sacct line {l:?}");
        (
            e + f[1].parse::<f64>().unwrap(),
            cpu + f[2].parse::<f64>().unwrap(),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_one_element_leaves_the_others_running() {
    let Some(c) = support::cluster() else { return };
    let mut d = deployment(&c, 3);
    // A longer window than the others: its quiet gap (50 ms) lets a straggler join.
    d.coalesce = slurm_connector::config::Coalesce::Window(Duration::from_secs(2));
    let server = Server::start(d).await;
    let g = server.client().await;
    // A first CreateTask (another shape: its own job) takes the connector's index of the
    // cluster's jobs (a week of slurmdbd) and its coalescing decision, which on CI's loaded
    // machine once outlasted `submit_wait` for the burst below (all three answered deferred).
    g.clone()
        .create_task(request("del-warm", SCRIPT))
        .await
        .unwrap();
    let script = "#!/bin/bash\n#SBATCH --time=2\nsleep 25\n";
    let metas: Vec<Vec<u8>> = futures::future::join_all((0..3).map(|i| {
        let mut g = g.clone();
        async move {
            g.create_task(request(&format!("del-{i}"), script))
                .await
                .unwrap()
                .into_inner()
                .resource_meta
        }
    }))
    .await;
    let ms: Vec<ResourceMeta> = metas.iter().map(|m| meta_of(m)).collect();
    // The three CreateTasks go out together, but on a loaded machine one may reach the
    // connector after the quiet gap closed the batch (CI failed so once, 2026-12-04, with 26.05
    // beside 24.11's tier): it is then a job of its own, which is a right answer. What this test
    // needs is one array of at least two of them, one element of which is cancelled.
    let in_array = |i: usize| {
        ms.iter()
            .filter(|m| m.element.is_some() && m.job_id == ms[i].job_id)
            .count()
    };
    let victim = (0..3)
        .find(|&i| in_array(i) >= 2)
        .unwrap_or_else(|| panic!("no two of three concurrent CreateTasks in one array: {ms:?}"));
    let others: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
    let mut g1 = g.clone();
    poll_until(
        &mut g1,
        &metas[victim],
        120,
        |r| r.phase == Phase::Running as i32,
        |_| {},
    )
    .await;
    g1.delete_task(slurm_connector::proto::connector::DeleteTaskRequest {
        resource_meta: metas[victim].clone(),
        ..Default::default()
    })
    .await
    .expect("DeleteTask of an element");
    let r = poll_until(&mut g1, &metas[victim], 120, terminal, |_| {}).await;
    assert_eq!(r.phase, Phase::Aborted as i32, "{}", r.message);
    for &i in &others {
        let r = get(&mut g1, &metas[i]).await;
        assert!(
            !drill_terminal(r.phase),
            "task {i} still runs after element {victim} was cancelled: {}",
            r.message
        );
    }
    for &i in &others {
        let r = poll_until(&mut g1, &metas[i], 120, terminal, |_| {}).await;
        assert_eq!(r.phase, Phase::Succeeded as i32, "task {i}: {}", r.message);
    }
    server.stop().await;
}

/// The published plugin's preprocess task (typed inputs, declared File and Directory outputs
/// uploaded by the connector) as element `i` of a map: its own run, its own `n_shards` and
/// `dataset` inputs, its own `file://` output prefix; no partition/QOS/account and no 2 CPU /
/// 2G lines (the dev cluster is small).
fn preprocess_element(i: usize, store: &std::path::Path) -> (CreateTaskRequest, i64) {
    use slurm_connector::proto::core::{literal, primitive, scalar};
    let mut req = common::request("script_preprocess.pb");
    let custom = req.template.as_mut().unwrap().custom.as_mut().unwrap();
    custom.fields.remove("sbatch");
    let Some(prost_types::value::Kind::StringValue(script)) = &custom.fields["script"].kind else {
        panic!("the fixture has a script")
    };
    let script: String = script
        .lines()
        .filter(|l| !l.starts_with("#SBATCH --mem") && !l.starts_with("#SBATCH --cpus-per-task"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut req = req.script(&script);
    let shards = (i % 4 + 1) as i64;
    for nl in &mut req.inputs.as_mut().unwrap().literals {
        let value = match nl.name.as_str() {
            "n_shards" => primitive::Value::Integer(shards),
            "dataset" => primitive::Value::StringValue(format!("ds-{i}")),
            _ => continue,
        };
        nl.value.as_mut().unwrap().value = Some(literal::Value::Scalar(Box::new(
            slurm_connector::proto::core::Scalar {
                value: Some(scalar::Value::Primitive(
                    slurm_connector::proto::core::Primitive { value: Some(value) },
                )),
            },
        )));
    }
    common::request::execution_id(&mut req).name = support::unique(&format!("map-io-{i}"));
    req.output_prefix = format!("file://{}/{i}", store.display());
    (req, shards)
}

/// A map whose every element has its own inputs and its own declared outputs (the issue's
/// measure: "each with its own input and its own declared File output"): coalesced, and each
/// element's outputs, uploaded by the connector, match its own inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_elements_outputs_follow_its_own_inputs() {
    use slurm_connector::proto::core::{literal, scalar};
    let Some(c) = support::cluster() else { return };
    if !c.accounting {
        return; // without slurmdbd nothing coalesces
    }
    let store = std::env::temp_dir().join(support::unique("map-io-store"));
    std::fs::create_dir_all(&store).unwrap();
    let mut d = deployment(&c, 3);
    d.coalesce = slurm_connector::config::Coalesce::Window(WINDOW);
    let server = Server::start(d).await;
    let g = server.client().await;
    let n = 20;
    let created: Vec<(usize, i64, Vec<u8>)> = futures::stream::iter(0..n)
        .map(|i| {
            let mut g = g.clone();
            let (req, shards) = preprocess_element(i, &store);
            async move {
                let meta = g
                    .create_task(req)
                    .await
                    .unwrap_or_else(|e| panic!("CreateTask {i}: {e}"))
                    .into_inner()
                    .resource_meta;
                (i, shards, meta)
            }
        })
        .buffer_unordered(n)
        .collect()
        .await;
    let arrays: BTreeSet<u32> = created
        .iter()
        .map(|(_, _, m)| meta_of(m).job_id.0)
        .collect();
    assert!(
        created.iter().all(|(_, _, m)| meta_of(m).element.is_some()) && arrays.len() <= 2,
        "{n} elements in at most 2 arrays: {arrays:?}"
    );
    for (i, shards, meta) in &created {
        let mut g = g.clone();
        let r = poll_until(&mut g, meta, 300, terminal, |_| {}).await;
        assert_eq!(
            r.phase,
            Phase::Succeeded as i32,
            "element {i}: {}",
            r.message
        );
        let outs = r.outputs.as_ref().expect("outputs");
        let uri = |name: &str| -> String {
            let nl = outs.literals.iter().find(|l| l.name == name).unwrap();
            match &nl.value.as_ref().unwrap().value {
                Some(literal::Value::Scalar(s)) => match &s.value {
                    Some(scalar::Value::Blob(b)) => b.uri.clone(),
                    other => panic!("{name}: {other:?}"),
                },
                other => panic!("{name}: {other:?}"),
            }
        };
        let local = |u: String| std::path::PathBuf::from(u.strip_prefix("file://").unwrap());
        assert_eq!(
            std::fs::read_to_string(local(uri("stats"))).unwrap(),
            format!("{{\"rows\": {shards}}}\n"),
            "element {i}'s stats follow its own n_shards"
        );
        let files = std::fs::read_dir(local(uri("shards"))).unwrap().count() as i64;
        assert_eq!(files, *shards, "element {i}'s shards");
    }
    server.stop().await;
    let _ = std::fs::remove_dir_all(&store);
}

/// A map under slurmctld's rate limiting (`dev-cluster --rate-limit`: 30 RPCs, then 2 a second,
/// per user): coalesced, its 100 CreateTasks at 50 in flight cost a handful of RPCs, so none
/// fails, none is deferred, and each is answered with its element. (CI runs it in the
/// `--rate-limit` stanza: `cargo test --test real_coalesce throttled`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_map_is_coalesced_and_answered_at_once() {
    let Some(c) = support::cluster() else { return };
    if !c.rate_limited("real_coalesce").await {
        return;
    }
    let mut d = deployment(&c, 3);
    d.coalesce = slurm_connector::config::Coalesce::Window(WINDOW);
    let server = Server::start(d).await;
    let g = server.client().await;
    // Pending for an hour: nothing runs on the shared machine; cancelled at the end.
    let script = "#!/bin/bash\n#SBATCH --begin=now+1hour\ntrue\n";
    let n = 100;
    let began = std::time::Instant::now();
    let metas: Vec<Result<Vec<u8>, tonic::Status>> = futures::stream::iter(0..n)
        .map(|i| {
            let mut g = g.clone();
            async move {
                let mut r = tonic::Request::new(request(&format!("rl-{i}"), script));
                r.set_timeout(Duration::from_secs(10));
                g.create_task(r).await.map(|r| r.into_inner().resource_meta)
            }
        })
        .buffer_unordered(50)
        .collect()
        .await;
    let answered = began.elapsed();
    let metas: Vec<ResourceMeta> = metas
        .into_iter()
        .map(|m| meta_of(&m.expect("no CreateTask fails under the rate limit")))
        .collect();
    let jobs: BTreeSet<u32> = metas.iter().map(|m| m.job_id.0).collect();
    let arrays: BTreeSet<u32> = metas
        .iter()
        .filter(|m| m.element.is_some())
        .map(|m| m.job_id.0)
        .collect();
    // None deferred: the map's few RPCs fit the bucket. A straggler that reached the connector
    // after its batch went out is a job of its own (see the map of 200 above): a few at most.
    assert!(
        metas.iter().all(|m| m.deferred.is_none()),
        "every CreateTask answered with its job, none deferred: {metas:?}"
    );
    let alone = metas.iter().filter(|m| m.element.is_none()).count();
    assert!(
        alone <= n / 10,
        "{alone} of {n} outside an array: {metas:?}"
    );
    assert!(
        arrays.len() <= 2 * n / 50,
        "{} arrays: {arrays:?}",
        arrays.len()
    );
    eprintln!(
        "throttled map: {n} CreateTasks answered in {:.1}s as {} arrays",
        answered.as_secs_f64(),
        arrays.len()
    );
    let client = c.user_client();
    for j in jobs {
        let _ = client
            .cancel(slurm_connector::slurmrestd::JobId(j), None)
            .await;
    }
    server.stop().await;
}

/// The default (`auto`) coalesces a burst of one shape on every release with slurmdbd. Where
/// slurmrestd shows slurm.conf keeping job comments (`GET conf`, v0.0.45: 26.05 and later on the
/// dev cluster) the array's comment carries its elements' keys and its name stays readable; where
/// it cannot tell (24.11) or slurmdbd keeps no comment (`dev-cluster --default-store-flags`), the
/// keys are in the array's name, which slurmdbd always keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_coalesces_with_the_keys_where_slurmdbd_keeps_them() {
    let Some(c) = support::cluster() else { return };
    let d = deployment(&c, 3);
    assert_eq!(d.coalesce, slurm_connector::config::Coalesce::Auto);
    let client = c.client(c.minted(&c.user), Some(&c.user));
    let conf = client.conf().await.expect("GET conf, where there is one");
    let keys_in_comment = conf.as_ref().is_some_and(|c| c.keeps_job_comments());
    let server = Server::start(d).await;
    let g = server.client().await;
    let ms: Vec<ResourceMeta> = futures::future::join_all((0..8).map(|i| {
        let mut g = g.clone();
        async move {
            meta_of(
                &g.create_task(request(&format!("auto-{i}"), SCRIPT))
                    .await
                    .unwrap()
                    .into_inner()
                    .resource_meta,
            )
        }
    }))
    .await;
    let jobs: BTreeSet<u32> = ms.iter().map(|m| m.job_id.0).collect();
    if c.accounting {
        // A batch goes out once none joined it for a tenth of the window: on a loaded machine
        // the burst's last CreateTask can come after that, alone, and a batch of one is a job of
        // its own (seen once in CI: 7 elements and 1 job). At most one such straggler.
        let arrays: BTreeSet<u32> = ms
            .iter()
            .filter(|m| m.element.is_some())
            .map(|m| m.job_id.0)
            .collect();
        let alone = ms.iter().filter(|m| m.element.is_none()).count();
        assert!(
            jobs.len() <= 2 && !arrays.is_empty() && alone <= 1,
            "Slurm {}: a burst of 8 in at most 2 jobs, arrays but for one straggler: {ms:?}",
            c.release
        );
        for id in &arrays {
            let r = client
                .job(slurm_connector::slurmrestd::JobId(*id))
                .await
                .unwrap()
                .expect("the array is listed");
            assert_eq!(
                r.name.starts_with("flyte-keys="),
                !keys_in_comment,
                "Slurm {} (slurm.conf shown: {}, keeps job comments: {keys_in_comment}): the \
                 array's name {:?}, comment {:?}",
                c.release,
                conf.is_some(),
                r.name,
                r.comment
            );
        }
    } else {
        assert!(
            ms.iter().all(|m| m.element.is_none()) && jobs.len() == 8,
            "Slurm {}: without slurmdbd, 8 jobs of their own: {ms:?}",
            c.release
        );
    }
    server.stop().await;
}

/// Elements found after their array left slurmctld, by a connector that never saw them (a new
/// replica, a restart): GetTask answers from slurmdbd's records, and a CreateTask retried for
/// an element finds it by its key in slurmdbd's copy of the array's comment, or of its name and
/// its logs' file names (the default's choice, as above), never submitting it again. A burst of
/// 30, past the 22 keys a name holds: where the keys are not in the comment, the array carries
/// the rest in its logs' file names once the connector has seen slurmdbd keep stdio paths
/// (24.11: from its records, as slurm.conf is not shown), and the element past the name's is
/// the one retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elements_are_found_after_they_left_slurmctld() {
    let Some(c) = support::cluster() else { return };
    if !c.accounting {
        return; // without slurmdbd nothing coalesces
    }
    const N: usize = 30;
    let mut d = deployment(&c, 3);
    // Two seconds, not WINDOW: the quiet gap that closes a batch is then its longest (50 ms).
    d.coalesce = slurm_connector::config::Coalesce::Window(Duration::from_secs(2));
    let client = c.client(c.minted(&c.user), Some(&c.user));
    let keys_in_comment = client
        .conf()
        .await
        .expect("GET conf, where there is one")
        .is_some_and(|c| c.keeps_job_comments());
    let server = Server::start(d.clone()).await;
    let g = server.client().await;
    // A job of slurmdbd's first, and a lone CreateTask after it: the index's first listing
    // reads slurmdbd's week, whose records show whether it keeps stdio paths.
    for warm in ["aged-warm-0", "aged-warm-1"] {
        let raw = g
            .clone()
            .create_task(request(warm, SCRIPT))
            .await
            .unwrap()
            .into_inner()
            .resource_meta;
        let r = poll_until(&mut g.clone(), &raw, 180, terminal, |_| {}).await;
        assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    }
    // A batch goes out once none joined it for a tenth of the window (at most 50 ms): under CI's
    // two lanes on 2 cores a burst of 30 CreateTasks has been seen split below 22 (once in
    // ~10 runs). The test is about an element past the name's keys, so a split burst is run to
    // its end and another sent, at most three in all; a burst never coalesced still fails.
    let mut attempt = 0;
    let (reqs, metas, ms, arrays, largest) = loop {
        let reqs: Vec<CreateTaskRequest> = (0..N)
            .map(|i| request(&format!("aged-{attempt}-{i}"), SCRIPT))
            .collect();
        let metas: Vec<Vec<u8>> = futures::future::join_all(reqs.iter().cloned().map(|r| {
            let mut g = g.clone();
            async move { g.create_task(r).await.unwrap().into_inner().resource_meta }
        }))
        .await;
        let ms: Vec<ResourceMeta> = metas.iter().map(|m| meta_of(m)).collect();
        // The element of the largest array with the highest index.
        let arrays: BTreeSet<u32> = ms.iter().map(|m| m.job_id.0).collect();
        let size = |id: u32| ms.iter().filter(|m| m.job_id.0 == id).count();
        let largest = *arrays.iter().max_by_key(|id| size(**id)).unwrap();
        if size(largest) > 22 {
            break (reqs, metas, ms, arrays, largest);
        }
        attempt += 1;
        assert!(
            attempt < 3,
            "Slurm {}: three bursts of {N}, none in an array past a name's 22 keys; the last: {ms:?}",
            c.release
        );
        eprintln!("burst {attempt} split ({arrays:?}); running it out and sending another");
        for raw in &metas {
            let r = poll_until(&mut g.clone(), raw, 180, terminal, |_| {}).await;
            assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
        }
    };
    let size = |id: u32| ms.iter().filter(|m| m.job_id.0 == id).count();
    assert!(size(largest) > 22);
    let last = (0..N)
        .filter(|i| ms[*i].job_id.0 == largest)
        .max_by_key(|i| ms[*i].element)
        .unwrap();
    assert!(ms[last].element >= Some(22), "{:?}", ms[last]);
    let record = client
        .job(slurm_connector::slurmrestd::JobId(largest))
        .await
        .unwrap()
        .expect("the array is listed");
    assert_eq!(
        record
            .standard_output
            .as_deref()
            .is_some_and(|o| o.contains("/flyte-keys=")),
        !keys_in_comment,
        "Slurm {}: keys in the comment: {keys_in_comment}; the array's stdout {:?}",
        c.release,
        record.standard_output
    );
    for raw in &metas {
        let mut g = g.clone();
        let r = poll_until(&mut g, raw, 180, terminal, |_| {}).await;
        assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    }
    server.stop().await;

    // Gone from slurmctld (MinJobAge, then its purge): slurmdbd alone knows the elements.
    let start = std::time::Instant::now();
    let ids: Vec<_> = arrays
        .iter()
        .map(|a| slurm_connector::slurmrestd::JobId(*a))
        .collect();
    loop {
        let listed = client.states(&ids).await.map(|s| s.len()).unwrap_or(0);
        if listed == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "arrays {arrays:?} still in slurmctld after 240 s ({listed} entries)"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    let fresh = Server::start(d).await;
    let mut g = fresh.client().await;
    for (raw, m) in metas.iter().zip(&ms) {
        let r = poll_until(&mut g, raw, 60, terminal, |_| {}).await;
        assert_eq!(
            r.phase,
            Phase::Succeeded as i32,
            "element {:?} from slurmdbd: {}",
            m.element,
            r.message
        );
    }
    for i in [0, last] {
        let again = meta_of(
            &g.create_task(reqs[i].clone())
                .await
                .unwrap()
                .into_inner()
                .resource_meta,
        );
        assert_eq!(
            (again.job_id, again.element),
            (ms[i].job_id, ms[i].element),
            "the retried CreateTask found its element in slurmdbd"
        );
    }
    fresh.stop().await;
}

fn drill_terminal(phase: i32) -> bool {
    terminal(&slurm_connector::proto::connector::Resource {
        phase,
        ..Default::default()
    })
}

/// A coalesced array whose replica died between its held submit and its release (made here as
/// that replica would have: held, the check's mark in its comment, the keys in its name) is
/// settled by the next CreateTask of one of its keys, on any replica: that element is adopted,
/// an element whose execution already has an older job of its own is cancelled (it never ran),
/// and the array is released, its comment restored. The protocol's orphan mode
/// (`service/submit/protocol.rs`) on Slurm's own records of a held array (one record for the
/// pending remainder; the mock's copy of that shape is pinned by its contract tests).
/// Two executions of one task (`<prefix>-0`, `<prefix>-1`), and what the connector renders of
/// them on this cluster.
async fn two_tasks(
    c: &support::Cluster,
    client: &slurm_connector::slurmrestd::Client,
    prefix: &str,
) -> (
    Vec<CreateTaskRequest>,
    Vec<slurm_connector::render::Rendered>,
) {
    use slurm_connector::render::{RenderConfig, render};
    let cfg = RenderConfig {
        api_version: client.version().await.unwrap(),
        working_dir: Some(c.workdir.clone()),
        ..Default::default()
    };
    let reqs: Vec<CreateTaskRequest> = (0..2)
        .map(|i| request(&format!("{prefix}-{i}"), SCRIPT))
        .collect();
    let rendered = reqs
        .iter()
        .map(|r| render(&slurm_connector::service::task_spec(r).unwrap(), &cfg).unwrap())
        .collect();
    (reqs, rendered)
}

/// The job array a replica that died between its held submit and its release leaves: element
/// `i` is `elements[i]`, the keys in its name, held, its comment marked for the check.
async fn left_held(
    client: &slurm_connector::slurmrestd::Client,
    elements: [&slurm_connector::render::Rendered; 2],
) -> slurm_connector::slurmrestd::JobId {
    use slurm_connector::render::{coalesce, keys_name};
    let keys: Vec<&str> = elements.iter().map(|r| r.key.as_str()).collect();
    let members: Vec<coalesce::Member> = elements
        .iter()
        .map(|r| coalesce::Member {
            key: &r.key,
            job: &r.job,
        })
        .collect();
    let mut array =
        coalesce::array_job(&members, &keys_name(&keys), "the tasks' comment".into()).unwrap();
    array.hold = Some(true);
    array.comment = Some(format!(
        "the tasks' comment{}",
        slurm_connector::service::AWAITING_CHECK
    ));
    client.submit(&array).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_a_dead_replica_left_held_is_settled_by_the_next_create_task() {
    let Some(c) = support::cluster() else { return };
    if !c.accounting {
        return; // without slurmdbd nothing coalesces
    }
    let client = c.client(c.minted(&c.user), Some(&c.user));
    let (reqs, rendered) = two_tasks(&c, &client, "orphan").await;
    // Execution 1 already has a job of its own, older than the array.
    let older = client.submit(&rendered[1].job).await.unwrap();
    let orphan = left_held(&client, [&rendered[0], &rendered[1]]).await;

    // A replica that never saw it; single jobs here, so the CreateTask takes the lookup's path.
    let mut d = deployment(&c, 3);
    d.coalesce = slurm_connector::config::Coalesce::Off;
    let server = Server::start(d).await;
    let mut g = server.client().await;
    let raw = g
        .create_task(reqs[0].clone())
        .await
        .unwrap()
        .into_inner()
        .resource_meta;
    let m = meta_of(&raw);
    assert_eq!(
        (m.job_id, m.element),
        (orphan, Some(0)),
        "execution 0 answered with its element of the orphaned array"
    );
    // Settled before the answer: element 1 cancelled, the rest released with its own comment.
    let listed: Vec<_> = client
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.array.as_ref().is_some_and(|a| a.array_job_id == orphan))
        .collect();
    assert!(
        !listed.is_empty()
            && listed.iter().all(|j| {
                j.array.as_ref().and_then(|a| a.task_id) != Some(1)
                    && j.comment.as_deref() == Some("the tasks' comment")
            }),
        "array {orphan} released without element 1: {listed:#?}"
    );
    let r = poll_until(&mut g, &raw, 180, terminal, |_| {}).await;
    assert_eq!(r.phase, Phase::Succeeded as i32, "{}", r.message);
    server.stop().await;
    // Once the array left slurmctld, slurmdbd's word: element 0 ran, element 1 never did.
    let start = std::time::Instant::now();
    while client.states(&[orphan]).await.map(|s| s.len()).unwrap_or(1) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "array {orphan} still in slurmctld after 240 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let id = orphan.to_string();
    let out = c
        .dev_cluster(&[
            "exec",
            "sacct",
            "-j",
            &id,
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,State",
        ])
        .await;
    let elements: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(
        elements,
        [format!("{orphan}_0|COMPLETED")],
        "slurmdbd's records of array {orphan}"
    );
    let _ = client.cancel(older, None).await;
}

/// The replica drill's stuck array (CI, 2026-12-06): two replicas made an array of the same two
/// executions, and the one with the lower id was rolled between its submit and its release.
/// The other's array loses both keys and steps back; its tasks are answered with the first
/// array's elements, which it must release, or they stay held (PENDING) for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_that_loses_its_keys_to_one_left_held_releases_that_one() {
    use slurm_connector::render::record_keys;
    let Some(c) = support::cluster() else { return };
    if !c.accounting {
        return; // without slurmdbd nothing coalesces
    }
    let client = c.client(c.minted(&c.user), Some(&c.user));
    let mut d = deployment(&c, 3);
    d.coalesce = slurm_connector::config::Coalesce::Window(Duration::from_secs(2));
    let server = Server::start(d).await;
    let g = server.client().await;
    // The connector's index of the cluster's jobs, taken now: the array below is made after
    // it, so this replica's lookup misses it and only its check meets it (as a race does).
    g.clone()
        .create_task(request("left-warm", SCRIPT))
        .await
        .unwrap();
    let (reqs, rendered) = two_tasks(&c, &client, "left").await;
    // The other replica's array, its elements in the other order.
    let theirs = left_held(&client, [&rendered[1], &rendered[0]]).await;
    let k0 = rendered[0].key.as_str();

    let metas: Vec<Vec<u8>> = futures::future::join_all(reqs.iter().map(|r| {
        let mut g = g.clone();
        async move {
            g.create_task(r.clone())
                .await
                .unwrap()
                .into_inner()
                .resource_meta
        }
    }))
    .await;
    let placed: Vec<_> = metas
        .iter()
        .map(|m| {
            let m = meta_of(m);
            (m.job_id, m.element)
        })
        .collect();
    assert_eq!(
        placed,
        [(theirs, Some(1)), (theirs, Some(0))],
        "each task answered with its element of the other replica's array"
    );
    // The connector's own array of the two (a batch of both) stepped back whole (in slurmdbd
    // too: a cancelled held job may leave slurmctld within `MinJobAge`).
    let mut jobs = client.jobs().await.unwrap();
    let since = chrono::Utc::now().timestamp() - 600;
    jobs.extend(
        client
            .accounting_jobs_since(since, Some(&c.user))
            .await
            .unwrap(),
    );
    // By the array's id: an element of theirs that started has an id of its own, above theirs
    // (26.05 in CI: 9662, element 0 of 9660).
    let ours: Vec<_> = jobs
        .iter()
        .filter(|j| {
            j.array.map_or(j.job_id, |a| a.array_job_id) > theirs
                && record_keys(j).is_some_and(|ks| ks.len() == 2 && ks.contains(&k0.to_string()))
        })
        .collect();
    assert!(
        !ours.is_empty(),
        "the two concurrent CreateTasks did not make one array (the case under test)"
    );
    assert!(
        ours.iter()
            .all(|j| j.state.base == slurm_connector::slurmrestd::BaseState::Cancelled),
        "{ours:#?}"
    );
    let mut g1 = g.clone();
    for (i, m) in metas.iter().enumerate() {
        let r = poll_until(&mut g1, m, 180, terminal, |_| {}).await;
        assert_eq!(r.phase, Phase::Succeeded as i32, "task {i}: {}", r.message);
    }
    server.stop().await;
}

/// A task answered with an element of an array still held for its duplicate check, its replica
/// gone (by a path that should have settled it and did not: the case above, before its fix):
/// the task's own GetTasks get it settled once the tracker sees it held past its listing
/// interval (30 s), instead of it waiting an hour to be cancelled as abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_answered_with_an_element_left_held_gets_it_released_by_its_get_tasks() {
    let Some(c) = support::cluster() else { return };
    if !c.accounting {
        return; // without slurmdbd nothing coalesces
    }
    let client = c.client(c.minted(&c.user), Some(&c.user));
    let (_, rendered) = two_tasks(&c, &client, "stuck").await;
    let array = left_held(&client, [&rendered[0], &rendered[1]]).await;
    // The metas a replica answered both tasks with, before it died without releasing.
    let metas: Vec<Vec<u8>> = (0..2u32)
        .map(|i| {
            let mut m =
                slurm_connector::service::resource_meta(&c.name, array, &rendered[i as usize]);
            m.place(array, Some((i, "0-1")));
            m.encode()
        })
        .collect();
    let server = Server::start(deployment(&c, 3)).await;
    let mut g = server.client().await;
    let r = get(&mut g, &metas[0]).await;
    assert_eq!(r.phase, Phase::Queued as i32, "{}", r.message);
    let mut told = false;
    for (i, m) in metas.iter().enumerate() {
        let r = poll_until(&mut g, m, 150, terminal, |r| {
            told |= r
                .message
                .contains("Held for the connector's duplicate check");
        })
        .await;
        assert_eq!(r.phase, Phase::Succeeded as i32, "task {i}: {}", r.message);
    }
    assert!(told, "GetTask said why the task waited");
    server.stop().await;
}
