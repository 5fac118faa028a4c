"""A ZenML step as a connector task: the task config (`custom`) and the CreateTaskRequest.

Pure mapping, no I/O: every setting's effect is visible in the request (tests/test_task.py).

Two task types, both the connector's own:
- `slurm_script` for a step without a container (`python` set): a batch script that changes to
  the code's folder and runs ZenML's entrypoint with that interpreter. Its result is the job's
  Slurm state.
- `slurm` for a step in an image: the connector runs the command in the image through Pyxis or
  Apptainer (its image mapping, `--container-env`, GPUs and cancel included). The connector
  decides a `slurm` task's success from an `outputs.pb` at the output prefix (Flyte's entrypoint
  writes one); ZenML's does not, so the command leaves an empty one once the entrypoint exited 0
  (an empty protobuf message is a valid, empty `Outputs`). A non-zero exit fails the job, and the
  task with it.
"""

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from zenml.config.resource_settings import ByteUnit, ResourceSettings

from zenml_slurm_connector.flavors import SlurmConnectorSettings

SCRIPT_TASK = "slurm_script"
CONTAINER_TASK = "slurm"
# The environment of a step's job, read in the job (entrypoints.py, orchestrator.py).
ENV_CODE_DIR = "ZENML_SLURM_CODE_DIR"
ENV_RUN_ID = "ZENML_SLURM_CONNECTOR_RUN_ID"
# The connector's first-class `sbatch` fields this package sets (the rest go to sbatch_options).
_FIRST_CLASS = (
    "partition",
    "account",
    "qos",
    "time_limit",
    "reservation",
    "constraint",
    "gres",
    "cpus_per_task",
    "mem",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_NAME_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class TaskConfigError(ValueError):
    """A setting the connector cannot take; the message names it and the fix."""


@dataclass
class StepTask:
    """What one step's job needs.

    Attributes:
        name: the task's name (the job's name on the cluster derives from it).
        run_name: unique per run: the connector's execution name.
        step_name: the step's invocation id.
        command: ZenML's entrypoint command (`python -m zenml.entrypoints.entrypoint ...`).
        environment: the step's environment (ZenML's store and run variables, the user's).
        settings: the merged settings (the component's config with the step's settings).
        resources: the step's `ResourceSettings`.
        image: the image ZenML built for the step, if any.
        output_prefix: where the connector keeps the task's files (`file://` on shared storage
            for a containerized step).
        depends_on: job ids that must end COMPLETED first (`afterok`).
        project: the connector-side project.
        code_dir_default: the client's source root, when `code_dir` is not set.
    """

    name: str
    run_name: str
    step_name: str
    command: List[str]
    environment: Dict[str, str]
    settings: SlurmConnectorSettings
    resources: Optional[ResourceSettings] = None
    image: Optional[str] = None
    output_prefix: str = ""
    depends_on: Sequence[int] = field(default_factory=list)
    project: str = "zenml"
    code_dir_default: Optional[str] = None


def resources_to_sbatch(
    resources: Optional[ResourceSettings],
) -> Dict[str, str]:
    """ZenML's `ResourceSettings` as sbatch fields.

    CPUs are rounded up (sbatch takes whole CPUs), memory goes in MiB rounded up (`--mem=NNNM`:
    sbatch's M is MiB, and a fractional or sub-GB value stays valid), GPUs as `gres=gpu:N`.

    Args:
        resources: the step's resource settings.

    Returns:
        The `sbatch` fields, by the connector's first-class names.
    """
    out: Dict[str, str] = {}
    if resources is None:
        return out
    if resources.cpu_count:
        out["cpus_per_task"] = str(math.ceil(resources.cpu_count))
    memory = resources.get_memory(ByteUnit.MIB)
    if memory:
        out["mem"] = f"{math.ceil(memory)}M"
    if resources.gpu_count:
        out["gres"] = f"gpu:{resources.gpu_count}"
    return out


def _sbatch(task: StepTask) -> Dict[str, str]:
    fields = resources_to_sbatch(task.resources)
    for name in _FIRST_CLASS:
        value = getattr(task.settings, name)
        if value is not None and value != "":
            fields[name] = str(value)
    return fields


def _sbatch_options(task: StepTask) -> Dict[str, Any]:
    options: Dict[str, Any] = dict(task.settings.sbatch_options)
    if task.depends_on:
        # Upstream-first submission guarantees every id exists; a failed upstream then kills
        # this job at once (state CANCELLED, reason DependencyNeverSatisfied) instead of
        # leaving it pending for ever.
        options["dependency"] = "afterok:" + ":".join(str(j) for j in task.depends_on)
        options["kill-on-invalid-dep"] = "yes"
        # A coalesced job array cannot carry per-element dependencies.
        options["no-coalesce"] = True
    return options


def _check_env(env: Dict[str, str]) -> None:
    for k in env:
        if not _ENV_NAME.match(k):
            raise TaskConfigError(
                f"environment variable `{k}`: not a valid name (letters, digits, `_`, not "
                "starting with a digit); rename it in `environment`"
            )


def _interpreter_command(command: List[str], python: str) -> List[str]:
    """The entrypoint with the configured interpreter in place of ZenML's `python`."""
    if command and command[0] in ("python", "python3"):
        return [python, *command[1:]]
    return list(command)


def job_script(task: StepTask) -> str:
    """The batch script of a step without a container.

    Args:
        task: the step.

    Returns:
        The script (every value reaching the shell quoted).

    Raises:
        TaskConfigError: no interpreter or code folder.
    """
    s = task.settings
    if not s.python:
        raise TaskConfigError(
            "python: a step without a container needs the interpreter of a Python "
            "environment on the cluster (with ZenML and zenml-slurm-connector); set `python`, "
            "or `image` to run the step in a container"
        )
    code_dir = s.code_dir or task.code_dir_default
    if not code_dir:
        raise TaskConfigError(
            "code_dir: where the pipeline's code is on the cluster; set `code_dir`"
        )
    command = _interpreter_command(task.command, s.python)
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# ZenML step {task.step_name} of run {task.run_name}",
        "set -euo pipefail",
        f"cd {q(code_dir)}",
        f"export {ENV_CODE_DIR}={q(code_dir)}",
        f'export PYTHONPATH={q(code_dir)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        f"exec {shlex.join(command)}",
        "",
    ]
    return "\n".join(lines)


