//! The slurmrestd HTTP surface, once per served API version: paths, status codes and JSON bodies
//! as recorded for that version.

// Handlers return early with a finished `Response`; boxing it would only add noise.
#![allow(clippy::result_large_err)]

mod slurmctld;
mod slurmdb;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::auth::{AuthOutcome, authenticate, has_token};
use crate::config::{ApiVersion, MockConfig, SlurmVersion};
use crate::faults::Faults;
use crate::jobdesc::{Parsed, parse_submit};
use crate::records::{Warning, error_entry, meta, nv, nv_unset, slurmdb_job};
use crate::scheduler::{CancelResult, Scheduler};
use crate::stats::Stats;
use crate::versions::Served;

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
    let mut r = Router::new();
    for &api in &state.cfg.api_versions {
        let served = Served {
            api,
            release: state.cfg.slurm_version.for_api(api),
        };
        r = r.merge(version_router(api, state.cfg.accounting).layer(Extension(served)));
    }
    let release = state.cfg.slurm_version;
    r.merge(crate::admin::router())
        .fallback(move |uri: axum::http::Uri, headers: HeaderMap| async move {
            not_found(release, uri.path(), &headers)
        })
        .with_state(state)
}

/// What slurmrestd answers for a path it does not serve (an unserved API version included):
/// 401 without a token (authentication comes first), else 404 text, worded per release
/// (recorded on all three: `*_ping-unserved*.json`, `*_any_*.json`). 26.11 answers `/` itself
/// with the long text (`_req_root`, no authentication) and everything else from its path table.
fn not_found(release: SlurmVersion, path: &str, headers: &HeaderMap) -> Response {
    const LONG: &str = "Unable to find requested URL endpoint. Please query the '/openapi/v3' endpoint or visit 'https://slurm.schedmd.com/rest_api.html' for the OpenAPI specification which includes a list of all possible slurmrestd endpoints.";
    if release == SlurmVersion::V26_11 && path == "/" {
        return text(StatusCode::NOT_FOUND, LONG);
    }
    if !has_token(headers) {
        return text(StatusCode::UNAUTHORIZED, "Authentication failure");
    }
    text(
        StatusCode::NOT_FOUND,
        match release {
            SlurmVersion::V24_11 => {
                "Unable find requested URL. Please view /openapi/v3 for API reference."
            }
            SlurmVersion::V26_05 => LONG,
            SlurmVersion::V26_11 => "Invalid or unknown URL path",
        },
    )
}

/// Every route of one API version; the slurmdb ones only with `accounting` (slurmrestd
/// without slurmdbd runs with `-s openapi/slurmctld`, and its slurmdb paths are unknown paths).
fn version_router(api: ApiVersion, accounting: bool) -> Router<AppState> {
    let s = format!("/slurm/{api}");
    let d = format!("/slurmdb/{api}");
    let (s, d) = (s.as_str(), d.as_str());
    let mut r = Router::new();
    // slurmrestd matches paths with and without the trailing slash.
    for slash in ["", "/"] {
        r = r
            .route(&format!("{s}/job/submit{slash}"), post(slurmctld::submit))
            .route(
                &format!("{s}/job/{{id}}{slash}"),
                get(slurmctld::job_get)
                    .delete(slurmctld::job_delete)
                    .post(slurmctld::job_update),
            )
            .route(
                &format!("{s}/jobs/state{slash}"),
                get(slurmctld::jobs_state),
            )
            .route(&format!("{s}/jobs{slash}"), get(slurmctld::jobs))
            .route(&format!("{s}/ping{slash}"), get(slurmctld::ping))
            .route(
                &format!("{s}/partitions{slash}"),
                get(slurmctld::partitions),
            )
            .route(&format!("{s}/diag{slash}"), get(slurmctld::diag));
        if accounting {
            r = r
                .route(
                    &format!("{d}/job/{{id}}{slash}"),
                    get(slurmdb::slurmdb_job_get),
                )
                .route(&format!("{d}/jobs{slash}"), get(slurmdb::slurmdb_jobs));
        }
        if api.has_requeue() {
            // Older versions have no such path: it falls through to the 404 of unknown paths.
            r = r.route(
                &format!("{s}/job/{{id}}/requeue{slash}"),
                get(slurmctld::job_requeue),
            );
        }
    }
    r
}

/// A JSON answer, pretty-printed like slurmrestd; errors carry `Connection: Close` like the real one.
pub fn json_resp(status: StatusCode, body: Value) -> Response {
    let bytes = serde_json::to_vec_pretty(&body).unwrap_or_default();
    let mut resp = (status, bytes).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if !status.is_success() {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("Close"));
    }
    resp
}

pub fn text(status: StatusCode, body: &'static str) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("Close"));
    resp
}

pub(crate) fn client_source(headers: &HeaderMap, ext: Option<&ClientAddr>) -> String {
    let _ = headers;
    match ext {
        Some(ClientAddr(a)) => format!("[{}]:{}(fd:9)", a.ip(), a.port()),
        None => "[localhost](fd:9)".into(),
    }
}

