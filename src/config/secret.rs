//! A value that must never be printed: tokens, keys. `Debug` and `Display` say `<redacted>`, so a
//! config struct can derive `Debug` and still be logged safely.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::new("eyJhbGciOi.secret.value");
        assert!(!format!("{s:?}").contains("secret"));
        assert!(!format!("{s}").contains("eyJ"));
        assert_eq!(s.expose(), "eyJhbGciOi.secret.value");
    }
}
