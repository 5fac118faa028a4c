//! `resource_meta`: what CreateTask hands the backend and every later call hands back.
//!
//! Ours is versioned JSON (`{"v":1, "cluster", "job_id", ...}`) naming the cluster, the job and
//! its files and declared outputs — never a credential. The published Python (SSH) connector's
//! JSON (`job_id`, `host`, `stdout_path`, ..., `declared_outputs`) is read too, so jobs it
//! started keep being tracked after a deployment swaps this connector in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::slurmrestd::JobId;
use crate::staging::DeclaredOutput;

pub const META_VERSION: u32 = 1;

/// `outputs` / `declared_outputs`: `{name: {uri, kind, upload, written_to}}`. The name is the
/// key; it is put back into each output here. An unknown `kind` or `upload` fails the decode;
/// `null` (the Python plugin's meta without outputs) is none.
fn named_outputs<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, DeclaredOutput>, D::Error> {
    let mut m = Option::<BTreeMap<String, DeclaredOutput>>::deserialize(d)?.unwrap_or_default();
    for (name, o) in &mut m {
        o.name = name.clone();
    }
    Ok(m)
}

/// Our `resource_meta`, version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceMeta {
    pub v: u32,
    pub cluster: String,
    pub job_id: JobId,
    pub job_name: String,
    pub stdout: String,
    pub stderr: String,
    #[serde(default, deserialize_with = "named_outputs")]
    pub outputs: BTreeMap<String, DeclaredOutput>,
    /// Native (`slurm`) tasks: the output prefix where the entrypoint writes `outputs.pb` or
    /// `error.pb`, which decide the result once the job COMPLETED (`native_result`). Absent for
    /// script tasks and in metas written before it existed (their result is the job's state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_prefix: Option<String>,
    /// How many times the cluster may fail this task's job (node failure, preemption) and have
    /// it put back before the task fails retryably (decided at CreateTask: the deployment's
    /// budget, or an interruptible task's `interruptible_failure_threshold`). Absent in metas
    /// written before it existed: the deployment's budget applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_budget: Option<u32>,
    /// Several ranks (a clustered task, a multi-node `slurm` task): srun labels every output
    /// line with its rank, and a failure names the rank that failed (`rank_failure`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ranks: bool,
    /// A job array (`--array`): its indices as submitted (`0-9%3`); `job_id` is then the
    /// array's id, and `stdout`/`stderr` hold `%A_%a`, filled in per element. Absent for a
    /// job that is not an array, and in metas written before arrays were supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// This task is element `element` of the job array `job_id` (`array` its indices), which
    /// the connector made of several tasks' jobs (`submit/coalesce`): the element is the task;
    /// `stdout`/`stderr`/`job_name` are its own. Absent for every other meta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub element: Option<u32>,
    /// The Slurm user the job runs as, when an identity rule chose one: cancels,
    /// accounting lookups and a taken-over submit act as this user, from any replica or after a
    /// restart. Absent: the cluster's deployment user (every meta written before identities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_user: Option<String>,
    /// Set when CreateTask answered before its submit was done (paced behind other submits, or
    /// retried after slurmrestd hiccupped): `job_id` is then 0 and the job is found by its key
    /// (`submit/deferred.rs`). Absent in every other meta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Box<DeferredSubmit>>,
    /// The Flyte project and domain the task ran for: the labels of what tasks used
    /// (`slurm_connector_task_*` counters). Absent in metas written before them, and for a
    /// request without an execution id: counted under empty labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The folder of the execution's claim (`submit/claim`), when the deployment makes jobs
    /// once through claims (`FLYTE_SLURM_ONCE_ONLY=claims`): a deferred task's GetTask reads
    /// its job there, DeleteTask writes its tombstone there. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// What any replica needs to find a deferred submit's job, or to make it when the replica that
/// accepted the CreateTask is gone: the execution's key and the job description (the rendered
/// script and settings; never a credential: a task that brought its own token is submitted by
/// the replica that holds it, `own_credentials`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeferredSubmit {
    pub key: String,
    /// Unix seconds when the CreateTask was answered.
    pub at: i64,
    pub job: crate::slurmrestd::JobDescription,
    #[serde(default)]
    pub own_credentials: bool,
}

