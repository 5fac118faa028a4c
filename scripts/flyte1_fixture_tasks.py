"""Flyte 1 tasks of flytekitplugins-slurm 1.16.31, as a user writes them: the source of the
fixtures scripts/make-flyte1-fixtures.py makes (tests/fixtures/flyte1/)."""

from flytekit import task
from flytekitplugins.slurm import SlurmFunctionConfig, SlurmScriptConfig, SlurmTask

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
