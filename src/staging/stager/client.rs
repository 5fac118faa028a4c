//! The sidecar backend: the [`Staging`] interface over HTTP to a `slurm-connector stager`.
//! The stager enforces confinement on its side; errors come back with their kind, so a refused
//! path is `StagingError::Refused` here exactly as with the local backend.

use std::path::Path;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use url::Url;

use super::Token;
use super::wire::{
    CHUNK_START_HEADER, FILE_SIZE_HEADER, UploadRequest, UploadStarted, UploadState, UploadStatus,
    WireError,
};
use crate::staging::backend::{
    ByteStream, Chunk, READ_AT_MAX_BYTES, ReadFrom, Staging, Stat, WalkEntry,
};
use crate::staging::error::{Result, StagingError};
use crate::staging::transfer::TransferCtl;

/// How long each status request waits on the stager for the upload to end (a long poll: the
/// answer comes as soon as it ends, and progress is refreshed at least this often).
const POLL_WAIT_MS: u64 = 1000;
/// Consecutive failed polls tolerated (a stager restart or a network blip) before giving up.
const POLL_RETRIES: u32 = 8;
/// Deadline for the small JSON calls (walks of big trees included); streams have none.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct SidecarStaging {
    base: Url,
    token: Token,
    http: reqwest::Client,
}

impl SidecarStaging {
    /// `url` is the stager's base URL (`FLYTE_SLURM_STAGER_URL`), `token_file` holds its token.
    pub fn new(url: &str, token_file: &Path) -> Result<Self> {
        Self::with_token(url, Token::from_file(token_file)?)
    }

