"""The dev-cluster example as a Flyte 2 task, for flyteplugins-slurm users.

The task is the published plugin's `SlurmScriptTask`, unchanged: no host, user or SSH key in it —
slurm-connector takes the cluster's address and credentials from its own deployment
(FLYTE_SLURM_RESTD_URL, FLYTE_SLURM_JWT_KEY_FILE, ...). Route the task type `slurm_script` to
slurm-connector in the Flyte backend (deploy/flyte/values-flyte2-binary.yaml).

Run it with the Flyte 2 SDK against a backend whose connector points at the dev cluster:
    pip install flyte flyteplugins-slurm
    python preprocess_task.py
"""

from pathlib import Path

import flyte
from flyte.io import Dir, File
from flyteplugins.slurm import Slurm, SlurmScriptTask

SCRIPT = (Path(__file__).parent / "preprocess.sbatch").read_text()

preprocess = SlurmScriptTask(
    name="preprocess",
    script=SCRIPT,
    # Scheduling only. The dev cluster has one partition, `debug`.
    plugin_config=Slurm(partition="debug"),
    inputs={"dataset": str, "n_shards": int},
    # Written by the script to $FLYTE_OUTPUT_SHARDS / $FLYTE_OUTPUT_STATS; uploaded by the
    # connector (output_upload="connector", the default) from the shared filesystem.
    outputs={"shards": Dir, "stats": File},
)

if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(preprocess, dataset="imagenet-mini", n_shards=4)
    print(run.url)
