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

    /// A job array's stdout: one file per element (`%A` the array's id, `%a` the index, as
    /// Slurm expands them in the paths it opens).
    pub fn element_stdout(&self) -> String {
        self.file("_%A_%a.out")
    }

    pub fn element_stderr(&self) -> String {
        self.file("_%A_%a.err")
    }

    /// A job array's exit-status markers, one per element: `%a` is the index, which the
    /// script's shell fills in from `SLURM_ARRAY_TASK_ID` (see `render::marker`).
    pub fn element_marker(&self) -> String {
        self.file("_%a.exit")
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

/// `path` of one element of array `array_id`: `%A` and `%a` filled in as Slurm does (a path
/// without them is the same for every element).
pub fn element_path(path: &str, array_id: u32, index: u32) -> String {
    path.replace("%A", &array_id.to_string())
        .replace("%a", &index.to_string())
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
        // An array's, per element (recorded: Slurm opens `<stem>_2205_3.err` for element 3
        // of array 2205, `tests/fixtures/slurmrestd/24.11_v0.0.42_arrays-job-get-14.json`).
        assert_eq!(f.element_stderr(), "/w/flyte-a-1_%A_%a.err");
        assert_eq!(
            element_path(&f.element_stderr(), 2205, 3),
            "/w/flyte-a-1_2205_3.err"
        );
        assert_eq!(
            element_path(&f.element_marker(), 2205, 3),
            "/w/flyte-a-1_3.exit"
        );
    }
}
