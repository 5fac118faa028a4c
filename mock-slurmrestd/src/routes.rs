//! The slurmrestd v0.0.42 HTTP surface: paths, status codes and JSON bodies as recorded.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::auth::{AuthOutcome, authenticate, has_token};
use crate::config::{MockConfig, SlurmVersion};
use crate::faults::Faults;
use crate::jobdesc::{Parsed, parse_submit};
use crate::records::{Warning, error_entry, job_info, meta, nv, nv_unset, slurmdb_job};
use crate::scheduler::{CancelResult, Scheduler};
use crate::stats::Stats;

#[derive(Clone)]
pub struct AppState {
    pub cfg: Arc<MockConfig>,
    pub sched: Arc<Scheduler>,
    pub faults: Arc<Faults>,
    pub stats: Arc<Stats>,
}

/// The peer address, put into request extensions by the accept loop (for `meta.client.source`).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub SocketAddr);

pub fn router(state: AppState) -> Router {
    const S: &str = "/slurm/v0.0.42";
    const D: &str = "/slurmdb/v0.0.42";
    let mut r = Router::new();
    // slurmrestd matches paths with and without the trailing slash.
    for slash in ["", "/"] {
        r = r
            .route(&format!("{S}/job/submit{slash}"), post(submit))
            .route(&format!("{S}/job/{{id}}{slash}"), get(job_get).delete(job_delete))
            .route(&format!("{S}/jobs/state{slash}"), get(jobs_state))
            .route(&format!("{S}/jobs{slash}"), get(jobs))
            .route(&format!("{S}/ping{slash}"), get(ping))
            .route(&format!("{S}/diag{slash}"), get(diag))
            .route(&format!("{D}/job/{{id}}{slash}"), get(slurmdb_job_get))
            .route(&format!("{D}/jobs{slash}"), get(slurmdb_jobs));
    }
    r.merge(crate::admin::router())
        .fallback(|| async { text(StatusCode::NOT_FOUND, "Invalid or unknown URL path") })
        .with_state(state)
}

/// A JSON answer, pretty-printed like slurmrestd; errors carry `Connection: Close` like the real one.
pub fn json_resp(status: StatusCode, body: Value) -> Response {
    let bytes = serde_json::to_vec_pretty(&body).unwrap_or_default();
    let mut resp = (status, bytes).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if !status.is_success() {
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("Close"));
    }
    resp
}

pub fn text(status: StatusCode, body: &'static str) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("Close"));
    resp
}

fn client_source(headers: &HeaderMap, ext: Option<&ClientAddr>) -> String {
    let _ = headers;
    match ext {
        Some(ClientAddr(a)) => format!("[{}]:{}(fd:9)", a.ip(), a.port()),
        None => "[localhost](fd:9)".into(),
    }
}

/// The shape of one endpoint's error answers.
#[derive(Clone, Copy)]
enum Shape<'a> {
    Submit,
    JobGet(&'a str),
    Jobs,
    JobsState,
    Delete,
    Diag,
    Slurmdb,
}

impl Shape<'_> {
    fn what(&self) -> (String, &'static str) {
        match self {
            Shape::Submit => ("Batch job submission failed".into(), "slurm_submit_batch_job()"),
            Shape::JobGet(id) => (format!("Unable to query JobId={id}"), "_handle_job_get"),
            Shape::Jobs => ("Unable to query jobs".into(), "slurm_load_jobs()"),
            Shape::JobsState => ("Unable to query job states".into(), "slurm_load_job_state()"),
            Shape::Delete => ("Signal request failed".into(), "slurm_kill_jobs()"),
            Shape::Diag => ("Unable to query diagnostics".into(), "slurm_get_statistics()"),
            Shape::Slurmdb => ("Failed to open slurmdbd connection".into(), "openapi_get_db_conn"),
        }
    }

    /// The body around `errors`, as each endpoint dumps it.
    fn body(&self, m: Value, errors: Vec<Value>) -> Value {
        match self {
            Shape::JobGet(_) | Shape::Jobs => json!({"jobs": [], "last_backfill": nv(0), "last_update": nv(0),
                "meta": m, "errors": errors, "warnings": []}),
            Shape::JobsState => json!({"jobs": null, "meta": m, "errors": errors, "warnings": []}),
            Shape::Delete => json!({"status": [], "meta": m, "errors": errors, "warnings": []}),
            _ => json!({"meta": m, "errors": errors, "warnings": []}),
        }
    }
}

/// Request context once authenticated.
struct Ctx {
    user: String,
    meta: Value,
}

