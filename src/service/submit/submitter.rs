//! [`Submitter`]: a cluster's write-path state, in one place: each execution's state in this
//! process, the cluster's jobs by key, the open batches, the pacer, the shutdown gate, and
//! whether the cluster coalesces. The files of `submit/` work on it; the rest of the service
//! asks through its methods, so no other module reaches into its maps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::{ClusterConfig, Coalesce};
use crate::service::wire::meta::ResourceMeta;
use crate::slurmrestd::{Client, JobId};

use super::batches::{Batches, Totals};
use super::claim::Claims;
use super::coalesce_settings::Coalescing;
use super::execution::{Executions, Submitted};
use super::gate::Gate;
use super::idempotency::Index;
use super::pacing::{PaceView, Pacer};
use super::takeover::{Settle, TakeOver, Takeovers};

pub struct Submitter {
    /// This process's state of each execution (`execution.rs`: one entry, one expiry).
    pub(in crate::service::submit) executions: Executions,
    /// CreateTasks waiting for their coalescing window (`coalesce.rs`).
    pub(in crate::service::submit) batches: Batches,
    /// The cluster's jobs by execution key: who already has a job, who won a race.
    pub(in crate::service::submit) index: Index,
    /// How many submits run at once (`pacing.rs`).
    pub(in crate::service::submit) pacer: Arc<Pacer>,
    /// Submits between their held submit and their release; closed at shutdown (`deferred::hand_off`).
    pub(in crate::service::submit) gate: Gate,
    /// Deferred submits GetTask found unmade past their takeover age, and held jobs it found
    /// left held, for the cluster's `takeovers` task (`takeover.rs`): the read path only reads.
    pub(in crate::service::submit) takeovers: Takeovers,
    /// Whether this cluster coalesces, decided the first time a CreateTask asks
    /// ([`Submitter::coalescing`]).
    coalescing: tokio::sync::OnceCell<Coalescing>,
    /// Executions that got a job of their own since start, and those answered with one the
    /// cluster already had (a retry, a restart, another replica).
    fresh: AtomicU64,
    adopted: AtomicU64,
    /// Where executions' claims are, and this process as their holder: the Connector's
    /// ([`Submitter::set_claims`]), else the default settings' (a cluster built without one).
    claims: std::sync::OnceLock<Arc<Claims>>,
    /// When the latest CreateTask that started a submit came (a check waits for its turn only
    /// while others come: `protocol.rs`).
    last_arrival: std::sync::Mutex<Option<Instant>>,
}

/// What the per-cluster gauges show of the write path.
#[derive(Debug, Clone, Copy, Default)]
pub struct SubmitGauges {
    pub executions: usize,
    /// `None` while the index is busy (not waited for: a gauge can skip a tick).
    pub index_jobs: Option<usize>,
    /// Since start (counters' totals).
    pub batches: Totals,
    pub batches_waiting: usize,
    /// Since start: executions submitted, and answered with a job the cluster had.
    pub submitted: u64,
    pub adopted: u64,
    /// Since start: the index's checks of the cluster's jobs (one `jobs/state` each).
    pub checks: u64,
}

impl Submitter {
    /// `terminal_ttl`: how long a settled execution's state is kept (the tracker's).
    pub fn new(terminal_ttl: Duration) -> Submitter {
        Submitter {
            executions: Executions::new(terminal_ttl),
            batches: Default::default(),
            index: Index::default(),
            pacer: Pacer::new(crate::config::DEFAULT_SUBMITS_IN_FLIGHT),
            gate: Gate::default(),
            takeovers: Takeovers::default(),
            coalescing: tokio::sync::OnceCell::new(),
            fresh: AtomicU64::new(0),
            adopted: AtomicU64::new(0),
            last_arrival: Default::default(),
            claims: std::sync::OnceLock::new(),
        }
    }

    /// The deployment's bound on submits in flight (`FLYTE_SLURM_SUBMITS_IN_FLIGHT`).
    /// The deployment's claims (one per process: its holder, its stores), set before any submit.
    pub fn set_claims(&self, claims: Arc<Claims>) {
        if self.claims.set(claims).is_err() {
            tracing::error!("a cluster's claims were set twice; the first stay");
        }
    }

    pub(in crate::service::submit) fn claims(&self) -> &Arc<Claims> {
        self.claims
            .get_or_init(|| Arc::new(Claims::new(Default::default())))
    }

    pub fn set_max_in_flight(&self, max: usize) {
        self.pacer.set_max(max);
    }

