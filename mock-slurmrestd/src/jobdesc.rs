//! Parsing a `POST job/submit` body the way data_parser does for the version asked: every field
//! of that version's `<version>_job_desc_msg` accepted (`data/<version>/job_desc_fields.json`,
//! from its real spec); a field the version does not know is warned about and ignored, exactly
//! as the real one answers `no_such_field` on every version; a wrongly typed field makes the whole
//! request a 200 with only a warning and no job (the recorded trap).

use serde_json::{Map, Value};

use crate::config::ApiVersion;
use crate::records::Warning;
use crate::versions::job_desc_fields;

/// A job description the scheduler can run; fields it does not simulate stay in `raw` and are
/// echoed in the job record.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub script: String,
    pub environment: Vec<String>,
    pub cwd: String,
    pub name: String,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub comment: String,
    pub standard_output: Option<String>,
    pub standard_error: Option<String>,
    pub standard_input: Option<String>,
    /// Minutes; `None` = UNLIMITED.
    pub time_limit: Option<u32>,
    /// `Some` only when given (SLURM_CPUS_PER_TASK is set only then, like the real one).
    pub cpus_per_task: Option<u32>,
    pub tasks: Option<u32>,
    pub min_nodes: u32,
    pub max_nodes: u32,
    pub memory_per_node: Option<u64>,
    pub memory_per_cpu: Option<u64>,
    pub hold: bool,
    pub priority: Option<u32>,
    pub nice: i64,
    pub dependency: String,
    pub array: Option<ArraySpec>,
    pub raw: Map<String, Value>,
}

impl JobSpec {
    pub fn cpus_per_task_or_default(&self) -> u32 {
        self.cpus_per_task.unwrap_or(1).max(1)
    }
    pub fn tasks_or_default(&self) -> u32 {
        self.tasks.unwrap_or(1).max(1)
    }
    /// CPUs the whole job needs.
    pub fn total_cpus(&self) -> u32 {
        let n = self.cpus_per_task_or_default() * self.tasks_or_default();
        let min = self
            .raw
            .get("minimum_cpus")
            .and_then(Value::as_u64)
            .unwrap_or(0) as u32;
        n.max(min).max(self.min_nodes)
    }
}

/// `array: "0-3"`, `"1,3,5"`, `"0-7:2"`, with an optional `%N` running limit.
#[derive(Debug, Clone, PartialEq)]
pub struct ArraySpec {
    pub text: String,
    pub indices: Vec<u32>,
    pub max_running: Option<u32>,
}

/// Why slurmctld refused a submit: an error number and its message.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub number: i64,
    pub message: &'static str,
}

#[derive(Debug)]
pub enum Parsed {
    Job(Box<JobSpec>, Vec<Warning>),
    /// Type errors: the real one answers 200 with these warnings and creates no job.
    TypeErrors(Vec<Warning>),
    /// The body itself could not be read (not JSON, no `job` object).
    BadBody(String),
}

fn json_type_desc(v: &Value) -> &'static str {
    match v {
        Value::Null => "OpenAPI type=null (Slurm type=null)",
        Value::Bool(_) => "OpenAPI type=boolean (Slurm type=boolean)",
        Value::Number(n) if n.is_f64() => {
            "OpenAPI type=number format=double (Slurm type=floating point number)"
        }
        Value::Number(_) => "OpenAPI type=integer format=int64 (Slurm type=64 bit integer)",
        Value::String(_) => "OpenAPI type=string (Slurm type=string)",
        Value::Array(_) => "OpenAPI type=array (Slurm type=list)",
        Value::Object(_) => "OpenAPI type=object (Slurm type=dictionary)",
    }
}

pub(crate) fn slurm_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "floating point number",
        Value::Number(_) => "64 bit integer",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "dictionary",
    }
}

fn expected_desc(kind: &str) -> &'static str {
    match kind {
        "integer" => "OpenAPI type=integer format=int32 (Slurm type=64 bit integer)",
        "boolean" => "OpenAPI type=boolean (Slurm type=boolean)",
        "no_val" => "OpenAPI type=object (Slurm type=dictionary)",
        "string_list" | "flags" => "OpenAPI type=array (Slurm type=list)",
        "object" => "OpenAPI type=object (Slurm type=dictionary)",
        _ => "OpenAPI type=string (Slurm type=string)",
    }
}

