//! A fleet of real `slurm-connector serve` processes and a client that behaves like Flyte's
//! backend behind a Service (the real-tier drills: tests/real_replica_drill.rs,
//! tests/real_controller_drill.rs):
//! - every call goes to a random replica with the backend's 10 s deadline; a CreateTask that
//!   fails or times out is retried on another replica until it answers;
//! - a call that cannot reach its replica at all (the pod is gone: a Service would route
//!   elsewhere) is sent to another one and counted apart; an *answer* that is an error counts as
//!   a GetTask error.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use slurm_connector::proto::connector::CreateTaskRequest;
use slurm_connector::proto::core::task_execution::Phase;
use tokio::sync::Mutex;

use super::drill::{FLYTE_DEADLINE, Grpc, ServeProcess, get_req};
use super::free_port;

/// The replicas by slot: their ports stay, the processes change.
pub struct Fleet {
    ports: Vec<u16>,
    channels: Vec<tonic::transport::Channel>,
    procs: Mutex<Vec<Option<ServeProcess>>>,
    env: Vec<(&'static str, String)>,
    log: std::path::PathBuf,
}

impl Fleet {
    pub fn start(replicas: usize, env: Vec<(&'static str, String)>, log: &Path) -> Fleet {
        let ports: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
        let procs = ports
            .iter()
            .map(|p| {
                let s = ServeProcess::spawn(*p, &env, log);
                s.wait_listening();
                Some(s)
            })
            .collect();
        let channels = ports
            .iter()
            .map(|p| {
                tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{p}"))
                    .unwrap()
                    .connect_lazy()
            })
            .collect();
        Fleet {
            ports,
            channels,
            procs: Mutex::new(procs),
            env,
            log: log.to_path_buf(),
        }
    }

    pub fn len(&self) -> usize {
        self.ports.len()
    }

    pub fn client(&self, slot: usize) -> Grpc {
        Grpc::new(self.channels[slot].clone())
    }

    /// Stops slot `i` (SIGTERM, or SIGKILL) and starts its successor on the same port.
    pub async fn replace(&self, i: usize, kill: bool) {
        let old = self.procs.lock().await[i].take().expect("running");
        tokio::task::spawn_blocking(move || if kill { old.sigkill() } else { old.sigterm() })
            .await
            .unwrap();
        let new = ServeProcess::spawn(self.ports[i], &self.env, &self.log);
        let new = tokio::task::spawn_blocking(move || {
            new.wait_listening();
            new
        })
        .await
        .unwrap();
        self.procs.lock().await[i] = Some(new);
    }
}

/// The backend's view of one answer: a replica's error, or no replica there to answer.
pub fn unreachable(s: &tonic::Status) -> bool {
    // A status the client made of a transport failure carries that failure as its source; an
    // answer from a replica carries none. A call written to a connection of the replica just
    // SIGKILLed fails so with code Unknown and a broken pipe (seen in CI): the pod is gone, and
    // the Service would route the call elsewhere, so it is no error of a replica.
    if from_transport(s) {
        return true;
    }
    let gone = s.message().contains("transport error")
        || s.message().contains("connect")
        || s.message().contains("connection");
    // Cancelled "operation was canceled ... connection closed": the call was put on a
    // connection the rolled replica closed as it shut down (seen once in a CI dry run). grpc-go,
    // the backend's client, retries such a call transparently; tonic hands it back.
    let closed_under_it =
        s.code() == tonic::Code::Cancelled && format!("{s:?}").contains("connection closed");
    (s.code() == tonic::Code::Unavailable && gone) || closed_under_it
}

/// Whether the client made this status of a transport failure (its source), rather than decoding
/// a replica's `grpc-status`.
pub fn from_transport(s: &tonic::Status) -> bool {
    std::error::Error::source(s).is_some_and(|e| e.is::<tonic::transport::Error>())
}

#[derive(Default)]
pub struct Counts {
    pub create_retries: AtomicUsize,
    /// CreateTasks sent again to another replica (the backend's retry after a timeout).
    pub repeated: AtomicUsize,
    pub unreachable: AtomicUsize,
    pub get_errors: AtomicUsize,
    /// GetTask errors in a row of any one task, at most (Flyte fails a task past 5).
    pub max_consecutive_errors: AtomicUsize,
    /// Non-terminal GetTask messages that gave Slurm's reason or said the cluster was
    /// unreachable (first line of each kind, deduplicated): what the drill's users saw.
    pub said: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// CreateTask on random replicas until one answers with a meta (for at most 2 minutes: 200
/// tries of up to 10 s each could have held CI for half an hour).
pub async fn create(fleet: &Fleet, counts: &Counts, req: &CreateTaskRequest) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut tries = 0;
    loop {
        let slot = rand::rng().random_range(0..fleet.len());
        let mut r = tonic::Request::new(req.clone());
        r.set_timeout(FLYTE_DEADLINE);
        match fleet.client(slot).create_task(r).await {
            Ok(a) => return a.into_inner().resource_meta,
            Err(e) => {
                tries += 1;
                counts.create_retries.fetch_add(1, Ordering::Relaxed);
                assert!(
                    Instant::now() < deadline,
                    "CreateTask not answered within 2 min ({tries} tries, last: {e})"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// GetTask on random replicas until the task is terminal; its phase. `until` is the whole
/// drill's deadline: a worker follows many tasks in turn, so one per task would not bound it.
pub async fn follow(
    fleet: &Fleet,
    counts: &Counts,
    meta: &[u8],
    until: Instant,
) -> (Phase, String) {
    let mut last = String::from("no answer yet");
    let mut in_a_row = 0;
    loop {
        assert!(
            Instant::now() < until,
            "a task not terminal by the drill's deadline; last: {last}"
        );
        let slot = rand::rng().random_range(0..fleet.len());
        match fleet.client(slot).get_task(get_req(meta)).await {
            Ok(a) => {
                let r = a.into_inner().resource.expect("a resource");
                in_a_row = 0;
                let p = Phase::try_from(r.phase).unwrap();
                if p.is_terminal() {
                    return (p, r.message);
                }
                for line in r.message.lines() {
                    if line.contains("reason:") || line.contains("unreachable") {
                        // Job ids and times vary; the kind of message is what is kept.
                        let kind: String = line
                            .split_whitespace()
                            .map(|w| {
                                if w.chars().any(|c| c.is_ascii_digit()) {
                                    "#"
                                } else {
                                    w
                                }
                            })
                            .collect::<Vec<_>>()
                            .join(" ");
                        counts.said.lock().unwrap().insert(kind);
                    }
                }
                last = format!("{p:?} {}", r.message);
            }
            Err(e) if unreachable(&e) => {
                counts.unreachable.fetch_add(1, Ordering::Relaxed);
                // Another replica at once, but not in a hot loop: 20 workers spinning on 2 cores
                // while a replica is replaced would starve the serves they wait for.
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => {
                eprintln!("GetTask error from replica {slot}: {e}");
                counts.get_errors.fetch_add(1, Ordering::Relaxed);
                in_a_row += 1;
                counts
                    .max_consecutive_errors
                    .fetch_max(in_a_row, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}
