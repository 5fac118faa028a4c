//! slurmctld endpoints: submit, job, jobs, jobs/state, DELETE job, ping, diag, partitions.

// Handlers return early with a finished `Response`; boxing it would only add noise.
#![allow(clippy::result_large_err)]

use super::*;
use crate::versions::{Template, template};

pub(super) async fn submit(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    req: axum::extract::Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let client = client_source(&parts.headers, ext_addr(&parts.extensions).as_ref());
    let ctx = match guard(&st, sv, &parts.headers, &client, Shape::Submit) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body: Bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large"),
    };
    match parse_submit(&body, sv.api) {
        Parsed::BadBody(why) => {
            let e = error_entry(
                &format!("Rejecting request: {why}"),
                9001,
                "Failure during parsing",
                "op_handler_submit_job",
            );
            json_resp(
                StatusCode::BAD_REQUEST,
                json!({"meta": ctx.meta, "errors": [e], "warnings": []}),
            )
        }
        Parsed::TypeErrors(w) => json_resp(
            StatusCode::OK,
            json!({"meta": ctx.meta, "errors": [], "warnings": w}),
        ),
        Parsed::Job(spec, warnings) => match st.sched.submit(*spec, &ctx.user, sv.release) {
            Ok(id) => {
                let mut body = json!({"job_id": id, "step_id": "batch", "job_submit_user_msg": "",
                "meta": ctx.meta, "errors": [], "warnings": warnings});
                if sv.api.submit_has_result_block() {
                    body["result"] = json!({"job_id": id, "step_id": "batch", "error_code": 0,
                        "error": "No error", "job_submit_user_msg": ""});
                }
                json_resp(StatusCode::OK, body)
            }
            Err(rej) => {
                let e = error_entry(
                    "Batch job submission failed",
                    rej.number,
                    rej.message,
                    "slurm_submit_batch_job()",
                );
                json_resp(
                    reject_status(sv),
                    json!({"meta": ctx.meta, "errors": [e], "warnings": warnings}),
                )
            }
        },
    }
}

pub(super) async fn job_get(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    Path(id): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let jid = match path_id(&st, sv, &client, &id) {
        Ok(j) => j,
        Err(r) => return r,
    };
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::JobGet(&id)) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    let jobs = crate::records::listed(
        c.jobs
            .values()
            .filter(|j| j.id == jid || j.array.as_ref().is_some_and(|a| a.array_job_id == jid)),
        &st.cfg,
        sv,
    );
    let last_update = c.last_update;
    drop(c);
    if jobs.is_empty() {
        let e = error_entry(
            &format!("Unable to query JobId={jid}"),
            2017,
            "Invalid job id specified",
            "_handle_job_get",
        );
        return json_resp(
            StatusCode::NOT_FOUND,
            Shape::JobGet(&id).body(sv.api, ctx.meta, vec![e]),
        );
    }
    json_resp(
        StatusCode::OK,
        json!({"jobs": jobs, "last_backfill": nv(0), "last_update": nv(last_update),
        "meta": ctx.meta, "errors": [], "warnings": []}),
    )
}

/// `?signal=` as scancel takes it: `SIGKILL`, `KILL`, `9`.
fn parse_signal(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let name = s.trim().to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    Some(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        _ => return None,
    })
}

pub(super) async fn job_delete(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let (jid, element) = match path_element(&st, sv, &client, &id) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let mut signal = libc::SIGTERM;
    for (k, _, v) in query_pairs(q.as_deref()) {
        if k == "signal" {
            match parse_signal(&v) {
                Some(s) => signal = s,
                None => return rfc_error(&st, sv, &client, "parameters", "op_handler_job", false),
            }
        }
    }
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::Delete) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let outcome = st.sched.cancel(jid, element, signal, &ctx.user);
    if !sv.api.delete_has_status() {
        // v0.0.40/41: the same 200 whatever happened (recorded: running, finished, unknown).
        return json_resp(
            StatusCode::OK,
            json!({"meta": ctx.meta, "errors": [], "warnings": []}),
        );
    }
    let status = match outcome {
        CancelResult::Signalled => json!([]),
        CancelResult::AlreadyDone => {
            json!([{"error": {"string": "Job/step already completing or completed",
            "code": 2021, "message": "Job/step already completing or completed"},
            "step_id": jid.to_string(), "job_id": nv(jid as i64), "federation": {"sibling": ""}}])
        }
        CancelResult::Unknown => {
            json!([{"error": {"string": "Invalid job id specified", "code": 2017,
            "message": "Invalid job id specified"},
            "step_id": jid.to_string(), "job_id": nv_unset(), "federation": {"sibling": ""}}])
        }
    };
    json_resp(
        StatusCode::OK,
        json!({"status": status, "meta": ctx.meta, "errors": [], "warnings": []}),
    )
}

