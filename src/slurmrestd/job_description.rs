//! Our own job description: what rendering produces and `submit` sends. Independent of the
//! generated v0.0.42 types; the conversion lives at one seam (see `v0042`).

/// A batch job as the connector wants it submitted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobDescription {
    pub name: String,
    pub script: String,
    pub current_working_directory: String,
    /// `NAME=value` entries; slurmrestd requires at least one.
    pub environment: Vec<(String, String)>,
    pub standard_output: Option<String>,
    pub standard_error: Option<String>,
    pub partition: Option<String>,
    pub comment: Option<String>,
    /// Minutes.
    pub time_limit: Option<u32>,
    pub cpus_per_task: Option<u32>,
}
