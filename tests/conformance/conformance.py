#!/usr/bin/env python3
"""Conformance: drive a running slurm-connector through the OFFICIAL flyteidl2 stubs, as the
Flyte backend would.

Checks: grpc.health.v1 SERVING ("" and both services); ListConnectors/GetConnector ("Slurm
Connector", categories slurm and slurm_script v0); for every fixture: CreateTask (and a repeated
CreateTask returning the same resource_meta), GetTask until a terminal phase with ZERO GetTask
errors, GetTaskLogs (server-streaming) answers, DeleteTask twice (idempotent); a long job is
cancelled mid-run and ends ABORTED.

Usage:
  python conformance.py --address 127.0.0.1:8000 --fixtures tests/fixtures/requests \
      [--partition debug] [--sbatch-option nodes=1 ...] [--expect script_no_io=SUCCEEDED] [--timeout 120]
Against the embedded default (`slurm-connector serve` with no cluster: one 8-CPU node):
  --partition '' --sbatch-option nodes=1 --sbatch-option ntasks-per-node=1 --sbatch-option cpus-per-task=1
Needs: pip install flyteidl2 grpcio. Prints 'N passed, M failed'; exit status 1 on any failure.
"""
import argparse
import glob
import json
import os
import sys
import time

import grpc
from google.protobuf import json_format, struct_pb2

from flyteidl2.connector import connector_pb2, service_pb2_grpc
from flyteidl2.core import execution_pb2

Phase = execution_pb2.TaskExecution.Phase
TERMINAL = {Phase.Value("SUCCEEDED"), Phase.Value("FAILED"), Phase.Value("ABORTED"), Phase.Value("RETRYABLE_FAILED")}
SERVICES = ["", "flyteidl2.connector.AsyncConnectorService", "flyteidl2.connector.ConnectorMetadataService"]

results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""), flush=True)
    return ok


def health_status(channel, service):
    # grpc.health.v1.HealthCheckRequest{service=1} / HealthCheckResponse{status=1}, encoded by
    # hand so the script needs no grpcio-health-checking.
    raw = service.encode()
    req = (b"\x0a" + bytes([len(raw)]) + raw) if raw else b""
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b, response_deserializer=lambda b: b)
    resp = call(req, timeout=10)
    return resp[1] if len(resp) >= 2 and resp[0] == 0x08 else 0


def reflected_services(channel):
    # grpc.reflection.v1 ServerReflectionInfo with ServerReflectionRequest{list_services = ""}
    # (field 7), encoded by hand as health is; the answer's ListServiceResponse holds the names.
    call = channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                 request_serializer=lambda b: b, response_deserializer=lambda b: b)
    answer = next(iter(call(iter([b"\x3a\x00"]), timeout=10)))
    return answer


def load_fixture(path, partition, attempt_offset, sbatch_options=(), drop=()):
    req = connector_pb2.CreateTaskRequest.FromString(open(path, "rb").read())
    # Requests a small real test cluster cannot satisfy (GPUs, features, memory it does not
    # declare) are dropped from the first-class `sbatch` fields, so every fixture still runs.
    if drop and "sbatch" in req.template.custom.fields:
        sb = req.template.custom.fields["sbatch"].struct_value
        for key in drop:
            if key in sb.fields:
                del sb.fields[key]
    # `sbatch_options` win over first-class fields and the script's #SBATCH lines: this fits the
    # fixtures' 2-node/32-CPU requests onto a small test cluster without touching anything else.
    for opt in sbatch_options:
        k, v = opt.split("=", 1)
        req.template.custom.fields["sbatch_options"].struct_value.fields[k].string_value = v
    if partition is not None:
        custom = req.template.custom
        if "sbatch" in custom.fields:
            sb = custom.fields["sbatch"].struct_value
            if "partition" in sb.fields:
                del sb.fields["partition"]
            if partition:
                sb.fields["partition"].string_value = partition
    # A distinct execution per script run, so reruns against one cluster do not find old jobs.
    req.task_execution_metadata.task_execution_id.retry_attempt += attempt_offset
    return req


def category(req):
    return connector_pb2.TaskCategory(name=req.template.type, version=0)