/// Whether `v` is acceptable for a field of `kind` (as lenient as data_parser: numbers as strings,
/// a no_val struct as a plain integer, a single string for a list).
fn type_ok(kind: &str, v: &Value) -> bool {
    match kind {
        "integer" => {
            v.is_i64() || v.is_u64() || v.as_str().is_some_and(|s| s.trim().parse::<i64>().is_ok())
        }
        "boolean" => v.is_boolean(),
        "no_val" => {
            v.is_i64()
                || v.is_u64()
                || v.is_object()
                || v.as_str().is_some_and(|s| s.parse::<u64>().is_ok())
        }
        "string_list" => {
            v.is_string() || v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
        }
        "flags" => v.is_string() || v.is_array(),
        "object" => v.is_object(),
        // data_parser turns numbers and booleans into strings for string fields.
        _ => v.is_string() || v.is_number() || v.is_boolean(),
    }
}

fn is_integer(v: &Value) -> bool {
    v.is_i64() || v.is_u64()
}

fn as_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn as_u64(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A no_val struct: `7`, `{"set":true,"number":7}`; `{"infinite":true}` and `{"set":false}` -> None.
fn no_val(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Object(m) => {
            if m.get("infinite").and_then(Value::as_bool) == Some(true)
                || m.get("set").and_then(Value::as_bool) == Some(false)
            {
                None
            } else {
                m.get("number").and_then(Value::as_u64)
            }
        }
        other => as_u64(Some(other)),
    }
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// The submitted text of each `job` field, in its original key order (data_parser quotes the
/// offending value as written, e.g. `{"set":true,"number":2}`).
fn raw_job_fields(body: &[u8]) -> std::collections::HashMap<String, String> {
    #[derive(serde::Deserialize)]
    struct RawBody<'a> {
        #[serde(borrow)]
        job: Option<std::collections::HashMap<String, &'a serde_json::value::RawValue>>,
    }
    serde_json::from_slice::<RawBody<'_>>(body)
        .ok()
        .and_then(|b| b.job)
        .map(|m| m.into_iter().map(|(k, v)| (k, minify(v.get()))).collect())
        .unwrap_or_default()
}

/// Drop whitespace outside strings.
fn minify(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_str, mut escaped) = (false, false);
    for c in json.chars() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

