//! Each job's files on the cluster's shared filesystem, as the service learns them from
//! `resource_meta` (CreateTask, GetTask): where its exit-status marker is (read by the tracker
//! through [`ExitMarkers`]) and, once its task ended, when — so a periodic sweep removes its
//! logs, marker and local outputs `FLYTE_SLURM_JOB_FILES_RETENTION` later, through the staging
//! interface (confined to the shared roots like every other staging access).
//!
//! In memory only: after a restart a job is known again from its next GetTask. A task that ended
//! before a restart and is never asked about again keeps its files (docs/operations.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use crate::slurmrestd::{JobId, JobRef};
use crate::staging::{self, Staging, retention};
use crate::tracker::ExitMarkers;

use crate::service::wire::meta::ResourceMeta;

#[derive(Debug, Clone)]
struct Files {
    /// The job's working directory and name: its marker and outputs folder are named from them.
    dir: String,
    job: String,
    stdout: String,
    stderr: String,
    ended_at: Option<SystemTime>,
    /// A job array: its id and indices (each element has its own logs and marker).
    array: Option<(u32, Vec<u32>)>,
    /// An element of a coalesced array (the array's id, its index): it also leaves the script
    /// it ran (`<job>.sh`) and the array's own logs of it.
    element: Option<(u32, u32)>,
}

impl Files {
    fn paths(&self) -> Vec<String> {
        let layout = staging::JobFiles::new(&self.dir, &self.job);
        let mut p = match &self.array {
            None => vec![
                self.stdout.clone(),
                self.stderr.clone(),
                layout.marker(),
                layout.marker_tmp(),
            ],
            Some((id, indices)) => indices
                .iter()
                .flat_map(|i| {
                    let marker = staging::element_path(&layout.element_marker(), *id, *i);
                    [
                        staging::element_path(&self.stdout, *id, *i),
                        staging::element_path(&self.stderr, *id, *i),
                        format!("{marker}.tmp"),
                        marker,
                    ]
                })
                .collect(),
        };
        if let Some((array, index)) = self.element {
            // The script it ran, and the array's own logs of this element (what Slurm wrote
            // before the element's script took over its output).
            p.push(format!("{}/{}.sh", self.dir, self.job));
            let legacy = crate::render::naming::legacy_array_logs(&self.job);
            for name in [crate::render::naming::ARRAY_LOGS, &legacy] {
                for ext in ["out", "err"] {
                    p.push(format!("{}/{name}_{array}_{index}.{ext}", self.dir));
                }
            }
        }
        p.push(layout.outputs_dir());
        p.retain(|x| !x.is_empty());
        p.dedup();
        p
    }
}

pub struct Registry {
    staging: Arc<dyn Staging>,
    /// By job, or by element of a coalesced array (each its own task, with its own files).
    jobs: Mutex<HashMap<JobRef, Files>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("jobs", &self.jobs.lock().unwrap().len())
            .finish()
    }
}

/// The job's files, from its stdout path (`<working_dir>/<job>.out`, or the Python plugin's own
/// name in the same folder) and its name; `None` when they cannot be derived.
fn files(meta: &ResourceMeta) -> Option<Files> {
    let dir = meta.stdout.rsplit_once('/')?.0;
    (!meta.job_name.is_empty() && !meta.job_name.contains('/')).then(|| Files {
        dir: dir.to_string(),
        job: meta.job_name.clone(),
        stdout: meta.stdout.clone(),
        stderr: meta.stderr.clone(),
        ended_at: None,
        // A coalesced array's element is a task with files of its own, not an array's.
        array: meta
            .array_indices()
            .ok()
            .flatten()
            .filter(|_| meta.element.is_none())
            .map(|i| (meta.job_id.0, i)),
        element: meta.element.map(|i| (meta.job_id.0, i)),
    })
}

impl Registry {
    pub fn new(staging: Arc<dyn Staging>) -> Registry {
        Registry {
            staging,
            jobs: Mutex::new(HashMap::new()),
        }
    }

    /// Learns a job's files (idempotent).
    pub fn note(&self, meta: &ResourceMeta) {
        self.with(meta, |_| ());
    }

