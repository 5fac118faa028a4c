//! The stager's HTTP surface (axum). Routes, all under bearer auth except `/healthz`:
//! `GET /v1/stat?path=`, `GET /v1/tail?path=&lines=`, `GET /v1/walk?path=`, `GET /v1/read?path=`
//! (raw bytes, streamed), `GET /v1/read_at?path=&offset=|back=&max=` (raw bytes with
//! `x-chunk-start` and `x-file-size`; 204 when the file does not exist), `POST /v1/remove?path=`, `POST /v1/uploads` `{path, dest}` → `{id}`,
//! `GET /v1/uploads/{id}?wait_ms=` → progress and state (waits up to `wait_ms`, at most 10 s,
//! for the upload to end: a long poll, so many small files do not each cost a poll interval), `DELETE /v1/uploads/{id}` → cancel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Json, Path, Query, Request, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::Token;
use super::wire::{
    CHUNK_START_HEADER, ErrorCode, FILE_SIZE_HEADER, PathQuery, ReadAtQuery, TailQuery,
    UploadRequest, UploadStarted, UploadState, UploadStatus, WireError,
};
use crate::staging::backend::{ReadFrom, Staging};
use crate::staging::confine::Roots;
use crate::staging::error::StagingError;
use crate::staging::local::{LocalStaging, upload_confined};
use crate::staging::transfer::{Transfer, TransferOutcome};

/// Finished uploads nobody asked about are forgotten past this many entries.
const MAX_TRACKED_UPLOADS: usize = 1024;

type UploadResult = Result<u64, WireError>;

struct AppState {
    local: LocalStaging,
    token: Token,
    uploads: Mutex<HashMap<u64, Arc<Transfer<UploadResult>>>>,
    next_id: AtomicU64,
}

impl IntoResponse for WireError {
    fn into_response(self) -> Response {
        (self.status(), Json(self)).into_response()
    }
}

fn wire(e: StagingError) -> WireError {
    if !matches!(
        e,
        StagingError::Refused { .. } | StagingError::NotFound { .. }
    ) {
        tracing::warn!(error = %e, "stager request failed");
    }
    WireError::from(&e)
}

/// The stager's routes over `roots`, guarded by `token`.
pub fn router(roots: Roots, token: Token) -> Router {
    let state = Arc::new(AppState {
        local: LocalStaging::new(roots),
        token,
        uploads: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
    });
    let api = Router::new()
        .route("/v1/stat", get(stat))
        .route("/v1/tail", get(tail))
        .route("/v1/walk", get(walk))
        .route("/v1/read", get(read))
        .route("/v1/read_at", get(read_at))
        .route("/v1/remove", post(remove))
        .route("/v1/uploads", post(start_upload))
        .route("/v1/uploads/{id}", get(upload_status).delete(cancel_upload))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth))
        .with_state(state);
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(api)
}

async fn auth(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    match presented {
        Some(t) if st.token.matches(t) => next.run(req).await,
        _ => {
            // Never log what was presented: a near-miss token is still a secret.
            tracing::warn!(path = %req.uri().path(), "stager request without a valid bearer token");
            WireError {
                code: ErrorCode::Unauthorized,
                subject: None,
                detail: format!(
                    "missing or wrong bearer token (the connector's {} must hold the stager's token)",
                    super::STAGER_TOKEN_FILE_VAR
                ),
            }
            .into_response()
        }
    }
}

async fn stat(State(st): State<Arc<AppState>>, Query(q): Query<PathQuery>) -> Response {
    match st.local.stat(&q.path).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => wire(e).into_response(),
    }
}

async fn tail(State(st): State<Arc<AppState>>, Query(q): Query<TailQuery>) -> Response {
    match st.local.tail(&q.path, q.lines).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => wire(e).into_response(),
    }
}

async fn walk(State(st): State<Arc<AppState>>, Query(q): Query<PathQuery>) -> Response {
    match st.local.walk(&q.path).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => wire(e).into_response(),
    }
}

async fn read(State(st): State<Arc<AppState>>, Query(q): Query<PathQuery>) -> Response {
    match st.local.read(&q.path).await {
        Ok(stream) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Body::from_stream(stream),
        )
            .into_response(),
        Err(e) => wire(e).into_response(),
    }
}

