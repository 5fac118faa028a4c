//! JSON shapes: job records built from REAL records of each API version (`data/<version>/`,
//! copied from the recorded samples) with only the changing fields filled in, so keys and types
//! match the version asked for. A field is only ever filled in when that version's record has it.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::config::MockConfig;
use crate::job::{Base, Exit, Job};
use crate::versions::{Served, Template, template};

mod listing;
mod slurmdb;
pub use listing::listed;
pub use slurmdb::slurmdb_job;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Warning {
    pub description: String,
    pub source: String,
}

/// A set no_val number.
pub fn nv(n: i64) -> Value {
    json!({"set": true, "infinite": false, "number": n})
}

pub fn nv_unset() -> Value {
    json!({"set": false, "infinite": false, "number": 0})
}

pub fn nv_infinite() -> Value {
    json!({"set": false, "infinite": true, "number": 0})
}

/// The `meta` block slurmrestd adds to every JSON answer.
pub fn meta(cfg: &MockConfig, sv: Served, slurmdb: bool, client: &str, user: &str) -> Value {
    let (major, minor, micro, release) = sv.release.parts();
    let (ty, name, group) = if slurmdb {
        // slurmdbd answers show an empty client user/group in the samples.
        ("openapi/slurmdbd", "Slurm OpenAPI slurmdbd", "")
    } else {
        ("openapi/slurmctld", "Slurm OpenAPI slurmctld", user)
    };
    let user = if slurmdb { "" } else { user };
    json!({
        "plugin": {"type": ty, "name": name, "data_parser": format!("data_parser/{}", sv.api),
                   "accounting_storage": "accounting_storage/slurmdbd"},
        "client": {"source": client, "user": user, "group": group},
        "command": [],
        "slurm": {"version": {"major": major, "micro": micro, "minor": minor},
                  "release": release, "cluster": cfg.cluster_name},
    })
}

/// One `errors[]` entry.
pub fn error_entry(description: &str, number: i64, error: &str, source: &str) -> Value {
    json!({"description": description, "error_number": number, "error": error, "source": source})
}

/// `exit_code` / `derived_exit_code` as v0.0.42 dumps a wait status.
pub fn exit_json(exit: Exit) -> Value {
    match exit {
        Exit::Code(0) => json!({"status": ["SUCCESS"], "return_code": nv(0),
            "signal": {"id": nv_unset(), "name": ""}}),
        Exit::Code(n) => json!({"status": ["ERROR"], "return_code": nv(n as i64),
            "signal": {"id": nv_unset(), "name": ""}}),
        Exit::Signal(s) => json!({"status": ["SIGNALED"], "return_code": nv_unset(),
            "signal": {"id": nv(s as i64), "name": signal_name(s)}}),
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "HUP",
        2 => "INT",
        3 => "QUIT",
        6 => "ABRT",
        9 => "KILL",
        10 => "USR1",
        12 => "USR2",
        15 => "TERM",
        18 => "CONT",
        19 => "STOP",
        _ => "",
    }
}

/// Uid the record shows (the mock has no passwd database: root 0, SlurmUser 64030, others 2000).
fn uid_of(cfg: &MockConfig, user: &str) -> i64 {
    if user == "root" {
        0
    } else if user == cfg.slurm_user {
        64030
    } else {
        2000
    }
}

fn time_limit_json(job: &Job) -> Value {
    match job.spec.time_limit {
        Some(m) => nv(m as i64),
        None => nv_infinite(),
    }
}

fn mem_mb(job: &Job) -> u64 {
    match (job.spec.memory_per_node, job.spec.memory_per_cpu) {
        (Some(n), _) if n > 0 => n,
        (_, Some(c)) if c > 0 => c * job.cpus() as u64,
        // The recorded node had RealMemory=8000 and jobs get the whole node's memory by default.
        _ => 8000,
    }
}

