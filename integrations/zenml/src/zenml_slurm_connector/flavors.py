"""Configs, settings and flavors of the two stack components.

Kept free of gRPC imports: a step's job imports this module (ZenML loads the stack's flavors in the
job) and needs only ZenML there.
"""

from typing import TYPE_CHECKING, Dict, List, Literal, Optional, Type, Union

from pydantic import Field, field_validator
from zenml.config.base_settings import BaseSettings
from zenml.orchestrators import BaseOrchestratorConfig, BaseOrchestratorFlavor
from zenml.step_operators import BaseStepOperatorConfig, BaseStepOperatorFlavor

if TYPE_CHECKING:
    from zenml_slurm_connector.orchestrator import SlurmConnectorOrchestrator
    from zenml_slurm_connector.step_operator import SlurmConnectorStepOperator

FLAVOR_NAME = "slurm_connector"

SbatchValue = Union[str, int, float, bool]


class SlurmConnectorSettings(BaseSettings):
    """Per-step (or per-pipeline) Slurm settings.

    Set them on a step with `settings={"step_operator": SlurmConnectorSettings(...)}` or
    `settings={"orchestrator": SlurmConnectorSettings(...)}`; the component's own config holds the
    defaults. `ResourceSettings` (cpu_count, memory, gpu_count) are mapped too, and the fields
    below win over them.

    Attributes:
        partition: Slurm partition (`--partition`).
        account: Slurm account (`--account`).
        qos: quality of service (`--qos`).
        time_limit: wall-clock limit as sbatch reads it (`--time`: `30`, `4:00:00`, `1-00:00:00`).
        reservation: `--reservation`.
        constraint: node features (`--constraint`).
        gres: generic resources (`--gres`, e.g. `gpu:a100:2`); replaces `gpu_count`'s `gpu:N`.
        cpus_per_task: `--cpus-per-task`; replaces `ResourceSettings.cpu_count` (rounded up).
        mem: `--mem` as sbatch reads it (`4G`, `500M`); replaces `ResourceSettings.memory`.
        sbatch_options: any other sbatch option, `{"exclusive": True, "nice": 10}`: the raw
            escape hatch. The connector maps each to slurmrestd's job description or refuses it
            by name at submission (docs/sbatch-options.md lists what it knows).
        image: the step's image (registry reference or a `.sqsh`/`.sif` path on the cluster);
            default: the image ZenML built for the step. Unused when `python` is set.
        runtime: the container runtime on the cluster, `pyxis` or `apptainer`.
        container_args: extra arguments of the runtime (e.g. `["--nv"]` for Apptainer).
        container_mounts: paths of the cluster bound into the container (`/shared/data`).
        python: the interpreter of a Python environment on the cluster's shared storage that has
            ZenML and this package: the step runs there, without a container.
        code_dir: where the pipeline's code is on the cluster (its source root); default: the
            client's source root, for a client that shares the cluster's filesystem.
        modules: environment modules to load before the step (`module load ...`).
        environment: extra environment variables of the step's job.
        cluster: which of the connector's configured clusters runs the step.
    """

    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_limit: Optional[str] = None
    reservation: Optional[str] = None
    constraint: Optional[str] = None
    gres: Optional[str] = None
    cpus_per_task: Optional[int] = Field(default=None, ge=1)
    mem: Optional[str] = None
    sbatch_options: Dict[str, SbatchValue] = Field(default_factory=dict)
    image: Optional[str] = None
    runtime: Literal["pyxis", "apptainer"] = "pyxis"
    container_args: List[str] = Field(default_factory=list)
    container_mounts: List[str] = Field(default_factory=list)
    python: Optional[str] = None
    code_dir: Optional[str] = None
    modules: List[str] = Field(default_factory=list)
    environment: Dict[str, str] = Field(default_factory=dict)
    cluster: Optional[str] = None

    @field_validator("sbatch_options")
    @classmethod
    def _no_reserved_options(cls, v: Dict[str, SbatchValue]) -> Dict[str, SbatchValue]:
        """Refuses the options the orchestrator itself sets.

        Args:
            v: the options.

        Returns:
            The options.

        Raises:
            ValueError: naming the option and why.
        """
        for key in v:
            if key.lstrip("-") in {"dependency", "d", "kill-on-invalid-dep"}:
                raise ValueError(
                    f"sbatch_options.{key}: the orchestrator sets each step's dependencies from "
                    "the pipeline's DAG; remove it"
                )
        return v


