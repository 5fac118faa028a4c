//! Test helpers: a CreateTaskRequest in readable protobuf JSON (as the fixtures are) → TaskSpec,
//! and the v0.0.42 schema check. The gRPC layer does the same mapping from prost types.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use slurm_connector::render::{
    ContainerSpec, ExecutionIdentity, InputValue, InterfaceKind, RenderConfig, RenderError,
    Rendered, TaskConfig, TaskSpec, TaskType,
};

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/render")
}

/// 2026-11-30T02:00:00Z: the clock every golden file is rendered at.
pub const NOW: i64 = 1_796_004_000;

pub fn config() -> RenderConfig {
    RenderConfig {
        working_dir: Some("/shared/flyte/jobs".into()),
        ..RenderConfig::default()
    }
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn input_value(v: &Value) -> InputValue {
    let scalar = &v["scalar"];
    if let Some(p) = scalar.get("primitive") {
        if let Some(i) = p.get("integer") {
            // proto3 JSON writes int64 as a string.
            return InputValue::Int(
                i.as_str()
                    .map(|t| t.parse().unwrap())
                    .unwrap_or_else(|| i.as_i64().unwrap()),
            );
        }
        if let Some(f) = p.get("floatValue") {
            return InputValue::Float(f.as_f64().unwrap());
        }
        if let Some(t) = p.get("stringValue") {
            return InputValue::Str(s(t));
        }
        if let Some(b) = p.get("boolean") {
            return InputValue::Bool(b.as_bool().unwrap());
        }
        return InputValue::Unsupported {
            type_name: "primitive".into(),
        };
    }
    if let Some(b) = scalar.get("blob") {
        let multipart = b["metadata"]["type"]["dimensionality"].as_str() == Some("MULTIPART");
        return InputValue::Blob {
            uri: s(&b["uri"]),
            multipart,
        };
    }
    let kind = v
        .as_object()
        .and_then(|o| o.keys().next().cloned())
        .unwrap_or_else(|| "unknown".into());
    InputValue::Unsupported { type_name: kind }
}

/// Maps one fixture request (readable protobuf JSON) to the renderer's input.
pub fn task_spec(req: &Value) -> TaskSpec {
    let t = &req["template"];
    let task_type =
        TaskType::from_template_type(t["type"].as_str().unwrap()).expect("slurm task type");
    let c = &t["container"];
    let container = (c.get("image").is_some() || c.get("args").is_some()).then(|| ContainerSpec {
        image: s(&c["image"]),
        command: c["command"]
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default(),
        args: c["args"]
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default(),
        env: c["env"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|kv| (s(&kv["key"]), s(&kv["value"])))
                    .collect()
            })
            .unwrap_or_default(),
        gpus: None,
    });
    let inputs = req["inputs"]["literals"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|l| (s(&l["name"]), input_value(&l["value"])))
                .collect()
        })
        .unwrap_or_default();
    let outputs = t["interface"]["outputs"]["variables"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| {
                    let ty = &v["value"]["type"];
                    let kind = match ty.get("blob") {
                        Some(b) if b["dimensionality"].as_str() == Some("MULTIPART") => {
                            InterfaceKind::Dir
                        }
                        Some(_) => InterfaceKind::File,
                        None => InterfaceKind::Other(ty.to_string()),
                    };
                    (s(&v["key"]), kind)
                })
                .collect()
        })
        .unwrap_or_default();
    let m = &req["taskExecutionMetadata"];
    let te = &m["taskExecutionId"];
    let ne = &te["nodeExecutionId"];
    let ex = &ne["executionId"];
    let exec = ExecutionIdentity {
        org: s(&ex["org"]),
        project: s(&ex["project"]),
        domain: s(&ex["domain"]),
        run_name: s(&ex["name"]),
        action_name: s(&ne["nodeId"]),
        attempt: te["retryAttempt"].as_u64().unwrap_or(0) as u32,
    };
    let env_vars: BTreeMap<String, String> = m["environmentVariables"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), s(v))).collect())
        .unwrap_or_default();
    TaskSpec {
        task_type,
        task_name: s(&t["id"]["name"]),
        custom: TaskConfig::parse(task_type, &t["custom"]).expect("the fixture's custom"),
        container,
        inputs,
        outputs,
        output_prefix: s(&req["outputPrefix"]),
        exec,
        env_vars,
        script_args: Vec::new(),
        shell_template: None,
        interruptible: false,
    }
}

/// A task whose `custom` is still the JSON the plugin writes: a test edits it (and, through
/// `Deref`, the rest of the spec), then parses it as a front end does, so a refusal from the
/// parse and one from the render are read alike.
#[derive(Debug, Clone)]
pub struct Draft {
    pub spec: TaskSpec,
    pub custom: Value,
}

impl std::ops::Deref for Draft {
    type Target = TaskSpec;
    fn deref(&self) -> &TaskSpec {
        &self.spec
    }
}

impl std::ops::DerefMut for Draft {
    fn deref_mut(&mut self) -> &mut TaskSpec {
        &mut self.spec
    }
}

impl Draft {
    /// One fixture request, its `custom` kept as JSON.
    pub fn of(req: &Value) -> Draft {
        Draft {
            spec: task_spec(req),
            custom: req["template"]["custom"].clone(),
        }
    }

    /// The spec with its `custom` parsed; `Err`: the parse's refusal.
    pub fn spec(&self) -> Result<TaskSpec, RenderError> {
        let mut spec = self.spec.clone();
        spec.custom = TaskConfig::parse(spec.task_type, &self.custom)?;
        Ok(spec)
    }

