"""Flyte 1 tasks of flytekitplugins-slurm 1.16.31, as a user writes them: the source of the
fixtures scripts/make-flyte1-fixtures.py makes (tests/fixtures/flyte1/)."""

from flytekit import task
from flytekit.extras.tasks.shell import OutputLocation
from flytekit.types.directory import FlyteDirectory
from flytekit.types.file import FlyteFile
from flytekitplugins.slurm import SlurmConfig, SlurmFunctionConfig, SlurmScriptConfig, SlurmShellTask, SlurmTask

# Ignored by the connector (it reaches Slurm through slurmrestd), kept as users write it.
SSH = {"host": "login.hpc.example.org", "username": "alice"}


@task(
    task_config=SlurmFunctionConfig(
        ssh_config=SSH,
        sbatch_config={"partition": "debug", "time": "00:10:00", "job-name": "mean"},
        script="#!/bin/bash\nset -e\nsource /opt/flyte-venv/bin/activate\n{task.fn}\n",
    )
)
def mean(values: list[float], label: str) -> float:
    return sum(values) / len(values)


@task(task_config=SlurmFunctionConfig(ssh_config=SSH, sbatch_config={}))
def plain(n: int) -> int:
    return n + 1


# With plain's interface, for the real tier (tests/real_flyte1.rs runs them with plain's request):
# a task that raises, and one that runs until it is cancelled. No fixture is made of them.
@task(task_config=SlurmFunctionConfig(ssh_config=SSH, sbatch_config={}))
def boom(n: int) -> int:
    if n >= 0:  # flytekit refuses a function without a return statement
        raise ValueError(f"boom {n}")
    return n


@task(task_config=SlurmFunctionConfig(ssh_config=SSH, sbatch_config={}))
def sleepy(n: int) -> int:
    import time

    time.sleep(600)
    return n


script_task = SlurmTask(
    name="run_script",
    task_config=SlurmScriptConfig(
        ssh_config=SSH,
        batch_script_path="/home/alice/jobs/train.sh",
        batch_script_args=["--epochs", "3", "--tag", "run one"],
        sbatch_config={"partition": "debug", "time": "00:05:00", "output": "/home/alice/jobs/out.txt"},
    ),
)


# A script written inline, its inputs and outputs placed by the plugin's `{inputs.x}` /
# `{outputs.y}` (Python format syntax: a shell's braces doubled). flytekit cannot register it as
# it stands (scripts/make-flyte1-fixtures.py says how its fixture is made).
shell_task = SlurmShellTask(
    name="shell_report",
    task_config=SlurmConfig(ssh_config=SSH, sbatch_config={"partition": "debug", "time": "00:05:00"}),
    script="""#!/bin/bash
#SBATCH --time=2
set -euo pipefail
echo greeting {inputs.greeting}, {inputs.n} shards, home "${{HOME:-none}}"
printf '%s x%s\\n' {inputs.greeting} {inputs.n} > {outputs.report}
mkdir -p {outputs.shards}
for i in $(seq 1 {inputs.n}); do echo "shard $i" > {outputs.shards}/part-$i.txt; done
""",
    inputs={"greeting": str, "n": int},
    output_locs=[
        OutputLocation(var="report", var_type=FlyteFile, location="/home/alice/results/{inputs.greeting}.txt"),
        OutputLocation(var="shards", var_type=FlyteDirectory, location="/home/alice/results/shards-{inputs.n}"),
    ],
)
