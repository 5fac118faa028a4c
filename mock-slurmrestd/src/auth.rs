//! Token checks as slurmrestd (`rest_auth/jwt`) + slurmctld (`auth/jwt`) do them together:
//! slurmrestd only checks that a token is present (401 otherwise); slurmctld verifies HS256, `exp`
//! and the user name, and a failure there is a 511 / 1007 on the REST side.

use axum::http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub enum AuthOutcome {
    /// The request acts as this user.
    Ok { user: String },
    /// No token header at all: slurmrestd answers 401 text/plain.
    Missing,
    /// Token present but refused by slurmctld (expired, bad signature, no exp, wrong user).
    /// The reason is for logs only; the client sees the generic 1007.
    Rejected(&'static str),
}

#[derive(Deserialize)]
struct Claims {
    sun: Option<String>,
    // `username` is what some older tooling writes; slurmctld accepts `sun` only since 20.11,
    // keep this to explain the rejection.
    #[allow(dead_code)]
    username: Option<String>,
}

/// The token a request carries: `X-SLURM-USER-TOKEN`, else `Authorization: Bearer`.
fn token(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("x-slurm-user-token") {
        return v.to_str().ok();
    }
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let rest = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))?;
    Some(rest.trim())
}

/// Only whether slurmrestd itself sees a token (it answers 401 before anything else).
pub fn has_token(headers: &HeaderMap) -> bool {
    token(headers).is_some()
}

/// Verify the token like slurmctld: HS256 over the raw key bytes, `exp` required and in the
/// future (no leeway), `sun` required; `X-SLURM-USER-NAME` must equal `sun` unless `sun` is the
/// SlurmUser or root (who may act for anyone).
pub fn authenticate(headers: &HeaderMap, key: &[u8], slurm_user: &str) -> AuthOutcome {
    let Some(tok) = token(headers) else {
        return AuthOutcome::Missing;
    };
    let Ok(dkey) = DecodingKey::from_secret(key) else {
        return AuthOutcome::Rejected("no jwt key configured");
    };
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 0;
    validation.validate_exp = true;
    validation.required_spec_claims = ["exp".to_string()].into_iter().collect();
    validation.validate_aud = false;
    let claims = match decode::<Claims>(tok, &dkey, &validation) {
        Ok(data) => data.claims,
        Err(e) => {
            use jsonwebtoken::errors::ErrorKind;
            return AuthOutcome::Rejected(match e.kind() {
                ErrorKind::ExpiredSignature => "token expired",
                ErrorKind::InvalidSignature => "bad signature",
                ErrorKind::MissingRequiredClaim(_) => "token without exp",
                _ => "jwt_decode failure",
            });
        }
    };
    let Some(sun) = claims.sun else {
        return AuthOutcome::Rejected("token without sun");
    };
    let header_user = headers
        .get("x-slurm-user-name")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty());
    match header_user {
        None => AuthOutcome::Ok { user: sun },
        Some(u) if u == sun => AuthOutcome::Ok { user: sun },
        Some(u) if sun == slurm_user || sun == "root" => AuthOutcome::Ok {
            user: u.to_string(),
        },
        Some(_) => {
            AuthOutcome::Rejected("attempt to authenticate as alternate user from non-SlurmUser")
        }
    }
}