/// Where a decoded `resource_meta` came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    Ours(ResourceMeta),
    /// The Python plugin's meta: the cluster is still to be found from `host`.
    Python {
        host: String,
        meta: ResourceMeta,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error(
        "resource_meta is not UTF-8 JSON ({0}); it was not written by this connector or the Slurm plugin"
    )]
    NotJson(String),
    #[error(
        "resource_meta version {0} is newer than this connector understands (it reads version {META_VERSION}); upgrade the connector"
    )]
    Version(u32),
    #[error("resource_meta: {0}")]
    Field(String),
}

impl ResourceMeta {
    /// The meta of plain job `job_id` with its output files, and nothing optional (no declared
    /// outputs, not native, no ranks, array, budget, user or deferred submit): the base every
    /// other meta is built on with struct update syntax.
    pub fn new(
        cluster: impl Into<String>,
        job_id: JobId,
        job_name: impl Into<String>,
        stdout: impl Into<String>,
        stderr: impl Into<String>,
    ) -> ResourceMeta {
        ResourceMeta {
            v: META_VERSION,
            cluster: cluster.into(),
            job_id,
            job_name: job_name.into(),
            stdout: stdout.into(),
            stderr: stderr.into(),
            outputs: BTreeMap::new(),
            native_prefix: None,
            ranks: false,
            requeue_budget: None,
            slurm_user: None,
            array: None,
            element: None,
            deferred: None,
            project: None,
            domain: None,
            claim: None,
        }
    }

    /// Where the task's job is: `job_id`, or element `index` of the coalesced array `job_id`
    /// whose indices are `array` (Slurm's syntax).
    pub fn place(&mut self, job_id: JobId, element: Option<(u32, &str)>) {
        self.job_id = job_id;
        if let Some((index, array)) = element {
            self.element = Some(index);
            self.array = Some(array.to_string());
        }
    }

    /// The task as a job of its own: an element of a coalesced array without the array's
    /// indices (its logs, outputs and state are its own); any other meta as it is.
    pub fn as_task(&self) -> ResourceMeta {
        let mut m = self.clone();
        if m.element.is_some() {
            m.array = None;
        }
        m
    }

    /// What a cancel of this task addresses: its job, or its element of a coalesced array.
    pub fn target(&self) -> crate::slurmrestd::JobRef {
        crate::slurmrestd::JobRef {
            id: self.job_id,
            element: self.element,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain data serializes")
    }

    /// A job array's indices (`None`: not an array). A meta is ours or the Python plugin's,
    /// which never submitted arrays, so an unreadable expression is one no CreateTask wrote:
    /// an error naming it.
    pub fn array_indices(&self) -> Result<Option<Vec<u32>>, MetaError> {
        self.array
            .as_deref()
            .map(|a| {
                crate::render::array::indices(a)
                    .map_err(|why| MetaError::Field(format!("`array` {a:?}: {why}")))
            })
            .transpose()
    }
}

/// The Python connector's `SlurmJobMetadata` (dataclass → `json.dumps(asdict(...))`).
#[derive(Deserialize)]
struct PythonMeta {
    job_id: serde_json::Value,
    #[serde(default)]
    job_name: Option<String>,
    host: String,
    #[serde(default)]
    stdout_path: Option<String>,
    #[serde(default)]
    stderr_path: Option<String>,
    #[serde(default, deserialize_with = "named_outputs")]
    declared_outputs: BTreeMap<String, DeclaredOutput>,
}

/// A Python plugin's `job_id` (sbatch's output, a string; a number is taken too).
fn python_job_id(v: &serde_json::Value) -> Result<JobId, MetaError> {
    match v {
        serde_json::Value::String(s) => s.trim().parse::<JobId>().ok(),
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()).map(JobId),
        _ => None,
    }
    .filter(|id| id.0 != 0)
    .ok_or_else(|| MetaError::Field(format!("`job_id` {v} is not a Slurm job id")))
}

