//! Where the process's log lines go and in which shape, decided once before anything logs: text
//! on stderr, coloured only on a terminal (a pod's log or `serve 2>log` gets no ANSI codes), or
//! JSON lines (`FLYTE_SLURM_LOG_FORMAT=json`) for Loki or Elasticsearch, one object a line with
//! the event's fields (`cluster`, `job_id`, `key`, ...) at the top level. No field ever holds a
//! token: credentials are `Secret`s, whose `Debug` and `Display` are redacted.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The shape of the log lines (`FLYTE_SLURM_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// `FLYTE_SLURM_LOG_FORMAT` as set (unset or empty: text).
    pub fn parse(value: Option<&str>) -> Result<LogFormat, String> {
        match value.map(str::trim).unwrap_or("") {
            "" | "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "FLYTE_SLURM_LOG_FORMAT={other:?}: use `text` (the default) or `json`"
            )),
        }
    }
}

/// Colour only for a person at a terminal, and never with `NO_COLOR` set (no-color.org).
fn ansi() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the subscriber: `RUST_LOG` filters (default `info`), lines go to stderr.
pub fn init() -> Result<LogFormat, String> {
    let format = LogFormat::parse(std::env::var("FLYTE_SLURM_LOG_FORMAT").ok().as_deref())?;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(ansi()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
    Ok(format)
}

#[cfg(test)]
mod tests {
    use super::LogFormat;

    #[test]
    fn the_format_is_text_json_or_a_clear_refusal() {
        assert_eq!(LogFormat::parse(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some(" ")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("json")), Ok(LogFormat::Json));
        let e = LogFormat::parse(Some("JSON-lines")).unwrap_err();
        assert!(
            e.contains("FLYTE_SLURM_LOG_FORMAT") && e.contains("json"),
            "{e}"
        );
    }
}