/// String fields of the job description that the job record shows under the same name.
const ECHOED: &[&str] = &[
    "admin_comment",
    "batch_features",
    "burst_buffer",
    "container",
    "container_id",
    "cpus_per_tres",
    "extra",
    "licenses",
    "mail_user",
    "mcs_label",
    "memory_per_tres",
    "network",
    "prefer",
    "selinux_context",
    "tres_bind",
    "tres_freq",
    "tres_per_job",
    "tres_per_node",
    "tres_per_socket",
    "tres_per_task",
    "wckey",
];

/// The full `GET job/{id}` record (`<version>_job_info`).
pub fn job_info(job: &Job, cfg: &MockConfig, sv: Served) -> Value {
    let mut v = template(sv.api, Template::Job);
    let tmpl_resources = v.get("job_resources").cloned().unwrap_or(Value::Null);
    let r = v.as_object_mut().expect("template is an object");
    let spec = &job.spec;
    let started = !job.node_names.is_empty();
    let cpus = job.cpus() as i64;
    let nnodes = if started {
        job.node_names.len().max(1)
    } else {
        spec.min_nodes as usize
    } as i64;
    // Only fields this version's record has: a version without a field never shows it.
    let set = |r: &mut Map<String, Value>, k: &str, val: Value| {
        if let Some(slot) = r.get_mut(k) {
            *slot = val;
        }
    };
    for k in ECHOED {
        if let Some(s) = spec.raw.get(*k).and_then(Value::as_str) {
            set(r, k, json!(s));
        }
    }
    if let Some(s) = spec.raw.get("constraints").and_then(Value::as_str) {
        set(r, "features", json!(s));
    }
    if let Some(s) = spec.raw.get("reservation").and_then(Value::as_str) {
        set(r, "resv_name", json!(s));
    }
    set(
        r,
        "account",
        json!(spec.account.clone().unwrap_or_else(|| "default".into())),
    );
    set(
        r,
        "accrue_time",
        nv(if job.reason == "None" || started {
            job.eligible_time
        } else {
            0
        }),
    );
    let (ajid, atid, amax) = match &job.array {
        Some(a) => (
            nv(a.array_job_id as i64),
            nv(a.task_id as i64),
            nv(a.max_running.unwrap_or(0) as i64),
        ),
        None => (nv(0), nv_unset(), nv(0)),
    };
    set(r, "array_job_id", ajid);
    set(r, "array_task_id", atid);
    set(r, "array_max_tasks", amax);
    set(r, "array_task_string", json!(""));
    set(
        r,
        "batch_host",
        json!(job.node_names.first().cloned().unwrap_or_default()),
    );
    set(r, "cluster", json!(cfg.cluster_name));
    set(r, "comment", json!(spec.comment));
    set(
        r,
        "cpus_per_task",
        nv(spec.cpus_per_task_or_default() as i64),
    );
    set(r, "dependency", json!(spec.dependency));
    set(r, "derived_exit_code", exit_json(Exit::Code(0)));
    set(r, "exit_code", exit_json(job.exit));
    set(r, "eligible_time", nv(job.eligible_time));
    set(r, "submit_time", nv(job.submit_time));
    set(r, "start_time", nv(job.start_time));
    let end = if job.state == Base::Running {
        // A running job's end_time is its expected end (start + time limit), like the real one.
        match spec.time_limit {
            Some(m) => job.start_time + m as i64 * cfg.minute.as_secs().max(1) as i64,
            None => job.start_time + 365 * 24 * 3600,
        }
    } else {
        job.end_time
    };
    set(r, "end_time", nv(end));
    set(r, "last_sched_evaluation", nv(job.last_sched));
    set(r, "group_id", json!(uid_of(cfg, &job.user)));
    set(r, "group_name", json!(job.user));
    set(r, "user_id", json!(uid_of(cfg, &job.user)));
    set(r, "user_name", json!(job.user));
    if !spec.raw.contains_key("mail_user") {
        set(r, "mail_user", json!(job.user));
    }
    set(r, "job_id", json!(job.id));
    set(r, "restart_cnt", json!(job.restart_cnt));
    set(
        r,
        "job_resources",
        if started {
            job_resources(job, cfg, sv, &tmpl_resources)
        } else {
            Value::Null
        },
    );
    let mut states = vec![json!(job.state.as_str())];
    if job.completing {
        states.push(json!("COMPLETING"));
    }
    set(r, "job_state", Value::Array(states));
    set(r, "name", json!(spec.name));
    set(r, "nodes", json!(job.node_list()));
    set(r, "hold", json!(spec.hold && job.state == Base::Pending));
    let prio = if spec.hold && job.state == Base::Pending {
        0
    } else {
        spec.priority.unwrap_or(1) as i64
    };
    set(r, "priority", nv(prio));
    set(r, "nice", json!(spec.nice));
    set(
        r,
        "partition",
        json!(
            spec.partition
                .clone()
                .unwrap_or_else(|| cfg.partition.clone())
        ),
    );
    set(
        r,
        "qos",
        json!(spec.qos.clone().unwrap_or_else(|| "normal".into())),
    );
    set_io(r, job, sv);
    set(r, "state_reason", json!(job.reason));
    set(r, "time_limit", time_limit_json(job));
    set(r, "cpus", nv(cpus));
    set(r, "billable_tres", nv(cpus));
    set(r, "node_count", nv(nnodes));
    set(r, "tasks", nv(spec.tasks_or_default() as i64));
    let explicit_max = spec.raw.contains_key("nodes") || spec.raw.contains_key("maximum_nodes");
    set(
        r,
        "max_nodes",
        nv(if explicit_max {
            spec.max_nodes as i64
        } else {
            0
        }),
    );
    set(
        r,
        "minimum_cpus_per_node",
        nv((cpus / nnodes.max(1)).max(1)),
    );
    match (spec.memory_per_node, spec.memory_per_cpu) {
        (_, Some(c)) => {
            set(r, "memory_per_cpu", nv(c as i64));
            set(r, "memory_per_node", nv_unset());
        }
        (n, None) => {
            set(r, "memory_per_cpu", nv_unset());
            set(r, "memory_per_node", nv(n.unwrap_or(0) as i64));
        }
    }
    set(
        r,
        "tres_req_str",
        json!(format!(
            "cpu={cpus},mem={}M,node={nnodes},billing={cpus}",
            mem_mb(job)
        )),
    );
    set(
        r,
        "tres_alloc_str",
        json!(if started {
            format!("cpu={cpus},node={nnodes},billing={cpus}")
        } else {
            String::new()
        }),
    );
    set(r, "current_working_directory", json!(spec.cwd));
    if let Some(rq) = spec.raw.get("requeue").and_then(Value::as_bool) {
        set(r, "requeue", json!(rq));
    }
    // v0.0.44+: the job's step id (the whole job is step "entire") with its Slurm-unique id.
    set(
        r,
        "step_id",
        json!({"sluid": sluid(job.id), "job_id": nv(job.id as i64),
               "step_het_component": nv_unset(), "step_id": "entire"}),
    );
    v
}

