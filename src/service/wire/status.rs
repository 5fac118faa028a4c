//! The read path's answers in the connector's own terms: GetTask's [`TaskStatus`], which each
//! protocol's seam (`convert::resource` for Flyte 2, `flyte1::resource` for Flyte 1) turns into
//! its wire's `Resource` once, and GetTaskMetrics' [`MetricsQuery`] and [`MetricResult`]. And [`literals!`]: the literal and phase conversions whose
//! body is the same for both wires (Flyte 1's and 2's messages have the same shape, but are
//! distinct Rust types), written once and instantiated per wire.

use serde_json::{Map, Value, json};

use crate::domain::Phase;
use crate::slurmrestd::JobId;
use crate::staging::OutputBlob;
use crate::tracker::FailureClass;

/// What GetTask reports of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    pub phase: Phase,
    /// Whose failure it is: the task's code, the cluster, or neither can be helped.
    pub class: Option<FailureClass>,
    /// The status line first, details on the lines after.
    pub message: String,
    /// The task's own Slurm job; `None` before it has one.
    pub job: Option<SlurmJob>,
    /// The declared outputs, once uploaded.
    pub outputs: Option<Vec<OutputBlob>>,
    pub log_links: Vec<LogLink>,
    /// What Slurm says of the job (state, reason, exit code, nodes, requeues, its files, an
    /// array's elements), for `custom_info`.
    pub facts: Map<String, Value>,
    /// What the job used, from slurmdbd (`report/accounting.rs`), once read.
    pub accounting: Option<Value>,
}

/// The Slurm job that is the task.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJob {
    pub cluster: String,
    /// The task's own job: an array element's own id once Slurm gave it one.
    pub job_id: JobId,
    pub job_name: String,
    /// The array this task is an element of, when the connector coalesced it with others.
    pub element: Option<ArrayElement>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArrayElement {
    pub array_job_id: JobId,
    pub index: u32,
}

/// A log link: the deployment's template filled in for this job.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLink {
    pub name: String,
    pub uri: String,
}

/// GetTaskMetrics' question: the metrics asked for (none: all), within a window of Unix seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsQuery {
    pub queries: Vec<String>,
    pub start: Option<i64>,
    pub end: Option<i64>,
}

/// One metric's answer: Prometheus' range-query result as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricResult {
    pub metric: String,
    pub data: Value,
}

impl TaskStatus {
    /// A task with no job yet: its phase and why.
    pub fn without_job(phase: Phase, message: String) -> TaskStatus {
        TaskStatus {
            phase,
            class: None,
            message,
            job: None,
            outputs: None,
            log_links: Vec::new(),
            facts: Map::new(),
            accounting: None,
        }
    }

    /// `custom_info`: the job, its facts, the failure class and the accounting; `None` without
    /// a job.
    pub fn custom_info(&self) -> Option<Value> {
        let job = self.job.as_ref()?;
        let mut info = Map::new();
        info.insert("cluster".into(), json!(job.cluster));
        info.insert("job_id".into(), json!(job.job_id.0));
        info.insert("job_name".into(), json!(job.job_name));
        if let Some(e) = job.element {
            info.insert("array_job_id".into(), json!(e.array_job_id.0));
            info.insert("array_task_id".into(), json!(e.index));
        }
        info.extend(self.facts.clone());
        info.insert(
            "failure_class".into(),
            json!(self.class.map(FailureClass::as_str)),
        );
        if let Some(a) = &self.accounting {
            info.insert("accounting".into(), a.clone());
        }
        Some(Value::Object(info))
    }
}

