"""The orchestrator: every step of a static pipeline a Slurm job, chained by the DAG
(`afterok` + kill on invalid dependency), submitted upstream-first through slurm-connector."""

import json
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Type, cast
from uuid import uuid4

from zenml.client import Client
from zenml.config.base_settings import BaseSettings
from zenml.enums import ExecutionStatus, MetadataResourceTypes
from zenml.logger import get_logger
from zenml.metadata.metadata_types import MetadataType
from zenml.models import PipelineRunUpdate, RunMetadataResource, StepRunUpdate
from zenml.models.v2.misc.exception_info import ExceptionInfo
from zenml.orchestrators import ContainerizedOrchestrator, SubmissionResult

from zenml_slurm_connector.client import ConnectorError, TaskState
from zenml_slurm_connector.common import (
    client_of,
    job_runtime_metadata,
    step_task,
    terminal_metadata,
)
from zenml_slurm_connector.entrypoints import SlurmStepEntrypointConfiguration
from zenml_slurm_connector.flavors import (
    SlurmConnectorOrchestratorConfig,
    SlurmConnectorSettings,
)
from zenml_slurm_connector.task import ENV_RUN_ID, create_task_request

if TYPE_CHECKING:
    from zenml.config.build_configuration import BuildConfiguration
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import (
        PipelineRunResponse,
        PipelineSnapshotBase,
        PipelineSnapshotResponse,
    )
    from zenml.stack import Stack

    from zenml_slurm_connector.client import ConnectorClient

logger = get_logger(__name__)

# The run's metadata: each step's job id and the connector's handle of it.
JOBS_KEY = "slurm_connector_jobs"
# Slurm's pending reason of a job whose dependency failed.
NEVER_SATISFIED = "DependencyNeverSatisfied"


def summary(message: str) -> str:
    """A connector failure message in one line: its first line (Slurm's state, exit code, node)
    and the last line the job wrote to stderr (what went wrong, e.g. a missing interpreter).

    Args:
        message: GetTask's message.

    Returns:
        The line.
    """
    lines = message.splitlines()
    if not lines:
        return ""
    tail = ""
    if "--- last lines of stderr ---" in lines:
        after = lines[lines.index("--- last lines of stderr ---") + 1 :]
        after = [x for x in after if x.strip() and not x.startswith("Slurm accounting:")]
        if after:
            tail = after[-1].strip()
    return f"{lines[0]}: {tail}" if tail else lines[0]


def run_status(statuses: Dict[str, ExecutionStatus], stopping: bool) -> ExecutionStatus:
    """A run's status from its jobs'.

    Args:
        statuses: each step's, from its job.
        stopping: a stop was asked for.

    Returns:
        FAILED once a job failed, COMPLETED when all completed, RUNNING while any runs or waits,
        STOPPED once none does and some were cancelled.
    """
    values = list(statuses.values())
    if any(s == ExecutionStatus.FAILED for s in values):
        return ExecutionStatus.FAILED
    if values and all(s == ExecutionStatus.COMPLETED for s in values):
        return ExecutionStatus.COMPLETED
    if any(not s.is_finished for s in values):
        return ExecutionStatus.STOPPING if stopping else ExecutionStatus.RUNNING
    return ExecutionStatus.STOPPED