/// A Slurm-unique id like the real ones (`s` + 13 upper-case base-32 characters), derived from
/// the job id so it is stable for the job's lifetime.
pub fn sluid(job_id: u32) -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut n = (job_id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1 << 63;
    let mut out = String::from("s");
    for _ in 0..13 {
        out.push(DIGITS[(n % 32) as usize] as char);
        n /= 32;
    }
    out
}

/// stdin/stdout/stderr as each version shows them. Up to v0.0.42 `standard_*` are the expanded
/// paths (24.11 shows stderr = stdout when not given, 26.05 shows ""); from v0.0.43 on
/// `standard_*` are the patterns as submitted (`slurm-%j.out` by default, else "") and the
/// expanded paths are in `std*_expanded`.
fn set_io(r: &mut Map<String, Value>, job: &Job, sv: Served) {
    let spec = &job.spec;
    let put = |r: &mut Map<String, Value>, k: &str, val: String| {
        if let Some(slot) = r.get_mut(k) {
            *slot = json!(val);
        }
    };
    if sv.api.minor() <= 42 {
        put(r, "standard_output", job.stdout.clone());
        let err = if spec.standard_error.is_some() || sv.release.is_24_11() {
            job.stderr.clone()
        } else {
            String::new()
        };
        put(r, "standard_error", err);
        put(r, "standard_input", job.stdin.clone());
        return;
    }
    let default_out = if spec.array.is_some() {
        "slurm-%A_%a.out"
    } else {
        "slurm-%j.out"
    };
    put(
        r,
        "standard_output",
        spec.standard_output
            .clone()
            .unwrap_or_else(|| default_out.to_string()),
    );
    put(r, "stdout_expanded", job.stdout.clone());
    put(
        r,
        "standard_error",
        spec.standard_error.clone().unwrap_or_default(),
    );
    put(
        r,
        "stderr_expanded",
        if spec.standard_error.is_some() {
            job.stderr.clone()
        } else {
            String::new()
        },
    );
    put(
        r,
        "standard_input",
        spec.standard_input.clone().unwrap_or_default(),
    );
    put(
        r,
        "stdin_expanded",
        if spec.standard_input.is_some() {
            job.stdin.clone()
        } else {
            String::new()
        },
    );
}

