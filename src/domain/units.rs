//! sbatch's value syntaxes: durations (`--time`), sizes (`--mem`), points in time (`--begin`).
//! Each follows Slurm's own parser (`time_str2secs`, `str_to_mbytes`, `parse_time`) and refuses
//! what sbatch would refuse, so the JSON job matches what `sbatch` would have submitted.

use crate::slurmrestd::job_description::Limit;

/// A duration in sbatch's formats, in seconds; `None` for "infinite".
/// `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`; `-1`, `INFINITE`, `UNLIMITED`.
pub fn parse_duration_secs(s: &str) -> Result<Option<u64>, String> {
    const EXPECTED: &str =
        "expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED";
    if s.eq_ignore_ascii_case("-1")
        || s.eq_ignore_ascii_case("infinite")
        || s.eq_ignore_ascii_case("unlimited")
    {
        return Ok(None);
    }
    let num = |p: &str| -> Result<u64, String> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 9 {
            return Err(EXPECTED.to_string());
        }
        p.parse::<u64>().map_err(|_| EXPECTED.to_string())
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, s),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => num(m)? * 60,
        (None, [m, s]) => num(m)? * 60 + num(s)?,
        (None, [h, m, s]) => num(h)? * 3600 + num(m)? * 60 + num(s)?,
        (Some(d), [h]) => d * 86400 + num(h)? * 3600,
        (Some(d), [h, m]) => d * 86400 + num(h)? * 3600 + num(m)? * 60,
        (Some(d), [h, m, s]) => d * 86400 + num(h)? * 3600 + num(m)? * 60 + num(s)?,
        _ => return Err(EXPECTED.to_string()),
    };
    Ok(Some(secs))
}

/// `--time` / `--time-min`: minutes rounded up (Slurm's `time_str2mins`); 0 means no limit.
pub fn parse_time_limit(s: &str) -> Result<Limit, String> {
    match parse_duration_secs(s)? {
        None => Ok(Limit::Infinite),
        Some(secs) => {
            let mins = secs.div_ceil(60);
            if mins == 0 {
                // sbatch: "A time limit of zero requests that no time limit be imposed."
                Ok(Limit::Infinite)
            } else if mins >= u32::MAX as u64 - 1 {
                Err("time limit too large".to_string())
            } else {
                Ok(Limit::Finite(mins as u32))
            }
        }
    }
}

/// A size with an optional unit (K, M, G, T; optional trailing `B`; default M), in MiB, rounded up
/// from K (Slurm's `str_to_mbytes`).
pub fn parse_mbytes(s: &str) -> Result<u64, String> {
    const EXPECTED: &str =
        "expected a whole number with an optional unit K, M, G or T (e.g. 512M, 16G)";
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return Err(EXPECTED.to_string());
    }
    let n: u64 = s[..digits_end].parse().map_err(|_| EXPECTED.to_string())?;
    let unit = &s[digits_end..];
    let unit_upper = unit.to_ascii_uppercase();
    let unit_letter = unit_upper
        .strip_suffix('B')
        .filter(|u| !u.is_empty())
        .unwrap_or(&unit_upper);
    let mb = match unit_letter {
        "" | "M" => Some(n),
        "K" => Some(n.div_ceil(1024)),
        "G" => n.checked_mul(1024),
        "T" => n.checked_mul(1024 * 1024),
        _ => return Err(EXPECTED.to_string()),
    };
    // `B` alone (e.g. "100B") is not a unit Slurm accepts.
    if unit_upper == "B" {
        return Err(EXPECTED.to_string());
    }
    match mb {
        Some(v) if v < i64::MAX as u64 => Ok(v),
        _ => Err("size too large".to_string()),
    }
}

