//! slurmctld endpoints: submit, job, jobs, jobs/state, DELETE job, ping, diag.

// Handlers return early with a finished `Response`; boxing it would only add noise.
#![allow(clippy::result_large_err)]

use super::*;

pub(super) async fn submit(State(st): State<AppState>, req: axum::extract::Request) -> Response {
    let (parts, body) = req.into_parts();
    let client = client_source(&parts.headers, ext_addr(&parts.extensions).as_ref());
    let ctx = match guard(&st, &parts.headers, &client, Shape::Submit) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body: Bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large"),
    };
    match parse_submit(&body) {
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
        Parsed::Job(spec, warnings) => match st.sched.submit(*spec, &ctx.user) {
            Ok(id) => json_resp(
                StatusCode::OK,
                json!({"job_id": id, "step_id": "batch", "job_submit_user_msg": "",
                "meta": ctx.meta, "errors": [], "warnings": warnings}),
            ),
            Err(rej) => {
                let e = error_entry(
                    "Batch job submission failed",
                    rej.number,
                    rej.message,
                    "slurm_submit_batch_job()",
                );
                json_resp(
                    reject_status(&st.cfg),
                    json!({"meta": ctx.meta, "errors": [e], "warnings": warnings}),
                )
            }
        },
    }
}

/// Validate a `{id}` path segment: comma list / not a number answer like the real one.
fn path_id(st: &AppState, client: &str, id: &str) -> Result<u32, Response> {
    if id.contains(',') {
        return Err(comma_path(&st.cfg));
    }
    id.parse::<u32>()
        .map_err(|_| rfc_error(st, client, "parameters", "op_handler_job", false))
}

pub(super) async fn job_get(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let jid = match path_id(&st, &client, &id) {
        Ok(j) => j,
        Err(r) => return r,
    };
    let ctx = match guard(&st, req.headers(), &client, Shape::JobGet(&id)) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    let jobs: Vec<Value> = c
        .jobs
        .values()
        .filter(|j| j.id == jid || j.array.as_ref().is_some_and(|a| a.array_job_id == jid))
        .map(|j| job_info(j, &st.cfg))
        .collect();
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
            Shape::JobGet(&id).body(ctx.meta, vec![e]),
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
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let jid = match path_id(&st, &client, &id) {
        Ok(j) => j,
        Err(r) => return r,
    };
    let mut signal = libc::SIGTERM;
    for (k, _, v) in query_pairs(q.as_deref()) {
        if k == "signal" {
            match parse_signal(&v) {
                Some(s) => signal = s,
                None => return rfc_error(&st, &client, "parameters", "op_handler_job", false),
            }
        }
    }
    let ctx = match guard(&st, req.headers(), &client, Shape::Delete) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let status = match st.sched.cancel(jid, signal, &ctx.user) {
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
            return comma_query(&st.cfg);
        }
        match v.trim().parse::<u32>() {
            Ok(n) => {
                ids.insert(n);
            }
            Err(_) => return rfc_error(&st, &client, "query", "op_handler_job_states", false),
        }
    }
    let ctx = match guard(&st, req.headers(), &client, Shape::JobsState) {
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
    RawQuery(q): RawQuery,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let mut update_time = None;
    for (k, _, v) in query_pairs(q.as_deref()) {
        if k == "update_time" {
            match v.trim().parse::<i64>() {
                Ok(t) => update_time = Some(t),
                Err(_) => return rfc_error(&st, &client, "query", "op_handler_jobs", false),
            }
        }
    }
    let ctx = match guard(&st, req.headers(), &client, Shape::Jobs) {
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
    let jobs: Vec<Value> = c.jobs.values().map(|j| job_info(j, &st.cfg)).collect();
    let last_update = c.last_update;
    drop(c);
    json_resp(
        StatusCode::OK,
        json!({"jobs": jobs, "last_backfill": nv(0), "last_update": nv(last_update),
        "meta": ctx.meta, "errors": [], "warnings": []}),
    )
}

pub(super) async fn ping(State(st): State<AppState>, req: axum::extract::Request) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    if !has_token(req.headers()) {
        return text(StatusCode::UNAUTHORIZED, "Authentication failure");
    }
    // The trap: a refused token still gets 200, with the controller shown DOWN.
    let up = matches!(
        authenticate(req.headers(), &st.cfg.jwt_key, &st.cfg.slurm_user),
        AuthOutcome::Ok { .. }
    ) && !st.faults.reject_token()
        && !st.faults.controller_down();
    let (pinged, latency) = if up { ("UP", 150) } else { ("DOWN", 12000) };
    json_resp(
        StatusCode::OK,
        json!({
        "pings": [{"hostname": "localhost", "pinged": pinged, "responding": up, "latency": latency,
                   "mode": "primary", "primary": true}],
        "meta": meta(&st.cfg, false, &client, ""), "errors": [], "warnings": []}),
    )
}