/// Parse the whole submit body: `{"job":{...}}` with `script` inside `job` or next to it.
pub fn parse_submit(body: &[u8], api: ApiVersion) -> Parsed {
    let root: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Parsed::BadBody(format!("body is not JSON: {e}")),
    };
    let Some(root) = root.as_object() else {
        return Parsed::BadBody("body is not a JSON object".into());
    };
    let Some(job) = root.get("job").and_then(Value::as_object) else {
        return Parsed::BadBody(
            "body has no \"job\" object (heterogeneous \"jobs\" are not supported by the mock)"
                .into(),
        );
    };
    let mut warnings = Vec::new();
    let mut type_errors = Vec::new();
    for (k, v) in root {
        if k != "job" && k != "script" {
            warnings.push(Warning {
                description: format!(
                    "Ignoring unknown field \"{k}\" of type {} in DATA_PARSER_JOB_SUBMIT_REQ",
                    slurm_type_name(v)
                ),
                source: format!("#/{k}/"),
            });
        }
    }
    let kinds = job_desc_fields(api);
    let raw_text = raw_job_fields(body);
    for (k, v) in job {
        match kinds.get(k) {
            None => warnings.push(Warning {
                description: format!(
                    "Ignoring unknown field \"{k}\" of type {} in DATA_PARSER_JOB_DESC_MSG",
                    slurm_type_name(v)
                ),
                source: format!("#/job/{k}/"),
            }),
            // v0.0.40 applies a plain integer for a no_val field but warns that it wanted the
            // object (recorded: `time_limit: 7`).
            Some(kind) if kind == "no_val" && api.warns_plain_no_val() && is_integer(v) => warnings
                .push(Warning {
                    description: format!(
                        "Expected {} but got OpenAPI type=integer (Slurm type=64 bit integer)",
                        expected_desc(kind)
                    ),
                    source: format!("#/job/{k}/"),
                }),
            Some(kind) if !type_ok(kind, v) => type_errors.push(Warning {
                description: format!(
                    "Expected {} but got {}: {}",
                    expected_desc(kind),
                    json_type_desc(v),
                    raw_text
                        .get(k)
                        .cloned()
                        .unwrap_or_else(|| serde_json::to_string(v).unwrap_or_default())
                ),
                source: format!("#/job/{k}/"),
            }),
            Some(_) => {}
        }
    }
    if !type_errors.is_empty() {
        return Parsed::TypeErrors(type_errors);
    }
    let array = match as_string(job.get("array")) {
        Some(text) if !text.is_empty() => match parse_array(&text) {
            Some(a) => Some(a),
            None => {
                return Parsed::TypeErrors(vec![Warning {
                    description: format!("Invalid job array specification: {text}"),
                    source: "#/job/array/".into(),
                }]);
            }
        },
        _ => None,
    };
    let (min_nodes, max_nodes) = parse_nodes(job);
    let script = as_string(job.get("script"))
        .or_else(|| as_string(root.get("script")))
        .unwrap_or_default();
    let spec = JobSpec {
        script,
        environment: string_list(job.get("environment")),
        cwd: as_string(job.get("current_working_directory")).unwrap_or_default(),
        name: as_string(job.get("name")).unwrap_or_default(),
        partition: as_string(job.get("partition")).filter(|s| !s.is_empty()),
        account: as_string(job.get("account")).filter(|s| !s.is_empty()),
        qos: as_string(job.get("qos")).filter(|s| !s.is_empty()),
        comment: as_string(job.get("comment")).unwrap_or_default(),
        standard_output: as_string(job.get("standard_output")).filter(|s| !s.is_empty()),
        standard_error: as_string(job.get("standard_error")).filter(|s| !s.is_empty()),
        standard_input: as_string(job.get("standard_input")).filter(|s| !s.is_empty()),
        time_limit: no_val(job.get("time_limit")).map(|m| m.min(u32::MAX as u64) as u32),
        cpus_per_task: as_u64(job.get("cpus_per_task")).map(|n| n as u32),
        tasks: as_u64(job.get("tasks")).map(|n| n as u32),
        min_nodes,
        max_nodes,
        memory_per_node: no_val(job.get("memory_per_node")),
        memory_per_cpu: no_val(job.get("memory_per_cpu")),
        hold: job.get("hold").and_then(Value::as_bool).unwrap_or(false),
        priority: no_val(job.get("priority")).map(|p| p as u32),
        nice: job.get("nice").and_then(Value::as_i64).unwrap_or(0),
        dependency: as_string(job.get("dependency")).unwrap_or_default(),
        array,
        raw: job.clone(),
    };
    Parsed::Job(Box::new(spec), warnings)
}

/// `nodes: "2"` or `"1-3"`; else minimum_nodes / maximum_nodes; default 1.
fn parse_nodes(job: &Map<String, Value>) -> (u32, u32) {
    if let Some(s) = as_string(job.get("nodes")) {
        let s = s.trim();
        if let Some((a, b)) = s.split_once('-') {
            if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                return (a.max(1), b.max(a).max(1));
            }
        } else if let Ok(n) = s.parse::<u32>() {
            return (n.max(1), n.max(1));
        }
    }
    let min = as_u64(job.get("minimum_nodes")).unwrap_or(1).max(1) as u32;
    let max = as_u64(job.get("maximum_nodes"))
        .unwrap_or(min as u64)
        .max(min as u64) as u32;
    (min, max)
}