/// The shape of one endpoint's error answers.
#[derive(Clone, Copy)]
pub(crate) enum Shape<'a> {
    Submit,
    JobGet(&'a str),
    Jobs,
    JobsState,
    Delete,
    Update,
    Requeue(&'a str),
    Diag,
    Partitions,
    Slurmdb,
}

impl Shape<'_> {
    fn what(&self) -> (String, &'static str) {
        match self {
            Shape::Submit => (
                "Batch job submission failed".into(),
                "slurm_submit_batch_job()",
            ),
            Shape::JobGet(id) => (format!("Unable to query JobId={id}"), "_handle_job_get"),
            Shape::Jobs => ("Unable to query jobs".into(), "slurm_load_jobs()"),
            Shape::JobsState => (
                "Unable to query job states".into(),
                "slurm_load_job_state()",
            ),
            Shape::Delete => ("Signal request failed".into(), "slurm_kill_jobs()"),
            Shape::Update => ("Job update requested failed".into(), "slurm_update_job2()"),
            Shape::Requeue(id) => (
                format!("Requeue JobID={id} failed"),
                "op_handler_job_requeue",
            ),
            Shape::Diag => (
                "Unable to query diagnostics".into(),
                "slurm_get_statistics()",
            ),
            Shape::Partitions => (
                "Unable to query partitions".into(),
                "slurm_load_partitions()",
            ),
            Shape::Slurmdb => (
                "Failed to open slurmdbd connection".into(),
                "openapi_get_db_conn",
            ),
        }
    }

    /// The body around `errors`, as each endpoint dumps it.
    fn body(&self, api: ApiVersion, m: Value, errors: Vec<Value>) -> Value {
        match self {
            Shape::JobGet(_) | Shape::Jobs => {
                json!({"jobs": [], "last_backfill": nv(0), "last_update": nv(0),
                "meta": m, "errors": errors, "warnings": []})
            }
            Shape::JobsState => json!({"jobs": null, "meta": m, "errors": errors, "warnings": []}),
            // v0.0.40/41 still carry the deprecated submit-style fields, empty.
            Shape::Update if api.minor() <= 41 => {
                json!({"results": null, "job_id": "", "step_id": "", "job_submit_user_msg": "",
                "meta": m, "errors": errors, "warnings": []})
            }
            Shape::Update => json!({"results": null, "meta": m, "errors": errors, "warnings": []}),
            Shape::Delete | Shape::Requeue(_) => {
                json!({"status": [], "meta": m, "errors": errors, "warnings": []})
            }
            _ => json!({"meta": m, "errors": errors, "warnings": []}),
        }
    }
}

/// Request context once authenticated.
pub(crate) struct Ctx {
    pub(crate) user: String,
    pub(crate) meta: Value,
}

/// slurmrestd's 401 (no token), then slurmctld's/slurmdbd's verdict on the token, then whether
/// the daemon is reachable at all.
pub(crate) fn guard(
    st: &AppState,
    sv: Served,
    headers: &HeaderMap,
    client: &str,
    shape: Shape<'_>,
) -> Result<Ctx, Response> {
    if !has_token(headers) {
        return Err(text(StatusCode::UNAUTHORIZED, "Authentication failure"));
    }
    let slurmdb = matches!(shape, Shape::Slurmdb);
    let outcome = authenticate(headers, &st.cfg.jwt_key, &st.cfg.slurm_user);
    let outcome = match outcome {
        AuthOutcome::Ok { .. } if st.faults.reject_token() => {
            AuthOutcome::Rejected("fault: reject_tokens")
        }
        o => o,
    };
    let user = match outcome {
        AuthOutcome::Ok { user } => user,
        AuthOutcome::Missing => {
            return Err(text(StatusCode::UNAUTHORIZED, "Authentication failure"));
        }
        AuthOutcome::Rejected(why) => {
            tracing::info!(reason = why, "token rejected");
            let m = meta(&st.cfg, sv, slurmdb, client, "");
            if slurmdb {
                let desc = if sv.release.is_24_11() {
                    "Failed to open slurmdbd connection, authentication error"
                } else {
                    "Failed to open slurmdbd connection"
                };
                let e = error_entry(
                    desc,
                    7000,
                    "Unable to connect to database",
                    "openapi_get_db_conn",
                );
                return Err(json_resp(
                    StatusCode::BAD_GATEWAY,
                    shape.body(sv.api, m, vec![e]),
                ));
            }
            let (desc, source) = shape.what();
            let e = error_entry(&desc, 1007, "Protocol authentication error", source);
            return Err(json_resp(
                StatusCode::NETWORK_AUTHENTICATION_REQUIRED,
                shape.body(sv.api, m, vec![e]),
            ));
        }
    };
    let m = meta(&st.cfg, sv, slurmdb, client, &user);
    if slurmdb && st.faults.slurmdbd_down() {
        let e = error_entry(
            "Failed to open slurmdbd connection",
            7000,
            "Unable to connect to database",
            "openapi_get_db_conn",
        );
        return Err(json_resp(
            StatusCode::BAD_GATEWAY,
            shape.body(sv.api, m, vec![e]),
        ));
    }
    if !slurmdb && st.faults.controller_down() {
        // What slurmrestd reports when slurmctld does not answer, as real 26.05 did with
        // slurmctld stopped (tests/fixtures/slurmrestd/26.05_v0.0.45_ctld-down-*.json):
        // `jobs/state` and `job/{id}` a 500 with error -1 ("Unable to query job states"), the
        // others a 502 with 1800 (SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR). (Real slurmrestd
        // answers only after its 10 s connect timeout; the mock answers at once.)
        let (desc, source) = shape.what();
        let (status, e) = match shape {
            Shape::JobsState | Shape::JobGet(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                error_entry(&desc, -1, "Unspecified error", source),
            ),
            _ => (
                StatusCode::BAD_GATEWAY,
                error_entry(
                    &desc,
                    1800,
                    "Unable to contact slurm controller (connect failure)",
                    source,
                ),
            ),
        };
        return Err(json_resp(status, shape.body(sv.api, m, vec![e])));
    }
    Ok(Ctx { user, meta: m })
}

