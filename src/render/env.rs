//! The job's environment. A REST job gets exactly the environment we send (no submitting shell),
//! so it starts from a usable base (`RenderConfig::base_env`: PATH at least). Then, lowest
//! precedence first: the template container's env; the execution identity; the backend's
//! `TaskExecutionMetadata.environment_variables` (`RUN_NAME`, `ACTION_NAME`, `_U_RUN_BASE`, ...);
//! the task's `env`; and last the connector's own `FLYTE_INPUT_*` / `FLYTE_OUTPUT_*`.
//!
//! HOME and USER are not sent: the connector does not know the submitting user's home, and a
//! wrong HOME is worse than none. The script derives them on the node from the passwd entry of
//! the user the job runs as (see `script.rs`), which is also what a login shell would do. We do
//! not ask Slurm for the login environment (`--get-user-env` is in no version's job description, and
//! would make jobs depend on users' dotfiles).
//!
//! Values travel only in the JSON `environment` array, never in the script text.

use std::collections::BTreeMap;

use super::error::RenderError;
use super::spec::{ExecutionIdentity, InputValue};

/// A shell identifier: what `export NAME=...` and `"$NAME"` can use.
pub fn is_shell_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub use crate::staging::outputs::var_suffix;

/// Python's `str(float)`, so a script sees the same text the published plugin exported
/// (`0.0003`, `1e-05`, `1e+16`, `inf`).
pub fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // Shortest round-trip digits and exponent, then Python's repr layout.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if neg { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let body = if exp >= n - 1 {
            format!("{digits}{}.0", "0".repeat((exp - (n - 1)) as usize))
        } else if exp >= 0 {
            let (a, b) = digits.split_at((exp + 1) as usize);
            format!("{a}.{b}")
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits.clone()
        };
        format!(
            "{sign}{m}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    }
}

/// Builds the environment layer by layer; later layers win.
#[derive(Debug, Default)]
pub struct EnvBuilder {
    vars: BTreeMap<String, String>,
    /// Names whose value is still the base layer's (the node's PATH, LANG): what a container
    /// keeps from its image rather than from the job (see [`EnvBuilder::task_names`]).
    base: std::collections::BTreeSet<String>,
}

impl EnvBuilder {
    /// The lowest layer: the deployment's base environment (the node's, not the task's).
    pub fn set_base(&mut self, name: &str, value: &str, layer: &str) -> Result<(), RenderError> {
        self.set(name, value, layer)?;
        self.base.insert(name.to_string());
        Ok(())
    }

    /// The names a layer above the base set: the task's and Flyte's variables, which must win
    /// inside a container over the image's own values (Pyxis `--container-env`).
    pub fn task_names(&self) -> Vec<String> {
        self.vars
            .keys()
            .filter(|k| !self.base.contains(*k))
            .cloned()
            .collect()
    }

    pub fn set(&mut self, name: &str, value: &str, layer: &str) -> Result<(), RenderError> {
        self.base.remove(name);
        if !is_shell_identifier(name) {
            return Err(RenderError::Env {
                name: name.escape_default().to_string(),
                problem: format!(
                    "from {layer}: not a valid shell identifier ([A-Za-z_][A-Za-z0-9_]*); rename it"
                ),
            });
        }
        if value.contains('\0') {
            return Err(RenderError::Env {
                name: name.to_string(),
                problem: format!(
                    "from {layer}: the value contains a NUL byte, which no environment can hold"
                ),
            });
        }
        self.vars.insert(name.to_string(), value.to_string());
        Ok(())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }

    pub fn identity(&mut self, id: &ExecutionIdentity) -> Result<(), RenderError> {
        const LAYER: &str = "the execution identity";
        self.set("FLYTE_INTERNAL_EXECUTION_PROJECT", &id.project, LAYER)?;
        self.set("FLYTE_INTERNAL_EXECUTION_DOMAIN", &id.domain, LAYER)?;
        self.set("FLYTE_INTERNAL_EXECUTION_ID", &id.run_name, LAYER)?;
        self.set("_U_ORG_NAME", &id.org, LAYER)?;
        self.set("FLYTE_ATTEMPT_NUMBER", &id.attempt.to_string(), LAYER)
    }

    /// Native tasks: what Flyte's entrypoint (`a0`) asserts non-empty or needs, derived from the
    /// execution identity. A lower layer than `TaskExecutionMetadata.environment_variables`: when
    /// the backend sends these itself, its values win.
    ///
    /// `_U_RUN_BASE` (a0's `--run-base-dir`: where the run's sub-actions and their data would go)
    /// defaults to the output prefix: it is a location the backend handed this attempt to write
    /// to, in the store the backend reads from, and unique per attempt, so nothing a0 puts under
    /// it can collide with another run. A leaf task writes nothing there at all.
    pub fn native_defaults(
        &mut self,
        id: &ExecutionIdentity,
        output_prefix: &str,
    ) -> Result<(), RenderError> {
        const LAYER: &str = "the execution identity (native task)";
        self.set("RUN_NAME", &id.run_name, LAYER)?;
        self.set("ACTION_NAME", &id.action_name, LAYER)?;
        let base = output_prefix.trim_end_matches('/');
        if !base.is_empty() {
            self.set("_U_RUN_BASE", base, LAYER)?;
        }
        Ok(())
    }

