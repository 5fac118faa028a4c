//! `/mock/...`: the admin surface for tests and benchmarks (no auth, not counted, no faults).
//!
//! - `GET /mock/stats` -> counters `{"operations":{"submit":{"200":3}, ...},
//!   "api_versions":{"v0.0.46":3, ...}}` (status 0 = dropped)
//! - `POST /mock/reset-stats` -> 204
//! - `GET /mock/faults` -> current faults; `POST /mock/faults` (a FaultConfig JSON, missing fields
//!   = off) replaces them; `DELETE /mock/faults` clears them.

use axum::Router;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::faults::FaultConfig;
use crate::routes::{AppState, json_resp};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/mock/stats", get(stats))
        .route("/mock/reset-stats", post(reset_stats))
        .route(
            "/mock/faults",
            get(get_faults).post(set_faults).delete(clear_faults),
        )
}

async fn stats(State(st): State<AppState>) -> Response {
    json_resp(
        StatusCode::OK,
        serde_json::to_value(st.stats.snapshot()).unwrap_or_default(),
    )
}

async fn reset_stats(State(st): State<AppState>) -> Response {
    st.stats.reset();
    StatusCode::NO_CONTENT.into_response()
}

async fn get_faults(State(st): State<AppState>) -> Response {
    json_resp(
        StatusCode::OK,
        serde_json::to_value(st.faults.get()).unwrap_or_default(),
    )
}

async fn set_faults(
    State(st): State<AppState>,
    body: Result<axum::Json<FaultConfig>, JsonRejection>,
) -> Response {
    match body {
        Ok(axum::Json(cfg)) => {
            tracing::info!(faults = ?cfg, "faults set");
            st.faults.set(cfg);
            json_resp(
                StatusCode::OK,
                serde_json::to_value(st.faults.get()).unwrap_or_default(),
            )
        }
        Err(e) => json_resp(
            StatusCode::BAD_REQUEST,
            json!({"error": format!("invalid fault config: {e}; fields: latency_ms, error_rate, fail_next, error_statuses, drop_rate, drop_next, drop_after_handling, reject_tokens, reject_next_tokens, controller_down_secs, slurmdbd_latency_ms, slurmdbd_down, operations")}),
        ),
    }
}

async fn clear_faults(State(st): State<AppState>) -> Response {
    st.faults.clear();
    StatusCode::NO_CONTENT.into_response()
}
