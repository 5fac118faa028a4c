//! slurmdbd endpoints: the accounting view (also of jobs aged out of slurmctld).

// Handlers return early with a finished `Response`; boxing it would only add noise.
#![allow(clippy::result_large_err)]

use super::*;

/// slurmdbd's "nothing found" warning: 24.11 prints a pointer, 26.05+ does not.
fn found_nothing(sv: Served) -> Warning {
    Warning {
        description: if sv.release.is_24_11() {
            "slurmdb_jobs_get(0x7f0000000000) found nothing"
        } else {
            "slurmdb_jobs_get() found nothing"
        }
        .into(),
        source: "_dump_jobs".into(),
    }
}

pub(super) async fn slurmdb_job_get(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    Path(id): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    if id.contains(',') {
        return comma_path(sv);
    }
    let Ok(jid) = id.parse::<u32>() else {
        return rfc_error(&st, sv, &client, "parameters", "op_handler_job", true);
    };
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::Slurmdb) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let c = st.sched.lock();
    let jobs: Vec<Value> = c
        .jobs
        .values()
        .chain(c.aged.values())
        // An array's id: every element (recorded on 24.11: `slurmdb job/2205`).
        .filter(|j| j.id == jid || j.array.as_ref().is_some_and(|a| a.array_job_id == jid))
        .map(|j| slurmdb_job(j, &st.cfg, sv))
        .collect();
    drop(c);
    let warnings = if jobs.is_empty() {
        vec![found_nothing(sv)]
    } else {
        vec![]
    };
    json_resp(
        StatusCode::OK,
        json!({"jobs": jobs, "meta": ctx.meta, "errors": [], "warnings": warnings}),
    )
}

/// Query parameters `GET /slurmdb/<v>/jobs/` knows (from the v0.0.42 spec; the same in every
/// version's spec for the ones a client uses).
const SLURMDB_JOBS_PARAMS: &[&str] = &[
    "account",
    "association",
    "cluster",
    "constraints",
    "scheduler_unset",
    "scheduled_on_submit",
    "scheduled_by_main",
    "scheduled_by_backfill",
    "job_started",
    "exit_code",
    "show_duplicates",
    "skip_steps",
    "disable_truncate_usage_time",
    "whole_hetjob",
    "disable_whole_hetjob",
    "disable_wait_for_result",
    "usage_time_as_submit_time",
    "show_batch_script",
    "show_job_environment",
    "format",
    "groups",
    "job_name",
    "partition",
    "qos",
    "reason",
    "reservation",
    "reservation_id",
    "state",
    "step",
    "end_time",
    "start_time",
    "node",
    "users",
    "wckey",
];

/// Slurm's `parse_time` relative form as the connector sends it: `now-N` (seconds), as N.
fn relative_time(v: &str) -> Option<i64> {
    v.strip_prefix("now-")
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
}

/// `start_time`/`end_time`: the jobs active at some point between them (sacct's window: a job
/// submitted before the end that had not ended by the start). Neither given: every job.
#[derive(Default)]
struct Window {
    start: Option<i64>,
    end: Option<i64>,
}

impl Window {
    fn set(&mut self, field: &str, t: i64) {
        if field == "start_time" {
            self.start = Some(t);
        } else {
            self.end = Some(t);
        }
    }

    fn holds(&self, j: &crate::job::Job) -> bool {
        let ended = j.end_time > 0 && j.state.is_finished();
        self.end.is_none_or(|e| j.submit_time <= e)
            && self.start.is_none_or(|s| !ended || j.end_time >= s)
    }
}

pub(super) async fn slurmdb_jobs(
    State(st): State<AppState>,
    Extension(sv): Extension<Served>,
    RawQuery(q): RawQuery,
    req: axum::extract::Request,
) -> Response {
    let client = client_source(req.headers(), ext_addr(req.extensions()).as_ref());
    let mut ids = BTreeSet::new();
    let mut warnings = Vec::new();
    let (mut script, mut env) = (false, false);
    let mut window = Window::default();
    for (k, raw, v) in query_pairs(q.as_deref()) {
        match k.as_str() {
            "step" => {
                if raw.contains(',') {
                    return comma_query(sv);
                }
                // `31` or `31.batch`: the job part selects the job.
                match v.split('.').next().unwrap_or("").trim().parse::<u32>() {
                    Ok(n) => {
                        ids.insert(n);
                    }
                    Err(_) => return rfc_error(&st, sv, &client, "query", "op_handler_jobs", true),
                }
            }
            // Unix seconds, or parse_time's `now-N`; v0.0.40/41 refuse the first (recorded).
            "start_time" | "end_time" => match v.trim().parse::<i64>() {
                Ok(t) if sv.api.unix_time_query_broken() && has_token(req.headers()) => {
                    return unparsed_timestamp(&st, sv, &client, &k, t, true);
                }
                Ok(t) => window.set(&k, t),
                Err(_) => match relative_time(&v) {
                    Some(ago) => window.set(&k, crate::scheduler::now() - ago),
                    None => return rfc_error(&st, sv, &client, "query", "op_handler_jobs", true),
                },
            },
            "show_batch_script" => script = v == "true",
            "show_job_environment" => env = v == "true",
            k if SLURMDB_JOBS_PARAMS.contains(&k) => {}
            other => warnings.push(Warning {
                description: format!(
                    "Ignoring unknown field \"{other}\" of type string in DATA_PARSER_JOB_CONDITION"
                ),
                source: format!("#/{other}/"),
            }),
        }
    }
    let ctx = match guard(&st, sv, req.headers(), &client, Shape::Slurmdb) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if script && env {
        // Recorded slurmdbd bug on both versions (SQL: Unknown column 't4.env_vars').
        let e = error_entry(
            if sv.release.is_24_11() {
                "slurmdb_jobs_get(0x7f0000000000) failed"
            } else {
                "slurmdb_jobs_get failed"
            },
            1054,
            "Unknown error 1054",
            "_dump_jobs",
        );
        return json_resp(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"meta": ctx.meta, "errors": [e], "warnings": []}),
        );
    }
    let c = st.sched.lock();
    let mut all: Vec<&crate::job::Job> = c
        .jobs
        .values()
        .chain(c.aged.values())
        // `step=<array id>` selects every element (recorded on 24.11: `jobs?step=2205`).
        .filter(|j| {
            ids.is_empty()
                || ids.contains(&j.id)
                || j.array
                    .as_ref()
                    .is_some_and(|a| ids.contains(&a.array_job_id))
        })
        .filter(|j| window.holds(j))
        .collect();
    all.sort_by_key(|j| j.id);
    let jobs: Vec<Value> = all
        .into_iter()
        .map(|j| {
            let mut v = slurmdb_job(j, &st.cfg, sv);
            if script {
                v["script"] = json!(j.spec.script);
            }
            v
        })
        .collect();
    drop(c);
    if jobs.is_empty() {
        warnings.push(found_nothing(sv));
    }
    json_resp(
        StatusCode::OK,
        json!({"jobs": jobs, "meta": ctx.meta, "errors": [], "warnings": warnings}),
    )
}
