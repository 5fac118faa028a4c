//! Shell words. Every value that reaches the shell is quoted with the `shlex` crate (POSIX
//! single-quoting, tested against bash/dash/zsh by its authors); the batch script (`script.rs`)
//! and the exit-status marker's lines (`marker.rs`) both quote through here.

use super::error::RenderError;

/// Quotes one shell word. Refuses NUL, which no shell word can hold.
pub fn quote(word: &str) -> Result<String, RenderError> {
    shlex::try_quote(word).map(|c| c.into_owned()).map_err(|_| {
        RenderError::Script(format!("`{}` contains a NUL byte", word.escape_default()))
    })
}

/// Words quoted and joined by spaces: one command line.
pub(super) fn join(words: &[String]) -> Result<String, RenderError> {
    Ok(words
        .iter()
        .map(|w| quote(w))
        .collect::<Result<Vec<_>, _>>()?
        .join(" "))
}