def wait_terminal(stub, req, meta, timeout, errors):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            r = stub.GetTask(connector_pb2.GetTaskRequest(
                resource_meta=meta, task_category=category(req), output_prefix=req.output_prefix,
                connection=req.connection), timeout=10)
            last = r.resource
            if last.phase in TERMINAL:
                return last
        except grpc.RpcError as e:
            errors.append(f"{e.code().name}: {e.details()}")
        time.sleep(0.5)
    return last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default="127.0.0.1:8000")
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--partition", default=None,
                    help="replace each fixture's sbatch.partition ('' removes it: the cluster default)")
    ap.add_argument("--sbatch-option", action="append", default=[],
                    help="name=value added to every fixture's sbatch_options, e.g. nodes=1 (small test clusters)")
    ap.add_argument("--drop-sbatch", action="append", default=[],
                    help="first-class sbatch field to remove from every fixture, e.g. gres (no GPUs here)")
    ap.add_argument("--expect", action="append", default=[],
                    help="fixture=PHASE, e.g. script_no_io=SUCCEEDED, or fixture=REFUSED (Slurm must refuse it); others: any terminal phase")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--mapped", default=None,
                    help="PROJECT=USER: a script task of PROJECT must run as Slurm user USER (identity rules)")
    ap.add_argument("--denied", default=None,
                    help="PROJECT: a task of PROJECT must be refused with PERMISSION_DENIED (identity_default deny)")
    ap.add_argument("--only-identities", action="store_true",
                    help="run only the --mapped/--denied checks (and health/metadata)")
    ap.add_argument("--tls-ca", default=None,
                    help="PEM file of a CA: connect with TLS verifying the server against it, as "
                         "Flyte's backend does with `insecure: false` (and no client certificate)")
    args = ap.parse_args()
    expect = dict(e.split("=", 1) for e in args.expect)
    offset = int(time.time()) % 100000 * 10

    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(args.address, creds)
        # A plaintext client on the same port must not get an answer.
        plain = grpc.insecure_channel(args.address)
        try:
            health_status(plain, "")
            check("plaintext refused on the TLS port", False, "a plaintext call was answered")
        except grpc.RpcError as e:
            check("plaintext refused on the TLS port", True, str(e.code()))
        plain.close()
    else:
        channel = grpc.insecure_channel(args.address)
    grpc.channel_ready_future(channel).result(timeout=30)
    for svc in SERVICES:
        st = health_status(channel, svc)
        check(f"health '{svc}' SERVING", st == 1, f"status {st}")
    listed = reflected_services(channel)
    for svc in SERVICES[1:] + ["grpc.health.v1.Health"]:
        check(f"reflection lists {svc}", svc.encode() in listed, repr(listed))

    meta_stub = service_pb2_grpc.ConnectorMetadataServiceStub(channel)
    lst = meta_stub.ListConnectors(connector_pb2.ListConnectorsRequest(), timeout=10)
    names = [c.name for c in lst.connectors]
    check("ListConnectors names 'Slurm Connector'", names == ["Slurm Connector"], str(names))
    cats = sorted((c.name, c.version) for c in lst.connectors[0].supported_task_categories) if lst.connectors else []
    check("categories slurm and slurm_script v0", cats == [("slurm", 0), ("slurm_script", 0)], str(cats))
    got = meta_stub.GetConnector(connector_pb2.GetConnectorRequest(name="Slurm Connector"), timeout=10)
    check("GetConnector", got.connector.name == "Slurm Connector")

    stub = service_pb2_grpc.AsyncConnectorServiceStub(channel)
    fixtures = [] if args.only_identities else sorted(glob.glob(os.path.join(args.fixtures, "*.pb")))
    if not args.only_identities:
        check("fixtures found", fixtures, args.fixtures)
    for path in fixtures:
        name = os.path.basename(path)[:-3]
        req = load_fixture(path, args.partition, offset, args.sbatch_option, args.drop_sbatch)
        want = expect.get(name)
        try:
            meta = stub.CreateTask(req, timeout=10).resource_meta
        except grpc.RpcError as e:
            # REFUSED: the cluster cannot run it (e.g. GPUs on a CPU-only test cluster); the
            # refusal must be INVALID_ARGUMENT quoting Slurm's own error.
            refused_ok = want == "REFUSED" and e.code() == grpc.StatusCode.INVALID_ARGUMENT and "Slurm refused" in e.details()
            check(f"{name}: CreateTask" + (" refused by Slurm, as expected" if want == "REFUSED" else ""),
                  refused_ok, f"{e.code().name}: {e.details()}")
            continue
        if want == "REFUSED":
            check(f"{name}: CreateTask refused by Slurm, as expected", False, "it was accepted")
            continue
        m = json.loads(meta)
        check(f"{name}: CreateTask resource_meta is versioned JSON", m.get("v") == 1 and "job_id" in m, meta[:200])
        again = stub.CreateTask(req, timeout=10).resource_meta
        check(f"{name}: repeated CreateTask returns the same job", again == meta)
        errors = []
        res = wait_terminal(stub, req, meta, args.timeout, errors)
        check(f"{name}: zero GetTask errors", not errors, "; ".join(errors[:3]))
        phase = Phase.Name(res.phase) if res is not None else "none"
        ok = res is not None and res.phase in TERMINAL and (want is None or phase == want)
        check(f"{name}: terminal phase {phase}" + (f" (want {want})" if want else ""), ok,
              res.message if res is not None else "no answer")
        if res is not None:
            # The job's line opens the message, or follows a failure's tag line
            # (`[TIMEOUT] after 00:01:00 (job 12 ...`, docs/operations.md).
            lines = res.message.splitlines()
            job_line = f"Slurm job {m['job_id']} is "
            names = bool(lines) and (lines[0].startswith(job_line) or (
                lines[0].startswith("[") and f"job {m['job_id']}" in lines[0]
                and len(lines) > 1 and lines[1].startswith(job_line)))
            check(f"{name}: message names the job", names, res.message[:200])
        logs = list(stub.GetTaskLogs(connector_pb2.GetTaskLogsRequest(
            resource_meta=meta, lines=20, task_category=category(req)), timeout=10))
        text = [l.message for r in logs if r.HasField("body") for l in r.body.lines]
        check(f"{name}: GetTaskLogs streams lines", len(text) > 0)
        metrics = stub.GetTaskMetrics(connector_pb2.GetTaskMetricsRequest(
            resource_meta=meta, queries=["elapsed_seconds", "allocated_cpus"], task_category=category(req)),
            timeout=10).results
        cpus = [json_format.MessageToDict(r.data) for r in metrics if r.metric == "allocated_cpus"]
        check(f"{name}: GetTaskMetrics answers a Prometheus matrix per query",
              [r.metric for r in metrics] == ["elapsed_seconds", "allocated_cpus"]
              and all(r.data.fields["resultType"].string_value == "matrix" for r in metrics)
              and (res is None or res.phase != Phase.Value("SUCCEEDED")
                   or float(cpus[0]["result"][0]["values"][0][1]) >= 1),
              str(cpus)[:300])
        for i in range(2):
            try:
                stub.DeleteTask(connector_pb2.DeleteTaskRequest(
                    resource_meta=meta, task_category=category(req), connection=req.connection), timeout=10)
                check(f"{name}: DeleteTask #{i + 1} (finished job) succeeds", True)
            except grpc.RpcError as e:
                check(f"{name}: DeleteTask #{i + 1} (finished job) succeeds", False, f"{e.code().name}: {e.details()}")

    # Cancel mid-run: a script task that sleeps, deleted while RUNNING, ends ABORTED.
    script_fixture = os.path.join(args.fixtures, "script_no_io.pb")
    if os.path.exists(script_fixture) and not args.only_identities:
        req = load_fixture(script_fixture, args.partition, offset + 5, args.sbatch_option, args.drop_sbatch)
        req.template.custom.fields["script"].string_value = "#!/bin/bash\nsleep 300\n"
        meta = stub.CreateTask(req, timeout=10).resource_meta
        deadline = time.time() + args.timeout
        phase = None
        while time.time() < deadline:
            phase = stub.GetTask(connector_pb2.GetTaskRequest(resource_meta=meta, task_category=category(req)), timeout=10).resource.phase
            if phase == Phase.Value("RUNNING"):
                break
            time.sleep(0.5)
        check("long job reaches RUNNING", phase == Phase.Value("RUNNING"), Phase.Name(phase or 0))
        stub.DeleteTask(connector_pb2.DeleteTaskRequest(resource_meta=meta, task_category=category(req)), timeout=10)
        errors = []
        res = wait_terminal(stub, req, meta, args.timeout, errors)
        check("cancelled job ends ABORTED", res is not None and res.phase == Phase.Value("ABORTED"),
              res.message if res is not None else "no answer")

        # A script that fails, with retries left (max_attempts as Flyte sends it for retries=2):
        # RETRYABLE_FAILED, so Flyte's own retries happen, and the message says what happened
        # first (a tag line; the published plugin's FAILED would never be retried).
        req = load_fixture(script_fixture, args.partition, offset + 6, args.sbatch_option, args.drop_sbatch)
        req.template.custom.fields["script"].string_value = "#!/bin/bash\necho 'about to fail' >&2\nexit 3\n"
        req.task_execution_metadata.max_attempts = 3
        meta = stub.CreateTask(req, timeout=10).resource_meta
        errors = []
        res = wait_terminal(stub, req, meta, args.timeout, errors)
        check("a failing script is RETRYABLE_FAILED", res is not None and res.phase == Phase.Value("RETRYABLE_FAILED"),
              (Phase.Name(res.phase) + ": " + res.message[:200]) if res is not None else "no answer")
        check("its message opens with the failure's tag", res is not None and res.message.startswith("[FAILED]")
              and "code 3" in res.message, res.message[:200] if res is not None else "no answer")

    # Identity rules (issue 15): a mapped project's task runs as its Slurm user; an unmapped one
    # under `identity_default.action = "deny"` is PERMISSION_DENIED and nothing is submitted.
    def with_project(req, project):
        req.task_execution_metadata.task_execution_id.node_execution_id.execution_id.project = project
        return req

    if args.mapped:
        project, user = args.mapped.split("=", 1)
        req = with_project(load_fixture(script_fixture, args.partition, offset + 7, args.sbatch_option,
                                        args.drop_sbatch), project)
        req.template.custom.fields["script"].string_value = "#!/bin/bash\necho \"runs as $(id -un)\"\n"
        try:
            meta = stub.CreateTask(req, timeout=10).resource_meta
            m = json.loads(meta)
            check(f"mapped project {project}: resource_meta records slurm_user {user}",
                  m.get("slurm_user") == user, meta[:300])
            errors = []
            res = wait_terminal(stub, req, meta, args.timeout, errors)
            check(f"mapped project {project}: SUCCEEDED", res is not None and res.phase == Phase.Value("SUCCEEDED"),
                  res.message[:200] if res is not None else "no answer")
            logs = list(stub.GetTaskLogs(connector_pb2.GetTaskLogsRequest(
                resource_meta=meta, lines=20, task_category=category(req)), timeout=10))
            text = [l.message for r in logs if r.HasField("body") for l in r.body.lines]
            check(f"mapped project {project}: the job ran as {user}", any(f"runs as {user}" in t for t in text),
                  str(text[:5]))
        except grpc.RpcError as e:
            check(f"mapped project {project}: CreateTask", False, f"{e.code().name}: {e.details()}")
    if args.denied:
        req = with_project(load_fixture(script_fixture, args.partition, offset + 8, args.sbatch_option,
                                        args.drop_sbatch), args.denied)
        try:
            stub.CreateTask(req, timeout=10)
            check(f"denied project {args.denied}: CreateTask PERMISSION_DENIED", False, "it was accepted")
        except grpc.RpcError as e:
            check(f"denied project {args.denied}: CreateTask PERMISSION_DENIED",
                  e.code() == grpc.StatusCode.PERMISSION_DENIED and "identity_default" in e.details(),
                  f"{e.code().name}: {e.details()}")

    passed = sum(1 for _, ok in results if ok)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
