//! The mock's slurmctld: job table, resources, dependencies, aging out (MinJobAge), cancel.
//! Running a job's process is in [`crate::runner`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};

use crate::config::{MockConfig, SlurmVersion};
use crate::job::{ArrayTask, Base, Control, Exit, Job};
use crate::jobdesc::{JobSpec, Rejection, parse_dependency};
use crate::placement::{DepStatus, allocate, dependency_status, expand_io};

mod control;

/// File in `state_dir` holding the next job id.
const NEXT_ID_FILE: &str = "next_job_id";

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Counters `diag/` reports.
#[derive(Debug, Default, Clone, Copy)]
pub struct JobCounters {
    pub submitted: u64,
    pub started: u64,
    pub completed: u64,
    pub canceled: u64,
    pub failed: u64,
}

#[derive(Debug, Default)]
pub struct Cluster {
    /// Jobs slurmctld still knows (pending, running, finished less than MinJobAge ago).
    pub jobs: BTreeMap<u32, Job>,
    /// Jobs only slurmdbd still has (aged out of slurmctld).
    pub aged: BTreeMap<u32, Job>,
    next_id: u32,
    /// Free CPUs per node.
    free: Vec<u32>,
    /// Last time anything in the job table changed (for `jobs/?update_time=`).
    pub last_update: i64,
    pub counters: JobCounters,
}

/// Fields `POST job/{id}` can change (`None` = leave as is; `time_limit: Some(None)` = UNLIMITED).
#[derive(Debug, Default, Clone)]
pub struct JobUpdate {
    pub hold: Option<bool>,
    pub priority: Option<u32>,
    pub time_limit: Option<Option<u32>>,
    pub comment: Option<String>,
    pub name: Option<String>,
}

/// Result of `DELETE job/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelResult {
    Signalled,
    /// 2021: already completing or completed.
    AlreadyDone,
    /// 2017: unknown or aged out.
    Unknown,
}

pub struct Scheduler {
    pub cfg: Arc<MockConfig>,
    cluster: Mutex<Cluster>,
    wake: Notify,
    pub script_dir: PathBuf,
}

