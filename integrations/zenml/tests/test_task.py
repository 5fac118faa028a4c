"""Each setting's effect on the connector task (no connector needed)."""

import json
import shlex

import pytest
from google.protobuf import json_format
from pydantic import ValidationError
from zenml.config.resource_settings import ResourceSettings

from zenml_slurm_connector.flavors import (
    SlurmConnectorOrchestratorConfig,
    SlurmConnectorSettings,
    SlurmConnectorStepOperatorConfig,
)
from zenml_slurm_connector.task import (
    StepTask,
    TaskConfigError,
    container_command,
    create_task_request,
    custom_config,
    job_name,
    resources_to_sbatch,
)

ENTRYPOINT = [
    "python",
    "-m",
    "zenml.entrypoints.entrypoint",
    "--entrypoint_config_source",
    "x.Y",
    "--step_name",
    "train; rm -rf /",
]


def task(**settings: object) -> StepTask:
    return StepTask(
        name="zenml.p.train",
        run_name="zs0123",
        step_name="train",
        command=list(ENTRYPOINT),
        environment={"ZENML_STORE_URL": "sqlite:////x.db"},
        settings=SlurmConnectorSettings(**settings),  # type: ignore[arg-type]
        code_dir_default="/home/u/code",
    )


def custom(**settings: object) -> dict:
    return custom_config(task(**settings))[1]


def test_resources_cpus_round_up_memory_in_mib_gpus_as_gres() -> None:
    assert resources_to_sbatch(None) == {}
    assert resources_to_sbatch(ResourceSettings(cpu_count=1.5, memory="1500MB", gpu_count=2)) == {
        "cpus_per_task": "2",
        "mem": "1431M",
        "gres": "gpu:2",
    }
    # sub-GB and fractional memory stays a valid whole number of MiB
    assert resources_to_sbatch(ResourceSettings(memory="100MB")) == {"mem": "96M"}
    assert resources_to_sbatch(ResourceSettings(memory="2GiB")) == {"mem": "2048M"}
    assert resources_to_sbatch(ResourceSettings(gpu_count=0)) == {}


@pytest.mark.parametrize(
    "setting,value,field,expected",
    [
        ("partition", "gpu", "partition", "gpu"),
        ("account", "proj1", "account", "proj1"),
        ("qos", "high", "qos", "high"),
        ("time_limit", "4:00:00", "time_limit", "4:00:00"),
        ("reservation", "maint", "reservation", "maint"),
        ("constraint", "a100", "constraint", "a100"),
        ("gres", "gpu:a100:2", "gres", "gpu:a100:2"),
        ("cpus_per_task", 3, "cpus_per_task", "3"),
        ("mem", "4G", "mem", "4G"),
    ],
)
def test_first_class_settings_become_sbatch_fields(
    setting: str, value: object, field: str, expected: str
) -> None:
    c = custom(python="/opt/zenml/bin/python", **{setting: value})
    assert c["sbatch"] == {field: expected}


def test_settings_win_over_resource_settings() -> None:
    t = task(python="/p", cpus_per_task=8, mem="10G", gres="gpu:h100:1")
    t.resources = ResourceSettings(cpu_count=2, memory="1GB", gpu_count=4)
    assert custom_config(t)[1]["sbatch"] == {
        "cpus_per_task": "8",
        "mem": "10G",
        "gres": "gpu:h100:1",
    }


def test_raw_sbatch_options_pass_through_and_dependencies_are_the_orchestrators() -> None:
    c = custom(python="/p", sbatch_options={"exclusive": True, "nice": 10})
    assert c["sbatch_options"] == {"exclusive": True, "nice": 10}
    for reserved in ("dependency", "--dependency", "kill-on-invalid-dep", "d"):
        with pytest.raises(ValidationError, match="DAG"):
            SlurmConnectorSettings(sbatch_options={reserved: "afterok:1"})
    t = task(python="/p")
    t.depends_on = [11, 12]
    opts = custom_config(t)[1]["sbatch_options"]
    assert opts == {
        "dependency": "afterok:11:12",
        "kill-on-invalid-dep": "yes",
        "no-coalesce": True,
    }


