#!/usr/bin/env python3
"""Flyte 1 CreateTaskRequests as flytepropeller sends them to an agent, made by the published
packages (issue 28): the task templates by flytekit 1.16.31 and flytekitplugins-slurm 1.16.31,
the request around them as propeller's agent/connector plugin builds it
(flyteplugins `go/tasks/plugins/webapi/connector/plugin.go`, `Create`):

- the container's args rendered (`template.Render`): `{{.input}}` is `<input prefix>/inputs.pb`,
  `{{.outputPrefix}}` the output prefix, `{{.rawOutputDataPrefix}}` the raw data prefix,
  `{{.checkpointOutputPrefix}}` the checkpoint prefix and `{{.prevCheckpointPrefix}}` the
  previous attempt's checkpoint, which is "" on a first attempt (an empty argument that
  `" ".join(args)` in the SSH plugin drops);
- `output_prefix` the node's output prefix; `task_execution_metadata` from
  `buildTaskExecutionMetadata`: the task execution id (with its retry attempt), namespace,
  labels, annotations, service account, environment variables, identity.

`SlurmShellTask` cannot be registered as flytekit makes it: its `custom` holds Python types
(`python_input_types`) and `OutputLocation` objects (`output_locs`), which the Struct conversion
refuses ("Object of type type is not JSON serializable"). Its fixture is the template flytekit
makes with those two values written as JSON (`jsonable_shell_custom`): type names, and each
location as `{"var", "var_type", "location"}` — the form the connector reads.

Writes `<name>.pb` (the serialized `flyteidl.admin.CreateTaskRequest`) and `<name>.json` (the same
as JSON, for reading) into tests/fixtures/flyte1/. Run in a Python 3.11/3.12 venv (flytekit
1.16 requires Python < 3.13):

    python3.11 -m venv /tmp/fk && /tmp/fk/bin/pip install flytekit==1.16.31 flytekitplugins-slurm==1.16.31
    /tmp/fk/bin/python scripts/make-flyte1-fixtures.py
"""

import pathlib
import sys
from importlib.metadata import version

PINNED = {"flytekit": "1.16.31", "flytekitplugins-slurm": "1.16.31"}
for pkg, want in PINNED.items():
    have = version(pkg)
    if have != want:
        sys.exit(f"{pkg} {have} installed; the fixtures are made with {want}: pip install {pkg}=={want}")

from flyteidl.admin import agent_pb2  # noqa: E402
from flyteidl.core import identifier_pb2  # noqa: E402
from flytekit.configuration import Image, ImageConfig, SerializationSettings  # noqa: E402
from flytekit.core.context_manager import FlyteContextManager  # noqa: E402
from flytekit.core.type_engine import TypeEngine  # noqa: E402
from flytekit.models.literals import LiteralMap  # noqa: E402
from flytekit.tools.translator import get_serializable  # noqa: E402
from google.protobuf import json_format  # noqa: E402

# The tasks live in a module of their own, as a user's would: pyflyte-execute's `task-module`
# argument names it, and a real-tier run imports it on the cluster.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from flyte1_fixture_tasks import mean, plain, script_task, shell_task  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "flyte1"

PROJECT, DOMAIN, VERSION = "flytesnacks", "development", "v1-fixture"
SETTINGS = SerializationSettings(
    project=PROJECT,
    domain=DOMAIN,
    version=VERSION,
    image_config=ImageConfig(default_image=Image(name="default", fqn="ghcr.io/flyteorg/flytekit", tag="py3.11-1.16.31")),
    env={},
)


def execution_metadata(node: str, attempt: int) -> agent_pb2.TaskExecutionMetadata:
    """As `buildTaskExecutionMetadata` fills it for a task in execution `f1fixture01`."""
    return agent_pb2.TaskExecutionMetadata(
        task_execution_id=identifier_pb2.TaskExecutionIdentifier(
            task_id=identifier_pb2.Identifier(
                resource_type=identifier_pb2.TASK, project=PROJECT, domain=DOMAIN, name=node, version=VERSION
            ),
            node_execution_id=identifier_pb2.NodeExecutionIdentifier(
                node_id="n0",
                execution_id=identifier_pb2.WorkflowExecutionIdentifier(
                    project=PROJECT, domain=DOMAIN, name="f1fixture01"
                ),
            ),
            retry_attempt=attempt,
        ),
        namespace=f"{PROJECT}-{DOMAIN}",
        labels={"execution-id": "f1fixture01", "project": PROJECT, "domain": DOMAIN},
        annotations={},
        k8s_service_account="default",
        environment_variables={},
    )