pub(super) async fn jobs_state(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    RawQuery(q): RawQuery,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let mut ids = BTreeSet::new();
    for (k, raw, v) in query_pairs(q.as_deref()) {
        if k != "job_id" {
            continue;
        }
        if raw.contains(',') {
            return comma_query(sv);
        }
        match v.trim().parse::<u32>() {
            Ok(n) => {
                ids.insert(n);
            }
            Err(_) => return rfc_error(&st, sv, &client, "query", "op_handler_job_states", false),
        }
    }
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::JobsState) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    let jobs: Vec<Value> = c
        .jobs
        .values()
        .filter(|j| {
            ids.is_empty()
                || ids.contains(&j.id)
                || j.array
                    .as_ref()
                    .is_some_and(|a| ids.contains(&a.array_job_id))
        })
        .map(|j| {
            let mut state = vec![json!(j.state.as_str())];
            if j.completing {
                state.push(json!("COMPLETING"));
            }
            json!({"job_id": j.state_id(), "state": state})
        })
        .collect();
    drop(c);
    json_resp(
        StatusCode::OK,
        json!({"jobs": jobs, "meta": ctx.meta, "errors": [], "warnings": []}),
    )
}

pub(super) async fn jobs(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    RawQuery(q): RawQuery,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let mut update_time = None;
    for (k, _, v) in query_pairs(q.as_deref()) {
        if k == "update_time" {
            match v.trim().parse::<i64>() {
                Ok(t) => update_time = Some(t),
                Err(_) => return rfc_error(&st, sv, &client, "query", "op_handler_jobs", false),
            }
        }
    }
    if let Some(t) = update_time
        && sv.api.unix_time_query_broken()
        && has_token(req.headers())
    {
        // After slurmrestd's own 401 (no token), before slurmctld judges the token.
        return unparsed_timestamp(&st, sv, &client, "update_time", t, false);
    }
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::Jobs) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    // All-or-nothing, like the real one: any change since update_time returns every job.
    if let Some(t) = update_time
        && c.last_update <= t
    {
        drop(c);
        let when = chrono::DateTime::from_timestamp(t, 0)
            .map(|d| d.format("%Y-%m-%dT%H:%M:%S").to_string())
            .unwrap_or_default();
        let w = Warning {
            description: format!("No job changes since update_time[{t}]={when}"),
            source: "op_handler_jobs".into(),
        };
        return json_resp(
            StatusCode::OK,
            json!({"jobs": [], "last_backfill": nv(0), "last_update": nv(0),
            "meta": ctx.meta, "errors": [], "warnings": [w]}),
        );
    }
    let jobs = crate::records::listed(c.jobs.values(), &st.cfg, sv);
    let last_update = c.last_update;
    drop(c);
    json_resp(
        StatusCode::OK,
        json!({"jobs": jobs, "last_backfill": nv(0), "last_update": nv(last_update),
        "meta": ctx.meta, "errors": [], "warnings": []}),
    )
}

pub(super) async fn ping(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    if !has_token(req.headers()) {
        return text(StatusCode::UNAUTHORIZED, "Authentication failure");
    }
    // The trap: a refused token still gets 200, with the controller shown DOWN.
    let token_ok = matches!(
        authenticate(req.headers(), &st.cfg.jwt_key, &st.cfg.slurm_user),
        AuthOutcome::Ok { .. }
    ) && !st.faults.reject_token();
    let down = st.faults.controller_down();
    let up = token_ok && !down;
    // The recorded body of this version; only the fields it has are filled in (v0.0.40/41 have no
    // `responding`, v0.0.45+ report `status` instead of `pinged` and `mode`).
    let mut body = template(sv.api, Template::Ping);
    if let Some(p) = body["pings"].get_mut(0).and_then(Value::as_object_mut) {
        let mut put = |k: &str, v: Value| {
            if let Some(slot) = p.get_mut(k) {
                *slot = v;
            }
        };
        put("hostname", json!("localhost"));
        put("pinged", json!(if up { "UP" } else { "DOWN" }));
        put("responding", json!(up));
        put("latency", json!(if up { 150 } else { 12000 }));
        put(
            "status",
            json!(if up {
                "No error"
            } else if !token_ok {
                "Protocol authentication error"
            } else {
                "Unable to contact slurm controller (connect failure)"
            }),
        );
    }
    body["meta"] = meta(&st.cfg, sv, false, &client, "");
    body["errors"] = json!([]);
    body["warnings"] = json!([]);
    json_resp(StatusCode::OK, body)
}