    pub fn with_token(url: &str, token: Token) -> Result<Self> {
        let bad = |message: String| StagingError::Config {
            var: super::STAGER_URL_VAR,
            message,
        };
        let base = Url::parse(url).map_err(|e| bad(format!("{url:?} is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(bad(format!(
                "{url:?} must be an http:// or https:// base URL"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| bad(format!("cannot build an HTTP client: {e}")))?;
        Ok(SidecarStaging { base, token, http })
    }

    fn request(&self, method: Method, route: &str) -> RequestBuilder {
        let mut url = self.base.clone();
        let path = format!("{}/{}", url.path().trim_end_matches('/'), route);
        url.set_path(&path);
        self.http
            .request(method, url)
            .bearer_auth(self.token.expose())
    }

    /// Send; a non-2xx answer becomes the error it carries.
    async fn send(&self, req: RequestBuilder) -> Result<Response> {
        let resp = req.send().await.map_err(|e| StagingError::Sidecar {
            message: format!(
                "cannot reach the stager at {}: {}",
                self.base,
                e.without_url()
            ),
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let body = resp.bytes().await.unwrap_or_default();
        Err(match serde_json::from_slice::<WireError>(&body) {
            Ok(w) => w.into_staging(),
            Err(_) => StagingError::Sidecar {
                message: format!(
                    "the stager at {} answered {status}: {}",
                    self.base,
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                ),
            },
        })
    }

    async fn json<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T> {
        let resp = self.send(req.timeout(CALL_TIMEOUT)).await?;
        resp.json().await.map_err(|e| StagingError::Sidecar {
            message: format!(
                "unexpected answer from the stager at {}: {}",
                self.base,
                e.without_url()
            ),
        })
    }

    async fn upload(&self, path: &str, dest_uri: &str, ctl: &TransferCtl) -> Result<u64> {
        let started: UploadStarted = self
            .json(
                self.request(Method::POST, "v1/uploads")
                    .json(&UploadRequest {
                        path: path.to_string(),
                        dest: dest_uri.to_string(),
                    }),
            )
            .await?;
        let route = format!("v1/uploads/{}", started.id);
        let mut reported = 0u64;
        let mut failures = 0u32;
        let status_req = || {
            self.request(Method::GET, &route)
                .query(&[("wait_ms", POLL_WAIT_MS)])
        };
        loop {
            let polled = tokio::select! {
                biased;
                _ = ctl.cancelled() => {
                    if let Err(e) = self.send(self.request(Method::DELETE, &route).timeout(CALL_TIMEOUT)).await {
                        tracing::warn!(error = %e, "could not cancel an upload on the stager");
                    }
                    return Err(StagingError::Cancelled);
                }
                polled = self.json::<UploadStatus>(status_req()) => polled,
            };
            let status = match polled {
                Ok(s) => {
                    failures = 0;
                    s
                }
                // The stager no longer knows the upload: retrying cannot help.
                Err(e @ StagingError::NotFound { .. }) => return Err(e),
                Err(e) if failures < POLL_RETRIES => {
                    failures += 1;
                    tracing::debug!(error = %e, failures, "polling a stager upload failed; retrying");
                    tokio::time::sleep(Duration::from_millis(250 * u64::from(failures))).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if status.done > reported {
                ctl.progress.add_done(status.done - reported);
                reported = status.done;
            }
            match status.state {
                UploadState::Running => {}
                UploadState::Succeeded { bytes } => {
                    if bytes > reported {
                        ctl.progress.add_done(bytes - reported);
                    }
                    return Ok(bytes);
                }
                UploadState::Failed { error } => return Err(error.into_staging()),
                UploadState::Cancelled => return Err(StagingError::Cancelled),
            }
        }
    }
}

impl Staging for SidecarStaging {
    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Stat>>> {
        self.json(
            self.request(Method::GET, "v1/stat")
                .query(&[("path", path)]),
        )
        .boxed()
    }

    fn tail<'a>(&'a self, path: &'a str, lines: usize) -> BoxFuture<'a, Result<Option<String>>> {
        let lines = lines.to_string();
        async move {
            self.json(
                self.request(Method::GET, "v1/tail")
                    .query(&[("path", path), ("lines", &lines)]),
            )
            .await
        }
        .boxed()
    }

    fn read_at<'a>(
        &'a self,
        path: &'a str,
        from: ReadFrom,
        max: u64,
    ) -> BoxFuture<'a, Result<Option<Chunk>>> {
        async move {
            let (key, at) = match from {
                ReadFrom::Offset(o) => ("offset", o),
                ReadFrom::End(b) => ("back", b),
            };
            let resp = self
                .send(
                    self.request(Method::GET, "v1/read_at")
                        .query(&[
                            ("path", path),
                            (key, &at.to_string()),
                            ("max", &max.min(READ_AT_MAX_BYTES).to_string()),
                        ])
                        .timeout(CALL_TIMEOUT),
                )
                .await?;
            if resp.status() == reqwest::StatusCode::NO_CONTENT {
                return Ok(None);
            }
            let header = |name: &str| {
                resp.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| StagingError::Sidecar {
                        message: format!(
                            "the stager at {} answered read_at without a numeric {name} header \
                             (a stager older than this connector? run the same version)",
                            self.base
                        ),
                    })
            };
            let (start, size) = (header(CHUNK_START_HEADER)?, header(FILE_SIZE_HEADER)?);
            let bytes = resp.bytes().await.map_err(|e| StagingError::Sidecar {
                message: format!(
                    "reading {path} from the stager at {}: {}",
                    self.base,
                    e.without_url()
                ),
            })?;
            Ok(Some(Chunk { start, size, bytes }))
        }
        .boxed()
    }

    fn walk<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<WalkEntry>>> {
        self.json(
            self.request(Method::GET, "v1/walk")
                .query(&[("path", path)]),
        )
        .boxed()
    }

    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<ByteStream>> {
        async move {
            let resp = self
                .send(
                    self.request(Method::GET, "v1/read")
                        .query(&[("path", path)]),
                )
                .await?;
            let stream: ByteStream = resp
                .bytes_stream()
                .map(|r| r.map_err(|e| std::io::Error::other(e.without_url())))
                .boxed();
            Ok(stream)
        }
        .boxed()
    }

    fn remove<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<bool>> {
        self.json(
            self.request(Method::POST, "v1/remove")
                .query(&[("path", path)]),
        )
        .boxed()
    }

    fn upload_file<'a>(
        &'a self,
        path: &'a str,
        dest_uri: &'a str,
        ctl: &'a TransferCtl,
    ) -> BoxFuture<'a, Result<u64>> {
        self.upload(path, dest_uri, ctl).boxed()
    }
}