/// slurmrestd's 401 (no token), then slurmctld's/slurmdbd's verdict on the token, then whether
/// the daemon is reachable at all.
fn guard(st: &AppState, headers: &HeaderMap, client: &str, shape: Shape<'_>) -> Result<Ctx, Response> {
    if !has_token(headers) {
        return Err(text(StatusCode::UNAUTHORIZED, "Authentication failure"));
    }
    let slurmdb = matches!(shape, Shape::Slurmdb);
    let outcome = authenticate(headers, &st.cfg.jwt_key, &st.cfg.slurm_user);
    let outcome = match outcome {
        AuthOutcome::Ok { .. } if st.faults.reject_token() => AuthOutcome::Rejected("fault: reject_tokens"),
        o => o,
    };
    let user = match outcome {
        AuthOutcome::Ok { user } => user,
        AuthOutcome::Missing => return Err(text(StatusCode::UNAUTHORIZED, "Authentication failure")),
        AuthOutcome::Rejected(why) => {
            tracing::info!(reason = why, "token rejected");
            let m = meta(&st.cfg, slurmdb, client, "");
            if slurmdb {
                let desc = match st.cfg.slurm_version {
                    SlurmVersion::V24_11 => "Failed to open slurmdbd connection, authentication error",
                    SlurmVersion::V26_05 => "Failed to open slurmdbd connection",
                };
                let e = error_entry(desc, 7000, "Unable to connect to database", "openapi_get_db_conn");
                return Err(json_resp(StatusCode::BAD_GATEWAY, shape.body(m, vec![e])));
            }
            let (desc, source) = shape.what();
            let e = error_entry(&desc, 1007, "Protocol authentication error", source);
            return Err(json_resp(StatusCode::NETWORK_AUTHENTICATION_REQUIRED, shape.body(m, vec![e])));
        }
    };
    let m = meta(&st.cfg, slurmdb, client, &user);
    if slurmdb && st.faults.slurmdbd_down() {
        let e = error_entry("Failed to open slurmdbd connection", 7000, "Unable to connect to database", "openapi_get_db_conn");
        return Err(json_resp(StatusCode::BAD_GATEWAY, shape.body(m, vec![e])));
    }
    if !slurmdb && st.faults.controller_down() {
        // What slurmrestd reports when slurmctld does not answer (SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR).
        let (desc, source) = shape.what();
        let e = error_entry(&desc, 1800, "Unable to contact slurm controller (connect failure)", source);
        return Err(json_resp(StatusCode::INTERNAL_SERVER_ERROR, shape.body(m, vec![e])));
    }
    Ok(Ctx { user, meta: m })
}

/// HTTP status of a rejected submit: 500 on 24.11, 422 on 26.05.
fn reject_status(cfg: &MockConfig) -> StatusCode {
    match cfg.slurm_version {
        SlurmVersion::V24_11 => StatusCode::INTERNAL_SERVER_ERROR,
        SlurmVersion::V26_05 => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// A comma list where one id is expected: 24.11 400, 26.05 404 (path) / 500 (query).
fn comma_path(cfg: &MockConfig) -> Response {
    match cfg.slurm_version {
        SlurmVersion::V24_11 => text(StatusCode::BAD_REQUEST, "Unable to parse URL path."),
        SlurmVersion::V26_05 => text(StatusCode::NOT_FOUND, "Invalid or unknown URL path"),
    }
}

fn comma_query(cfg: &MockConfig) -> Response {
    match cfg.slurm_version {
        SlurmVersion::V24_11 => text(StatusCode::BAD_REQUEST, "Unable to parse query."),
        SlurmVersion::V26_05 => text(StatusCode::INTERNAL_SERVER_ERROR, "Unspecified error"),
    }
}

fn rfc_error(st: &AppState, client: &str, what: &str, source: &str, slurmdb: bool) -> Response {
    let e = error_entry(&format!("Rejecting request. Failure parsing {what}"), 9000,
        "Query empty or not RFC7320 compliant", source);
    json_resp(StatusCode::UNPROCESSABLE_ENTITY,
        json!({"meta": meta(&st.cfg, slurmdb, client, ""), "errors": [e], "warnings": []}))
}

/// Query pairs as (name, raw value, decoded value): raw commas and encoded ones are told apart.
fn query_pairs(raw: Option<&str>) -> Vec<(String, String, String)> {
    raw.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned()).unwrap_or_default();
            (dec(k), v.to_string(), dec(v))
        })
        .collect()
}

fn ext_addr(req_ext: &axum::http::Extensions) -> Option<ClientAddr> {
    req_ext.get::<ClientAddr>().copied()
}

