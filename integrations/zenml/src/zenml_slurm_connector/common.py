"""What the step operator and the orchestrator share: the client, the step's task, the metadata."""

import os
import uuid
from typing import Any, Dict, List, Optional

from zenml.metadata.metadata_types import MetadataType
from zenml.utils import source_utils

from zenml_slurm_connector.client import ConnectorClient, TaskState
from zenml_slurm_connector.flavors import (
    SlurmConnectorBaseConfig,
    SlurmConnectorSettings,
)
from zenml_slurm_connector.task import StepTask

# The connector's accounting figures recorded on a step run (`custom_info.accounting`).
_ACCOUNTING_KEYS = (
    "elapsed_seconds",
    "cpus",
    "nodes",
    "gpus",
    "memory_bytes",
    "cpu_seconds_allocated",
    "cpu_seconds_used",
    "cpu_efficiency",
    "max_rss_bytes",
    "memory_efficiency",
    "node_hours",
    "gpu_hours",
    "billing_seconds",
    "energy_joules",
)
# A failure message is the connector's: Slurm's state and reason, then the stderr tail.
_MESSAGE_LIMIT = 4000


def client_of(config: SlurmConnectorBaseConfig) -> ConnectorClient:
    """A client for the component's connector.

    Args:
        config: the component's config.

    Returns:
        The client.
    """
    return ConnectorClient(config.connector_url, tls=config.tls, tls_ca_file=config.tls_ca_file)


def output_prefix(config: SlurmConnectorBaseConfig, run_id: str, step: str) -> str:
    """Where the connector keeps a step's task files: under `shared_dir` (a containerized
    step's result marker goes there), else nowhere in particular (a script step declares no
    outputs, so the connector writes nothing there).

    Args:
        config: the component's config.
        run_id: the run.
        step: the step.

    Returns:
        A `file://` prefix, or "".
    """
    if not config.shared_dir:
        return ""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in step)
    return f"file://{config.shared_dir.rstrip('/')}/zenml/{run_id}/{safe}-{uuid.uuid4().hex[:8]}"


def step_task(
    *,
    config: SlurmConnectorBaseConfig,
    settings: SlurmConnectorSettings,
    pipeline: str,
    step: str,
    run_id: str,
    command: List[str],
    environment: Dict[str, str],
    resources: Any,
    image: Optional[str],
    depends_on: Optional[List[int]] = None,
) -> StepTask:
    """The task of one step.

    Args:
        config: the component's config.
        settings: the step's merged settings.
        pipeline: the pipeline's name.
        step: the step's invocation id.
        run_id: unique per run (and per step-operator submission).
        command: ZenML's entrypoint command.
        environment: the step's environment.
        resources: the step's ResourceSettings.
        image: the image ZenML built, if any.
        depends_on: upstream job ids.

    Returns:
        The task.
    """
    from zenml_slurm_connector.task import job_name

    env = dict(environment)
    env.update(settings.environment)
    return StepTask(
        name=job_name(pipeline, step),
        run_name=run_id,
        step_name=step,
        command=list(command),
        environment=env,
        settings=settings,
        resources=resources,
        image=image,
        output_prefix=output_prefix(config, run_id, step),
        depends_on=list(depends_on or []),
        project=config.project,
        code_dir_default=source_utils.get_source_root(),
    )


def terminal_metadata(state: TaskState) -> Dict[str, MetadataType]:
    """What a step run records once its job ended: Slurm's raw terminal state (TIMEOUT,
    NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, ... tell an infrastructure kill from a step that exited
    non-zero), the connector's verdict and message, and the cluster's accounting.

    Args:
        state: GetTask's terminal answer.

    Returns:
        The metadata.
    """
    info = state.info
    md: Dict[str, MetadataType] = {
        "slurm_job_id": state.job_id,
        "slurm_cluster": str(info.get("cluster", "")),
        "slurm_state": str(info.get("state") or ""),
        "slurm_phase": state.status.value,
        "slurm_message": state.message[:_MESSAGE_LIMIT],
    }
    for key in ("reason", "exit_code", "failure_class", "nodes"):
        if info.get(key) not in (None, ""):
            md[f"slurm_{key}"] = str(info[key])
    acct = info.get("accounting") or {}
    if isinstance(acct, dict):
        for key in _ACCOUNTING_KEYS:
            if key in acct:
                md[f"slurm_{key}"] = acct[key]
        if "unavailable" in acct:
            md["slurm_accounting_unavailable"] = str(acct["unavailable"])
    return md


def job_runtime_metadata() -> Dict[str, MetadataType]:
    """What a step's job knows about itself (read in the job, from Slurm's environment).

    Returns:
        The job id, cluster, partition and node, when the step runs in a Slurm job.
    """
    md: Dict[str, MetadataType] = {}
    for key, var in (
        ("slurm_job_id", "SLURM_JOB_ID"),
        ("slurm_cluster", "SLURM_CLUSTER_NAME"),
        ("slurm_partition", "SLURM_JOB_PARTITION"),
        ("slurm_nodelist", "SLURM_JOB_NODELIST"),
    ):
        value = os.environ.get(var)
        if value:
            md[key] = int(value) if key == "slurm_job_id" and value.isdigit() else value
    return md