    /// `FLYTE_INPUT_<NAME>` for each input; refuses inputs a shell cannot receive.
    pub fn inputs(&mut self, inputs: &[(String, InputValue)]) -> Result<(), RenderError> {
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (name, v) in inputs {
            let var = format!("FLYTE_INPUT_{}", var_suffix(name));
            if let Some(other) = seen.insert(var.clone(), name) {
                return Err(RenderError::Env {
                    name: var,
                    problem: format!(
                        "inputs `{other}` and `{name}` map to the same variable; rename one"
                    ),
                });
            }
            let text = match v {
                InputValue::Str(s) => s.clone(),
                InputValue::Int(i) => i.to_string(),
                InputValue::Float(f) => python_float(*f),
                InputValue::Bool(b) => b.to_string(),
                InputValue::Blob { uri, .. } => uri.clone(),
                InputValue::Unsupported { type_name } => {
                    return Err(RenderError::UnsupportedInput {
                        name: name.clone(),
                        type_name: type_name.clone(),
                    });
                }
            };
            self.set(&var, &text, "inputs")?;
        }
        Ok(())
    }

    pub fn into_vec(self) -> Vec<(String, String)> {
        self.vars.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_matches_cpython_str() {
        for (f, s) in [
            (0.0003, "0.0003"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (123456789.0, "123456789.0"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (1.5e300, "1.5e+300"),
            (0.1, "0.1"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(python_float(f), s, "{f}");
        }
    }

    #[test]
    fn identifiers_and_suffixes() {
        assert!(is_shell_identifier("_U_RUN_BASE"));
        assert!(!is_shell_identifier("1A"));
        assert!(!is_shell_identifier("A-B"));
        assert!(!is_shell_identifier(""));
        assert_eq!(var_suffix("n_shards"), "N_SHARDS");
        assert_eq!(var_suffix("my-file.v2"), "MY_FILE_V2");
    }

    #[test]
    fn native_defaults_come_from_the_identity_and_yield_to_the_backend() {
        let id = ExecutionIdentity {
            org: "local".into(),
            project: "p".into(),
            domain: "d".into(),
            run_name: "r1".into(),
            action_name: "a0".into(),
            attempt: 0,
        };
        let mut e = EnvBuilder::default();
        e.identity(&id).unwrap();
        e.native_defaults(&id, "s3://b/runs/r1/a0/0/").unwrap();
        let got: BTreeMap<_, _> = e.into_vec().into_iter().collect();
        assert_eq!(got["RUN_NAME"], "r1");
        assert_eq!(got["ACTION_NAME"], "a0");
        assert_eq!(got["_U_RUN_BASE"], "s3://b/runs/r1/a0/0");
        assert_eq!(got["_U_ORG_NAME"], "local");
        assert_eq!(got["FLYTE_INTERNAL_EXECUTION_PROJECT"], "p");
        // The backend's TaskExecutionMetadata.environment_variables is a later layer: it wins.
        let mut e = EnvBuilder::default();
        e.native_defaults(&id, "s3://b/p").unwrap();
        e.set("_U_RUN_BASE", "s3://b/runs/r1", "backend").unwrap();
        let got: BTreeMap<_, _> = e.into_vec().into_iter().collect();
        assert_eq!(got["_U_RUN_BASE"], "s3://b/runs/r1");
        // No prefix: no run base rather than an empty one.
        let mut e = EnvBuilder::default();
        e.native_defaults(&id, "").unwrap();
        assert!(!e.contains("_U_RUN_BASE"));
    }

    #[test]
    fn refusals() {
        let mut e = EnvBuilder::default();
        assert!(e.set("BAD NAME", "x", "env").is_err());
        assert!(e.set("A", "x\0y", "env").is_err());
        let err = e
            .inputs(&[(
                "xs".into(),
                InputValue::Unsupported {
                    type_name: "collection".into(),
                },
            )])
            .unwrap_err();
        assert!(err.to_string().contains("`xs`"));
        let err = e
            .inputs(&[
                ("a-b".into(), InputValue::Int(1)),
                ("a_b".into(), InputValue::Int(2)),
            ])
            .unwrap_err();
        assert!(err.to_string().contains("FLYTE_INPUT_A_B"));
    }
}
