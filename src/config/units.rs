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
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        "must be a number of bytes, optionally with a unit (500MB, 2GB, 512MiB)".to_string()
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown unit `{other}`; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ));
        }
    };
    let v = n * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err("out of range".into());
    }
    Ok(v as u64)
}
