"""The step operator: one step as a Slurm job, through slurm-connector."""

import threading
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple, Type, cast
from uuid import UUID

from zenml.client import Client
from zenml.config.build_configuration import BuildConfiguration
from zenml.enums import ExecutionStatus, MetadataResourceTypes
from zenml.logger import get_logger
from zenml.metadata.metadata_types import MetadataType
from zenml.models import RunMetadataResource, StepRunUpdate
from zenml.models.v2.misc.exception_info import ExceptionInfo
from zenml.stack import StackValidator
from zenml.step_operators import BaseStepOperator

from zenml_slurm_connector.common import (
    client_of,
    job_runtime_metadata,
    step_task,
    terminal_metadata,
)
from zenml_slurm_connector.entrypoints import (
    SlurmStepOperatorEntrypointConfiguration,
)
from zenml_slurm_connector.flavors import (
    SlurmConnectorSettings,
    SlurmConnectorStepOperatorConfig,
)
from zenml_slurm_connector.task import create_task_request

if TYPE_CHECKING:
    from zenml.config.base_settings import BaseSettings
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import PipelineSnapshotBase, StepRunResponse

    from zenml_slurm_connector.client import ConnectorClient, TaskState

logger = get_logger(__name__)

IMAGE_KEY = "slurm_connector_step_operator"
# The step run's metadata key holding the connector's handle of the job (status and cancel by
# exact job, from any process).
META_KEY = "slurm_connector_resource_meta"


