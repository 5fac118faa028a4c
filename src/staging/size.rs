//! The upload ceiling `FLYTE_SLURM_CONNECTOR_UPLOAD_MAX_BYTES`: a plain byte count or a suffixed
//! size (`500MB`, `2GB`, `512MiB`), `0` for no ceiling, default 100 MB. A malformed value is an
//! error that fails the task reading it — never a silent fall back to the default.

use super::error::StagingError;

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
    /// From the variable's value; `None` (unset) is the default. Empty counts as malformed.
    pub fn from_var(value: Option<&str>) -> Result<Self, StagingError> {
        match value {
            None => Ok(Ceiling::default()),
            Some(v) => match parse_size(v) {
                Ok(0) => Ok(Ceiling::Unlimited),
                Ok(n) => Ok(Ceiling::Bytes(n)),
                Err(why) => Err(StagingError::Config {
                    var: UPLOAD_MAX_BYTES_VAR,
                    message: format!(
                        "{v:?} is not a size ({why}); use a byte count or 500MB, 2GB, 512MiB, or 0 for no limit"
                    ),
                }),
            },
        }
    }

    /// Read the connector's environment.
    pub fn from_env() -> Result<Self, StagingError> {
        Self::from_var(std::env::var(UPLOAD_MAX_BYTES_VAR).ok().as_deref())
    }

    /// From the deployment config's reading of the variable; `Malformed` stays an error (its
    /// message already names the variable), so the tasks it concerns fail with it.
    pub fn from_limit(limit: &crate::config::UploadLimit) -> Result<Self, StagingError> {
        use crate::config::UploadLimit;
        match limit {
            UploadLimit::Bytes(n) => Ok(Ceiling::Bytes(*n)),
            UploadLimit::Unlimited => Ok(Ceiling::Unlimited),
            UploadLimit::Malformed(message) => Err(StagingError::Output {
                message: message.clone(),
            }),
        }
    }

    pub fn allows(&self, size: u64) -> bool {
        match self {
            Ceiling::Unlimited => true,
            Ceiling::Bytes(max) => size <= *max,
        }
    }
}

/// Parse `123`, `500MB`, `1.5GB`, `512MiB` (case-insensitive, optional space before the unit).
/// Decimal units are powers of 1000, binary ones (`KiB`...) of 1024.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].trim());
    if num.is_empty() {
        return Err("no number".into());
    }
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => return Err(format!("unknown unit {other:?}")),
    };
    if let Some((int, frac)) = num.split_once('.') {
        if mult == 1 || int.is_empty() && frac.is_empty() || frac.contains('.') {
            return Err("a fraction needs a unit, e.g. 1.5GB".into());
        }
        let int: u64 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| "number too large".to_string())?
        };
        let frac_digits = frac.len().min(12) as u32;
        let frac_val: u64 = if frac.is_empty() {
            0
        } else {
            frac[..frac_digits as usize]
                .parse()
                .map_err(|_| "bad fraction".to_string())?
        };
        let whole = int.checked_mul(mult).ok_or("number too large")?;
        let part = (frac_val as u128 * mult as u128 / 10u128.pow(frac_digits)) as u64;
        return whole
            .checked_add(part)
            .ok_or_else(|| "number too large".into());
    }
    let n: u64 = num.parse().map_err(|_| "number too large".to_string())?;
    n.checked_mul(mult).ok_or_else(|| "number too large".into())
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
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512 mib"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        for bad in [
            "",
            "MB",
            "1.5",
            "12XB",
            "1..2GB",
            "-1",
            "99999999999999999999",
            "1e6",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ceiling_from_var() {
        assert_eq!(
            Ceiling::from_var(None).unwrap(),
            Ceiling::Bytes(100_000_000)
        );
        assert_eq!(Ceiling::from_var(Some("0")).unwrap(), Ceiling::Unlimited);
        let e = Ceiling::from_var(Some("100 megs")).unwrap_err().to_string();
        assert!(
            e.contains(UPLOAD_MAX_BYTES_VAR) && e.contains("100 megs"),
            "{e}"
        );
        assert!(Ceiling::from_var(Some("")).is_err());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(512_000_000), "512 MB");
        assert_eq!(human(100_000_000), "100 MB");
        assert_eq!(human(1_500_000_000), "1.5 GB");
        assert_eq!(human(12), "12 bytes");
    }
}
