//! Where a job's files are on the cluster's shared filesystem: `<working_dir>/<job>.out` and
//! `.err` (its logs), `.exit` (the exit-status marker the rendered script leaves, written to
//! `.exit.tmp` and renamed) and `.outputs/` (the declared outputs the connector uploads). The one
//! place this layout is spelt out: the renderer writes it into the job, the service reads the
//! marker and outputs from it and retention removes it.

/// The files of job `job` in `working_dir` (cluster paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFiles {
    dir: String,
    job: String,
}

impl JobFiles {
    /// `working_dir` with or without a trailing `/`.
    pub fn new(working_dir: &str, job: &str) -> JobFiles {
        JobFiles {
            dir: working_dir.trim_end_matches('/').to_string(),
            job: job.to_string(),
        }
    }

    fn file(&self, suffix: &str) -> String {
        format!("{}/{}{suffix}", self.dir, self.job)
    }

    pub fn stdout(&self) -> String {
        self.file(".out")
    }

    pub fn stderr(&self) -> String {
        self.file(".err")
    }

    /// The exit-status marker.
    pub fn marker(&self) -> String {
        self.file(".exit")
    }

    /// Where the script writes the marker before renaming it to [`JobFiles::marker`].
    pub fn marker_tmp(&self) -> String {
        self.file(".exit.tmp")
    }

    /// The folder of the outputs the connector uploads after the job.
    pub fn outputs_dir(&self) -> String {
        self.file(".outputs")
    }

    /// Where the job writes output `name` for the connector to upload.
    pub fn output(&self, name: &str) -> String {
        format!("{}/{name}", self.outputs_dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let f = JobFiles::new("/w/", "flyte-a-1");
        assert_eq!(f.stdout(), "/w/flyte-a-1.out");
        assert_eq!(f.stderr(), "/w/flyte-a-1.err");
        assert_eq!(f.marker(), "/w/flyte-a-1.exit");
        assert_eq!(f.marker_tmp(), "/w/flyte-a-1.exit.tmp");
        assert_eq!(f.outputs_dir(), "/w/flyte-a-1.outputs");
        assert_eq!(f.output("stats"), "/w/flyte-a-1.outputs/stats");
        assert_eq!(JobFiles::new("/w", "j"), JobFiles::new("/w/", "j"));
    }
}
