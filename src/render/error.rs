//! Why a task cannot be rendered. Every message names the offending field or option and says how
//! to fix it; the service returns it as `INVALID_ARGUMENT` from CreateTask.

use std::fmt;

use super::options::versions::{Feature, Part};
use crate::slurmrestd::ApiVersion;

/// Where an sbatch option came from (lowest precedence first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A `#SBATCH` directive of the script task's script, with its 1-based line number.
    Script { line: usize },
    /// A first-class field of the plugin config (`sbatch.<field>`), e.g. `mem`.
    FirstClass(&'static str),
    /// An entry of `sbatch_options`.
    SbatchOptions,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Script { line } => write!(f, "script line {line} (#SBATCH)"),
            Origin::FirstClass(field) => write!(f, "Slurm config field `sbatch.{field}`"),
            Origin::SbatchOptions => write!(f, "`sbatch_options`"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    #[error(
        "no working directory for job files: set FLYTE_SLURM_WORKING_DIR on the connector (an absolute \
         path on the cluster's shared filesystem) or `working_dir` in the task's Slurm config"
    )]
    NoWorkingDir,

    #[error("Slurm config `{field}`: {problem}")]
    InvalidConfig { field: String, problem: String },

    #[error("unknown key `{key}` in the task's Slurm config; known keys: {known}")]
    UnknownKey { key: String, known: String },

    #[error("{origin}: `{option}` is not an sbatch option{hint}")]
    UnknownOption {
        origin: Origin,
        option: String,
        hint: String,
    },

    #[error(
        "{origin}: sbatch option `--{option}` cannot be expressed in a slurmrestd job description \
         ({reason}); remove it. Supported options: {supported}"
    )]
    UnsupportedOption {
        origin: Origin,
        option: String,
        reason: String,
        supported: String,
    },

    /// The option (or one value of it) needs a part of the job description that the version the
    /// job is rendered for lacks.
    #[error("{}", not_in_version(.origin, .option, .value.as_deref(), .feature, *.version))]
    NotInApiVersion {
        origin: Origin,
        option: String,
        /// Set when only this value of the option needs the part.
        value: Option<String>,
        feature: Feature,
        version: ApiVersion,
    },

    #[error(
        "{origin}: sbatch option `--{option}` is reserved: the connector sets the job's name, output, \
         error and working directory itself, and never uses --wrap, --uid or --gid; remove it"
    )]
    ReservedOption { origin: Origin, option: String },

    #[error("{origin}: invalid value `{value}` for `--{option}`: {expected}")]
    InvalidValue {
        origin: Origin,
        option: String,
        value: String,
        expected: String,
    },

    #[error("conflicting options: {problem}")]
    Conflict { problem: String },

    #[error("script line {line}: {problem}")]
    Directive { line: usize, problem: String },

    #[error("environment variable `{name}`: {problem}")]
    Env { name: String, problem: String },

    #[error(
        "input `{name}` has type {type_name}, which a script task cannot receive: only str, int, \
         float, bool, File and Dir inputs become FLYTE_INPUT_* variables"
    )]
    UnsupportedInput { name: String, type_name: String },

    #[error("output `{name}`: {problem}")]
    Output { name: String, problem: String },

    #[error("{0}")]
    Script(String),

    #[error("container: {0}")]
    Container(String),
}

fn not_in_version(
    origin: &Origin,
    option: &str,
    value: Option<&str>,
    feature: &Feature,
    version: ApiVersion,
) -> String {
    let value = value.map(|v| format!(" `{v}`")).unwrap_or_default();
    let part = match feature.part {
        Part::Field => "field",
        Part::Value => "value",
    };
    let have = if feature.versions.len() == 1 {
        "has"
    } else {
        "have"
    };
    format!(
        "{origin}: `--{option}`{value} needs a job description {part} that {version} lacks (`{}`); \
         {} {have} it. Remove it, or pin api_version to one of those if the cluster serves it",
        feature.name, feature.versions
    )
}

impl RenderError {
    pub(crate) fn config(field: impl Into<String>, problem: impl Into<String>) -> Self {
        RenderError::InvalidConfig {
            field: field.into(),
            problem: problem.into(),
        }
    }
}
