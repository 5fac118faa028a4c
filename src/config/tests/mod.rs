//! The configuration's tests, by where a setting comes from: `environment` (FLYTE_SLURM_*),
//! `file` (the TOML file, its per-cluster tables and env overrides), `docs` (the documented
//! defaults are the real ones).

use std::collections::HashMap;

use super::*;

mod docs;
mod environment;
mod file;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

fn load(pairs: &[(&str, &str)]) -> Result<DeploymentConfig, ConfigError> {
    DeploymentConfig::load_with(&env(pairs), None)
}
