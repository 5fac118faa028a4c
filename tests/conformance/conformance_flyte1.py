#!/usr/bin/env python3
"""Conformance for Flyte 1: drive a running slurm-connector through the OFFICIAL flyteidl 1.16
stubs (flyteidl.service.AsyncAgentService, AgentMetadataService), as flytepropeller's agent
plugin does, with the requests flytekit and flytekitplugins-slurm 1.16.31 make
(tests/fixtures/flyte1/).

Checks: grpc.health.v1 SERVING for both Flyte 1 services; ListAgents/GetAgent ("Slurm
Connector", task types slurm_fn and slurm, not sync), GetAgent of an unknown name NOT_FOUND;
a slurm_fn task: CreateTask (a repeated one returns the same resource_meta), GetTask until a
terminal phase with ZERO GetTask errors, GetTaskLogs answers, DeleteTask twice (idempotent); its
retry (attempt 1) is another task; a slurm task whose batch_script_path is a file this script
writes (--script-dir, on the cluster's shared filesystem) SUCCEEDS and its logs show the
arguments; one whose file is missing is refused with INVALID_ARGUMENT naming batch_script_path;
a long slurm_fn is cancelled mid-run and ends ABORTED.

Usage:
  python conformance_flyte1.py --address 127.0.0.1:8000 --fixtures tests/fixtures/flyte1 \
      --script-dir /shared/flyte [--host-script-dir DIR] [--partition debug] [--timeout 120]
Needs: pip install flyteidl==1.16.8 grpcio. Prints 'N passed, M failed'; exit 1 on any failure.
"""
import argparse
import os
import sys
import time

import grpc
from google.protobuf import struct_pb2

from flyteidl.admin import agent_pb2
from flyteidl.core import execution_pb2
from flyteidl.service import agent_pb2_grpc

Phase = execution_pb2.TaskExecution.Phase
TERMINAL = {Phase.Value("SUCCEEDED"), Phase.Value("FAILED"), Phase.Value("ABORTED"), Phase.Value("RETRYABLE_FAILED")}
SERVICES = ["flyteidl.service.AsyncAgentService", "flyteidl.service.AgentMetadataService"]

results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""), flush=True)
    return ok


def health_status(channel, service):
    # grpc.health.v1.HealthCheckRequest{service=1} / HealthCheckResponse{status=1}, by hand (as
    # conformance.py does) so the script needs no grpcio-health-checking.
    raw = service.encode()
    req = b"\x0a" + bytes([len(raw)]) + raw
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b, response_deserializer=lambda b: b)
    resp = call(req, timeout=10)
    return resp[1] if len(resp) >= 2 and resp[0] == 0x08 else 0


def load(fixtures, name, run, partition, attempt=None, prefix_dir=None):
    req = agent_pb2.CreateTaskRequest.FromString(open(os.path.join(fixtures, name + ".pb"), "rb").read())
    if prefix_dir:
        # A prefix on the shared filesystem: the connector looks for the task's result there.
        req.output_prefix = f"file://{prefix_dir}/{run}-{attempt or 0}"
    tid = req.task_execution_metadata.task_execution_id
    tid.node_execution_id.execution_id.name = run
    if attempt is not None:
        tid.retry_attempt = attempt
    cfg = req.template.custom.fields["sbatch_config"].struct_value
    for key in ("partition", "time"):
        if key in cfg.fields:
            del cfg.fields[key]
    if partition:
        cfg.fields["partition"].string_value = partition
    return req


def set_args(req, args):
    del req.template.container.args[:]
    req.template.container.args.extend(args)


def wait(stub, meta, task_type, timeout):
    errors, deadline, resource = 0, time.time() + timeout, None
    while time.time() < deadline:
        try:
            resource = stub.GetTask(agent_pb2.GetTaskRequest(
                resource_meta=meta, task_category=agent_pb2.TaskCategory(name=task_type, version=0)), timeout=10).resource
        except grpc.RpcError as e:
            errors += 1
            print(f"  GetTask error: {e.code()} {e.details()}", flush=True)
            time.sleep(1)
            continue
        if resource.phase in TERMINAL:
            break
        time.sleep(0.5)
    return resource, errors