async fn submit(State(st): State<AppState>, req: axum::extract::Request) -> Response {
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
            let e = error_entry(&format!("Rejecting request: {why}"), 9001, "Failure during parsing", "op_handler_submit_job");
            json_resp(StatusCode::BAD_REQUEST, json!({"meta": ctx.meta, "errors": [e], "warnings": []}))
        }
        Parsed::TypeErrors(w) => json_resp(StatusCode::OK, json!({"meta": ctx.meta, "errors": [], "warnings": w})),
        Parsed::Job(spec, warnings) => match st.sched.submit(*spec, &ctx.user) {
            Ok(id) => json_resp(StatusCode::OK, json!({"job_id": id, "step_id": "batch", "job_submit_user_msg": "",
                "meta": ctx.meta, "errors": [], "warnings": warnings})),
            Err(rej) => {
                let e = error_entry("Batch job submission failed", rej.number, rej.message, "slurm_submit_batch_job()");
                json_resp(reject_status(&st.cfg), json!({"meta": ctx.meta, "errors": [e], "warnings": warnings}))
            }
        },
    }
}

/// Validate a `{id}` path segment: comma list / not a number answer like the real one.
fn path_id(st: &AppState, client: &str, id: &str) -> Result<u32, Response> {
    if id.contains(',') {
        return Err(comma_path(&st.cfg));
    }
    id.parse::<u32>().map_err(|_| rfc_error(st, client, "parameters", "op_handler_job", false))
}

async fn job_get(State(st): State<AppState>, Path(id): Path<String>, req: axum::extract::Request) -> Response {
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
        let e = error_entry(&format!("Unable to query JobId={jid}"), 2017, "Invalid job id specified", "_handle_job_get");
        return json_resp(StatusCode::NOT_FOUND, Shape::JobGet(&id).body(ctx.meta, vec![e]));
    }
    json_resp(StatusCode::OK, json!({"jobs": jobs, "last_backfill": nv(0), "last_update": nv(last_update),
        "meta": ctx.meta, "errors": [], "warnings": []}))
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

async fn job_delete(State(st): State<AppState>, Path(id): Path<String>, RawQuery(q): RawQuery, req: axum::extract::Request) -> Response {
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
        CancelResult::AlreadyDone => json!([{"error": {"string": "Job/step already completing or completed",
            "code": 2021, "message": "Job/step already completing or completed"},
            "step_id": jid.to_string(), "job_id": nv(jid as i64), "federation": {"sibling": ""}}]),
        CancelResult::Unknown => json!([{"error": {"string": "Invalid job id specified", "code": 2017,
            "message": "Invalid job id specified"},
            "step_id": jid.to_string(), "job_id": nv_unset(), "federation": {"sibling": ""}}]),
    };
    json_resp(StatusCode::OK, json!({"status": status, "meta": ctx.meta, "errors": [], "warnings": []}))
}

async fn jobs_state(State(st): State<AppState>, RawQuery(q): RawQuery, req: axum::extract::Request) -> Response {
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
            ids.is_empty() || ids.contains(&j.id) || j.array.as_ref().is_some_and(|a| ids.contains(&a.array_job_id))
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
    json_resp(StatusCode::OK, json!({"jobs": jobs, "meta": ctx.meta, "errors": [], "warnings": []}))
}

async fn jobs(State(st): State<AppState>, RawQuery(q): RawQuery, req: axum::extract::Request) -> Response {
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
        let when = chrono::DateTime::from_timestamp(t, 0).map(|d| d.format("%Y-%m-%dT%H:%M:%S").to_string()).unwrap_or_default();
        let w = Warning { description: format!("No job changes since update_time[{t}]={when}"), source: "op_handler_jobs".into() };
        return json_resp(StatusCode::OK, json!({"jobs": [], "last_backfill": nv(0), "last_update": nv(0),
            "meta": ctx.meta, "errors": [], "warnings": [w]}));
    }
    let jobs: Vec<Value> = c.jobs.values().map(|j| job_info(j, &st.cfg)).collect();
    let last_update = c.last_update;
    drop(c);
    json_resp(StatusCode::OK, json!({"jobs": jobs, "last_backfill": nv(0), "last_update": nv(last_update),
        "meta": ctx.meta, "errors": [], "warnings": []}))
}

async fn ping(State(st): State<AppState>, req: axum::extract::Request) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    if !has_token(req.headers()) {
        return text(StatusCode::UNAUTHORIZED, "Authentication failure");
    }
    // The trap: a refused token still gets 200, with the controller shown DOWN.
    let up = matches!(authenticate(req.headers(), &st.cfg.jwt_key, &st.cfg.slurm_user), AuthOutcome::Ok { .. })
        && !st.faults.reject_token()
        && !st.faults.controller_down();
    let (pinged, latency) = if up { ("UP", 150) } else { ("DOWN", 12000) };
    json_resp(StatusCode::OK, json!({
        "pings": [{"hostname": "localhost", "pinged": pinged, "responding": up, "latency": latency,
                   "mode": "primary", "primary": true}],
        "meta": meta(&st.cfg, false, &client, ""), "errors": [], "warnings": []}))
}

