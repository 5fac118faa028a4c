//! The slurmrestd transport (being built).
pub mod job_description;
pub use job_description::JobDescription;
