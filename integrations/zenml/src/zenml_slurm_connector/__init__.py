"""ZenML on Slurm through slurm-connector: a step operator and an orchestrator (flavor
`slurm_connector`) that submit steps over the connector's gRPC API. No SSH, no sbatch.

Register the flavors once per ZenML store (docs/zenml.md):

    zenml step-operator flavor register \
        zenml_slurm_connector.flavors.SlurmConnectorStepOperatorFlavor
    zenml orchestrator flavor register \
        zenml_slurm_connector.flavors.SlurmConnectorOrchestratorFlavor
"""

from zenml_slurm_connector.flavors import (
    FLAVOR_NAME,
    SlurmConnectorOrchestratorConfig,
    SlurmConnectorOrchestratorFlavor,
    SlurmConnectorSettings,
    SlurmConnectorStepOperatorConfig,
    SlurmConnectorStepOperatorFlavor,
)

__all__ = [
    "FLAVOR_NAME",
    "SlurmConnectorOrchestratorConfig",
    "SlurmConnectorOrchestratorFlavor",
    "SlurmConnectorSettings",
    "SlurmConnectorStepOperatorConfig",
    "SlurmConnectorStepOperatorFlavor",
]