/// `GET diag/`: the recorded statistics of this version with the mock's own counters.
pub(super) async fn diag(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::Diag) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    let pending = c
        .jobs
        .values()
        .filter(|j| j.state == crate::job::Base::Pending)
        .count();
    let running = c
        .jobs
        .values()
        .filter(|j| j.state == crate::job::Base::Running)
        .count();
    let k = c.counters;
    let ts = c.last_update;
    drop(c);
    let now = crate::scheduler::now();
    let mut body = template(sv.api, Template::Diag);
    if let Some(s) = body["statistics"].as_object_mut() {
        let mut put = |key: &str, v: Value| {
            if let Some(slot) = s.get_mut(key) {
                *slot = v;
            }
        };
        put("req_time", nv(now));
        put("req_time_start", nv(now));
        put("schedule_queue_length", json!(pending));
        put("jobs_submitted", json!(k.submitted));
        put("jobs_started", json!(k.started));
        put("jobs_completed", json!(k.completed));
        put("jobs_canceled", json!(k.canceled));
        put("jobs_failed", json!(k.failed));
        put("jobs_pending", json!(pending));
        put("jobs_running", json!(running));
        put("job_states_ts", nv(ts));
        // The real daemon's RPC tallies say nothing about the mock: empty lists.
        put("rpcs_by_message_type", json!([]));
        put("rpcs_by_user", json!([]));
        put("pending_rpcs", json!([]));
        put("pending_rpcs_by_hostlist", json!([]));
    }
    body["meta"] = ctx.meta;
    body["errors"] = json!([]);
    body["warnings"] = json!([]);
    json_resp(StatusCode::OK, body)
}

/// `GET job/{id}/requeue[?Hold]` (v0.0.45+): 200 `status: []`; unknown 404 / 2017, pending
/// 422 / 2024 (recorded on 26.05).
pub(super) async fn job_requeue(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let jid = match path_id(&st, sv, &client, &id) {
        Ok(j) => j,
        Err(r) => return r,
    };
    let hold = query_pairs(q.as_deref())
        .iter()
        .any(|(k, _, v)| k.eq_ignore_ascii_case("hold") && v != "false");
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::Requeue(&id)) {
        Ok(c) => c,
        Err(r) => return r,
    };
    match st.sched.requeue(jid, hold) {
        Ok(()) => json_resp(
            StatusCode::OK,
            json!({"status": [], "meta": ctx.meta, "errors": [], "warnings": []}),
        ),
        Err(rej) => {
            let e = error_entry(
                &format!("Requeue JobID={jid} failed"),
                rej.number,
                rej.message,
                "op_handler_job_requeue",
            );
            let status = if rej.number == 2017 {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::UNPROCESSABLE_ENTITY
            };
            json_resp(status, Shape::Requeue(&id).body(sv.api, ctx.meta, vec![e]))
        }
    }
}