def logs(stub, meta, task_type):
    text = []
    for part in stub.GetTaskLogs(agent_pb2.GetTaskLogsRequest(
            resource_meta=meta, lines=100, task_category=agent_pb2.TaskCategory(name=task_type)), timeout=30):
        if part.HasField("body"):
            text.extend(line.message for line in part.body.structured_lines)
    return "\n".join(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--script-dir", required=True, help="a folder on the cluster's shared filesystem, as the cluster sees it")
    ap.add_argument("--host-script-dir", help="the same folder as this script sees it (default: --script-dir)")
    ap.add_argument("--partition", default="")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    run = f"f1conf{int(time.time() * 1000) % 10**9}"
    channel = grpc.insecure_channel(a.address)
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = agent_pb2_grpc.AsyncAgentServiceStub(channel)
    meta_stub = agent_pb2_grpc.AgentMetadataServiceStub(channel)

    for s in SERVICES:
        check(f"health {s} SERVING", health_status(channel, s) == 1)

    agents = meta_stub.ListAgents(agent_pb2.ListAgentsRequest(), timeout=10).agents
    check("ListAgents: one agent", len(agents) == 1, str(agents))
    agent = agents[0]
    check("ListAgents: Slurm Connector", agent.name == "Slurm Connector", agent.name)
    check("ListAgents: slurm_fn and slurm",
          sorted(c.name for c in agent.supported_task_categories) == ["slurm", "slurm_fn"],
          str(agent.supported_task_categories))
    check("ListAgents: not sync", not agent.is_sync)
    got = meta_stub.GetAgent(agent_pb2.GetAgentRequest(name="Slurm Connector"), timeout=10).agent
    check("GetAgent by name", got.name == "Slurm Connector")
    try:
        meta_stub.GetAgent(agent_pb2.GetAgentRequest(name="nope"), timeout=10)
        check("GetAgent unknown: NOT_FOUND", False, "answered")
    except grpc.RpcError as e:
        check("GetAgent unknown: NOT_FOUND", e.code() == grpc.StatusCode.NOT_FOUND, str(e.code()))

    host_dir = a.host_script_dir or a.script_dir
    os.makedirs(host_dir, exist_ok=True)
    os.chmod(host_dir, 0o777)  # the job's user makes its output prefix in it

    # slurm_fn: the fixture's pyflyte-execute entrypoint replaced by a command every node has
    # (this script has no flytekit on the cluster: tests/real_flyte1.rs runs the real one).
    req = load(a.fixtures, "slurm_fn_plain", run, a.partition, prefix_dir=a.script_dir)
    set_args(req, ["echo", "flyte1 conformance", ""])
    meta = stub.CreateTask(req, timeout=30).resource_meta
    check("slurm_fn CreateTask", len(meta) > 0)
    again = stub.CreateTask(req, timeout=30).resource_meta
    check("slurm_fn CreateTask again: same resource_meta", again == meta)
    res, errors = wait(stub, meta, "slurm_fn", a.timeout)
    check("slurm_fn terminal, zero GetTask errors", res is not None and res.phase in TERMINAL and errors == 0,
          f"{res.phase if res else None} errors={errors}")
    # No outputs.pb: the entrypoint was `echo`, so the task's result is missing and the message says so.
    check("slurm_fn without a result FAILED with a message",
          res is not None and res.phase == Phase.Value("FAILED") and res.message != "",
          f"{res.phase if res else None}: {res.message if res else ''}")
    check("slurm_fn GetTaskLogs answers", "flyte1 conformance" in logs(stub, meta, "slurm_fn"))
    for i in (1, 2):
        stub.DeleteTask(agent_pb2.DeleteTaskRequest(resource_meta=meta, task_category=agent_pb2.TaskCategory(name="slurm_fn")), timeout=30)
        check(f"slurm_fn DeleteTask #{i} (finished: a success)", True)
    retry = load(a.fixtures, "slurm_fn_plain", run, a.partition, attempt=1, prefix_dir=a.script_dir)
    set_args(retry, ["echo", "retry"])
    retried = stub.CreateTask(retry, timeout=30).resource_meta
    check("slurm_fn retry: another task", retried != meta)
    wait(stub, retried, "slurm_fn", a.timeout)

    # slurm: a script on the shared filesystem, with the plugin's arguments.
    # Another node of the run: the connector's key is (execution, node, attempt), as propeller's.
    path = os.path.join(host_dir, f"{run}.sh")
    with open(path, "w") as f:
        f.write("#!/bin/bash\necho \"train: $# [$1] [$2] [$3] [$4]\"\n")
    os.chmod(path, 0o755)
    req = load(a.fixtures, "slurm_script_path", run + "s", a.partition)
    req.template.custom.fields["batch_script_path"].string_value = os.path.join(a.script_dir, f"{run}.sh")
    meta = stub.CreateTask(req, timeout=30).resource_meta
    res, errors = wait(stub, meta, "slurm", a.timeout)
    check("slurm SUCCEEDED, zero GetTask errors", res is not None and res.phase == Phase.Value("SUCCEEDED") and errors == 0,
          f"{res.phase if res else None} {res.message if res else ''} errors={errors}")
    text = logs(stub, meta, "slurm")
    check("slurm: its arguments", "train: 4 [--epochs] [3] [--tag] [run one]" in text, text[-500:])

    missing = load(a.fixtures, "slurm_script_path", run + "m", a.partition)
    try:
        stub.CreateTask(missing, timeout=30)
        check("slurm missing script: INVALID_ARGUMENT", False, "accepted")
    except grpc.RpcError as e:
        check("slurm missing script: INVALID_ARGUMENT naming batch_script_path",
              e.code() == grpc.StatusCode.INVALID_ARGUMENT and "batch_script_path" in (e.details() or ""),
              f"{e.code()} {e.details()}")

    # Cancel mid-run.
    long = load(a.fixtures, "slurm_fn_plain", run + "c", a.partition, prefix_dir=a.script_dir)
    set_args(long, ["sleep", "300"])
    meta = stub.CreateTask(long, timeout=30).resource_meta
    deadline = time.time() + a.timeout
    while time.time() < deadline:
        r = stub.GetTask(agent_pb2.GetTaskRequest(resource_meta=meta, task_category=agent_pb2.TaskCategory(name="slurm_fn")), timeout=10).resource
        if r.phase == Phase.Value("RUNNING"):
            break
        time.sleep(0.5)
    stub.DeleteTask(agent_pb2.DeleteTaskRequest(resource_meta=meta, task_category=agent_pb2.TaskCategory(name="slurm_fn")), timeout=30)
    res, _ = wait(stub, meta, "slurm_fn", a.timeout)
    check("cancelled slurm_fn ABORTED", res is not None and res.phase == Phase.Value("ABORTED"),
          f"{res.phase if res else None} {res.message if res else ''}")

    passed = sum(1 for _, ok in results if ok)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