pub(super) async fn diag(State(st): State<AppState>, req: axum::extract::Request) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let ctx = match guard(&st, req.headers(), &client, Shape::Diag) {
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
    json_resp(
        StatusCode::OK,
        json!({"statistics": {
        "parts_packed": 1, "req_time": nv(now), "req_time_start": nv(now), "server_thread_count": 1,
        "agent_queue_size": 0, "agent_count": 0, "agent_thread_count": 0, "dbd_agent_queue_size": 0,
        "gettimeofday_latency": 0, "schedule_cycle_max": 0, "schedule_cycle_last": 0,
        "schedule_cycle_sum": 0, "schedule_cycle_total": 0, "schedule_cycle_mean": 0,
        "schedule_cycle_mean_depth": 0, "schedule_cycle_per_minute": 0, "schedule_cycle_depth": 0,
        "schedule_exit": {"end_job_queue": 0, "default_queue_depth": 0, "max_job_start": 0,
            "max_rpc_cnt": 0, "max_sched_time": 0, "licenses": 0},
        "schedule_queue_length": pending, "jobs_submitted": k.submitted, "jobs_started": k.started,
        "jobs_completed": k.completed, "jobs_canceled": k.canceled, "jobs_failed": k.failed,
        "jobs_pending": pending, "jobs_running": running, "job_states_ts": nv(ts),
        "bf_backfilled_jobs": 0, "bf_last_backfilled_jobs": 0, "bf_backfilled_het_jobs": 0,
        "bf_cycle_counter": 0, "bf_cycle_mean": 0, "bf_depth_mean": 0, "bf_depth_mean_try": 0,
        "bf_cycle_sum": 0, "bf_cycle_last": 0, "bf_cycle_max": 0,
        "bf_exit": {"end_job_queue": 0, "bf_max_job_start": 0, "bf_max_job_test": 0, "bf_max_time": 0,
            "bf_node_space_size": 0, "state_changed": 0},
        "bf_last_depth": 0, "bf_last_depth_try": 0, "bf_depth_sum": 0, "bf_depth_try_sum": 0,
        "bf_queue_len": 0, "bf_queue_len_mean": 0, "bf_queue_len_sum": 0, "bf_table_size": 0,
        "bf_table_size_sum": 0, "bf_table_size_mean": 0, "bf_when_last_cycle": nv(0), "bf_active": false,
        "rpcs_by_message_type": [], "rpcs_by_user": [], "pending_rpcs": [], "pending_rpcs_by_hostlist": []},
        "meta": ctx.meta, "errors": [], "warnings": []}),
    )
}