async fn diag(State(st): State<AppState>, req: axum::extract::Request) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let ctx = match guard(&st, req.headers(), &client, Shape::Diag) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    let pending = c.jobs.values().filter(|j| j.state == crate::job::Base::Pending).count();
    let running = c.jobs.values().filter(|j| j.state == crate::job::Base::Running).count();
    let k = c.counters;
    let ts = c.last_update;
    drop(c);
    let now = crate::scheduler::now();
    json_resp(StatusCode::OK, json!({"statistics": {
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
        "meta": ctx.meta, "errors": [], "warnings": []}))
}

fn found_nothing() -> Warning {
    Warning { description: "slurmdb_jobs_get(0x7f0000000000) found nothing".into(), source: "_dump_jobs".into() }
}

async fn slurmdb_job_get(State(st): State<AppState>, Path(id): Path<String>, req: axum::extract::Request) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    if id.contains(',') {
        return comma_path(&st.cfg);
    }
    let Ok(jid) = id.parse::<u32>() else {
        return rfc_error(&st, &client, "parameters", "op_handler_job", true);
    };
    let ctx = match guard(&st, req.headers(), &client, Shape::Slurmdb) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    let jobs: Vec<Value> = c
        .jobs
        .values()
        .chain(c.aged.values())
        .filter(|j| j.id == jid)
        .map(|j| slurmdb_job(j, &st.cfg))
        .collect();
    drop(c);
    let warnings = if jobs.is_empty() { vec![found_nothing()] } else { vec![] };
    json_resp(StatusCode::OK, json!({"jobs": jobs, "meta": ctx.meta, "errors": [], "warnings": warnings}))
}

/// Query parameters `GET /slurmdb/v0.0.42/jobs/` knows (from the v0.0.42 spec).
const SLURMDB_JOBS_PARAMS: &[&str] = &[
    "account", "association", "cluster", "constraints", "scheduler_unset", "scheduled_on_submit",
    "scheduled_by_main", "scheduled_by_backfill", "job_started", "exit_code", "show_duplicates",
    "skip_steps", "disable_truncate_usage_time", "whole_hetjob", "disable_whole_hetjob",
    "disable_wait_for_result", "usage_time_as_submit_time", "show_batch_script",
    "show_job_environment", "format", "groups", "job_name", "partition", "qos", "reason",
    "reservation", "reservation_id", "state", "step", "end_time", "start_time", "node", "users", "wckey",
];

async fn slurmdb_jobs(State(st): State<AppState>, RawQuery(q): RawQuery, req: axum::extract::Request) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let mut ids = BTreeSet::new();
    let mut warnings = Vec::new();
    let (mut script, mut env) = (false, false);
    for (k, raw, v) in query_pairs(q.as_deref()) {
        match k.as_str() {
            "step" => {
                if raw.contains(',') {
                    return comma_query(&st.cfg);
                }
                // `31` or `31.batch`: the job part selects the job.
                match v.split('.').next().unwrap_or("").trim().parse::<u32>() {
                    Ok(n) => {
                        ids.insert(n);
                    }
                    Err(_) => return rfc_error(&st, &client, "query", "op_handler_jobs", true),
                }
            }
            "show_batch_script" => script = v == "true",
            "show_job_environment" => env = v == "true",
            k if SLURMDB_JOBS_PARAMS.contains(&k) => {}
            other => warnings.push(Warning {
                description: format!("Ignoring unknown field \"{other}\" of type string in DATA_PARSER_JOB_CONDITION"),
                source: format!("#/{other}/"),
            }),
        }
    }
    let ctx = match guard(&st, req.headers(), &client, Shape::Slurmdb) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if script && env {
        // Recorded slurmdbd bug on both versions (SQL: Unknown column 't4.env_vars').
        let e = error_entry("slurmdb_jobs_get(0x7f0000000000) failed", 1054, "Unknown error 1054", "_dump_jobs");
        return json_resp(StatusCode::INTERNAL_SERVER_ERROR, json!({"meta": ctx.meta, "errors": [e], "warnings": []}));
    }
    let c = st.sched.lock();
    let mut all: Vec<&crate::job::Job> = c
        .jobs
        .values()
        .chain(c.aged.values())
        .filter(|j| ids.is_empty() || ids.contains(&j.id))
        .collect();
    all.sort_by_key(|j| j.id);
    let jobs: Vec<Value> = all
        .into_iter()
        .map(|j| {
            let mut v = slurmdb_job(j, &st.cfg);
            if script {
                v["script"] = json!(j.spec.script);
            }
            v
        })
        .collect();
    drop(c);
    if jobs.is_empty() {
        warnings.push(found_nothing());
    }
    json_resp(StatusCode::OK, json!({"jobs": jobs, "meta": ctx.meta, "errors": [], "warnings": warnings}))
}