PREFIX = "s3://my-s3-bucket/metadata/propeller/flytesnacks-development-f1fixture01/n0/data/0"
RAW = "s3://my-s3-bucket/data/xy/f1fixture01-n0-0"


def render(args: list[str], attempt: int) -> list[str]:
    """propeller's `template.Render` of the parameters a flytekit entrypoint uses."""
    values = {
        "{{.input}}": f"{PREFIX}/inputs.pb",
        "{{.inputPrefix}}": PREFIX,
        "{{.outputPrefix}}": PREFIX,
        "{{.rawOutputDataPrefix}}": RAW,
        "{{.checkpointOutputPrefix}}": f"{RAW}/_flytecheckpoints",
        "{{.prevCheckpointPrefix}}": "" if attempt == 0 else f"{RAW}-prev/_flytecheckpoints",
    }
    out = []
    for a in args:
        for k, v in values.items():
            a = a.replace(k, v)
        out.append(a)
    return out


def jsonable_shell_custom(custom: dict) -> dict:
    """A SlurmShellTask's custom with its Python objects written as JSON (module doc)."""
    out = dict(custom)
    out["python_input_types"] = {k: t.__name__ for k, t in (custom["python_input_types"] or {}).items()}
    out["output_locs"] = [
        {"var": o.var, "var_type": o.var_type.__name__, "location": str(o.location)}
        for o in custom["output_locs"]
    ]
    return out


def request(entity, name: str, inputs: dict, attempt: int = 0) -> agent_pb2.CreateTaskRequest:
    model = get_serializable({}, SETTINGS, entity).template
    if "output_locs" in model.custom:
        model._custom = jsonable_shell_custom(model.custom)
    template = model.to_flyte_idl()
    if template.HasField("container"):
        rendered = render(list(template.container.args), attempt)
        del template.container.args[:]
        template.container.args.extend(rendered)
    ctx = FlyteContextManager.current_context()
    lm = LiteralMap(
        literals={
            k: TypeEngine.to_literal(ctx, v, type(v) if not isinstance(v, list) else list[float],
                                     TypeEngine.to_literal_type(type(v) if not isinstance(v, list) else list[float]))
            for k, v in inputs.items()
        }
    )
    return agent_pb2.CreateTaskRequest(
        inputs=lm.to_flyte_idl(),
        template=template,
        output_prefix=PREFIX,
        task_execution_metadata=execution_metadata(template.id.name, attempt),
    )


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    made = {
        "slurm_fn_script": request(mean, "slurm_fn_script", {"values": [1.0, 2.5, 4.0], "label": "run one"}),
        "slurm_fn_plain": request(plain, "slurm_fn_plain", {"n": 41}),
        "slurm_fn_retry": request(plain, "slurm_fn_retry", {"n": 41}, attempt=1),
        "slurm_script_path": request(script_task, "slurm_script_path", {}),
        "slurm_shell": request(shell_task, "slurm_shell", {"greeting": "hello world", "n": 3}),
    }
    for name, req in made.items():
        (OUT / f"{name}.pb").write_bytes(req.SerializeToString(deterministic=True))
        (OUT / f"{name}.json").write_text(json_format.MessageToJson(req, sort_keys=True) + "\n")
        print(f"{OUT / name}.pb: {req.template.type}, {len(req.SerializeToString())} bytes")
    # The resource_meta the plugin's own agents answer CreateTask with (a task in flight when a
    # site swaps the SSH agent for the connector): its `SlurmJobMetadata`, encoded by flytekit.
    from flytekitplugins.slurm.function.connector import SlurmJobMetadata as FunctionMeta
    from flytekitplugins.slurm.script.connector import SlurmJobMetadata as ScriptMeta

    ssh = {"host": "login.hpc.example.org", "username": "alice"}
    metas = {
        "meta_slurm_fn": FunctionMeta(job_id="4242", ssh_config=ssh),
        "meta_slurm": ScriptMeta(job_id="4243", ssh_config=ssh, outputs={}),
    }
    for name, meta in metas.items():
        (OUT / f"{name}.bin").write_bytes(meta.encode())
        print(f"{OUT / name}.bin: {meta.encode().decode()}")


if __name__ == "__main__":
    main()