    /// Parsed, then rendered with `cfg` at `now`.
    pub fn render_at(&self, cfg: &RenderConfig, now: i64) -> Result<Rendered, RenderError> {
        slurm_connector::render::render_at(&self.spec()?, cfg, now)
    }
}

/// A `slurm_script` task's config from its JSON, as a front end parses it (`Err`: the parse's
/// refusal, naming the field).
pub fn slurm_config(custom: Value) -> Result<TaskConfig, RenderError> {
    TaskConfig::parse(TaskType::SlurmScript, &custom)
}

pub fn load_request(name: &str) -> Value {
    let p = fixtures_dir().join("requests").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// Checks `job` (the `job` object of a submit body) against the upstream v0.0.42 schema: every
/// key is a property of `job_desc_msg` and every value has the schema's JSON type (slurmrestd
/// answers a wrong type with a warning and no job). Returns the problems found.
pub fn schema_problems(job: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_dir().join("v0.0.42_job_desc_msg.schema.json")).unwrap(),
    )
    .unwrap();
    let schemas = &schema["schemas"];
    let mut problems = Vec::new();
    check(
        job,
        &schemas["v0.0.42_job_desc_msg"],
        schemas,
        "job",
        &mut problems,
    );
    problems
}

/// The same check against `job_desc_msg` of a version's committed trimmed spec (the one its client
/// is generated from; enum values as `x-slurm-enum`).
pub fn schema_problems_for(version: &str, job: &Value) -> Vec<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("openapi/slurmrestd-{version}.json"));
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let schemas = &spec["components"]["schemas"];
    let mut problems = Vec::new();
    check(job, &schemas["job_desc_msg"], schemas, "job", &mut problems);
    problems
}

fn resolve<'a>(mut s: &'a Value, schemas: &'a Value) -> &'a Value {
    while let Some(r) = s.get("$ref").and_then(Value::as_str) {
        s = &schemas[r.rsplit('/').next().unwrap()];
    }
    s
}

fn check(v: &Value, schema: &Value, schemas: &Value, path: &str, problems: &mut Vec<String>) {
    let schema = resolve(schema, schemas);
    let ty = schema["type"].as_str().unwrap_or("");
    match (ty, v) {
        ("object", Value::Object(m)) => {
            for (k, child) in m {
                match schema["properties"].get(k) {
                    Some(p) => check(child, p, schemas, &format!("{path}.{k}"), problems),
                    None => problems.push(format!("{path}.{k}: not a property of the schema")),
                }
            }
        }
        ("array", Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                check(
                    item,
                    &schema["items"],
                    schemas,
                    &format!("{path}[{i}]"),
                    problems,
                );
            }
        }
        ("string", Value::String(text)) => {
            if let Some(allowed) = schema["enum"]
                .as_array()
                .or_else(|| schema["x-slurm-enum"].as_array())
                && !allowed.iter().any(|a| a.as_str() == Some(text))
            {
                problems.push(format!("{path}: `{text}` is not one of {allowed:?}"));
            }
        }
        ("integer", Value::Number(n)) => {
            let fits = match schema["format"].as_str() {
                Some("int32") => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                _ => n.as_i64().is_some(),
            };
            if !fits {
                problems.push(format!("{path}: {n} does not fit {:?}", schema["format"]));
            }
        }
        ("boolean", Value::Bool(_)) => {}
        _ => problems.push(format!("{path}: expected {ty}, got {v}")),
    }
}

/// Every mapped option that can go together, as `#SBATCH` lines.
pub const KITCHEN_SINK: &str = "\
#SBATCH -A acct --acctg-freq=task=30 -a 0-15%4 --batch=feat --bb=bbspec -b now+1hour
#SBATCH --cluster-constraint=cc --comment=mine -C a100 --container=/oci/b --container-id=cid --contiguous
#SBATCH -S 2 --cpu-freq=high --cpus-per-gpu=4 -c 8 --deadline=2026-12-24T00:00 --delay-boot=5
#SBATCH -d afterok:1 -m plane=4 -x bad[1-2] --exclusive=user --export=ALL --extra=x
#SBATCH --gpu-bind=closest --gpu-freq=high -G a100:8 --gpus-per-node=2 --gpus-per-socket=1
#SBATCH --gpus-per-task=1 --gres=gpu:a100:4,nvme:1 --gres-flags=enforce-binding --hint=nomultithread
#SBATCH -H -i /dev/null --kill-on-invalid-dep=yes -L matlab:1 --mail-type=ALL,TIME_LIMIT_90
#SBATCH --mail-user=a@b.c --mcs-label=m --mem-per-gpu=16G --mem-bind=verbose,map_mem:0,1
#SBATCH --mincpus=8 --network=net --nice=5 -k --no-requeue -w good[1-4] -N 4 -n 16
#SBATCH --ntasks-per-gpu=2 --ntasks-per-node=4 --ntasks-per-socket=2 --oom-kill-step=1 --open-mode=append
#SBATCH -O --prefer=fast --priority=100 --profile=task --qos=high --reboot --reservation=r
#SBATCH --segment=2 --signal=R:TERM@120 --sockets-per-node=2 --spread-job --stepmgr --switches=1@10
#SBATCH --thread-spec=1 -t 1-0 --time-min=30 --tmp=10G --tres-per-task=license/x:1 --use-min-nodes
#SBATCH --wait-all-nodes=1 --wckey=wk -p gpu
";
