#!/usr/bin/env python3
"""Writes tests/fixtures/multinode/multinode_*.{pb,json}: the CreateTaskRequests the Flyte backend
sends for the tasks of tests/fixtures/real/multinode_tasks.py, with the task templates serialized
by the published SDK itself (flyte 2.12.1's get_proto_task; the `slurm` one with
flyteplugins-slurm 2.12.1's Slurm(nodes=2, ntasks=2)). The container args keep the SDK's
`{{.input}}`-style templates, as the backend stores them; tests render them as the backend does.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install flyte==2.12.1 flyteplugins-slurm==2.12.1
    /tmp/v/bin/python scripts/make-multinode-fixtures.py
"""

import pathlib
import sys

from google.protobuf import json_format

HERE = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests/fixtures/real"))

import flyte  # noqa: E402
import multinode_tasks as t  # noqa: E402
from flyte._internal.runtime.task_serde import get_proto_task  # noqa: E402
from flyte.models import SerializationContext  # noqa: E402
from flyteidl2.connector import connector_pb2  # noqa: E402
from flyteidl2.core import identifier_pb2, literals_pb2  # noqa: E402
from flyteidl2.task import common_pb2  # noqa: E402

assert flyte.__version__ == "2.12.1", flyte.__version__

ctx = SerializationContext(version="v1", project="flytesnacks", domain="development", org="local",
                           root_dir=HERE / "tests/fixtures/real")
out = HERE / "tests/fixtures/multinode"
for name, task in [("multinode_rank_sum", t.rank_sum), ("multinode_rank_boom", t.rank_boom),
                   ("multinode_rank_sleep", t.rank_sleep), ("multinode_native_sum", t.native_sum)]:
    template = get_proto_task(task, ctx)
    req = connector_pb2.CreateTaskRequest(
        inputs=common_pb2.Inputs(literals=[common_pb2.NamedLiteral(
            name="x", value=literals_pb2.Literal(scalar=literals_pb2.Scalar(
                primitive=literals_pb2.Primitive(integer=100))))]),
        template=template,
        output_prefix="file:///shared/flyte/multinode/out",
        task_execution_metadata=connector_pb2.TaskExecutionMetadata(
            task_execution_id=identifier_pb2.TaskExecutionIdentifier(
                node_execution_id=identifier_pb2.NodeExecutionIdentifier(
                    node_id="a0",
                    execution_id=identifier_pb2.WorkflowExecutionIdentifier(
                        project="flytesnacks", domain="development", name="rmultinode", org="local"))),
            namespace="flytesnacks-development"),
    )
    (out / f"{name}.pb").write_bytes(req.SerializeToString())
    (out / f"{name}.json").write_text(json_format.MessageToJson(req) + "\n")
    print(f"{name}: type={template.type} v{template.task_type_version} custom={json_format.MessageToDict(template.custom)}")
