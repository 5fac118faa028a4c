//! The upload ceiling `FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES`: a plain byte count or a suffixed
//! size (`500MB`, `2GB`, `512MiB`), `0` for no ceiling, default 100 MB. A malformed value is an
//! error that fails the task reading it — never a silent fall back to the default.

pub const UPLOAD_MAX_BYTES_VAR: &str = "FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES";

/// The largest output (file, or directory in total) the connector moves itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    Unlimited,
    Bytes(u64),
}

impl Default for Ceiling {
    fn default() -> Self {
        Ceiling::Bytes(crate::config::DEFAULT_UPLOAD_MAX_BYTES)
    }
}

impl Ceiling {
    pub fn allows(&self, size: u64) -> bool {
        match self {
            Ceiling::Unlimited => true,
            Ceiling::Bytes(max) => size <= *max,
        }
    }
}

/// `512 MB`, `1.5 GB`, `900 bytes`: decimal units, as the ceiling's message shows sizes.
pub fn human(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000_000, "TB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1_000, "kB"),
    ];
    for (m, u) in UNITS {
        if n >= m {
            let v = n as f64 / m as f64;
            return if v >= 100.0 || (v.fract() * 10.0).round() == 0.0 {
                format!("{} {u}", v.round() as u64)
            } else {
                format!("{v:.1} {u}")
            };
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(512_000_000), "512 MB");
        assert_eq!(human(100_000_000), "100 MB");
        assert_eq!(human(1_500_000_000), "1.5 GB");
        assert_eq!(human(12), "12 bytes");
    }
}
