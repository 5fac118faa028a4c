//! mock-slurmrestd: a stateful slurmrestd stand-in (data_parser v0.0.40-46, each with its own
//! recorded shapes) that really runs batch jobs, with faults on demand. Embed it with [`MockServer::start`]; see the crate README for the HTTP surface.
//!
//! ```no_run
//! # async fn demo() -> Result<(), mock_slurmrestd::MockError> {
//! use mock_slurmrestd::{MockConfig, MockServer};
//! let cfg = MockConfig { jwt_key: b"a key of at least some bytes".to_vec(), ..MockConfig::default() };
//! let mock = MockServer::start(cfg, "127.0.0.1:0".parse().unwrap()).await?;
//! let token = mock.mint_token("flyte", std::time::Duration::from_secs(600));
//! println!("{} {}", mock.url(), token.len());
//! assert_eq!(mock.stats().count("submit"), 0);
//! mock.shutdown().await;
//! # Ok(()) }
//! ```

#![recursion_limit = "512"]

mod admin;
mod auth;
pub mod config;
pub mod faults;
mod job;
mod jobdesc;
mod placement;
mod records;
mod routes;
mod runner;
mod scheduler;
mod server;
pub mod stats;
mod versions;

use std::time::Duration;

pub use config::{ApiVersion, MockConfig, SlurmVersion, UnknownApiVersion};
pub use faults::{FaultConfig, Faults};
pub use server::{MockError, MockHandle, MockServer, classify};
pub use stats::StatsSnapshot;

/// An HS256 token over the raw key bytes with claims `{sun, iat, exp}` — what `scontrol token`
/// produces and what the real slurmctld accepts.
pub fn mint_token(key: &[u8], user: &str, lifetime: Duration) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims =
        serde_json::json!({"sun": user, "iat": now, "exp": now + lifetime.as_secs() as i64});
    let Ok(k) = jsonwebtoken::EncodingKey::from_secret(key) else {
        return String::new();
    };
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &k,
    )
    .unwrap_or_default()
}