    /// The deployment's turn of duplicate checks (`FLYTE_SLURM_CHECK_EVERY`).
    pub fn set_check_every(&self, every: Duration) {
        self.index.turns().set_every(every);
    }

    pub fn pacing(&self) -> PaceView {
        self.pacer.view()
    }

    pub fn gauges(&self) -> SubmitGauges {
        SubmitGauges {
            executions: self.executions.count(),
            index_jobs: self.index.size().map(|(jobs, _)| jobs),
            batches: self.batches.totals(),
            batches_waiting: self.batches.waiting(),
            submitted: self.fresh.load(Ordering::Relaxed),
            adopted: self.adopted.load(Ordering::Relaxed),
            checks: self.index.turns().checks(),
        }
    }

    /// A CreateTask started a submit now (a member of a batch, or a job of its own).
    pub(in crate::service::submit) fn arrived(&self) -> Instant {
        let now = Instant::now();
        *self.last_arrival.lock().unwrap() = Some(now);
        now
    }

    /// Whether a CreateTask started a submit after `t`.
    pub(in crate::service::submit) fn arrived_after(&self, t: Instant) -> bool {
        self.last_arrival.lock().unwrap().is_some_and(|a| a > t)
    }

    /// Counts a submit's outcome (see [`SubmitGauges`]).
    pub(in crate::service::submit) fn count(&self, s: &Submitted) {
        let n = match s {
            Submitted::Fresh(_) => &self.fresh,
            Submitted::Adopted(_) | Submitted::LostRace { .. } => &self.adopted,
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// Queues the takeover of a deferred submit no replica made (`takeover.rs`).
    pub fn take_over(&self, t: TakeOver) {
        self.takeovers.queue(t);
    }

    /// Queues the settling of a job (or array) a task was answered with that is still held for
    /// its duplicate check long after (`takeover.rs`).
    pub fn settle_held(&self, job_id: JobId, slurm_user: Option<String>, claim: Option<String>) {
        self.takeovers.queue_settle(Settle {
            job_id,
            slurm_user,
            claim,
        });
    }

    /// One CreateTask of execution `key` at a time in this process.
    pub fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.executions.lock(key)
    }

    /// The execution's job, if this process submitted or found it.
    pub fn job(&self, key: &str) -> Option<ResourceMeta> {
        self.executions.job(key)
    }

    /// Whether jobs that left slurmctld cannot be found again (no slurmdbd): such a cluster
    /// does not coalesce, whose once-only check of an array needs them.
    pub fn without_accounting(&self) -> bool {
        self.index.without_accounting()
    }

    /// Shutdown: no new held submit starts; how many are between submit and release.
    pub fn close(&self) -> usize {
        self.gate.close()
    }

    /// Every submit between its held submit and its release has ended.
    pub async fn idle(&self) {
        self.gate.idle().await
    }

    /// Whether this cluster coalesces, and its arrays' limits: decided once from `setting` and
    /// slurm.conf (one `GET conf` where slurmrestd has it), and logged. A transient error is
    /// not kept: this CreateTask goes without slurm.conf, the next one asks again.
    pub async fn coalescing(
        &self,
        cfg: &ClusterConfig,
        client: &Client,
        setting: Coalesce,
    ) -> Coalescing {
        let once_only = self.claims().settings().once_only;
        if setting == Coalesce::Off {
            return Coalescing::decide(setting, None, once_only);
        }
        let read = self
            .coalescing
            .get_or_try_init(|| async {
                let conf = match client.conf().await {
                    Ok(conf) => conf,
                    Err(e) if e.is_transient() => return Err(e),
                    Err(e) => {
                        tracing::warn!(cluster = %cfg.name, error = %e, "slurm.conf not readable through slurmrestd (GET conf): coalescing decided without it");
                        None
                    }
                };
                let c = Coalescing::decide(setting, conf.as_ref(), once_only);
                tracing::info!(cluster = %cfg.name, coalescing = %c.why, max_elements = c.limits.max_elements, script_bytes = c.limits.script_bytes, "coalescing decided");
                Ok(c)
            })
            .await;
        match read {
            Ok(c) if self.index.log_paths_kept() => c.clone().with_log_paths_kept(),
            Ok(c) => c.clone(),
            Err(e) => {
                tracing::debug!(cluster = %cfg.name, error = %e, "slurm.conf not read now; asked again with the next CreateTask");
                Coalescing::decide(setting, None, once_only)
            }
        }
    }
}