async fn read_at(State(st): State<Arc<AppState>>, Query(q): Query<ReadAtQuery>) -> Response {
    let from = match (q.offset, q.back) {
        (Some(o), None) => ReadFrom::Offset(o),
        (None, Some(b)) => ReadFrom::End(b),
        _ => {
            return WireError {
                code: ErrorCode::BadRequest,
                subject: Some(q.path),
                detail: "read_at takes exactly one of `offset` and `back`".into(),
            }
            .into_response();
        }
    };
    match st.local.read_at(&q.path, from, q.max).await {
        Ok(Some(c)) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                (
                    HeaderName::from_static(CHUNK_START_HEADER),
                    c.start.to_string(),
                ),
                (
                    HeaderName::from_static(FILE_SIZE_HEADER),
                    c.size.to_string(),
                ),
            ],
            c.bytes,
        )
            .into_response(),
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => wire(e).into_response(),
    }
}

async fn remove(State(st): State<Arc<AppState>>, Query(q): Query<PathQuery>) -> Response {
    match st.local.remove(&q.path).await {
        Ok(removed) => Json(removed).into_response(),
        Err(e) => wire(e).into_response(),
    }
}

async fn start_upload(State(st): State<Arc<AppState>>, Json(req): Json<UploadRequest>) -> Response {
    let roots = st.local.roots().clone();
    let transfer = Transfer::spawn(move |ctl| async move {
        match upload_confined(&roots, &req.path, &req.dest, &ctl).await {
            Ok(n) => Ok(Ok(n)),
            Err(StagingError::Cancelled) => Err(StagingError::Cancelled),
            Err(e) => Ok(Err(wire(e))),
        }
    });
    let id = st.next_id.fetch_add(1, Ordering::Relaxed);
    let mut uploads = st.uploads.lock().expect("uploads lock");
    if uploads.len() >= MAX_TRACKED_UPLOADS {
        uploads.retain(|_, t| t.outcome().is_none());
    }
    uploads.insert(id, Arc::new(transfer));
    (StatusCode::ACCEPTED, Json(UploadStarted { id })).into_response()
}

fn unknown_upload(id: u64) -> Response {
    WireError {
        code: ErrorCode::NotFound,
        subject: Some(format!("upload {id}")),
        detail: format!("upload {id} is not known to this stager (restarted?)"),
    }
    .into_response()
}

#[derive(Debug, serde::Deserialize)]
struct WaitQuery {
    #[serde(default)]
    wait_ms: u64,
}

/// The longest a status request waits for an upload to end.
const MAX_WAIT_MS: u64 = 10_000;

async fn upload_status(
    State(st): State<Arc<AppState>>,
    Path(id): Path<u64>,
    Query(q): Query<WaitQuery>,
) -> Response {
    let Some(t) = st.uploads.lock().expect("uploads lock").get(&id).cloned() else {
        return unknown_upload(id);
    };
    if q.wait_ms > 0 {
        let wait = std::time::Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
        let _ = tokio::time::timeout(wait, t.wait()).await;
    }
    let (done, total) = t.progress();
    let state = match t.outcome() {
        None => UploadState::Running,
        Some(TransferOutcome::Succeeded(Ok(bytes))) => UploadState::Succeeded { bytes },
        Some(TransferOutcome::Succeeded(Err(error))) => UploadState::Failed { error },
        Some(TransferOutcome::Failed(message)) => UploadState::Failed {
            error: WireError {
                code: ErrorCode::Internal,
                subject: None,
                detail: message,
            },
        },
        Some(TransferOutcome::Cancelled) => UploadState::Cancelled,
    };
    if !matches!(state, UploadState::Running) {
        // Reported once, then forgotten: the client stops polling at a terminal state.
        st.uploads.lock().expect("uploads lock").remove(&id);
    }
    Json(UploadStatus { done, total, state }).into_response()
}

async fn cancel_upload(State(st): State<Arc<AppState>>, Path(id): Path<u64>) -> Response {
    let uploads = st.uploads.lock().expect("uploads lock");
    match uploads.get(&id) {
        Some(t) => {
            t.cancel();
            StatusCode::NO_CONTENT.into_response()
        }
        None => unknown_upload(id),
    }
}
