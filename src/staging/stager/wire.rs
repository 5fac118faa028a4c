//! What travels between the stager and its client: JSON bodies and errors that keep their kind
//! (a refused path stays `Refused` on the client side, so both backends fail the same way).

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::staging::error::StagingError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Refused,
    NotFound,
    BadUri,
    Output,
    Cancelled,
    BadRequest,
    Unauthorized,
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub code: ErrorCode,
    /// The path or URI concerned, if any.
    #[serde(default)]
    pub subject: Option<String>,
    /// For `Refused` the reason, for `BadUri` the reason, otherwise the full message.
    pub detail: String,
}

impl WireError {
    pub fn status(&self) -> StatusCode {
        match self.code {
            ErrorCode::Refused => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::BadUri | ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Output | ErrorCode::Cancelled | ErrorCode::Internal => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    pub fn into_staging(self) -> StagingError {
        let subject = self.subject.unwrap_or_default();
        match self.code {
            ErrorCode::Refused => StagingError::Refused {
                path: subject,
                reason: self.detail,
            },
            ErrorCode::NotFound => StagingError::NotFound { path: subject },
            ErrorCode::BadUri => StagingError::BadUri {
                uri: subject,
                reason: self.detail,
            },
            ErrorCode::Output => StagingError::Output {
                message: self.detail,
            },
            ErrorCode::Cancelled => StagingError::Cancelled,
            ErrorCode::BadRequest | ErrorCode::Unauthorized | ErrorCode::Internal => {
                StagingError::Sidecar {
                    message: self.detail,
                }
            }
        }
    }
}

impl From<&StagingError> for WireError {
    fn from(e: &StagingError) -> Self {
        let (code, subject, detail) = match e {
            StagingError::Refused { path, reason } => {
                (ErrorCode::Refused, Some(path.clone()), reason.clone())
            }
            StagingError::NotFound { path } => {
                (ErrorCode::NotFound, Some(path.clone()), e.to_string())
            }
            StagingError::BadUri { uri, reason } => {
                (ErrorCode::BadUri, Some(uri.clone()), reason.clone())
            }
            StagingError::Output { message } => (ErrorCode::Output, None, message.clone()),
            StagingError::Cancelled => (ErrorCode::Cancelled, None, e.to_string()),
            _ => (ErrorCode::Internal, None, e.to_string()),
        };
        WireError {
            code,
            subject,
            detail,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathQuery {
    pub path: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TailQuery {
    pub path: String,
    pub lines: usize,
}

/// `GET /v1/read_at`: exactly one of `offset` and `back` (bytes before the end).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadAtQuery {
    pub path: String,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub back: Option<u64>,
    pub max: u64,
}

/// The headers a `read_at` answer carries beside its raw bytes (no base64 on a log page).
pub const CHUNK_START_HEADER: &str = "x-chunk-start";
pub const FILE_SIZE_HEADER: &str = "x-file-size";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UploadRequest {
    pub path: String,
    pub dest: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UploadStarted {
    pub id: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum UploadState {
    Running,
    Succeeded { bytes: u64 },
    Failed { error: WireError },
    Cancelled,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UploadStatus {
    pub done: u64,
    pub total: u64,
    #[serde(flatten)]
    pub state: UploadState,
}