/// A point in time as sbatch's `--begin`/`--deadline` take it (`parse_time`), in unix seconds.
/// `now` is the submit time; `utc_offset` the cluster's seconds east of UTC (wall-clock forms are
/// local time on the submit host). Supported: `now[+-N[seconds|minutes|hours|days|weeks]]`,
/// `today`, `tomorrow`, `midnight`, `noon`, `elevenses`, `fika`, `teatime`, `HH:MM[:SS]`,
/// `YYYY-MM-DD[THH:MM[:SS]]`, `MM/DD[/YY]`.
pub fn parse_point_in_time(s: &str, now: i64, utc_offset: i32) -> Result<i64, String> {
    use chrono::{DateTime, NaiveDate, NaiveTime, Timelike};
    const EXPECTED: &str = "expected now+N[units], today, tomorrow, midnight, noon, HH:MM[:SS], \
                            YYYY-MM-DD[THH:MM[:SS]] or MM/DD[/YY]";
    let lower = s.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("now") {
        if rest.is_empty() {
            return Ok(now);
        }
        let (sign, rest) = match rest.as_bytes()[0] {
            b'+' => (1i64, &rest[1..]),
            b'-' => (-1i64, &rest[1..]),
            _ => return Err(EXPECTED.to_string()),
        };
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: i64 = rest[..end].parse().map_err(|_| EXPECTED.to_string())?;
        let mult = match &rest[end..] {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86400,
            "w" | "week" | "weeks" => 7 * 86400,
            _ => return Err(EXPECTED.to_string()),
        };
        return n
            .checked_mul(mult)
            .and_then(|d| d.checked_mul(sign))
            .and_then(|d| now.checked_add(d))
            .ok_or_else(|| "time too far away".to_string());
    }
    let offset = utc_offset as i64;
    let local_now = DateTime::from_timestamp(now + offset, 0)
        .ok_or("bad clock")?
        .naive_utc();
    let today = local_now.date();
    let to_unix = |d: NaiveDate, t: NaiveTime| d.and_time(t).and_utc().timestamp() - offset;
    let hm = |h: u32, m: u32| NaiveTime::from_hms_opt(h, m, 0).unwrap();
    // A time of day alone means its next occurrence.
    let next_occurrence = |t: NaiveTime| {
        if t.num_seconds_from_midnight() <= local_now.time().num_seconds_from_midnight() {
            to_unix(today.succ_opt().unwrap_or(today), t)
        } else {
            to_unix(today, t)
        }
    };
    match lower.as_str() {
        "today" => return Ok(to_unix(today, hm(0, 0))),
        "tomorrow" => return Ok(to_unix(today.succ_opt().unwrap_or(today), hm(0, 0))),
        "midnight" => return Ok(to_unix(today.succ_opt().unwrap_or(today), hm(0, 0))),
        "noon" => return Ok(next_occurrence(hm(12, 0))),
        "elevenses" => return Ok(next_occurrence(hm(11, 0))),
        "fika" => return Ok(next_occurrence(hm(15, 0))),
        "teatime" => return Ok(next_occurrence(hm(16, 0))),
        _ => {}
    }
    let parse_tod = |t: &str| -> Option<NaiveTime> {
        NaiveTime::parse_from_str(t, "%H:%M:%S")
            .or_else(|_| NaiveTime::parse_from_str(t, "%H:%M"))
            .ok()
    };
    if let Some(t) = parse_tod(s) {
        return Ok(next_occurrence(t));
    }
    if let Some((d, t)) = s.split_once('T') {
        let date = NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|_| EXPECTED.to_string())?;
        let time = parse_tod(t).ok_or_else(|| EXPECTED.to_string())?;
        return Ok(to_unix(date, time));
    }
    if let Ok(date) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(to_unix(date, hm(0, 0)));
    }
    let parts: Vec<&str> = s.split('/').collect();
    if (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        let month: u32 = parts[0].parse().map_err(|_| EXPECTED)?;
        let day: u32 = parts[1].parse().map_err(|_| EXPECTED)?;
        let year: i32 = match parts.get(2) {
            Some(y) if y.len() == 2 => 2000 + y.parse::<i32>().map_err(|_| EXPECTED)?,
            Some(y) if y.len() == 4 => y.parse().map_err(|_| EXPECTED)?,
            Some(_) => return Err(EXPECTED.to_string()),
            None => local_now.date().year_ce().1 as i32,
        };
        let date = NaiveDate::from_ymd_opt(year, month, day).ok_or_else(|| EXPECTED.to_string())?;
        return Ok(to_unix(date, hm(0, 0)));
    }
    Err(EXPECTED.to_string())
}

use chrono::Datelike;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_time_format() {
        let m = |s| parse_time_limit(s).unwrap();
        assert_eq!(m("30"), Limit::Finite(30));
        assert_eq!(m("30:01"), Limit::Finite(31));
        assert_eq!(m("4:00:00"), Limit::Finite(240));
        assert_eq!(m("1-00:00:00"), Limit::Finite(1440));
        assert_eq!(m("0-00:30"), Limit::Finite(30));
        assert_eq!(m("2-3"), Limit::Finite(2 * 1440 + 180));
        assert_eq!(m("0"), Limit::Infinite);
        assert_eq!(m("UNLIMITED"), Limit::Infinite);
        assert_eq!(m("infinite"), Limit::Infinite);
        assert_eq!(m("-1"), Limit::Infinite);
        for bad in ["", "1h", "1:2:3:4", "1-2-3", ":5", "5:", "-5", "1.5", " 5"] {
            assert!(parse_time_limit(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_mbytes("256G").unwrap(), 256 * 1024);
        assert_eq!(parse_mbytes("2g").unwrap(), 2048);
        assert_eq!(parse_mbytes("100").unwrap(), 100);
        assert_eq!(parse_mbytes("100M").unwrap(), 100);
        assert_eq!(parse_mbytes("100MB").unwrap(), 100);
        assert_eq!(parse_mbytes("1025K").unwrap(), 2);
        assert_eq!(parse_mbytes("1T").unwrap(), 1024 * 1024);
        assert_eq!(parse_mbytes("0").unwrap(), 0);
        for bad in ["", "G", "1.5G", "1GiB", "-1", "1P", "10B", "1 G"] {
            assert!(parse_mbytes(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn points_in_time() {
        // 2026-11-30T02:00:00Z
        let now = 1_796_004_000;
        assert_eq!(parse_point_in_time("now", now, 0).unwrap(), now);
        assert_eq!(
            parse_point_in_time("now+1hour", now, 0).unwrap(),
            now + 3600
        );
        assert_eq!(parse_point_in_time("now+90", now, 0).unwrap(), now + 90);
        assert_eq!(
            parse_point_in_time("2026-12-01T10:00", now, 0).unwrap(),
            1_796_119_200
        );
        assert_eq!(
            parse_point_in_time("2026-12-01T10:00", now, 3600).unwrap(),
            1_796_119_200 - 3600
        );
        assert_eq!(parse_point_in_time("03:00", now, 0).unwrap(), now + 3600);
        assert_eq!(
            parse_point_in_time("01:00", now, 0).unwrap(),
            now + 23 * 3600
        );
        assert_eq!(
            parse_point_in_time("tomorrow", now, 0).unwrap(),
            now + 22 * 3600
        );
        assert_eq!(
            parse_point_in_time("12/01/26", now, 0).unwrap(),
            now + 22 * 3600
        );
        for bad in ["soon", "now+", "now+1fortnight", "2026-13-01", "25:00"] {
            assert!(parse_point_in_time(bad, now, 0).is_err(), "{bad:?}");
        }
    }
}
