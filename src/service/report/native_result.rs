//! A native (`slurm`) task's result, decided from what the Flyte entrypoint wrote at the output
//! prefix — never from the job's exit code: `a0` exits 0 when the task raised (it writes
//! `error.pb` instead of `outputs.pb`), and a job can exit non-zero after a result was written.
//!
//! - `error.pb` (a `flyteidl2.core.ErrorDocument`) → FAILED, or RETRYABLE_FAILED when its kind is
//!   RECOVERABLE, with the user's error message;
//! - `outputs.pb` → SUCCEEDED with no `Resource.outputs`: Flyte's connector plugin then reads
//!   `outputs.pb` at the output prefix itself when a SUCCEEDED resource has no outputs ("file
//!   based outputs"; skipped when the interface declares none);
//! - neither → FAILED: the entrypoint wrote no result (the caller adds the stderr tail).
//!
//! Reading happens in the background (an object store can be slow) and is remembered per job,
//! so GetTask (10 s deadline) only waits [`WAIT`] and otherwise reports RUNNING until it is done.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::ObjectStoreExt;
use prost::Message;

use crate::domain::Phase;
use crate::proto::core::{ErrorDocument, container_error, execution_error};
use crate::slurmrestd::JobRef;
use crate::staging::{self, Staging};

use crate::service::background::{self, Background, Work};
use crate::service::cluster::ClusterRuntime;
use crate::service::phase::Native;
use crate::service::wire::meta::ResourceMeta;

/// How long GetTask waits for a read in progress before answering RUNNING.
pub const WAIT: Duration = Duration::from_secs(3);
/// A whole read (both files) gives up after this.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Reads of a prefix before an unreadable one decides FAILED.
pub const MAX_READS: u32 = 3;
/// `error.pb` is a short message; anything bigger is not one.
const MAX_ERROR_DOC: u64 = 1024 * 1024;
/// Decided results are kept this long (GetTask keeps polling a finished task a few times).
const KEEP_DECIDED: Duration = Duration::from_secs(3600);

pub const OUTPUTS_FILE: &str = "outputs.pb";
pub const ERROR_FILE: &str = "error.pb";

/// What was found at the prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// `error.pb`'s bytes (checked first: a task that failed after writing outputs failed).
    Error(Vec<u8>),
    Outputs,
    Nothing,
}

/// The result of a COMPLETED native job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub phase: Phase,
    /// Appended to the status message.
    pub message: String,
    /// The decision came from an `error.pb` the task wrote (its own account of the failure).
    pub from_error_doc: bool,
}

/// The decision, from what was found (or why it could not be read).
pub fn decide(prefix: &str, found: Result<Found, String>) -> Decision {
    match found {
        Ok(Found::Outputs) => Decision {
            phase: Phase::Succeeded,
            message: format!(
                "the task wrote {}",
                staging::objstore::join_uri(prefix, OUTPUTS_FILE)
            ),
            from_error_doc: false,
        },
        Ok(Found::Error(bytes)) => match ErrorDocument::decode(bytes.as_slice()) {
            Ok(doc) => {
                let e = doc.error.unwrap_or_default();
                let recoverable = e.kind == container_error::Kind::Recoverable as i32;
                let origin = execution_error::ErrorKind::try_from(e.origin)
                    .map(|k| k.as_str_name().to_lowercase())
                    .unwrap_or_else(|_| "unknown".into());
                let kind = if recoverable {
                    "recoverable"
                } else {
                    "non-recoverable"
                };
                Decision {
                    phase: if recoverable {
                        Phase::RetryableFailed
                    } else {
                        Phase::Failed
                    },
                    message: format!(
                        "the task failed ({kind} {origin} error {}): {}",
                        if e.code.is_empty() { "?" } else { &e.code },
                        e.message
                    ),
                    from_error_doc: true,
                }
            }
            Err(err) => Decision {
                phase: Phase::Failed,
                message: format!(
                    "the task failed: {} is not an ErrorDocument ({err})",
                    staging::objstore::join_uri(prefix, ERROR_FILE)
                ),
                from_error_doc: false,
            },
        },
        Ok(Found::Nothing) => Decision {
            phase: Phase::Failed,
            message: format!(
                "the task's entrypoint wrote no result: neither {OUTPUTS_FILE} nor {ERROR_FILE} at {prefix} \
                 (it died before writing one, or the image/command is not a Flyte entrypoint)"
            ),
            from_error_doc: false,
        },
        Err(why) => Decision {
            phase: Phase::Failed,
            message: format!("the task's result at {prefix} could not be read: {why}"),
            from_error_doc: false,
        },
    }
}