class SlurmConnectorStepOperator(BaseStepOperator):
    """Runs a step as a Slurm job: CreateTask, then GetTask until it ends, its logs followed."""

    _lock = threading.Lock()

    def __init__(self, *args: object, **kwargs: object) -> None:
        """The component, with its per-process memory of submitted jobs.

        Args:
            *args: ZenML's.
            **kwargs: ZenML's.
        """
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._metas: Dict[UUID, bytes] = {}
        self._recorded: Set[UUID] = set()
        self._client: Optional["ConnectorClient"] = None

    @property
    def config(self) -> SlurmConnectorStepOperatorConfig:
        """The config.

        Returns:
            The config.
        """
        return cast(SlurmConnectorStepOperatorConfig, self._config)

    @property
    def settings_class(self) -> Optional[Type["BaseSettings"]]:
        """Per-step settings.

        Returns:
            SlurmConnectorSettings.
        """
        return SlurmConnectorSettings

    @property
    def entrypoint_config_class(
        self,
    ) -> Type[SlurmStepOperatorEntrypointConfiguration]:
        """ZenML's step-operator entrypoint, in `code_dir` without a container.

        Returns:
            The class.
        """
        return SlurmStepOperatorEntrypointConfiguration

    @property
    def validator(self) -> Optional[StackValidator]:
        """No extra components: an image build is needed only for steps that run in one.

        Returns:
            None.
        """
        return None

    def get_docker_builds(self, snapshot: "PipelineSnapshotBase") -> List["BuildConfiguration"]:
        """Images for the steps of this operator that run in ZenML's image (neither `python`
        nor `image` set).

        Args:
            snapshot: the snapshot.

        Returns:
            The builds.
        """
        builds = []
        for step_name, step in snapshot.step_configurations.items():
            if not step.config.uses_step_operator(self.name):
                continue
            settings = cast(SlurmConnectorSettings, self.get_settings(step))
            if settings.python or settings.image:
                continue
            builds.append(
                BuildConfiguration(
                    key=IMAGE_KEY,
                    settings=step.config.docker_settings,
                    step_name=step_name,
                )
            )
        return builds

    def _connector(self) -> "ConnectorClient":
        if self._client is None:
            self._client = client_of(self.config)
        return self._client

    def submit(
        self,
        info: "StepRunInfo",
        entrypoint_command: List[str],
        environment: Dict[str, str],
    ) -> None:
        """Submits the step's job and records its id on the step run.

        Args:
            info: the step run.
            entrypoint_command: ZenML's entrypoint.
            environment: the step's environment (it travels in the job description, never on a
                command line).
        """
        settings = cast(SlurmConnectorSettings, self.get_settings(info))
        image = None
        if not settings.python and not settings.image:
            image = info.get_image(key=IMAGE_KEY)
        task = step_task(
            config=self.config,
            settings=settings,
            pipeline=info.pipeline.name,
            step=info.pipeline_step_name,
            run_id=f"zs{info.step_run_id.hex[:24]}",
            command=entrypoint_command,
            environment=environment,
            resources=info.config.resource_settings,
            image=image,
        )
        client = self._connector()
        meta = client.create(create_task_request(task))
        job_id = client.wait_for_job_id(meta)
        with self._lock:
            self._metas[info.step_run_id] = meta
        state = client.get(meta)
        logger.info(
            "Step `%s` is Slurm job %s on cluster `%s` (connector %s).",
            info.pipeline_step_name,
            job_id,
            state.info.get("cluster", ""),
            self.config.connector_url,
        )
        self._publish(
            info.step_run_id,
            {
                META_KEY: meta.decode(),
                "slurm_job_id": job_id,
                "slurm_cluster": str(state.info.get("cluster", "")),
                "slurm_connector_url": self.config.connector_url,
            },
        )

    def _publish(self, step_run_id: UUID, md: Dict[str, MetadataType]) -> None:
        Client().create_run_metadata(
            metadata=md,
            resources=[RunMetadataResource(id=step_run_id, type=MetadataResourceTypes.STEP_RUN)],
            stack_component_id=self.id,
        )

    def _meta(self, step_run: "StepRunResponse") -> bytes:
        with self._lock:
            if step_run.id in self._metas:
                return self._metas[step_run.id]
        fresh = Client().get_run_step(step_run.id)
        value = fresh.run_metadata.get(META_KEY)
        if not value:
            raise RuntimeError(
                f"step run {step_run.id} has no `{META_KEY}` metadata: it was not submitted "
                "by this step operator"
            )
        meta = str(value).encode()
        with self._lock:
            self._metas[step_run.id] = meta
        return meta

    def _state(self, step_run: "StepRunResponse") -> Tuple[bytes, "TaskState"]:
        meta = self._meta(step_run)
        state = self._connector().get(meta)
        if state.terminal and step_run.id not in self._recorded:
            self._recorded.add(step_run.id)
            self._record_terminal(step_run.id, state)
        return meta, state

    def _record_terminal(self, step_run_id: UUID, state: "TaskState") -> None:
        """Slurm's account of the job on the step run; for a job that failed before ZenML's
        entrypoint could report anything (a missing image or interpreter, a node failure), the
        connector's message becomes the step's error."""
        self._publish(step_run_id, terminal_metadata(state))
        if state.status != ExecutionStatus.FAILED:
            return
        step = Client().get_run_step(step_run_id, hydrate=True)
        if step.exception_info is None:
            Client().zen_store.update_run_step(
                step_run_id=step_run_id,
                step_run_update=StepRunUpdate(
                    exception_info=ExceptionInfo(
                        traceback=state.message,
                        message=f"Slurm job {state.job_id}: {state.message}",
                    )
                ),
            )

    def get_status(self, step_run: "StepRunResponse") -> ExecutionStatus:
        """The step's status from its job.

        Args:
            step_run: the step run.

        Returns:
            The status.
        """
        return self._state(step_run)[1].status

    def wait(self, step_run: "StepRunResponse") -> ExecutionStatus:
        """Waits for the job to end, copying its new log lines into this step's logs.

        Args:
            step_run: the step run.

        Returns:
            The final status.
        """
        token = ""
        logs_done = not self.config.stream_logs
        while True:
            meta, state = self._state(step_run)
            if not logs_done:
                token, logs_done = self._copy_logs(meta, token)
            if state.terminal:
                # What the job wrote after the last page, once.
                if not logs_done:
                    self._copy_logs(meta, token)
                if state.status == ExecutionStatus.FAILED:
                    logger.error("Slurm job %s failed: %s", state.job_id, state.message)
                return state.status
            time.sleep(self.config.poll_seconds)

    def _copy_logs(self, meta: bytes, token: str) -> Tuple[str, bool]:
        try:
            lines, token_after = self._connector().logs(meta, token)
        except Exception as e:  # logs are a courtesy: the status decides
            logger.debug("GetTaskLogs failed: %s", e)
            return token, False
        for line in lines:
            logger.info("%s", line)
        return token_after, token_after == ""

    def cancel(self, step_run: "StepRunResponse") -> None:
        """Cancels the step's job (scancel of that exact job).

        Args:
            step_run: the step run.
        """
        self._connector().delete(self._meta(step_run))

    def get_step_run_metadata(self, info: "StepRunInfo") -> Dict[str, "MetadataType"]:
        """What the job knows of itself (read in the job).

        Args:
            info: the step run.

        Returns:
            The job id, cluster, partition and nodes.
        """
        return job_runtime_metadata()