def custom_config(task: StepTask) -> Tuple[str, Dict[str, Any]]:
    """The task type and its `custom` (the connector's task config).

    Args:
        task: the step.

    Returns:
        (task type, custom).

    Raises:
        TaskConfigError: a setting that cannot work, named.
    """
    s = task.settings
    custom: Dict[str, Any] = {
        "sbatch": _sbatch(task),
        "sbatch_options": _sbatch_options(task),
        "env": dict(s.environment),
        "modules": list(s.modules),
    }
    _check_env(custom["env"])
    if s.cluster:
        custom["connection"] = {"cluster": s.cluster}
    if s.python:
        custom["script"] = job_script(task)
        custom["outputs"] = {}
        custom["output_upload"] = "connector"
        return SCRIPT_TASK, custom
    image = s.image or task.image
    if not image:
        raise TaskConfigError(
            "image: the step has no image (ZenML built none for it); set `image`, or `python` "
            "to run the step in a Python environment on the cluster"
        )
    prefix = task.output_prefix
    if not prefix.startswith("file://"):
        raise TaskConfigError(
            "shared_dir: a step in a container leaves its result marker on the cluster's shared "
            "storage; set `shared_dir` to a folder there that the connector reads"
        )
    marker_dir = prefix[len("file://") :]
    mounts = list(s.container_mounts)
    if marker_dir not in mounts and not any(
        marker_dir.startswith(m.rstrip("/") + "/") for m in mounts
    ):
        mounts.append(marker_dir)
    container: Dict[str, Any] = {
        "runtime": s.runtime,
        "image": image,
        "args": list(s.container_args),
        "mounts": mounts,
    }
    if s.code_dir:
        container["workdir"] = s.code_dir
    custom["container"] = container
    return CONTAINER_TASK, custom


def container_command(task: StepTask) -> List[str]:
    """The containerized step's command: ZenML's entrypoint, then the result marker.

    Args:
        task: the step.

    Returns:
        The command (argv; no word of it is re-split by a shell).
    """
    marker = task.output_prefix[len("file://") :].rstrip("/") + "/outputs.pb"
    return ["sh", "-c", '"$@" && : > "$0"', marker, *task.command]


def job_name(pipeline: str, step: str) -> str:
    """A task name Slurm shows as the job's name: the pipeline and the step.

    Args:
        pipeline: the pipeline's name.
        step: the step's invocation id.

    Returns:
        A name of safe characters.
    """
    return _JOB_NAME_SAFE.sub("-", f"zenml.{pipeline}.{step}")[:120]


def create_task_request(task: StepTask) -> Any:
    """The CreateTaskRequest for a step (flyteidl2 types, imported here: the job never needs
    them).

    Args:
        task: the step.

    Returns:
        A `flyteidl2.connector.connector_pb2.CreateTaskRequest`.
    """
    from flyteidl2.connector import connector_pb2
    from flyteidl2.core import identifier_pb2, tasks_pb2
    from google.protobuf import struct_pb2

    task_type, custom = custom_config(task)
    _check_env(task.environment)
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(custom)))
    template = tasks_pb2.TaskTemplate(
        id=identifier_pb2.Identifier(
            resource_type=identifier_pb2.TASK,
            project=task.project,
            domain="zenml",
            name=task.name,
            version="zenml",
        ),
        type=task_type,
        custom=struct,
    )
    if task_type == CONTAINER_TASK:
        image = task.settings.image or task.image or ""
        template.container.CopyFrom(tasks_pb2.Container(image=image, args=container_command(task)))
    execution = identifier_pb2.TaskExecutionIdentifier(
        task_id=template.id,
        node_execution_id=identifier_pb2.NodeExecutionIdentifier(
            node_id=_JOB_NAME_SAFE.sub("-", task.step_name)[:63] or "step",
            execution_id=identifier_pb2.WorkflowExecutionIdentifier(
                project=task.project,
                domain="zenml",
                name=task.run_name,
            ),
        ),
    )
    meta = connector_pb2.TaskExecutionMetadata(
        task_execution_id=execution,
        namespace=f"{task.project}-zenml",
        environment_variables=dict(task.environment),
    )
    return connector_pb2.CreateTaskRequest(
        template=template,
        output_prefix=task.output_prefix,
        task_execution_metadata=meta,
    )