/// Where the prefix is read from.
#[derive(Clone)]
pub enum Source {
    /// A `file://` prefix on the cluster's filesystem, read through staging (mount or stager).
    Cluster {
        staging: Arc<dyn Staging>,
        dir: String,
    },
    /// An object store (`s3://`, `gs://`, `abfs://`, or `file://` seen by the connector itself).
    Store { prefix: String },
}

impl Source {
    /// `file://` prefixes are cluster paths (the job wrote them) and go through staging when it
    /// is configured; without staging the connector must see the same filesystem (embedded).
    pub fn for_prefix(prefix: &str, staging: Option<&Arc<dyn Staging>>) -> Source {
        match (prefix.strip_prefix("file://"), staging) {
            (Some(dir), Some(st)) => Source::Cluster {
                staging: st.clone(),
                dir: dir.trim_end_matches('/').to_string(),
            },
            _ => Source::Store {
                prefix: prefix.to_string(),
            },
        }
    }

    async fn find(&self) -> Result<Found, String> {
        match self {
            Source::Cluster { staging, dir } => {
                let err_path = format!("{dir}/{ERROR_FILE}");
                if let Some(st) = staging.stat(&err_path).await.map_err(|e| e.to_string())? {
                    if st.size > MAX_ERROR_DOC {
                        return Err(format!(
                            "{err_path} is {} bytes, too big for an ErrorDocument",
                            st.size
                        ));
                    }
                    let mut stream = staging.read(&err_path).await.map_err(|e| e.to_string())?;
                    let mut bytes = Vec::new();
                    while let Some(chunk) = stream.next().await {
                        bytes.extend_from_slice(&chunk.map_err(|e| format!("{err_path}: {e}"))?);
                        if bytes.len() as u64 > MAX_ERROR_DOC {
                            return Err(format!("{err_path} grew past {MAX_ERROR_DOC} bytes"));
                        }
                    }
                    return Ok(Found::Error(bytes));
                }
                let out_path = format!("{dir}/{OUTPUTS_FILE}");
                match staging.stat(&out_path).await.map_err(|e| e.to_string())? {
                    Some(_) => Ok(Found::Outputs),
                    None => Ok(Found::Nothing),
                }
            }
            Source::Store { prefix } => {
                let err = staging::objstore::open(&staging::objstore::join_uri(prefix, ERROR_FILE))
                    .map_err(|e| e.to_string())?;
                match err.store.get(&err.path).await {
                    Ok(r) => {
                        if r.meta.size > MAX_ERROR_DOC {
                            return Err(format!(
                                "{} is {} bytes, too big for an ErrorDocument",
                                err.uri, r.meta.size
                            ));
                        }
                        let bytes = r.bytes().await.map_err(|e| {
                            format!("{}: {}", err.uri, staging::objstore::redact(&e))
                        })?;
                        return Ok(Found::Error(bytes.to_vec()));
                    }
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => {
                        return Err(format!("{}: {}", err.uri, staging::objstore::redact(&e)));
                    }
                }
                let out =
                    staging::objstore::open(&staging::objstore::join_uri(prefix, OUTPUTS_FILE))
                        .map_err(|e| e.to_string())?;
                match staging::objstore::exists(&out, false).await {
                    Ok(true) => Ok(Found::Outputs),
                    Ok(false) => Ok(Found::Nothing),
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    }
}

type Outcome = Result<Found, String>;

/// One read of a job's prefix: which attempt, and its outcome when done.
#[derive(Clone)]
struct Probe {
    /// Reads of this job's prefix so far (this one included).
    attempt: u32,
    outcome: tokio::sync::watch::Receiver<Option<Outcome>>,
}

impl Work for Probe {
    type Outcome = Outcome;
    fn outcome(&self) -> Option<Outcome> {
        self.outcome.outcome()
    }
    fn settled(&self) -> impl Future<Output = ()> + Send {
        self.outcome.settled()
    }
}

impl Probe {
    fn start(prefix: &str, source: Source, attempt: u32) -> Probe {
        let prefix = prefix.to_string();
        let outcome = background::spawn(async move {
            let found = match tokio::time::timeout(READ_TIMEOUT, source.find()).await {
                Ok(f) => f,
                Err(_) => Err(format!("no answer within {}s", READ_TIMEOUT.as_secs())),
            };
            if let Err(e) = &found {
                tracing::warn!(%prefix, attempt, error = %e, "reading a native task's result failed");
            }
            found
        });
        Probe { attempt, outcome }
    }
}

/// Reads in flight and decided, per (cluster, job); a decided one is dropped after
/// [`KEEP_DECIDED`] without a GetTask reading it.
pub struct Probes(Background<(String, JobRef), Probe>);

impl Default for Probes {
    fn default() -> Self {
        Probes(Background::new(KEEP_DECIDED))
    }
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes").finish_non_exhaustive()
    }
}

impl Probes {
    /// The decision for a COMPLETED job, or `None` while the read is still going after [`WAIT`].
    /// A read that failed (store unreachable, permissions) is tried again on the next calls, up
    /// to [`MAX_READS`] reads, before it decides FAILED: one network blip must not fail a task
    /// that succeeded.
    pub async fn decision(
        &self,
        cluster: &str,
        job: impl Into<JobRef>,
        prefix: &str,
        source: Source,
    ) -> Option<Decision> {
        let job: JobRef = job.into();
        let probe = self
            .0
            .start_or_join((cluster.to_string(), job), |p| match p {
                None => Some(Probe::start(prefix, source, 1)),
                Some(p) if p.attempt < MAX_READS && matches!(p.outcome(), Some(Err(_))) => {
                    Some(Probe::start(prefix, source, p.attempt + 1))
                }
                Some(_) => None,
            });
        let last_try = probe.attempt >= MAX_READS;
        match background::wait(&probe, WAIT).await {
            Some(Ok(f)) => Some(decide(prefix, Ok(f))),
            Some(Err(e)) if last_try => Some(decide(prefix, Err(e))),
            _ => None,
        }
    }
}

/// The task's native result as GetTask's fact, and what it said (for the message): read
/// ([`Native::Read`]), or being read ([`Native::Reading`]); no fact for a task that has none (no
/// output prefix: not a native task).
pub async fn read(
    rt: &ClusterRuntime,
    meta: &ResourceMeta,
    probes: &Probes,
) -> (Option<Native>, Option<Decision>) {
    let Some(prefix) = &meta.native_prefix else {
        return (None, None);
    };
    let source = Source::for_prefix(prefix, rt.staging.as_ref());
    let read = probes
        .decision(&meta.cluster, meta.target(), prefix, source)
        .await;
    let fact = match &read {
        Some(d) => Native::Read {
            phase: d.phase,
            from_error_doc: d.from_error_doc,
        },
        None => Native::Reading,
    };
    (Some(fact), read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurmrestd::JobId;

    // Written by the official `flyteidl2` Python package (what `a0` uses), see the fixtures' README.
    // Read at run time, not embedded: the container build context leaves tests/ out.
    fn fixture(name: &str) -> Vec<u8> {
        let p = format!(
            "{}/tests/fixtures/native/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn recoverable_error_is_retryable_with_the_users_message() {
        let d = decide(
            "s3://b/p",
            Ok(Found::Error(fixture("error_recoverable.pb"))),
        );
        assert_eq!(d.phase, Phase::RetryableFailed);
        assert_eq!(
            d.message,
            "the task failed (recoverable user error ValueError): boom 21"
        );
    }

    #[test]
    fn non_recoverable_error_fails() {
        let d = decide(
            "s3://b/p",
            Ok(Found::Error(fixture("error_non_recoverable.pb"))),
        );
        assert_eq!(d.phase, Phase::Failed);
        assert_eq!(
            d.message,
            "the task failed (non-recoverable system error OOM): out of memory in user code"
        );
    }

    #[test]
    fn outputs_succeed_nothing_and_garbage_fail() {
        assert_eq!(
            decide("file:///w/o", Ok(Found::Outputs)).phase,
            Phase::Succeeded
        );
        let d = decide("file:///w/o", Ok(Found::Nothing));
        assert_eq!(d.phase, Phase::Failed);
        assert!(d.message.contains("wrote no result"), "{}", d.message);
        let d = decide("file:///w/o", Ok(Found::Error(vec![0xff, 0xff, 0xff])));
        assert_eq!(d.phase, Phase::Failed);
        assert!(d.message.contains("not an ErrorDocument"), "{}", d.message);
        let d = decide("s3://b/p", Err("access denied".into()));
        assert_eq!(d.phase, Phase::Failed);
        assert!(
            d.message.contains("could not be read: access denied"),
            "{}",
            d.message
        );
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "slurm-connector-native-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[tokio::test]
    async fn a_file_prefix_is_a_cluster_path_read_through_staging() {
        let local = temp_dir("staging");
        std::fs::create_dir_all(local.join("flyte/out")).unwrap();
        std::fs::write(
            local.join("flyte/out").join(ERROR_FILE),
            fixture("error_non_recoverable.pb"),
        )
        .unwrap();
        let st: Arc<dyn Staging> = Arc::new(staging::LocalStaging::new(
            staging::Roots::parse(&format!("/shared={}", local.display())).unwrap(),
        ));
        let prefix = "file:///shared/flyte/out/";
        let src = Source::for_prefix(prefix, Some(&st));
        assert!(matches!(&src, Source::Cluster { dir, .. } if dir == "/shared/flyte/out"));
        let d = Probes::default()
            .decision("c", JobId(4), prefix, src)
            .await
            .unwrap();
        assert_eq!(d.phase, Phase::Failed);
        assert!(
            d.message.ends_with("out of memory in user code"),
            "{}",
            d.message
        );
        // Outside the mapped roots: refused by staging's confinement, never read; FAILED once
        // the reads are used up.
        let probes = Probes::default();
        let outside = "file:///etc/out";
        let mut last = None;
        for _ in 0..MAX_READS {
            let src = Source::for_prefix(outside, Some(&st));
            last = probes.decision("c", JobId(5), outside, src).await;
        }
        let d = last.expect("decided after MAX_READS reads");
        assert_eq!(d.phase, Phase::Failed);
        assert!(d.message.contains("could not be read"), "{}", d.message);
        let _ = std::fs::remove_dir_all(local);
    }

    #[tokio::test]
    async fn an_unreadable_prefix_is_read_again_before_it_fails() {
        let probes = Probes::default();
        let prefix = "file:///x";
        // A store that refuses: a URI object_store cannot open.
        let bad = || Source::Store {
            prefix: "nosuchscheme://bucket/p".into(),
        };
        for _ in 1..MAX_READS {
            assert_eq!(probes.decision("c", JobId(9), prefix, bad()).await, None);
        }
        let d = probes.decision("c", JobId(9), prefix, bad()).await.unwrap();
        assert_eq!(d.phase, Phase::Failed);
        assert!(d.message.contains("could not be read"), "{}", d.message);
    }

    #[tokio::test]
    async fn reads_a_local_prefix_error_first() {
        let dir = temp_dir("ok");
        let prefix = format!("file://{}", dir.display());
        let probes = Probes::default();
        let src = || Source::for_prefix(&prefix, None);
        std::fs::write(dir.join(OUTPUTS_FILE), b"").unwrap();
        let d = probes
            .decision("c", JobId(1), &prefix, src())
            .await
            .unwrap();
        assert_eq!(d.phase, Phase::Succeeded);
        std::fs::write(dir.join(ERROR_FILE), fixture("error_recoverable.pb")).unwrap();
        let d = probes
            .decision("c", JobId(2), &prefix, src())
            .await
            .unwrap();
        assert_eq!(d.phase, Phase::RetryableFailed);
        // Decided once per job: the first answer stays.
        let d = probes
            .decision("c", JobId(1), &prefix, src())
            .await
            .unwrap();
        assert_eq!(d.phase, Phase::Succeeded);
        let empty = temp_dir("empty");
        let prefix = format!("file://{}", empty.display());
        let d = probes
            .decision("c", JobId(3), &prefix, Source::for_prefix(&prefix, None))
            .await
            .unwrap();
        assert_eq!(d.phase, Phase::Failed);
        assert!(d.message.contains("wrote no result"), "{}", d.message);
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(empty);
    }
}