def test_python_environment_is_a_script_task_with_every_word_quoted() -> None:
    kind, c = custom_config(task(python="/shared/envs/zen ml/bin/python"))
    assert kind == "slurm_script"
    script = c["script"]
    assert c["outputs"] == {} and c["output_upload"] == "connector"
    assert "cd /home/u/code\n" in script
    assert "export ZENML_SLURM_CODE_DIR=/home/u/code\n" in script
    last = [line for line in script.splitlines() if line.startswith("exec ")][0]
    assert shlex.split(last)[1:] == ["/shared/envs/zen ml/bin/python", *ENTRYPOINT[1:]]
    # code_dir wins over the client's source root
    assert "cd /shared/code\n" in custom(python="/p", code_dir="/shared/code")["script"]


def test_modules_environment_and_cluster() -> None:
    c = custom(
        python="/p",
        modules=["cuda/12"],
        environment={"HF_HOME": "/shared/hf"},
        cluster="hpc2",
    )
    assert c["modules"] == ["cuda/12"]
    assert c["env"] == {"HF_HOME": "/shared/hf"}
    assert c["connection"] == {"cluster": "hpc2"}
    assert "connection" not in custom(python="/p")
    with pytest.raises(TaskConfigError, match="environment variable `1X`"):
        custom(python="/p", environment={"1X": "y"})


def test_container_step_runs_the_image_and_leaves_a_marker() -> None:
    t = task(
        image="ghcr.io/org/step:1",
        runtime="apptainer",
        container_args=["--nv"],
        container_mounts=["/shared/data"],
        code_dir="/app",
    )
    t.output_prefix = "file:///shared/zenml/r/train-1"
    kind, c = custom_config(t)
    assert kind == "slurm"
    assert c["container"] == {
        "runtime": "apptainer",
        "image": "ghcr.io/org/step:1",
        "args": ["--nv"],
        "mounts": ["/shared/data", "/shared/zenml/r/train-1"],
        "workdir": "/app",
    }
    cmd = container_command(t)
    assert cmd[:4] == ["sh", "-c", '"$@" && : > "$0"', "/shared/zenml/r/train-1/outputs.pb"]
    assert cmd[4:] == ENTRYPOINT
    # ZenML's built image when none is set; pyxis by default
    t = task()
    t.image = "registry/zenml:abc"
    t.output_prefix = "file:///shared/x"
    assert custom_config(t)[1]["container"]["image"] == "registry/zenml:abc"
    assert custom_config(t)[1]["container"]["runtime"] == "pyxis"


def test_refusals_name_the_setting() -> None:
    with pytest.raises(TaskConfigError, match="^image:"):
        custom()
    with pytest.raises(TaskConfigError, match="^shared_dir:"):
        custom(image="x")
    t = task(python="/p")
    t.code_dir_default = None
    with pytest.raises(TaskConfigError, match="^code_dir:"):
        custom_config(t)
    with pytest.raises(ValidationError):
        SlurmConnectorSettings(runtime="docker")
    with pytest.raises(ValidationError):
        SlurmConnectorSettings(cpus_per_task=0)


def test_request_carries_env_in_metadata_and_never_in_the_script() -> None:
    t = task(python="/p")
    t.environment["ZENML_STORE_API_TOKEN"] = "s3cret-token"
    req = create_task_request(t)
    assert req.template.type == "slurm_script"
    assert (
        req.task_execution_metadata.environment_variables["ZENML_STORE_API_TOKEN"] == "s3cret-token"
    )
    custom_json = json.dumps(json_format.MessageToDict(req.template.custom))
    assert "s3cret-token" not in custom_json
    assert (
        req.task_execution_metadata.task_execution_id.node_execution_id.execution_id.name
        == "zs0123"
    )
    assert req.template.id.name == "zenml.p.train"


def test_container_request_has_the_template_container() -> None:
    t = task(image="img:1")
    t.output_prefix = "file:///shared/x"
    req = create_task_request(t)
    assert req.template.type == "slurm"
    assert req.template.container.image == "img:1"
    assert list(req.template.container.args)[4:] == ENTRYPOINT
    assert req.output_prefix == "file:///shared/x"


def test_job_name_is_safe() -> None:
    assert job_name("my pipe", "train/1") == "zenml.my-pipe.train-1"


def test_component_configs_hold_the_defaults() -> None:
    c = SlurmConnectorStepOperatorConfig(partition="p", connector_url="h:1")
    assert c.partition == "p" and c.connector_url == "h:1"
    o = SlurmConnectorOrchestratorConfig(synchronous=False)
    assert not o.is_synchronous
    assert SlurmConnectorOrchestratorConfig().is_synchronous