/// `POST job/{id}`: update a job. The body is the job description itself (`{"hold": false}`),
/// as recorded on every version: a body wrapped in `{"job": {...}}` changes nothing and each
/// field inside gets the unknown-field warning (`#/job/<field>/`). Answers: 200
/// `results: null` (v0.0.40: `results: []`; v0.0.40/41 also `job_id`, `step_id`,
/// `job_submit_user_msg` as ""), unknown job 404 / 2017, finished job 2084 (422; 24.11: 500).
pub(super) async fn job_update(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    Path(id): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let client = client_source(&parts.headers, ext_addr(&parts.extensions).as_ref());
    let jid = match path_id(&st, sv, &client, &id) {
        Ok(j) => j,
        Err(r) => return r,
    };
    let ctx = match guard(&st, sv, &parts.headers, &client, Shape::Update) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body: Bytes = match axum::body::to_bytes(body, 16 << 20).await {
        Ok(b) => b,
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large"),
    };
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(desc) = v.as_object() else {
        let e = error_entry(
            "Rejecting request: body is not a JSON object",
            9001,
            "Failure during parsing",
            "op_handler_job",
        );
        return json_resp(
            StatusCode::BAD_REQUEST,
            Shape::Update.body(sv.api, ctx.meta, vec![e]),
        );
    };
    let kinds = crate::versions::job_desc_fields(sv.api);
    let mut warnings = Vec::new();
    let mut fields = serde_json::Map::new();
    for (k, val) in desc {
        match (k.as_str(), val) {
            ("job", Value::Object(inner)) => {
                for (ik, iv) in inner {
                    warnings.push(Warning {
                        description: format!(
                            "Ignoring unknown field \"{ik}\" of type {} in DATA_PARSER_JOB_DESC_MSG",
                            crate::jobdesc::slurm_type_name(iv)
                        ),
                        source: format!("#/job/{ik}/"),
                    });
                }
            }
            (k, val) if kinds.contains_key(k) => {
                fields.insert(k.to_string(), val.clone());
            }
            (k, val) => warnings.push(Warning {
                description: format!(
                    "Ignoring unknown field \"{k}\" of type {} in DATA_PARSER_JOB_DESC_MSG",
                    crate::jobdesc::slurm_type_name(val)
                ),
                source: format!("#/{k}/"),
            }),
        }
    }
    let time_limit = fields.get("time_limit").map(|t| match t {
        Value::Object(m)
            if m.get("infinite") == Some(&json!(true)) || m.get("set") == Some(&json!(false)) =>
        {
            None
        }
        Value::Object(m) => m.get("number").and_then(Value::as_u64).map(|n| n as u32),
        other => other.as_u64().map(|n| n as u32),
    });
    let upd = crate::scheduler::JobUpdate {
        hold: fields.get("hold").and_then(Value::as_bool),
        priority: fields
            .get("priority")
            .and_then(|p| p.get("number").or(Some(p)))
            .and_then(Value::as_u64)
            .map(|p| p as u32),
        time_limit,
        comment: fields
            .get("comment")
            .and_then(Value::as_str)
            .map(str::to_string),
        name: fields
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    let (status, errors) = match st.sched.update(jid, &upd) {
        Ok(_) => (StatusCode::OK, vec![]),
        Err(rej) => {
            let e = error_entry(
                "Job update requested failed",
                rej.number,
                rej.message,
                "slurm_update_job2()",
            );
            let status = if rej.number == 2017 {
                StatusCode::NOT_FOUND
            } else {
                reject_status(sv)
            };
            (status, vec![e])
        }
    };
    let mut body = Shape::Update.body(sv.api, ctx.meta, errors);
    body["warnings"] = json!(warnings);
    if sv.api.minor() == 40 {
        body["results"] = json!([]);
    }
    json_resp(status, body)
}

/// `GET partitions/`: the mock's one partition, in the recorded partition record of this version
/// with the mock's name, nodes and CPUs filled in.
pub(super) async fn partitions(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::Partitions) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let cfg = &st.cfg;
    let names: Vec<String> = (0..cfg.nodes as usize).map(|i| cfg.node_name(i)).collect();
    let total_cpus = cfg.cpus * cfg.nodes;
    let mut body = template(sv.api, Template::Partitions);
    if let Some(p) = body["partitions"].get_mut(0) {
        p["name"] = json!(cfg.partition);
        p["nodes"]["configured"] = json!(crate::job::node_list(&names));
        p["nodes"]["total"] = json!(cfg.nodes);
        p["cpus"]["total"] = json!(total_cpus);
        p["partition"]["state"] = json!(["UP"]);
        if p["tres"].get("configured").is_some() {
            p["tres"]["configured"] = json!(format!(
                "cpu={total_cpus},mem={}M,node={},billing={total_cpus}",
                8000 * cfg.nodes,
                cfg.nodes
            ));
        }
    }
    let last_update = st.sched.lock().last_update;
    body["last_update"] = nv(last_update);
    body["meta"] = ctx.meta;
    body["errors"] = json!([]);
    body["warnings"] = json!([]);
    json_resp(StatusCode::OK, body)
}