/// Parse a Slurm array expression; `None` when malformed or empty.
pub fn parse_array(text: &str) -> Option<ArraySpec> {
    let (body, limit) = match text.split_once('%') {
        Some((b, l)) => (b, Some(l.trim().parse::<u32>().ok()?)),
        None => (text, None),
    };
    let mut indices = Vec::new();
    for part in body.split(',') {
        let part = part.trim();
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.trim().parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        match range.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if b < a || b - a > 100_000 {
                    return None;
                }
                indices.extend((a..=b).step_by(step as usize));
            }
            None => indices.push(range.parse::<u32>().ok()?),
        }
    }
    indices.sort_unstable();
    indices.dedup();
    (!indices.is_empty()).then(|| ArraySpec {
        text: text.to_string(),
        indices,
        max_running: limit,
    })
}

/// A dependency clause the scheduler understands: `afterok:1:2,afterany:3` (`?` = any-of not
/// supported: treated like `,`).
#[derive(Debug, Clone, PartialEq)]
pub struct DepClause {
    pub kind: String,
    pub job_ids: Vec<u32>,
}

pub fn parse_dependency(text: &str) -> Option<Vec<DepClause>> {
    let mut out = Vec::new();
    for clause in text
        .split([',', '?'])
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        if clause == "singleton" {
            out.push(DepClause {
                kind: "singleton".into(),
                job_ids: vec![],
            });
            continue;
        }
        let mut parts = clause.split(':');
        let kind = parts.next()?.to_string();
        if !matches!(
            kind.as_str(),
            "after" | "afterok" | "afterany" | "afternotok" | "aftercorr"
        ) {
            return None;
        }
        let mut ids = Vec::new();
        for p in parts {
            // `after:123+5` (delay) and `123_4` (array task) are reduced to the job id.
            let id = p.split(['+', '_']).next()?.trim().parse::<u32>().ok()?;
            ids.push(id);
        }
        if ids.is_empty() {
            return None;
        }
        out.push(DepClause { kind, job_ids: ids });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays() {
        assert_eq!(parse_array("0-3").unwrap().indices, vec![0, 1, 2, 3]);
        assert_eq!(parse_array("1,3,5%2").unwrap().max_running, Some(2));
        assert_eq!(parse_array("0-6:3").unwrap().indices, vec![0, 3, 6]);
        assert!(parse_array("3-1").is_none());
        assert!(parse_array("x").is_none());
    }

    #[test]
    fn dependencies() {
        let d = parse_dependency("afterok:12:13,afterany:14").unwrap();
        assert_eq!(
            d[0],
            DepClause {
                kind: "afterok".into(),
                job_ids: vec![12, 13]
            }
        );
        assert_eq!(d[1].job_ids, vec![14]);
        assert!(parse_dependency("whenever:1").is_none());
        assert!(parse_dependency("afterok").is_none());
    }

    #[test]
    fn wrong_type_is_a_type_error() {
        let body = br##"{"job":{"cpus_per_task":{"set":true,"number":2},"script":"#!/bin/bash\n","environment":["A=B"],"current_working_directory":"/tmp"}}"##;
        match parse_submit(body, ApiVersion::V0_0_42) {
            Parsed::TypeErrors(w) => {
                assert_eq!(w[0].source, "#/job/cpus_per_task/");
                assert!(w[0].description.starts_with(
                    "Expected OpenAPI type=integer format=int32 (Slurm type=64 bit integer) but got OpenAPI type=object (Slurm type=dictionary): {\"set\":true,\"number\":2}"
                ));
            }
            other => panic!("expected type errors, got {other:?}"),
        }
    }

    #[test]
    fn time_limit_forms_and_nodes() {
        let body =
            br##"{"job":{"time_limit":{"set":true,"number":7},"nodes":"2-3","script":"x"}}"##;
        let Parsed::Job(spec, w) = parse_submit(body, ApiVersion::V0_0_42) else {
            panic!()
        };
        assert!(w.is_empty());
        assert_eq!(spec.time_limit, Some(7));
        assert_eq!((spec.min_nodes, spec.max_nodes), (2, 3));
        let Parsed::Job(spec, _) =
            parse_submit(br#"{"job":{"time_limit":5}}"#, ApiVersion::V0_0_42)
        else {
            panic!()
        };
        assert_eq!(spec.time_limit, Some(5));
    }
}
