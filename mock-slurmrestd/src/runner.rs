//! Running one batch job: the script as a child process in its own process group, in
//! `current_working_directory`, with exactly the submitted environment plus the SLURM_* variables
//! a real batch job sees; time limit, cancel and KillWait handled like slurmstepd.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use crate::config::MockConfig;
use crate::job::{Base, Control, Exit, Job};
use crate::scheduler::Scheduler;

/// What a job needs to start, copied out of the job table so the lock is not held.
#[derive(Debug)]
pub struct Launch {
    script: String,
    script_path: PathBuf,
    env: Vec<(String, String)>,
    cwd: String,
    stdout: String,
    stderr: String,
    stdin: String,
    limit: Option<Duration>,
    kill_wait: Duration,
}

impl Launch {
    pub fn new(job: &Job, cfg: &MockConfig, script_dir: &Path) -> Launch {
        let spec = &job.spec;
        let mut env: Vec<(String, String)> = spec
            .environment
            .iter()
            .map(|e| match e.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (e.clone(), String::new()),
            })
            .collect();
        let node = job.node_names.first().cloned().unwrap_or_default();
        let cpus_on_node = job.alloc.first().map(|a| a.1).unwrap_or(1);
        let partition = spec
            .partition
            .clone()
            .unwrap_or_else(|| cfg.partition.clone());
        let mut slurm = vec![
            ("SLURM_JOB_ID", job.id.to_string()),
            ("SLURM_JOBID", job.id.to_string()),
            ("SLURM_JOB_NAME", spec.name.clone()),
            ("SLURM_JOB_USER", job.user.clone()),
            (
                "SLURM_JOB_ACCOUNT",
                spec.account.clone().unwrap_or_else(|| "default".into()),
            ),
            (
                "SLURM_JOB_QOS",
                spec.qos.clone().unwrap_or_else(|| "normal".into()),
            ),
            ("SLURM_JOB_PARTITION", partition),
            ("SLURM_CLUSTER_NAME", cfg.cluster_name.clone()),
            ("SLURM_SUBMIT_DIR", spec.cwd.clone()),
            ("SLURM_SUBMIT_HOST", "localhost".into()),
            ("SLURM_NTASKS", spec.tasks_or_default().to_string()),
            ("SLURM_NPROCS", spec.tasks_or_default().to_string()),
            ("SLURM_JOB_NUM_NODES", job.node_names.len().to_string()),
            ("SLURM_NNODES", job.node_names.len().to_string()),
            ("SLURM_JOB_NODELIST", job.node_list()),
            ("SLURM_NODELIST", job.node_list()),
            ("SLURM_JOB_CPUS_PER_NODE", cpus_on_node.to_string()),
            ("SLURM_CPUS_ON_NODE", cpus_on_node.to_string()),
            ("SLURMD_NODENAME", node),
            ("SLURM_NODEID", "0".into()),
            ("SLURM_PROCID", "0".into()),
            ("SLURM_LOCALID", "0".into()),
            ("SLURM_GTIDS", "0".into()),
            ("SLURM_JOB_START_TIME", job.start_time.to_string()),
        ];
        // Like sbatch: only set when requested.
        if let Some(c) = spec.cpus_per_task {
            slurm.push(("SLURM_CPUS_PER_TASK", c.to_string()));
        }
        if let Some(m) = spec.memory_per_node {
            slurm.push(("SLURM_MEM_PER_NODE", m.to_string()));
        }
        if let Some(m) = spec.memory_per_cpu {
            slurm.push(("SLURM_MEM_PER_CPU", m.to_string()));
        }
        if let Some(a) = &job.array {
            slurm.push(("SLURM_ARRAY_JOB_ID", a.array_job_id.to_string()));
            slurm.push(("SLURM_ARRAY_TASK_ID", a.task_id.to_string()));
            slurm.push(("SLURM_ARRAY_TASK_COUNT", a.count.to_string()));
            slurm.push(("SLURM_ARRAY_TASK_MIN", a.min.to_string()));
            slurm.push(("SLURM_ARRAY_TASK_MAX", a.max.to_string()));
            slurm.push(("SLURM_ARRAY_TASK_STEP", a.step.to_string()));
        }
        for (k, v) in slurm {
            env.retain(|(ek, _)| ek != k);
            env.push((k.to_string(), v));
        }
        let limit = spec.time_limit.map(|m| cfg.minute * m);
        Launch {
            script: spec.script.clone(),
            script_path: script_dir
                .join(format!("job{:05}", job.id))
                .join("slurm_script"),
            env,
            cwd: spec.cwd.clone(),
            stdout: job.stdout.clone(),
            stderr: job.stderr.clone(),
            stdin: job.stdin.clone(),
            limit,
            kill_wait: cfg.kill_wait,
        }
    }
}