/// HTTP status of a rejected submit: 500 on 24.11, 422 on 26.05 and 26.11.
pub(crate) fn reject_status(sv: Served) -> StatusCode {
    if sv.release.is_24_11() {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    }
}

/// A comma list where one id is expected: 24.11 400, 26.05/26.11 404 (path) / 500 (query).
pub(crate) fn comma_path(sv: Served) -> Response {
    if sv.release.is_24_11() {
        text(StatusCode::BAD_REQUEST, "Unable to parse URL path.")
    } else {
        text(StatusCode::NOT_FOUND, "Invalid or unknown URL path")
    }
}

pub(crate) fn comma_query(sv: Served) -> Response {
    if sv.release.is_24_11() {
        text(StatusCode::BAD_REQUEST, "Unable to parse query.")
    } else {
        text(StatusCode::INTERNAL_SERVER_ERROR, "Unspecified error")
    }
}

/// Validate a `{id}` path segment: comma list / not a number answer like the real one.
pub(crate) fn path_id(st: &AppState, sv: Served, client: &str, id: &str) -> Result<u32, Response> {
    if id.contains(',') {
        return Err(comma_path(sv));
    }
    id.parse::<u32>()
        .map_err(|_| rfc_error(st, sv, client, "parameters", "op_handler_job", false))
}

/// A `{id}` path segment that may name one element of an array, `<array id>_<index>` (DELETE
/// takes it: recorded on 24.11 and 26.05, `*_coalesce-array-held-delete-element*`); ranges
/// (`_[8-9]`) are refused like any garbage.
pub(crate) fn path_element(
    st: &AppState,
    sv: Served,
    client: &str,
    id: &str,
) -> Result<(u32, Option<u32>), Response> {
    match id.split_once('_') {
        Some((a, i)) => {
            let i = i
                .parse::<u32>()
                .map_err(|_| rfc_error(st, sv, client, "parameters", "op_handler_job", false))?;
            Ok((path_id(st, sv, client, a)?, Some(i)))
        }
        None => Ok((path_id(st, sv, client, id)?, None)),
    }
}

pub(crate) fn rfc_error(
    st: &AppState,
    sv: Served,
    client: &str,
    what: &str,
    source: &str,
    slurmdb: bool,
) -> Response {
    let e = error_entry(
        &format!("Rejecting request. Failure parsing {what}"),
        9000,
        "Query empty or not RFC7320 compliant",
        source,
    );
    json_resp(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"meta": meta(&st.cfg, sv, slurmdb, client, ""), "errors": [e], "warnings": []}),
    )
}

/// v0.0.40/41's timestamp parser refuses unix seconds in a query parameter (`update_time` of
/// slurmctld's `jobs/`, `start_time` of slurmdb's): the recorded 24.11 bug, 422 with 9202 + 9000.
pub(crate) fn unparsed_timestamp(
    st: &AppState,
    sv: Served,
    client: &str,
    field: &str,
    t: i64,
    slurmdb: bool,
) -> Response {
    let errors = vec![
        error_entry(
            &format!("Parsing of {t} for timestamp failed"),
            9202,
            "Unable to convert Data type",
            &format!("#/{field}/"),
        ),
        error_entry(
            if slurmdb {
                "Rejecting request. Failure parsing query parameters"
            } else {
                "Rejecting request. Failure parsing query."
            },
            9000,
            "Query empty or not RFC7320 compliant",
            "op_handler_jobs",
        ),
    ];
    json_resp(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"meta": meta(&st.cfg, sv, slurmdb, client, ""), "errors": errors, "warnings": []}),
    )
}

/// Query pairs as (name, raw value, decoded value): raw commas and encoded ones are told apart.
pub(crate) fn query_pairs(raw: Option<&str>) -> Vec<(String, String, String)> {
    raw.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| {
                form_urlencoded::parse(format!("x={s}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            };
            (dec(k), v.to_string(), dec(v))
        })
        .collect()
}

pub(crate) fn ext_addr(req_ext: &axum::http::Extensions) -> Option<ClientAddr> {
    req_ext.get::<ClientAddr>().copied()
}