    /// GetTask answered the task: its job's files are known from now on; `ended`, with the
    /// deployment's retention, when the answer was terminal.
    pub fn answered(&self, meta: &ResourceMeta, ended: Option<Option<Duration>>) {
        self.note(meta);
        if let Some(retention) = ended {
            self.ended(meta, retention);
        }
    }

    /// The task ended (GetTask reported a terminal phase): the retention clock starts now. With
    /// retention off the job is forgotten (nothing will remove its files, nor read its marker).
    pub fn ended(&self, meta: &ResourceMeta, retention: Option<Duration>) {
        if retention.is_none() {
            self.jobs.lock().unwrap().remove(&meta.target());
            return;
        }
        self.with(meta, |f| {
            f.ended_at.get_or_insert_with(SystemTime::now);
        });
    }

    /// `f` on the job's entry, made from `meta` only the first time (GetTask calls this on
    /// every poll: a known job costs one map lookup, no allocation).
    fn with(&self, meta: &ResourceMeta, f: impl FnOnce(&mut Files)) {
        let mut jobs = self.jobs.lock().unwrap();
        let entry = match jobs.entry(meta.target()) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => match files(meta) {
                Some(new) => v.insert(new),
                None => return,
            },
        };
        f(entry);
    }

    pub fn len(&self) -> usize {
        self.jobs.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes the files of every job whose task ended at least `keep` ago; forgets those jobs.
    pub async fn sweep(&self, keep: Duration, now: SystemTime) -> retention::SweepReport {
        let due: Vec<retention::FinishedJob> = self
            .jobs
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(id, f)| {
                f.ended_at.map(|ended_at| retention::FinishedJob {
                    job_id: id.to_string(),
                    ended_at,
                    paths: f.paths(),
                })
            })
            .collect();
        let report = retention::sweep(self.staging.as_ref(), &due, keep, now).await;
        if !report.removed_jobs.is_empty() {
            let mut jobs = self.jobs.lock().unwrap();
            jobs.retain(|id, _| !report.removed_jobs.contains(&id.to_string()));
            tracing::info!(
                jobs = report.removed_jobs.len(),
                "retention: removed finished jobs' files"
            );
        }
        report
    }

    /// Sweeps every `every` until `stop` resolves.
    pub async fn run_sweeps(
        self: Arc<Self>,
        cluster: String,
        keep: Duration,
        every: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {
                    let r = self.sweep(keep, SystemTime::now()).await;
                    if !r.failures.is_empty() {
                        tracing::warn!(%cluster, failures = r.failures.len(), "retention: some files could not be removed; retrying next sweep");
                    }
                }
            }
        }
    }
}

/// How often to sweep: often enough that files go within a tenth of the retention time (and at
/// least hourly), not so often that a short test retention spins.
pub fn sweep_interval(keep: Duration) -> Duration {
    (keep / 10).clamp(Duration::from_millis(200), Duration::from_secs(3600))
}

impl ExitMarkers for Registry {
    fn exit_code(
        &self,
        id: JobId,
    ) -> BoxFuture<'_, Result<Option<staging::exit_marker::ExitMarker>, String>> {
        Box::pin(async move {
            let (dir, job) = match self.jobs.lock().unwrap().get(&JobRef::from(id)) {
                Some(f) => (f.dir.clone(), f.job.clone()),
                None => return Ok(None),
            };
            staging::exit_marker::read_exit_marker(self.staging.as_ref(), &dir, &job)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn element_exit_code(
        &self,
        array: JobId,
        index: u32,
    ) -> BoxFuture<'_, Result<Option<staging::exit_marker::ExitMarker>, String>> {
        Box::pin(async move {
            let path = match self.jobs.lock().unwrap().get(&JobRef::from(array)) {
                Some(f) if f.array.is_some() => staging::element_path(
                    &staging::JobFiles::new(&f.dir, &f.job).element_marker(),
                    array.0,
                    index,
                ),
                _ => return Ok(None),
            };
            staging::exit_marker::read_exit_marker_at(self.staging.as_ref(), &path)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