class SlurmConnectorBaseConfig(SlurmConnectorSettings):
    """What both components share: where the connector is, and the settings' defaults.

    Attributes:
        connector_url: the connector's gRPC address (`host:port`; `http://`/`https://` accepted).
        tls: speak TLS to the connector (on by itself for an `https://` address).
        tls_ca_file: a CA bundle to verify the connector's certificate with.
        shared_dir: a folder on the cluster's shared filesystem that the connector reads
            (its `FLYTE_SLURM_SHARED_MOUNTS` or stager): each containerized step's result marker
            goes there. Needed for steps that run in an image.
        project: the ZenML-side name jobs are accounted under (the connector's task project).
        poll_seconds: how often a waiting step operator or a synchronous orchestrator asks the
            connector (it answers from its cache: one slurmrestd request per tick for all jobs).
        stream_logs: the step operator copies the job's stdout/stderr into its own logs while
            it waits.

    The ZenML store must be reachable from the cluster's nodes (each step's job talks to it).
    The components do not declare themselves remote, so ZenML lets a local store be used: right
    when the nodes share the client's machine (the embedded connector, a dev cluster), not
    otherwise.
    """

    connector_url: str = "127.0.0.1:8000"
    tls: bool = False
    tls_ca_file: Optional[str] = None
    shared_dir: Optional[str] = None
    project: str = "zenml"
    poll_seconds: float = Field(default=2.0, gt=0)
    stream_logs: bool = True


class SlurmConnectorStepOperatorConfig(BaseStepOperatorConfig, SlurmConnectorBaseConfig):
    """Config of the step operator."""


class SlurmConnectorOrchestratorConfig(BaseOrchestratorConfig, SlurmConnectorBaseConfig):
    """Config of the orchestrator.

    Attributes:
        synchronous: `pipeline.run()` waits for the run's jobs to end (else it returns once
            every job is queued; `zenml pipeline runs refresh` then reconciles it).
    """

    synchronous: bool = True

    @property
    def is_synchronous(self) -> bool:
        """Whether `run()` waits.

        Returns:
            The `synchronous` setting.
        """
        return self.synchronous


class SlurmConnectorStepOperatorFlavor(BaseStepOperatorFlavor):
    """Runs one step as a Slurm job through slurm-connector."""

    @property
    def name(self) -> str:
        """The flavor's name.

        Returns:
            `slurm_connector`.
        """
        return FLAVOR_NAME

    @property
    def docs_url(self) -> Optional[str]:
        """No hosted docs: docs/zenml.md of the repository.

        Returns:
            None.
        """
        return None

    @property
    def sdk_docs_url(self) -> Optional[str]:
        """No hosted SDK docs.

        Returns:
            None.
        """
        return None

    @property
    def logo_url(self) -> str:
        """A logo for the dashboard.

        Returns:
            Slurm's logo.
        """
        return "https://slurm.schedmd.com/slurm_logo.png"

    @property
    def config_class(self) -> Type[SlurmConnectorStepOperatorConfig]:
        """The config class.

        Returns:
            The config class.
        """
        return SlurmConnectorStepOperatorConfig

    @property
    def implementation_class(self) -> Type["SlurmConnectorStepOperator"]:
        """The implementation.

        Returns:
            The step operator class.
        """
        from zenml_slurm_connector.step_operator import (
            SlurmConnectorStepOperator,
        )

        return SlurmConnectorStepOperator


class SlurmConnectorOrchestratorFlavor(BaseOrchestratorFlavor):
    """Runs every step of a pipeline as a Slurm job, chained by the DAG."""

    @property
    def name(self) -> str:
        """The flavor's name.

        Returns:
            `slurm_connector`.
        """
        return FLAVOR_NAME

    @property
    def docs_url(self) -> Optional[str]:
        """No hosted docs.

        Returns:
            None.
        """
        return None

    @property
    def sdk_docs_url(self) -> Optional[str]:
        """No hosted SDK docs.

        Returns:
            None.
        """
        return None

    @property
    def logo_url(self) -> str:
        """A logo for the dashboard.

        Returns:
            Slurm's logo.
        """
        return "https://slurm.schedmd.com/slurm_logo.png"

    @property
    def config_class(self) -> Type[SlurmConnectorOrchestratorConfig]:
        """The config class.

        Returns:
            The config class.
        """
        return SlurmConnectorOrchestratorConfig

    @property
    def implementation_class(self) -> Type["SlurmConnectorOrchestrator"]:
        """The implementation.

        Returns:
            The orchestrator class.
        """
        from zenml_slurm_connector.orchestrator import (
            SlurmConnectorOrchestrator,
        )

        return SlurmConnectorOrchestrator
