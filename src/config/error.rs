//! Configuration errors: each names the variable or file key and says how to fix it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{var}={value:?}: {problem}")]
    Invalid {
        var: String,
        value: String,
        problem: String,
    },

    #[error("{var}: {problem}")]
    Missing { var: String, problem: String },

    #[error("config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },

    #[error("config file {path}: cluster `{cluster}`: {problem}")]
    Cluster {
        path: PathBuf,
        cluster: String,
        problem: String,
    },
}

impl ConfigError {
    pub(crate) fn invalid(var: &str, value: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            var: var.into(),
            value: value.into(),
            problem: problem.into(),
        }
    }
}
