//! The processes and Pyxis (Enroot) containers of a Slurm job, as the host sees them under
//! /proc and the cluster's root: what a cancelled native task must leave none of. For
//! tests/real_apptainer.rs, real_pyxis.rs and real_multinode.rs (through `support`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use slurm_connector::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use slurm_connector::proto::connector::{DeleteTaskRequest, TaskCategory};
use slurm_connector::proto::core::task_execution::Phase;
use tonic::transport::Channel;

use super::{Cluster, JOB_UID, job_of, phase, wait_until};

/// Every process seen before a cancel (pid, command line) is gone: a pid reused since is not
/// the same process, its command line differs. (A process seen without a command line, a
/// zombie or one mid-exec, cannot be compared.)
pub fn assert_processes_gone(before: &[(u32, String)]) {
    for (pid, cmd) in before.iter().filter(|(_, cmd)| !cmd.is_empty()) {
        let now = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .trim()
                    .to_string()
            })
            .unwrap_or_default();
        assert!(
            now != *cmd,
            "process {pid} of the cancelled job is still alive: {cmd}"
        );
    }
}

/// Once job `job` runs (RUNNING) and `a0` is up inside its container (so a cancel has a
/// container to tear down): the job's processes then.
pub async fn processes_once_a0_runs(
    client: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
    secs: u64,
) -> Vec<(u32, String)> {
    let job = job_of(client, meta).await;
    wait_until(client, meta, 120, |p| {
        p == Phase::Running || p.is_terminal()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let procs = job_processes(job);
        if procs
            .iter()
            .any(|(_, cmd)| cmd.contains("/opt/venv/bin/a0"))
        {
            return procs;
        }
        assert!(
            Instant::now() < deadline,
            "a0 of job {job} never started; processes: {procs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// DeleteTask of a native task: it ends ABORTED, and within 60 s no process of its job is left.
pub async fn cancel_until_no_process(
    client: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
) {
    let job = job_of(client, meta).await;
    client
        .delete_task(DeleteTaskRequest {
            resource_meta: meta.to_vec(),
            task_category: Some(TaskCategory {
                name: "slurm".into(),
                version: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let r = wait_until(client, meta, 120, Phase::is_terminal).await;
    assert_eq!(phase(&r), Phase::Aborted, "{}", r.message);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = job_processes(job);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of cancelled job {job} still alive 60 s after ABORTED: {left:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The Enroot containers Pyxis made for job `job` (`pyxis_<job>.<step>`, its unpacked root
/// filesystem), as (node tree, name): `dev-cluster --pyxis` gives each node its own tree,
/// `/tmp/enroot/<hostname>/data/user-<uid>` (lib/pyxis.sh), the host's name for a one-node
/// cluster, the node's (`node1`, `node2`, ...) with `--nodes`.
pub fn enroot_containers(c: &Cluster, job: u64) -> Vec<(String, String)> {
    let prefix = format!("pyxis_{job}.");
    let mut found = Vec::new();
    let Ok(trees) = std::fs::read_dir(c.root.join("tmp/enroot")) else {
        return found;
    };
    for tree in trees.flatten() {
        let data = tree.path().join(format!("data/user-{JOB_UID}"));
        for e in std::fs::read_dir(&data).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                found.push((tree.file_name().to_string_lossy().into_owned(), name));
            }
        }
    }
    found.sort();
    found
}

/// Waits (60 s at most) until Pyxis has removed every Enroot container of job `job`.
pub async fn until_no_enroot_container(c: &Cluster, job: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = enroot_containers(c, job);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the cancelled job {job}'s Enroot containers are still there: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Processes that belong to Slurm job `job`, with their commands: its slurmstepds (`slurmstepd:
/// [JOB.STEP]`), processes whose environment says so (the batch script, srun, the container's
/// python inherit SLURM_JOB_ID), and all their descendants (apptainer's starter and
/// squashfuse_ll run with a cleaned environment under the step's slurmstepd).
pub fn job_processes(job: u64) -> Vec<(u32, String)> {
    let needle = format!("SLURM_JOB_ID={job}");
    let stepd = format!("slurmstepd: [{job}.");
    let mut parent = std::collections::BTreeMap::new();
    let mut ours = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID ...": the command may hold spaces and parentheses.
        let after = stat.rsplit_once(") ").map(|(_, a)| a).unwrap_or("");
        if let Some(ppid) = after.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok()) {
            parent.insert(pid, ppid);
        }
        let is_stepd =
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(stepd.as_bytes()));
        let has_env = std::fs::read(e.path().join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()));
        if is_stepd || has_env {
            ours.insert(pid);
        }
    }
    loop {
        let more: Vec<u32> = parent
            .iter()
            .filter(|(p, pp)| !ours.contains(*p) && ours.contains(*pp))
            .map(|(p, _)| *p)
            .collect();
        if more.is_empty() {
            break;
        }
        ours.extend(more);
    }
    ours.into_iter()
        .filter_map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((
                pid,
                String::from_utf8_lossy(&cmd)
                    .replace('\0', " ")
                    .trim()
                    .to_string(),
            ))
        })
        .collect()
}
