//! Durations (`5s`, `250ms`, `2m`, or plain seconds) and byte sizes (`500MB`, `2GB`, `512MiB`,
//! plain bytes) as operators write them.

use std::time::Duration;

/// Plain numbers are seconds; otherwise humantime's syntax (`5s`, `1m 30s`, `250ms`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err("must be a non-negative duration".into());
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("not a duration ({e}); write e.g. 5s, 250ms, 2m"))
}

/// Bytes, with optional decimal (KB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB) unit; `0` = 0.
/// One parser for the whole crate: the staging ceiling reads the same variable the same way.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    crate::staging::size::parse_size(text).map_err(|e| {
        format!("{e}; write a number of bytes, optionally with a unit (500MB, 2GB, 512MiB)")
    })
}