/// `POST job/{id}`: update a job (body: a job description, also accepted wrapped in `{"job":...}`).
pub(super) async fn job_update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let client = client_source(&parts.headers, ext_addr(&parts.extensions).as_ref());
    let jid = match path_id(&st, &client, &id) {
        Ok(j) => j,
        Err(r) => return r,
    };
    let ctx = match guard(&st, &parts.headers, &client, Shape::Submit) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body: Bytes = match axum::body::to_bytes(body, 16 << 20).await {
        Ok(b) => b,
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large"),
    };
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let desc = v.get("job").filter(|j| j.is_object()).unwrap_or(&v);
    let Some(desc) = desc.as_object() else {
        let e = error_entry(
            "Rejecting request: body is not a JSON object",
            9001,
            "Failure during parsing",
            "op_handler_job",
        );
        return json_resp(
            StatusCode::BAD_REQUEST,
            json!({"meta": ctx.meta, "errors": [e], "warnings": []}),
        );
    };
    let time_limit = desc.get("time_limit").map(|t| match t {
        Value::Object(m)
            if m.get("infinite") == Some(&json!(true)) || m.get("set") == Some(&json!(false)) =>
        {
            None
        }
        Value::Object(m) => m.get("number").and_then(Value::as_u64).map(|n| n as u32),
        other => other.as_u64().map(|n| n as u32),
    });
    let upd = crate::scheduler::JobUpdate {
        hold: desc.get("hold").and_then(Value::as_bool),
        priority: desc
            .get("priority")
            .and_then(|p| p.get("number").or(Some(p)))
            .and_then(Value::as_u64)
            .map(|p| p as u32),
        time_limit,
        comment: desc
            .get("comment")
            .and_then(Value::as_str)
            .map(str::to_string),
        name: desc.get("name").and_then(Value::as_str).map(str::to_string),
    };
    match st.sched.update(jid, &upd) {
        Ok(ids) => {
            let results: Vec<Value> = ids
                .iter()
                .map(|i| json!({"job_id": i, "step_id": "batch", "error": "No error", "error_code": 0, "why": ""}))
                .collect();
            json_resp(
                StatusCode::OK,
                json!({"results": results, "meta": ctx.meta, "errors": [], "warnings": []}),
            )
        }
        Err(rej) => {
            let e = error_entry(
                "Job update requested failed",
                rej.number,
                rej.message,
                "slurm_update_job2()",
            );
            json_resp(
                reject_status(&st.cfg),
                json!({"meta": ctx.meta, "errors": [e], "warnings": []}),
            )
        }
    }
}

/// `GET partitions/`: the mock's one partition (no recorded sample; built from the v0.0.42 spec's
/// `partition_info` with its keys and types).
pub(super) async fn partitions(
    State(st): State<AppState>,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let ctx = match guard(&st, req.headers(), &client, Shape::Partitions) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let cfg = &st.cfg;
    let names: Vec<String> = (0..cfg.nodes as usize).map(|i| cfg.node_name(i)).collect();
    let total_cpus = cfg.cpus * cfg.nodes;
    let p = json!({
        "nodes": {"allowed_allocation": "", "configured": crate::job::node_list(&names), "total": cfg.nodes},
        "accounts": {"allowed": "", "deny": ""},
        "groups": {"allowed": ""},
        "qos": {"allowed": "", "deny": "", "assigned": ""},
        "alternate": "",
        "tres": {"billing_weights": "",
                 "configured": format!("cpu={total_cpus},mem={}M,node={},billing={total_cpus}", 8000 * cfg.nodes, cfg.nodes)},
        "cluster": cfg.cluster_name,
        "select_type": ["CPU"],
        "cpus": {"task_binding": 0, "total": total_cpus},
        "defaults": {"memory_per_cpu": 0, "partition_memory_per_cpu": nv_unset(),
                     "partition_memory_per_node": nv_unset(), "time": crate::records::nv_infinite(), "job": ""},
        "grace_time": 0,
        "maximums": {"cpus_per_node": crate::records::nv_infinite(), "cpus_per_socket": crate::records::nv_infinite(),
                     "memory_per_cpu": 0, "partition_memory_per_cpu": nv_unset(),
                     "partition_memory_per_node": nv_unset(), "nodes": crate::records::nv_infinite(), "shares": 1,
                     "oversubscribe": {"jobs": 1, "flags": []}, "time": crate::records::nv_infinite(),
                     "over_time_limit": nv_unset()},
        "minimums": {"nodes": 0},
        "name": cfg.partition,
        "node_sets": "",
        "priority": {"job_factor": 1, "tier": 1},
        "timeouts": {"resume": nv_unset(), "suspend": nv_unset()},
        "partition": {"state": ["UP"]},
        "suspend_time": nv_unset(),
    });
    let last_update = st.sched.lock().last_update;
    json_resp(
        StatusCode::OK,
        json!({"partitions": [p], "last_update": nv(last_update),
        "meta": ctx.meta, "errors": [], "warnings": []}),
    )
}
