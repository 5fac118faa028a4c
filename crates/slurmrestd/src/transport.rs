//! Per-request plumbing between the facade and the generated client.
//!
//! The generated client calls [`pre_hook`] before sending and [`post_hook`] after each response.
//! Both read and write a task-local [`CallContext`] that the facade sets up around every call:
//! - the auth headers come from it, so a token re-minted between calls is used at once, without
//!   rebuilding the client (and its connection pool);
//! - the response's HTTP status and content type are recorded in it, because slurmrestd answers
//!   some errors (401, 400, some 500) with `text/plain` bodies that the generated code can only
//!   report as an undecodable payload, without the status.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

use reqwest::header::{HeaderName, HeaderValue};

use super::auth::Secret;
use super::exchange::Daemon;

pub const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-slurm-user-token");
pub const USER_HEADER: HeaderName = HeaderName::from_static("x-slurm-user-name");

/// What one facade call hands to the hooks, and what they hand back.
#[derive(Debug, Clone)]
pub struct CallContext {
    token: HeaderValue,
    user: Option<HeaderValue>,
    response: Arc<ResponseNote>,
}

/// The last response's status and whether its body was JSON, and the daemon the request was
/// for (from its path, noted when it is sent).
#[derive(Debug, Default)]
pub struct ResponseNote {
    status: AtomicU16,
    json: AtomicBool,
    sent: AtomicBool,
    slurmdb: AtomicBool,
}

impl ResponseNote {
    /// The status of the response, if one arrived.
    pub fn status(&self) -> Option<u16> {
        match self.status.load(Ordering::Relaxed) {
            0 => None,
            s => Some(s),
        }
    }
    pub fn was_json(&self) -> bool {
        self.json.load(Ordering::Relaxed)
    }
    /// The daemon the request was for; `None` when no request was sent (it could not be built).
    pub fn daemon(&self) -> Option<Daemon> {
        self.sent.load(Ordering::Relaxed).then(|| {
            if self.slurmdb.load(Ordering::Relaxed) {
                Daemon::Slurmdbd
            } else {
                Daemon::Slurmctld
            }
        })
    }
}

impl CallContext {
    /// `None` when the token or user cannot be a header value (control characters): refused
    /// rather than sent mangled.
    pub fn new(token: &Secret, user: Option<&str>) -> Option<CallContext> {
        let mut token = HeaderValue::from_str(token.expose()).ok()?;
        // Keeps the value out of reqwest's/hyper's Debug output.
        token.set_sensitive(true);
        let user = match user {
            Some(u) => Some(HeaderValue::from_str(u).ok()?),
            None => None,
        };
        Some(CallContext {
            token,
            user,
            response: Arc::new(ResponseNote::default()),
        })
    }

    pub fn response(&self) -> Arc<ResponseNote> {
        self.response.clone()
    }
}

tokio::task_local! {
    static CALL: CallContext;
}

/// Run `fut` (one generated-client call) with `ctx` visible to the hooks.
pub async fn with_context<F: std::future::Future>(ctx: CallContext, fut: F) -> F::Output {
    CALL.scope(ctx, fut).await
}

/// Called by the generated client before each request: attach the auth headers, note the daemon.
pub fn pre_hook(request: &mut reqwest::Request) {
    let daemon = Daemon::of_path(request.url().path());
    // Outside a facade call there is no token: the request goes out without one and slurmrestd
    // answers 401, which the facade reports as a missing token. (The facade always sets one.)
    let _ = CALL.try_with(|ctx| {
        ctx.response.sent.store(true, Ordering::Relaxed);
        ctx.response
            .slurmdb
            .store(daemon == Daemon::Slurmdbd, Ordering::Relaxed);
        let headers = request.headers_mut();
        headers.insert(TOKEN_HEADER, ctx.token.clone());
        if let Some(user) = &ctx.user {
            headers.insert(USER_HEADER, user.clone());
        }
    });
}

/// Called by the generated client after each response: note its status and content type.
pub fn post_hook(result: &Result<reqwest::Response, reqwest::Error>) {
    if let Ok(response) = result {
        let json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let _ = CALL.try_with(|ctx| {
            ctx.response
                .status
                .store(response.status().as_u16(), Ordering::Relaxed);
            ctx.response.json.store(json, Ordering::Relaxed);
        });
    }
}