fn job_resources(job: &Job, cfg: &MockConfig, sv: Served, tmpl: &Value) -> Value {
    if sv.api.legacy_job_resources() {
        // v0.0.40: sockets as a map of index -> {cores: {index: "allocated"}}, allocated ones only.
        let nodes: Vec<Value> = job
            .alloc
            .iter()
            .map(|(node, n)| {
                let sockets: Map<String, Value> = (0..*n)
                    .map(|s| (s.to_string(), json!({"cores": {"0": "allocated"}})))
                    .collect();
                json!({"sockets": sockets, "nodename": cfg.node_name(*node), "cpus_used": 0,
                       "memory_used": 0, "memory_allocated": 0})
            })
            .collect();
        return json!({"nodes": job.node_list(), "allocated_cores": 0, "allocated_cpus": job.cpus(),
                      "allocated_hosts": job.node_names.len(), "allocated_nodes": nodes});
    }
    // The select type as that release shows it (24.11 "CPU", 26.05+ "CR_CPU").
    let select_type = tmpl
        .get("select_type")
        .cloned()
        .unwrap_or_else(|| json!(["CPU"]));
    let alloc: Vec<Value> = job
        .alloc
        .iter()
        .enumerate()
        .map(|(i, (node, n))| {
            let sockets: Vec<Value> = (0..cfg.cpus)
                .map(|s| {
                    let st = if s < *n { "ALLOCATED" } else { "UNALLOCATED" };
                    json!({"index": s, "cores": [{"index": 0, "status": [st]}]})
                })
                .collect();
            json!({"index": i, "name": cfg.node_name(*node), "cpus": {"count": n, "used": 0},
                   "memory": {"used": 0, "allocated": 0}, "sockets": sockets})
        })
        .collect();
    json!({
        "select_type": select_type,
        "nodes": {"count": job.node_names.len(), "select_type": ["ONE_ROW"], "list": job.node_list(),
                  "whole": false, "allocation": alloc},
        "cpus": job.cpus(),
        "threads_per_core": nv_unset(),
    })
}

fn set_tres_counts(list: &mut Value, cpus: i64, mem: i64, nodes: i64) {
    if let Some(a) = list.as_array_mut() {
        for t in a {
            let count = match t.get("type").and_then(Value::as_str) {
                Some("cpu") | Some("billing") => cpus,
                Some("mem") => mem,
                Some("node") => nodes,
                _ => continue,
            };
            t["count"] = json!(count);
        }
    }
}

/// Set `obj[k]` only when the version's template has it.
fn put(obj: &mut Value, k: &str, val: Value) {
    if let Some(slot) = obj.get_mut(k) {
        *slot = val;
    }
}