pub fn decode(bytes: &[u8]) -> Result<Decoded, MetaError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| MetaError::NotJson(e.to_string()))?;
    if let Some(ver) = v.get("v") {
        let ver = ver
            .as_u64()
            .ok_or_else(|| MetaError::Field("`v` must be a number".into()))?;
        if ver != u64::from(META_VERSION) {
            return Err(MetaError::Version(ver as u32));
        }
        let m: ResourceMeta =
            serde_json::from_value(v).map_err(|e| MetaError::Field(e.to_string()))?;
        // Slurm's ids start at 1; 0 stands for "not submitted yet" only beside `deferred`.
        // Asking slurmrestd about job 0 is a 422 (error 9000, recorded on 24.11), so a meta
        // claiming it is refused here, naming the field, not sent on.
        if m.job_id.0 == 0 && m.deferred.is_none() {
            return Err(MetaError::Field(
                "`job_id` is 0, which is no Slurm job (only a deferred submit's meta, with \
                 `deferred`, carries 0); pass the resource_meta CreateTask returned"
                    .into(),
            ));
        }
        return Ok(Decoded::Ours(m));
    }
    // flytekitplugins-slurm's (Flyte 1) `SlurmJobMetadata(job_id, ssh_config[, outputs])`: a task
    // its SSH agent started, asked about once the connector serves Flyte 1. Its host picks the
    // cluster as the Flyte 2 plugin's does; it names no files (the plugin left sbatch's defaults).
    if let Some(host) = v
        .get("ssh_config")
        .and_then(|s| s.get("host"))
        .and_then(|h| h.as_str())
    {
        let job_id = python_job_id(v.get("job_id").unwrap_or(&serde_json::Value::Null))?;
        return Ok(Decoded::Python {
            host: host.to_string(),
            meta: ResourceMeta::new("", job_id, String::new(), String::new(), String::new()),
        });
    }
    if v.get("host").is_some() {
        let p: PythonMeta =
            serde_json::from_value(v).map_err(|e| MetaError::Field(e.to_string()))?;
        let job_id = python_job_id(&p.job_id)?;
        let outputs = p.declared_outputs;
        return Ok(Decoded::Python {
            host: p.host,
            meta: ResourceMeta {
                outputs,
                ..ResourceMeta::new(
                    "",
                    job_id,
                    p.job_name.unwrap_or_default(),
                    p.stdout_path.unwrap_or_default(),
                    p.stderr_path.unwrap_or_default(),
                )
            },
        });
    }
    Err(MetaError::Field(
        "neither this connector's (`v`, `cluster`, `job_id`) nor the Slurm plugins' (`job_id` with `host`, or with `ssh_config.host` for Flyte 1) fields".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::staging::{OutputKind, UploadMode};

    #[test]
    fn ours_round_trips_and_has_no_secret_fields() {
        let m = ResourceMeta {
            requeue_budget: Some(2),
            ..ResourceMeta::new(
                "hpc1",
                JobId(42),
                "flyte-train-0123abcd",
                "/shared/j.out",
                "/shared/j.err",
            )
        };
        let bytes = m.encode();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("{\"v\":1,"), "{text}");
        assert_eq!(decode(&bytes).unwrap(), Decoded::Ours(m));
    }

    #[test]
    fn job_id_0_is_refused_unless_the_submit_is_deferred() {
        let e = decode(
            br#"{"v":1,"cluster":"hpc1","job_id":0,"job_name":"j","stdout":"","stderr":""}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("`job_id` is 0"), "{e}");
        let e = decode(br#"{"job_id": "0", "host": "login1"}"#).unwrap_err();
        assert!(
            e.to_string()
                .contains("`job_id` \"0\" is not a Slurm job id"),
            "{e}"
        );
    }

    /// Arrays: the indices travel in the meta; a meta written before arrays existed (no
    /// `array`) still decodes as a plain job.
    #[test]
    fn an_array_meta_round_trips_and_old_metas_still_decode() {
        let mut m = ResourceMeta {
            array: Some("0-4%3".into()),
            ..ResourceMeta::new(
                "hpc1",
                JobId(2205),
                "flyte-a-0123456789abcdef",
                "/w/flyte-a-0123456789abcdef_%A_%a.out",
                "/w/flyte-a-0123456789abcdef_%A_%a.err",
            )
        };
        let Decoded::Ours(back) = decode(&m.encode()).unwrap() else {
            panic!()
        };
        assert_eq!(back.array_indices().unwrap(), Some(vec![0, 1, 2, 3, 4]));
        let old = br#"{"v":1,"cluster":"hpc1","job_id":7,"job_name":"j","stdout":"/w/j.out","stderr":"/w/j.err","outputs":{}}"#;
        let Decoded::Ours(old) = decode(old).unwrap() else {
            panic!()
        };
        assert_eq!(old.array, None);
        assert_eq!(old.array_indices().unwrap(), None);
        assert!(!String::from_utf8(old.encode()).unwrap().contains("array"));
        m.array = Some("9-1".into());
        assert!(m.array_indices().unwrap_err().to_string().contains("9-1"));
    }

    /// flytekitplugins-slurm's metas, encoded by flytekit 1.16.31 (scripts/make-flyte1-fixtures.py).
    #[test]
    fn flyte1_plugin_meta_is_read() {
        for (name, id) in [("meta_slurm_fn", 4242), ("meta_slurm", 4243)] {
            let path = format!(
                "{}/tests/fixtures/flyte1/{name}.bin",
                env!("CARGO_MANIFEST_DIR")
            );
            let Decoded::Python { host, meta } = decode(&std::fs::read(path).unwrap()).unwrap()
            else {
                panic!("{name}")
            };
            assert_eq!(host, "login.hpc.example.org");
            assert_eq!(meta.job_id, JobId(id));
            assert!(meta.outputs.is_empty());
        }
        let e = decode(br#"{"job_id": "x", "ssh_config": {"host": "h"}}"#).unwrap_err();
        assert!(e.to_string().contains("job_id"), "{e}");
    }

    #[test]
    fn python_plugin_meta_is_read() {
        let raw = br#"{"job_id": "1234", "job_name": "flyte-x-1", "host": "login1", "username": "u",
            "port": 22, "stdout_path": "/h/.flyte/jobs/x.out", "stderr_path": "/h/.flyte/jobs/x.err",
            "known_hosts": null, "skip_host_key_verification": false,
            "declared_outputs": {"stats": {"uri": "s3://b/o/stats", "kind": "file", "upload": "connector", "written_to": "/h/x.outputs/stats"}}}"#;
        let Decoded::Python { host, meta } = decode(raw).unwrap() else {
            panic!()
        };
        assert_eq!(host, "login1");
        assert_eq!(meta.job_id, JobId(1234));
        let stats = &meta.outputs["stats"];
        assert_eq!(stats.name, "stats");
        assert_eq!(
            (stats.kind, stats.upload),
            (OutputKind::File, UploadMode::Connector)
        );
    }

    #[test]
    fn outputs_keep_their_wire_strings_and_an_unknown_one_is_an_error() {
        let o = |kind, upload| DeclaredOutput {
            name: "shards".into(),
            kind,
            upload,
            written_to: "/w/j.outputs/shards".into(),
            uri: "s3://b/o/shards".into(),
        };
        let mut m = ResourceMeta::new("hpc1", JobId(7), "j", "/w/j.out", "/w/j.err");
        m.outputs
            .insert("shards".into(), o(OutputKind::Dir, UploadMode::Job));
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(
            text.contains(r#""outputs":{"shards":{"uri":"s3://b/o/shards","kind":"directory","upload":"job","written_to":"/w/j.outputs/shards"}}"#),
            "{text}"
        );
        assert_eq!(decode(text.as_bytes()).unwrap(), Decoded::Ours(m.clone()));
        m.outputs
            .insert("shards".into(), o(OutputKind::File, UploadMode::Connector));
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(
            text.contains(r#""kind":"file","upload":"connector""#),
            "{text}"
        );

        // Written by something else: refused, naming the value, rather than read as a file.
        for (from, to) in [
            (r#""kind":"file""#, r#""kind":"folder""#),
            (r#""upload":"connector""#, r#""upload":"stager""#),
        ] {
            let bad = text.replace(from, to);
            let e = decode(bad.as_bytes()).unwrap_err().to_string();
            assert!(
                e.contains(to.split(':').nth(1).unwrap().trim_matches('"')),
                "{e}"
            );
        }
        let python = br#"{"job_id": "1", "host": "login1",
            "declared_outputs": {"s": {"uri": "u", "kind": "blob", "upload": "connector", "written_to": "w"}}}"#;
        assert!(matches!(decode(python), Err(MetaError::Field(e)) if e.contains("blob")));
        let python = br#"{"job_id": "1", "host": "login1", "declared_outputs": null}"#;
        let Decoded::Python { meta, .. } = decode(python).unwrap() else {
            panic!()
        };
        assert!(meta.outputs.is_empty());
    }

    #[test]
    fn unreadable_meta_is_an_error_naming_why() {
        assert!(matches!(decode(b"\x80abc"), Err(MetaError::NotJson(_))));
        assert!(matches!(decode(br#"{"v": 9}"#), Err(MetaError::Version(9))));
        assert!(
            decode(br#"{"foo": 1}"#)
                .unwrap_err()
                .to_string()
                .contains("host")
        );
    }
}
