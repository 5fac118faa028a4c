//! What a site decides for every task, which the deployment's configuration reads and rendering
//! applies.

/// The container runtime of `slurm` tasks with an image (`container.runtime`, and the site's
/// default for clustered tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    #[default]
    Pyxis,
    Apptainer,
}

/// The deployment's settings for clustered tasks (`FLYTE_SLURM_CLUSTERED_*`, read by config's
/// clustered.rs): a ClusteredTaskSpec says nothing about Slurm, so the container runtime, its
/// mounts and the placement come from the site (render's clustered.rs applies them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusteredSite {
    /// Whether `clustered-task` is served (and advertised in ListConnectors).
    pub enabled: bool,
    /// `pyxis` or `apptainer`, as `container.runtime` of a `slurm` task.
    pub runtime: String,
    /// Bind mounts into the container (`container.mounts`).
    pub mounts: Vec<String>,
    /// Partition for clustered jobs (None: the cluster's default partition rules).
    pub partition: Option<String>,
    /// sbatch `--switches=count[@max-time]`: all nodes under at most `count` leaf switches,
    /// waiting at most `max-time` for such a placement.
    pub switches: Option<String>,
    /// `--exclusive` (whole nodes; default on: ranks of a training job should not share nodes).
    pub exclusive: bool,
    /// `--time` for clustered jobs (None: the partition's default).
    pub time_limit: Option<String>,
}

impl Default for ClusteredSite {
    fn default() -> Self {
        ClusteredSite {
            enabled: false,
            runtime: "pyxis".into(),
            mounts: Vec::new(),
            partition: None,
            switches: None,
            exclusive: true,
            time_limit: None,
        }
    }
}

/// What the site does with an interruptible task (`interruptible=True` in flyte-sdk or flytekit;
/// `FLYTE_SLURM_INTERRUPTIBLE_*`, read by config's interruptible.rs): where it runs and how it is
/// warned before Slurm preempts it. Rendering applies it (render/interruptible.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptibleSite {
    /// The preemptible partition for interruptible tasks that name none themselves.
    pub partition: Option<String>,
    /// The QOS for interruptible tasks that name none themselves (a scavenger QOS).
    pub qos: Option<String>,
    /// The warning before the job is killed: `(signal, seconds)`, as sbatch's `--signal=SIG@SECS`
    /// (the scope, batch shell or steps, follows the task type). `None`: no warning.
    pub warning: Option<(String, u16)>,
}

impl Default for InterruptibleSite {
    fn default() -> Self {
        InterruptibleSite {
            partition: None,
            qos: None,
            warning: Some(("USR1".into(), 60)),
        }
    }
}
