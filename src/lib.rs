//! slurm-connector: runs Flyte 2 tasks on Slurm through slurmrestd.