impl Scheduler {
    pub fn new(cfg: Arc<MockConfig>, script_dir: PathBuf) -> Arc<Self> {
        // With a configured state_dir, job ids continue after a restart (like slurmctld's
        // state save), so a restarted mock never hands out an id a client still remembers.
        let saved = cfg
            .state_dir
            .as_ref()
            .and_then(|d| std::fs::read_to_string(d.join(NEXT_ID_FILE)).ok())
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let cluster = Cluster {
            next_id: cfg.first_job_id.max(1).max(saved),
            free: vec![cfg.cpus; cfg.nodes.max(1) as usize],
            last_update: now(),
            ..Cluster::default()
        };
        Arc::new(Scheduler {
            cfg,
            cluster: Mutex::new(cluster),
            wake: Notify::new(),
            script_dir,
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The scheduling loop: runs until the task is aborted.
    pub async fn run_loop(self: Arc<Self>) {
        loop {
            self.schedule();
            self.age_out();
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    /// Validate and enqueue a job like slurmctld's `job_submit`; returns the (first) job id.
    /// `release` is the Slurm release the request is answered as (error numbers differ).
    pub fn submit(
        &self,
        spec: JobSpec,
        user: &str,
        release: SlurmVersion,
    ) -> Result<u32, Rejection> {
        let cfg = &self.cfg;
        if spec.script.trim().is_empty() {
            return Err(Rejection {
                number: 2009,
                message: "Job script not specified",
            });
        }
        if spec.cwd.is_empty() {
            return Err(Rejection {
                number: 2063,
                message: "Job cannot be submitted without the current working directory specified.",
            });
        }
        if spec.environment.is_empty() {
            return Err(if release.is_24_11() {
                Rejection {
                    number: 2019,
                    message: "I/O error writing script/environment to file",
                }
            } else {
                Rejection {
                    number: 2127,
                    message: "Environment is missing in job",
                }
            });
        }
        if spec
            .partition
            .as_deref()
            .is_some_and(|p| p != cfg.partition)
        {
            return Err(Rejection {
                number: 2000,
                message: "Invalid partition name specified",
            });
        }
        if spec.min_nodes > cfg.nodes {
            return Err(Rejection {
                number: 2006,
                message: "Node count specification invalid",
            });
        }
        let per_node = spec.total_cpus().div_ceil(spec.min_nodes.max(1));
        if per_node > cfg.cpus || spec.total_cpus() > cfg.cpus * cfg.nodes {
            return Err(Rejection {
                number: 2014,
                message: "Requested node configuration is not available",
            });
        }
        let deps = match spec.dependency.trim() {
            "" => Vec::new(),
            d => parse_dependency(d).ok_or(Rejection {
                number: 2038,
                message: "Job dependency problem",
            })?,
        };
        let mut c = self.lock();
        if let Some(max) = cfg.max_job_count {
            // slurmctld's job_allocate: the count (each array element) against MaxJobCount,
            // before the job is made; 24.11 refused at one below the limit (measured).
            let adding = spec.array.as_ref().map_or(1, |a| a.indices.len());
            let held = c.jobs.len();
            let full = if release.is_24_11() {
                held + adding >= max
            } else {
                held + adding > max
            };
            if full {
                return Err(if release.is_24_11() {
                    Rejection {
                        number: 11,
                        message: "Resource temporarily unavailable",
                    }
                } else {
                    Rejection {
                        number: 2007,
                        message: "MaxJobCount limit reached",
                    }
                });
            }
        }
        for dep in deps.iter().flat_map(|d| d.job_ids.iter()) {
            if !c.jobs.contains_key(dep) && !c.aged.contains_key(dep) {
                return Err(Rejection {
                    number: 2038,
                    message: "Job dependency problem",
                });
            }
        }
        let t = now();
        let spec = Arc::new(spec);
        let first = c.next_id;
        let tasks: Vec<Option<ArrayTask>> = match &spec.array {
            None => vec![None],
            Some(a) => a
                .indices
                .iter()
                .map(|&i| {
                    Some(ArrayTask {
                        array_job_id: first,
                        task_id: i,
                        count: a.indices.len() as u32,
                        min: a.indices[0],
                        max: *a.indices.last().unwrap_or(&0),
                        step: if a.indices.len() > 1 {
                            a.indices[1] - a.indices[0]
                        } else {
                            1
                        },
                        max_running: a.max_running,
                    })
                })
                .collect(),
        };
        // Like slurmctld: the array's id is the one the submit answers, and it ends up with the
        // last element (real Slurm gives the others their ids as they start; here they are
        // reserved at once, after the array's). Until an element starts, jobs/state lists it
        // under the array's id (`Job::state_id`).
        let n = tasks.len() as u32;
        c.next_id += n;
        for (k, array) in tasks.into_iter().enumerate() {
            let k = k as u32;
            let id = if k + 1 == n { first } else { first + 1 + k };
            let mut job = Job {
                id,
                spec: spec.clone(),
                user: user.to_string(),
                array,
                deps: deps.clone(),
                state: Base::Pending,
                completing: false,
                // slurmctld's job_create sets a held job's reason at once (WAIT_HELD_USER), not
                // at its next scheduling pass.
                reason: if spec.hold { "JobHeldUser" } else { "None" }.into(),
                submit_time: t,
                eligible_time: t,
                start_time: 0,
                end_time: 0,
                last_sched: t,
                exit: Exit::Code(0),
                alloc: Vec::new(),
                node_names: Vec::new(),
                stdout: String::new(),
                stderr: String::new(),
                stdin: String::new(),
                kill_request_user: String::new(),
                control: None,
                pgid: None,
                ended_at: None,
                restart_cnt: 0,
                begin_at: None,
                requeued: false,
            };
            expand_io(&mut job, "");
            c.jobs.insert(id, job);
            c.counters.submitted += 1;
        }
        c.last_update = t;
        let next = c.next_id;
        drop(c);
        if let Some(dir) = &self.cfg.state_dir
            && let Err(e) = std::fs::write(dir.join(NEXT_ID_FILE), next.to_string())
        {
            tracing::warn!(error = %e, dir = %dir.display(), "cannot save the next job id");
        }
        self.wake();
        Ok(first)
    }

    /// One scheduling pass: start every pending job that may and can run, set reasons for the rest.
    pub fn schedule(self: &Arc<Self>) {
        let mut c = self.lock();
        let t = now();
        // Priority, then submission order; an array's tasks in index order, as slurmctld
        // starts them (the array's own id, kept by the last task, runs last).
        let mut order: Vec<(u32, (u32, u32), u32)> = c
            .jobs
            .values()
            .filter(|j| j.state == Base::Pending)
            .map(|j| {
                let place = match &j.array {
                    Some(a) => (a.array_job_id, a.task_id),
                    None => (j.id, 0),
                };
                (j.spec.priority.unwrap_or(1), place, j.id)
            })
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut blocked = false;
        let mut changed = false;
        for (_, _, id) in order {
            let reason = self.blocking_reason(&c, id, blocked);
            let job = c.jobs.get_mut(&id).expect("listed above");
            job.last_sched = t;
            if let Some(r) = reason {
                if r == "Resources" {
                    blocked = true;
                }
                if job.reason != r {
                    job.reason = r.to_string();
                    changed = true;
                }
                continue;
            }
            let total = job.cpus();
            let nodes = job.spec.min_nodes.max(1) as usize;
            match allocate(&c.free, total, nodes) {
                Some(alloc) => {
                    for (n, cpus) in &alloc {
                        c.free[*n] -= cpus;
                    }
                    self.start(&mut c, id, alloc, t);
                    changed = true;
                }
                None => {
                    let r = if blocked { "Priority" } else { "Resources" };
                    blocked = true;
                    let job = c.jobs.get_mut(&id).expect("listed above");
                    if job.reason != r {
                        job.reason = r.to_string();
                        changed = true;
                    }
                }
            }
        }
        if changed {
            c.last_update = t;
        }
    }

    /// Why a pending job may not start yet (None: it may, if resources allow).
    fn blocking_reason(&self, c: &Cluster, id: u32, _blocked: bool) -> Option<&'static str> {
        let job = &c.jobs[&id];
        if job.spec.hold {
            return Some("JobHeldUser");
        }
        if job.requeued || job.begin_at.is_some_and(|b| b > Instant::now()) {
            return Some("BeginTime");
        }
        match dependency_status(c, &job.deps) {
            DepStatus::Never => return Some("DependencyNeverSatisfied"),
            DepStatus::Wait => return Some("Dependency"),
            DepStatus::Ok => {}
        }
        if let Some(a) = &job.array
            && let Some(limit) = a.max_running
        {
            let running = c
                .jobs
                .values()
                .filter(|j| j.state == Base::Running)
                .filter(|j| {
                    j.array
                        .as_ref()
                        .is_some_and(|x| x.array_job_id == a.array_job_id)
                })
                .count() as u32;
            if running >= limit {
                return Some("JobArrayTaskLimit");
            }
        }
        None
    }

    fn start(self: &Arc<Self>, c: &mut Cluster, id: u32, alloc: Vec<(usize, u32)>, t: i64) {
        let cfg = self.cfg.clone();
        let job = c.jobs.get_mut(&id).expect("caller checked");
        job.state = Base::Running;
        job.reason = "None".into();
        job.start_time = t;
        job.node_names = alloc.iter().map(|(n, _)| cfg.node_name(*n)).collect();
        job.alloc = alloc;
        let first_node = job.node_names[0].clone();
        expand_io(job, &first_node);
        let (tx, rx) = mpsc::unbounded_channel();
        job.control = Some(tx);
        let launch = crate::runner::Launch::new(job, &cfg, &self.script_dir);
        c.counters.started += 1;
        let me = self.clone();
        tokio::spawn(async move { crate::runner::run(me, id, launch, rx).await });
    }

    /// Record a job's end (called by the runner once its processes are gone).
    pub fn finish(&self, id: u32, forced: Option<Base>, exit: Exit) {
        let mut c = self.lock();
        let t = now();
        let Some(job) = c.jobs.get_mut(&id) else {
            return;
        };
        if job.requeued {
            // The processes of a requeued run are gone: give back its CPUs; the job itself is
            // already PENDING again and keeps its new state.
            job.requeued = false;
            job.control = None;
            job.pgid = None;
            let alloc = std::mem::take(&mut job.alloc);
            for (n, cpus) in alloc {
                c.free[n] += cpus;
            }
            c.last_update = t;
            drop(c);
            self.wake();
            return;
        }
        let state = match (job.state, forced) {
            // A cancel decided the state already; keep it.
            (Base::Cancelled, _) => Base::Cancelled,
            (_, Some(s)) => s,
            (_, None) => match exit {
                Exit::Code(0) => Base::Completed,
                _ => Base::Failed,
            },
        };
        job.state = state;
        job.exit = exit;
        job.completing = false;
        job.control = None;
        job.pgid = None;
        if job.end_time == 0 {
            job.end_time = t;
        }
        job.ended_at = Some(Instant::now());
        let alloc = std::mem::take(&mut job.alloc);
        for (n, cpus) in alloc {
            c.free[n] += cpus;
        }
        match state {
            Base::Completed => c.counters.completed += 1,
            Base::Cancelled => c.counters.canceled += 1,
            _ => c.counters.failed += 1,
        }
        c.last_update = t;
        drop(c);
        self.wake();
    }

    /// Mark a running job as timed out (its processes are being killed).
    pub fn mark_timeout(&self, id: u32) {
        let mut c = self.lock();
        let t = now();
        if let Some(job) = c.jobs.get_mut(&id)
            && job.state == Base::Running
        {
            job.state = Base::Timeout;
            job.completing = true;
            job.end_time = t;
            c.last_update = t;
        }
    }

    /// MinJobAge: finished jobs leave slurmctld's table for the accounting view only.
    pub fn age_out(&self) {
        let mut c = self.lock();
        let age = self.cfg.min_job_age;
        let old: Vec<u32> = c
            .jobs
            .values()
            .filter(|j| j.state.is_finished() && !j.completing)
            .filter(|j| j.ended_at.is_some_and(|e| e.elapsed() >= age))
            .map(|j| j.id)
            .collect();
        for id in old {
            if let Some(job) = c.jobs.remove(&id) {
                c.aged.insert(id, job);
            }
        }
    }

    /// Remember a started job's process group.
    pub fn set_pgid(&self, id: u32, pgid: i32) {
        if let Some(job) = self.lock().jobs.get_mut(&id) {
            job.pgid = Some(pgid);
        }
    }

    /// Kill every running job's processes (server shutdown). Done here, synchronously, because
    /// the runtime (and with it the runner tasks) may be going away too.
    pub fn kill_all(&self) {
        let c = self.lock();
        for job in c.jobs.values() {
            if let Some(pgid) = job.pgid {
                crate::runner::kill_group(pgid, libc::SIGKILL);
            }
            if let Some(tx) = &job.control {
                let _ = tx.send(Control::Signal {
                    signal: libc::SIGKILL,
                    cancel: true,
                });
            }
        }
    }
}