/// Signal a whole process group; a gone group is fine.
pub fn kill_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// ExitCode=0:53 in scontrol: what the real one reports when the job cannot set up its cwd/files.
const SETUP_FAILED: Exit = Exit::Signal(53);

fn open_outputs(l: &Launch) -> std::io::Result<(File, File, Stdio)> {
    let out = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&l.stdout)?;
    let err = if l.stderr == l.stdout {
        out.try_clone()?
    } else {
        OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&l.stderr)?
    };
    let stdin = if l.stdin == "/dev/null" {
        Stdio::null()
    } else {
        Stdio::from(File::open(&l.stdin)?)
    };
    Ok((out, err, stdin))
}

fn write_script(l: &Launch) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = l.script_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o700)
        .open(&l.script_path)?;
    f.write_all(l.script.as_bytes())
}

/// Run one job to its end and report it to the scheduler.
pub async fn run(
    sched: Arc<Scheduler>,
    id: u32,
    l: Launch,
    mut rx: mpsc::UnboundedReceiver<Control>,
) {
    if !Path::new(&l.cwd).is_dir() {
        tracing::info!(job = id, cwd = %l.cwd, "working directory missing: job fails like slurmstepd's chdir failure");
        return sched.finish(id, Some(Base::Failed), SETUP_FAILED);
    }
    let (out, err, stdin) = match open_outputs(&l) {
        Ok(x) => x,
        Err(e) => {
            tracing::info!(job = id, error = %e, "cannot open job output files");
            return sched.finish(id, Some(Base::Failed), SETUP_FAILED);
        }
    };
    // The kernel (not bash) reads the #! line, so a script without one cannot be executed; the
    // check is explicit because execvp would silently fall back to /bin/sh.
    if !l.script.starts_with("#!") {
        use std::io::Write;
        let mut e = &err;
        let _ = writeln!(
            e,
            "slurmstepd: error: execve(): {}: Exec format error",
            l.script_path.display()
        );
        return sched.finish(id, Some(Base::Failed), Exit::Code(libc::ENOEXEC));
    }
    if let Err(e) = write_script(&l) {
        tracing::warn!(job = id, error = %e, "cannot write job script");
        return sched.finish(id, Some(Base::Failed), SETUP_FAILED);
    }
    let mut cmd = tokio::process::Command::new(&l.script_path);
    cmd.current_dir(&l.cwd)
        .env_clear()
        .envs(l.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(stdin)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false);
    // ETXTBSY: another job's spawn forked while this script's file was still open for writing
    // (the fd lives in that child until its exec closes it). The file is complete; the exec
    // succeeds a moment later. Seen as a flaky FAILED start under load in CI.
    let mut spawned = cmd.spawn();
    for attempt in 1..=20 {
        match &spawned {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                tokio::time::sleep(std::time::Duration::from_millis(5 * attempt)).await;
                spawned = cmd.spawn();
            }
            _ => break,
        }
    }
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(job = id, error = %e, "job script could not be executed");
            let code = e.raw_os_error().unwrap_or(1);
            return sched.finish(id, Some(Base::Failed), Exit::Code(code));
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    sched.set_pgid(id, pgid);
    let deadline = l.limit.map(|d| Instant::now() + d);
    let mut kill_at: Option<Instant> = None;
    let mut forced: Option<Base> = None;
    let status = loop {
        tokio::select! {
            st = child.wait() => break st,
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() && forced.is_none() => {
                tracing::info!(job = id, "time limit reached");
                sched.mark_timeout(id);
                forced = Some(Base::Timeout);
                kill_group(pgid, libc::SIGTERM);
                kill_at = Some(Instant::now() + l.kill_wait);
            }
            msg = rx.recv() => match msg {
                Some(Control::Signal { signal, cancel }) => {
                    kill_group(pgid, signal);
                    if cancel && forced.is_none() {
                        forced = Some(Base::Cancelled);
                        kill_at = Some(Instant::now() + l.kill_wait);
                    }
                }
                // The scheduler dropped the sender: nothing more to receive; keep waiting.
                None => {
                    let st = child.wait().await;
                    break st;
                }
            },
            _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                kill_group(pgid, libc::SIGKILL);
                kill_at = None;
            }
        }
    };
    // Like the end of a job's cgroup: nothing the script left behind survives it.
    kill_group(pgid, libc::SIGKILL);
    let exit = match status {
        Ok(st) => match (st.code(), st.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            _ => Exit::Code(1),
        },
        Err(e) => {
            tracing::warn!(job = id, error = %e, "waiting for job failed");
            Exit::Code(1)
        }
    };
    let _ = std::fs::remove_dir_all(l.script_path.parent().unwrap_or(Path::new("/nonexistent")));
    sched.finish(id, forced, exit);
}