class SlurmConnectorOrchestrator(ContainerizedOrchestrator):
    """Submits a pipeline's steps as Slurm jobs through slurm-connector and reconciles the run
    from them."""

    _client: Optional["ConnectorClient"] = None

    @property
    def config(self) -> SlurmConnectorOrchestratorConfig:
        """The config.

        Returns:
            The config.
        """
        return cast(SlurmConnectorOrchestratorConfig, self._config)

    @property
    def settings_class(self) -> Optional[Type[BaseSettings]]:
        """Per-step settings.

        Returns:
            SlurmConnectorSettings.
        """
        return SlurmConnectorSettings

    def _connector(self) -> "ConnectorClient":
        if self._client is None:
            self._client = client_of(self.config)
        return self._client

    def get_orchestrator_run_id(self) -> str:
        """The run id, in a step's job.

        Returns:
            The id the submission gave every job of the run.

        Raises:
            RuntimeError: outside such a job.
        """
        try:
            return os.environ[ENV_RUN_ID]
        except KeyError:
            raise RuntimeError(
                f"{ENV_RUN_ID} is not set: not in a job of the slurm_connector orchestrator"
            ) from None

    def get_docker_builds(self, snapshot: "PipelineSnapshotBase") -> List["BuildConfiguration"]:
        """Images only when some step runs in ZenML's image (neither `python` nor `image`).

        Args:
            snapshot: the snapshot.

        Returns:
            The builds.
        """
        for step in snapshot.step_configurations.values():
            s = cast(SlurmConnectorSettings, self.get_settings(step))
            if not s.python and not s.image:
                return super().get_docker_builds(snapshot)
        return []

    def submit_pipeline(
        self,
        snapshot: "PipelineSnapshotResponse",
        stack: "Stack",
        base_environment: Dict[str, str],
        step_environments: Dict[str, Dict[str, str]],
        placeholder_run: Optional["PipelineRunResponse"] = None,
    ) -> Optional[SubmissionResult]:
        """Submits every step, upstream first, each depending on its upstream steps' jobs.

        Args:
            snapshot: the snapshot (its steps are in topological order).
            stack: the stack.
            base_environment: ZenML's environment for every step.
            step_environments: each step's.
            placeholder_run: the run.

        Returns:
            The jobs as run metadata, and a wait when `synchronous`.

        Raises:
            ValueError: a schedule (Slurm has none of ZenML's).
            Exception: a submission failed; what was queued is cancelled first.
        """
        if snapshot.schedule:
            raise ValueError(
                "schedule: the slurm_connector orchestrator runs pipelines now; remove the "
                "schedule (or use scrontab on the cluster)"
            )
        run_id = str(placeholder_run.id) if placeholder_run else str(uuid4())
        client = self._connector()
        submitted: Dict[str, Tuple[int, bytes]] = {}
        try:
            for name, step in snapshot.step_configurations.items():
                settings = cast(SlurmConnectorSettings, self.get_settings(step))
                image = None
                if not settings.python and not settings.image:
                    image = self.get_image(snapshot=snapshot, step_name=name)
                env = dict(step_environments.get(name, base_environment))
                env[ENV_RUN_ID] = run_id
                command = (
                    SlurmStepEntrypointConfiguration.get_entrypoint_command()
                    + SlurmStepEntrypointConfiguration.get_entrypoint_arguments(
                        step_name=name, snapshot_id=snapshot.id
                    )
                )
                upstream = [u for u in step.spec.upstream_steps if u in submitted]
                task = step_task(
                    config=self.config,
                    settings=settings,
                    pipeline=snapshot.pipeline_configuration.name,
                    step=name,
                    run_id=f"zo{run_id.replace('-', '')[:24]}",
                    command=command,
                    environment=env,
                    resources=step.config.resource_settings,
                    image=image,
                    depends_on=[submitted[u][0] for u in upstream],
                )
                meta = client.create(create_task_request(task))
                # Recorded before waiting for a deferred submit's id, so a failure cancels it.
                submitted[name] = (0, meta)
                job_id = client.wait_for_job_id(meta)
                submitted[name] = (job_id, meta)
                logger.info(
                    "Step `%s`: Slurm job %s%s.",
                    name,
                    job_id,
                    f" (after {', '.join(str(submitted[u][0]) for u in upstream)})"
                    if upstream
                    else "",
                )
        except Exception:
            for name, (_, meta) in submitted.items():
                try:
                    client.delete(meta)
                except ConnectorError as e:
                    logger.warning("cancelling the job of step `%s` failed: %s", name, e)
            raise
        if placeholder_run is not None:
            # So the run can be stopped while no job has started yet (each step's job would set
            # it, from ZENML_SLURM_CONNECTOR_RUN_ID, once it runs).
            Client().zen_store.update_run(
                run_id=placeholder_run.id,
                run_update=PipelineRunUpdate(orchestrator_run_id=run_id),
            )
        jobs = {
            name: {
                "job_id": job_id,
                "resource_meta": meta.decode(),
                "after": [
                    u
                    for u in snapshot.step_configurations[name].spec.upstream_steps
                    if u in submitted
                ],
            }
            for name, (job_id, meta) in submitted.items()
        }
        metadata: Dict[str, MetadataType] = {
            JOBS_KEY: cast(MetadataType, jobs),
            "slurm_connector_url": self.config.connector_url,
        }
        wait = None
        if self.config.synchronous and placeholder_run is not None:
            run = placeholder_run

            def wait() -> None:
                self._wait(run, jobs)

        return SubmissionResult(wait_for_completion=wait, metadata=metadata)

    def _states(self, jobs: Dict[str, Any]) -> Dict[str, TaskState]:
        """Each step's job state (`jobs` upstream first).

        A job whose upstream failed can never start. Slurm cancels it itself (kill on invalid
        dependency) at its next scheduling pass; it is cancelled here too, as soon as the
        failure is seen, so the run ends without waiting for that pass or for a site that
        ignores the flag and leaves it pending (DependencyNeverSatisfied).
        """
        client = self._connector()
        states: Dict[str, TaskState] = {}
        for name, j in jobs.items():
            meta = str(j["resource_meta"]).encode()
            state = client.get(meta)
            failed_upstream = [
                u
                for u in j.get("after") or []
                if u in states
                and states[u].terminal
                and states[u].status != ExecutionStatus.COMPLETED
            ]
            never = state.info.get("reason") == NEVER_SATISFIED
            if not state.terminal and (failed_upstream or never):
                logger.info(
                    "Step `%s` (Slurm job %s) can never start (%s): cancelling it.",
                    name,
                    state.job_id,
                    f"upstream {', '.join(failed_upstream)} did not complete"
                    if failed_upstream
                    else NEVER_SATISFIED,
                )
                client.delete(meta)
                state = client.get(meta)
            states[name] = state
        return states

    def _wait(self, run: "PipelineRunResponse", jobs: Dict[str, Any]) -> None:
        while True:
            states = self._states(jobs)
            if all(s.terminal for s in states.values()):
                break
            time.sleep(self.config.poll_seconds)
        self._reconcile(Client().get_pipeline_run(run.id), states)
        failed = {n: s for n, s in states.items() if s.status == ExecutionStatus.FAILED}
        if failed:
            raise RuntimeError(
                "Pipeline run failed: "
                + "; ".join(
                    f"step `{n}` (Slurm job {s.job_id}): {summary(s.message) or s.status}"
                    for n, s in failed.items()
                )
            )

    @staticmethod
    def _jobs_of(run: "PipelineRunResponse") -> Dict[str, Any]:
        jobs = run.run_metadata.get(JOBS_KEY)
        if isinstance(jobs, str):
            jobs = json.loads(jobs)
        return cast(Dict[str, Any], jobs or {})

    def _reconcile(self, run: "PipelineRunResponse", states: Dict[str, TaskState]) -> None:
        """Records each ended job's Slurm account on its step run (once) and the run, and gives
        a step that failed before ZenML's entrypoint reported anything the connector's message
        as its error."""
        store = Client().zen_store
        failures: Dict[str, str] = {}
        ended = {n: s for n, s in states.items() if s.terminal}
        for name, state in ended.items():
            if state.status == ExecutionStatus.FAILED:
                failures[name] = f"Slurm job {state.job_id}: {state.message}"[:2000]
            step = run.steps.get(name)
            if step is None:
                continue
            if "slurm_state" not in step.run_metadata:
                Client().create_run_metadata(
                    metadata=terminal_metadata(state),
                    resources=[
                        RunMetadataResource(id=step.id, type=MetadataResourceTypes.STEP_RUN)
                    ],
                    stack_component_id=self.id,
                )
            if state.status == ExecutionStatus.FAILED and step.exception_info is None:
                store.update_run_step(
                    step_run_id=step.id,
                    step_run_update=StepRunUpdate(
                        exception_info=ExceptionInfo(
                            traceback=state.message, message=failures[name]
                        )
                    ),
                )
        if ended and "slurm_job_states" not in run.run_metadata and len(ended) == len(states):
            Client().create_run_metadata(
                metadata={
                    "slurm_job_states": {
                        n: str(s.info.get("state") or "") for n, s in states.items()
                    },
                    "slurm_failures": cast(MetadataType, failures),
                },
                resources=[RunMetadataResource(id=run.id, type=MetadataResourceTypes.PIPELINE_RUN)],
                stack_component_id=self.id,
            )
        if failures and not run.status.is_finished:
            store.update_run(
                run_id=run.id,
                run_update=PipelineRunUpdate(
                    status=ExecutionStatus.FAILED,
                    status_reason="; ".join(
                        f"step `{n}`: {summary(m)}" for n, m in failures.items()
                    )[:1000],
                ),
            )

    def fetch_status(
        self, run: "PipelineRunResponse", include_steps: bool = False
    ) -> Tuple[Optional[ExecutionStatus], Optional[Dict[str, ExecutionStatus]]]:
        """The run's status from its jobs, including a job that failed before ZenML's
        entrypoint ran (which no step can report itself).

        Args:
            run: the run.
            include_steps: also each step's.

        Returns:
            (the run's status, each step's when asked); (None, None) while nothing is known.
        """
        jobs = self._jobs_of(run)
        if not jobs:
            return None, None
        states = self._states(jobs)
        self._reconcile(run, states)
        statuses = {n: s.status for n, s in states.items()}
        status = run_status(statuses, run.status == ExecutionStatus.STOPPING)
        return status, (statuses if include_steps else None)

    def _stop_run(self, run: "PipelineRunResponse", graceful: bool = False) -> None:
        """Cancels every job of the run that has not ended (scancel by exact job id).

        Args:
            run: the run.
            graceful: ignored: Slurm's cancel already signals the job first (KillWait).
        """
        client = self._connector()
        for name, j in self._jobs_of(run).items():
            meta = str(j["resource_meta"]).encode()
            if not client.get(meta).terminal:
                logger.info("Cancelling step `%s` (Slurm job %s).", name, j["job_id"])
                client.delete(meta)

    def get_step_run_metadata(self, info: "StepRunInfo") -> Dict[str, "MetadataType"]:
        """What the job knows of itself (read in the job).

        Args:
            info: the step run.

        Returns:
            The job id, cluster, partition and nodes.
        """
        return job_runtime_metadata()
