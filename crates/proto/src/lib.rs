//! The flyteidl2 connector protocol subset and Flyte 1's agent protocol (flyteidl 1.16),
//! generated from `proto/` by `build.rs`.
//!
//! Modules follow the protobuf packages: `proto::flyteidl2::connector`, `::core`, `::task`,
//! `::logs::dataplane`; Flyte 1's are `proto::flyteidl::admin`, `::core`, `::service`
//! (re-exported as [`flyte1`]). Re-exports below are the names the rest of the crate uses most.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/flyteidl2.rs"));

/// The compiled descriptors of `proto/` (build.rs): protobuf-JSON requests and gRPC reflection.
pub static DESCRIPTORS: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/flyteidl2_descriptor.bin"));

pub use flyteidl2::connector;
pub use flyteidl2::core;
pub use flyteidl2::logs;
pub use flyteidl2::task;

/// Flyte 1 (flytekit + flytepropeller): `flyteidl.admin` (the agent messages), `flyteidl.core`,
/// `flyteidl.service` (AsyncAgentService, AgentMetadataService).
pub mod flyte1 {
    pub use super::flyteidl::{admin, core, service};
}

impl core::task_execution::Phase {
    /// Whether a task in this phase is done: Flyte stops polling it and never sees it change.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Aborted | Self::RetryableFailed
        )
    }

    /// The phase of a wire value; an unknown value is `Undefined` (never terminal).
    pub fn of(value: i32) -> Self {
        Self::try_from(value).unwrap_or(Self::Undefined)
    }
}

/// `google.protobuf.Value` → JSON, as protobuf's JSON mapping does (numbers stay floats: a Struct
/// has no integers, which is why the renderer reads `2.0` as `2`).
pub fn value_to_json(v: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n)
            .map(serde_json::Value::Number)
            // NaN/Infinity have no JSON number; protobuf's JSON mapping writes them as strings.
            .unwrap_or_else(|| serde_json::Value::String(n.to_string())),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(value_to_json).collect())
        }
    }
}

/// `google.protobuf.Struct` → a JSON object.
pub fn struct_to_json(s: &prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

/// JSON → `google.protobuf.Struct` (non-objects become an empty Struct); used for `custom_info`.
pub fn json_to_struct(v: &serde_json::Value) -> prost_types::Struct {
    let mut out = prost_types::Struct::default();
    if let serde_json::Value::Object(m) = v {
        for (k, v) in m {
            out.fields.insert(k.clone(), json_to_value(v));
        }
    }
    out
}

/// JSON → `google.protobuf.Value`.
pub fn json_to_value(v: &serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(json_to_value).collect(),
        }),
        serde_json::Value::Object(_) => Kind::StructValue(json_to_struct(v)),
    };
    prost_types::Value { kind: Some(kind) }
}