/// The conversions of one Flyte wire whose body is the same for both, over its `core` module
/// (`$core`, an alias in scope where it is used): a literal read as the renderer's
/// [`InputValue`](crate::render::InputValue), an interface type as its
/// [`InterfaceKind`](crate::render::InterfaceKind), an uploaded output as a blob literal, the
/// connector's phase as the wire's.
macro_rules! literals {
    ($core:ident) => {
        /// A request's input literal as the renderer reads it.
        pub(super) fn input_value(l: Option<&$core::Literal>) -> crate::render::InputValue {
            use crate::render::InputValue;
            use $core::{literal, primitive, scalar};
            let unsupported = |t: &str| InputValue::Unsupported {
                type_name: t.to_string(),
            };
            let Some(v) = l.and_then(|l| l.value.as_ref()) else {
                return unsupported("empty literal");
            };
            match v {
                literal::Value::Scalar(s) => match s.value.as_ref() {
                    Some(scalar::Value::Primitive(p)) => match p.value.as_ref() {
                        Some(primitive::Value::Integer(i)) => InputValue::Int(*i),
                        Some(primitive::Value::FloatValue(f)) => InputValue::Float(*f),
                        Some(primitive::Value::StringValue(s)) => InputValue::Str(s.clone()),
                        Some(primitive::Value::Boolean(b)) => InputValue::Bool(*b),
                        Some(primitive::Value::Datetime(_)) => unsupported("datetime"),
                        Some(primitive::Value::Duration(_)) => unsupported("timedelta"),
                        None => unsupported("empty primitive"),
                    },
                    Some(scalar::Value::Blob(b)) => InputValue::Blob {
                        uri: b.uri.clone(),
                        multipart: b
                            .metadata
                            .as_ref()
                            .and_then(|m| m.r#type.as_ref())
                            .is_some_and(|t| {
                                t.dimensionality
                                    == $core::blob_type::BlobDimensionality::Multipart as i32
                            }),
                    },
                    Some(scalar::Value::Binary(_)) => unsupported("binary"),
                    Some(scalar::Value::Schema(_)) => unsupported("schema"),
                    Some(scalar::Value::NoneType(_)) => unsupported("None"),
                    Some(scalar::Value::Error(_)) => unsupported("error"),
                    Some(scalar::Value::Generic(_)) => unsupported("struct/dict"),
                    Some(scalar::Value::StructuredDataset(_)) => {
                        unsupported("structured dataset (DataFrame)")
                    }
                    Some(scalar::Value::Union(_)) => unsupported("union/Optional"),
                    None => unsupported("empty scalar"),
                },
                literal::Value::Collection(_) => unsupported("list"),
                literal::Value::Map(_) => unsupported("dict (map)"),
                literal::Value::OffloadedMetadata(_) => unsupported("offloaded literal"),
            }
        }

        /// An interface variable's type, as far as the renderer tells types apart.
        pub(super) fn interface_kind(
            t: Option<&$core::LiteralType>,
        ) -> crate::render::InterfaceKind {
            use crate::render::InterfaceKind;
            use $core::literal_type;
            match t.and_then(|t| t.r#type.as_ref()) {
                Some(literal_type::Type::Blob(b)) => {
                    if b.dimensionality == $core::blob_type::BlobDimensionality::Multipart as i32 {
                        InterfaceKind::Dir
                    } else {
                        InterfaceKind::File
                    }
                }
                Some(literal_type::Type::Simple(s)) => InterfaceKind::Other(
                    $core::SimpleType::try_from(*s)
                        .map(|s| s.as_str_name().to_lowercase())
                        .unwrap_or_else(|_| "simple".into()),
                ),
                Some(other) => InterfaceKind::Other(
                    match other {
                        literal_type::Type::Schema(_) => "schema",
                        literal_type::Type::CollectionType(_) => "list",
                        literal_type::Type::MapValueType(_) => "dict",
                        literal_type::Type::EnumType(_) => "enum",
                        literal_type::Type::StructuredDatasetType(_) => "structured dataset",
                        literal_type::Type::UnionType(_) => "union",
                        _ => "other",
                    }
                    .to_string(),
                ),
                None => InterfaceKind::Other("untyped".into()),
            }
        }

        /// An uploaded output as the blob literal Flyte reads it from.
        fn blob_literal(b: &crate::staging::OutputBlob) -> $core::Literal {
            use $core::{
                Blob, BlobMetadata, BlobType, Literal, Scalar, blob_type, literal, scalar,
            };
            let dimensionality = match b.dimensionality {
                crate::staging::Dimensionality::Single => blob_type::BlobDimensionality::Single,
                crate::staging::Dimensionality::Multipart => {
                    blob_type::BlobDimensionality::Multipart
                }
            };
            Literal {
                value: Some(literal::Value::Scalar(Box::new(Scalar {
                    value: Some(scalar::Value::Blob(Blob {
                        metadata: Some(BlobMetadata {
                            r#type: Some(BlobType {
                                format: String::new(),
                                dimensionality: dimensionality as i32,
                            }),
                        }),
                        uri: b.uri.clone(),
                    })),
                }))),
                ..Default::default()
            }
        }

        /// The connector's phase as the wire's enum value.
        fn wire_phase(p: crate::domain::Phase) -> i32 {
            use crate::domain::Phase;
            use $core::task_execution::Phase as Wire;
            (match p {
                Phase::Queued => Wire::Queued,
                Phase::Running => Wire::Running,
                Phase::Succeeded => Wire::Succeeded,
                Phase::Failed => Wire::Failed,
                Phase::RetryableFailed => Wire::RetryableFailed,
                Phase::Aborted => Wire::Aborted,
            }) as i32
        }

        /// A log link as the wire's `TaskLog`, shown while the task is pending (a Slurm job's
        /// files exist from its start).
        fn task_log(l: crate::service::wire::status::LogLink) -> $core::TaskLog {
            $core::TaskLog {
                uri: l.uri,
                name: l.name,
                show_while_pending: true,
                ..Default::default()
            }
        }
    };
}
pub(super) use literals;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elements_custom_info_names_its_own_job_and_its_array() {
        let mut s = TaskStatus::without_job(Phase::Running, "m".into());
        assert_eq!(s.custom_info(), None);
        s.job = Some(SlurmJob {
            cluster: "hpc".into(),
            job_id: JobId(8),
            job_name: "n".into(),
            element: Some(ArrayElement {
                array_job_id: JobId(7),
                index: 1,
            }),
        });
        s.facts.insert("state".into(), json!("RUNNING"));
        let info = s.custom_info().unwrap();
        assert_eq!(info["job_id"], 8);
        assert_eq!(info["array_job_id"], 7);
        assert_eq!(info["array_task_id"], 1);
        assert_eq!(info["state"], "RUNNING");
        assert_eq!(info["failure_class"], Value::Null);
        assert!(info.get("accounting").is_none());
    }
}
