"""ZenML's step entrypoints, for a step that runs in a Python environment on the cluster.

ZenML's own entrypoint changes to `/app` (creating it), where its Docker images keep the code. On a
cluster without containers there is no `/app`, and the job's user may not create one; the code is
in the folder the job script changed to (`code_dir`, exported as ZENML_SLURM_CODE_DIR). These
classes use that folder, and behave as ZenML's own in a container (the variable is then unset).
"""

import os
import sys

from zenml.entrypoints.step_entrypoint_configuration import (
    StepEntrypointConfiguration,
)
from zenml.step_operators.step_operator_entrypoint_configuration import (
    StepOperatorEntrypointConfiguration,
)
from zenml.utils import source_utils

from zenml_slurm_connector.task import ENV_CODE_DIR


def _use_code_dir() -> bool:
    code_dir = os.environ.get(ENV_CODE_DIR)
    if not code_dir:
        return False
    os.chdir(code_dir)
    if code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    source_utils.set_custom_source_root(code_dir)
    return True


class SlurmStepOperatorEntrypointConfiguration(StepOperatorEntrypointConfiguration):
    """The step operator's entrypoint, in `code_dir` when there is one."""

    def prepare_code_environment(self) -> None:
        """Changes to `code_dir`, or does what ZenML does in an image."""
        if not _use_code_dir():
            super().prepare_code_environment()


class SlurmStepEntrypointConfiguration(StepEntrypointConfiguration):
    """The orchestrator's per-step entrypoint, in `code_dir` when there is one."""

    def prepare_code_environment(self) -> None:
        """Changes to `code_dir`, or does what ZenML does in an image."""
        if not _use_code_dir():
            super().prepare_code_environment()
