#!/usr/bin/env python3
"""Proves that proto/ (our flyteidl2 subset) is wire-compatible with the published flyteidl2.

Compiles proto/ with grpcio-tools' protoc into a descriptor set and compares, for every message,
enum and service we declare, the full name, each field's number, type, label and message/enum type
name, and each enum value, against the descriptors of the real `flyteidl2` package from PyPI.
Also checks the fixtures: every `.pb` in the fixtures folder parses with the real package and equals
its `.json` beside it.

Usage: python compare_descriptors.py [--proto-dir proto] [--fixtures DIR]
Needs: pip install flyteidl2 grpcio-tools. Exit status 0 = compatible; 1 = lists every mismatch.
"""
import argparse
import glob
import importlib
import os
import sys
import tempfile

from google.protobuf import descriptor_pb2, json_format
from grpc_tools import protoc
import grpc_tools

REAL_MODULES = [
    "flyteidl2.connector.connector_pb2",
    "flyteidl2.connector.service_pb2",
    "flyteidl2.core.tasks_pb2",
    "flyteidl2.core.literals_pb2",
    "flyteidl2.core.types_pb2",
    "flyteidl2.core.identifier_pb2",
    "flyteidl2.core.interface_pb2",
    "flyteidl2.core.security_pb2",
    "flyteidl2.core.execution_pb2",
    "flyteidl2.core.metrics_pb2",
    "flyteidl2.task.common_pb2",
    "flyteidl2.logs.dataplane.payload_pb2",
]


def compile_ours(proto_dir):
    files = sorted(
        os.path.relpath(p, proto_dir)
        for p in glob.glob(os.path.join(proto_dir, "**", "*.proto"), recursive=True)
    )
    if not files:
        sys.exit(f"no .proto files under {proto_dir}")
    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fds.bin")
        rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{wkt}", "--include_imports",
                          f"--descriptor_set_out={out}"] + files)
        if rc != 0:
            sys.exit(f"protoc failed on {proto_dir} (exit {rc})")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return fds


def walk_messages(prefix, messages, out_msgs, out_enums):
    for m in messages:
        name = f"{prefix}.{m.name}"
        out_msgs[name] = m
        for e in m.enum_type:
            out_enums[f"{name}.{e.name}"] = e
        walk_messages(name, m.nested_type, out_msgs, out_enums)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--proto-dir", default=os.path.join(here, "..", "..", "proto"))
    ap.add_argument("--fixtures", default=os.environ.get("FIXTURES_DIR", ""))
    args = ap.parse_args()

    for mod in REAL_MODULES:
        importlib.import_module(mod)
    from google.protobuf import descriptor_pool
    pool = descriptor_pool.Default()

    fds = compile_ours(args.proto_dir)
    msgs, enums, services = {}, {}, {}
    for fd in fds.file:
        if fd.name.startswith("google/"):
            continue
        walk_messages("." + fd.package, fd.message_type, msgs, enums)
        for e in fd.enum_type:
            enums[f".{fd.package}.{e.name}"] = e
        for s in fd.service:
            services[f"{fd.package}.{s.name}"] = (s, fd)

    errors, checked_fields = [], 0
    for full, m in sorted(msgs.items()):
        try:
            real = pool.FindMessageTypeByName(full[1:])
        except KeyError:
            errors.append(f"message {full}: not in the published flyteidl2")
            continue
        for f in m.field:
            rf = real.fields_by_number.get(f.number)
            checked_fields += 1
            if rf is None:
                errors.append(f"{full}.{f.name} = {f.number}: no such field number upstream")
                continue
            if rf.name != f.name:
                errors.append(f"{full} field {f.number}: ours '{f.name}', upstream '{rf.name}'")
            if rf.type != f.type:
                errors.append(f"{full}.{f.name}: type {f.type} upstream {rf.type}")
            ours_rep = f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
            real_rep = rf.is_repeated if hasattr(rf, "is_repeated") else rf.label == 3
            if ours_rep != real_rep:
                errors.append(f"{full}.{f.name}: repeated mismatch")
            ref = rf.message_type or rf.enum_type
            if ref is not None and f.type_name != "." + ref.full_name:
                errors.append(f"{full}.{f.name}: refers to {f.type_name}, upstream .{ref.full_name}")
            real_oneof = rf.containing_oneof.name if rf.containing_oneof else None
            our_oneof = m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
            if real_oneof != our_oneof:
                errors.append(f"{full}.{f.name}: oneof ours {our_oneof} upstream {real_oneof}")
    for full, e in sorted(enums.items()):
        try:
            real = pool.FindEnumTypeByName(full[1:])
        except KeyError:
            errors.append(f"enum {full}: not in the published flyteidl2")
            continue
        for v in e.value:
            rv = real.values_by_number.get(v.number)
            if rv is None or rv.name != v.name:
                errors.append(f"enum {full}: {v.name} = {v.number}, upstream {rv.name if rv else 'none'}")
    for full, (s, fd) in sorted(services.items()):
        try:
            real = pool.FindServiceByName(full)
        except KeyError:
            errors.append(f"service {full}: not in the published flyteidl2")
            continue
        for meth in s.method:
            rm = real.methods_by_name.get(meth.name)
            if rm is None:
                errors.append(f"{full}/{meth.name}: no such method upstream")
                continue
            if meth.input_type != "." + rm.input_type.full_name or meth.output_type != "." + rm.output_type.full_name:
                errors.append(f"{full}/{meth.name}: request/response types differ")
            real_stream = rm.server_streaming
            if bool(meth.server_streaming) != bool(real_stream):
                errors.append(f"{full}/{meth.name}: server_streaming ours {meth.server_streaming} upstream {real_stream}")

    fixtures_checked = 0
    if args.fixtures:
        from flyteidl2.connector import connector_pb2
        for pb in sorted(glob.glob(os.path.join(args.fixtures, "*.pb"))):
            js = pb[:-3] + ".json"
            a = connector_pb2.CreateTaskRequest.FromString(open(pb, "rb").read())
            b = json_format.Parse(open(js).read(), connector_pb2.CreateTaskRequest())
            if a != b:
                errors.append(f"fixture {os.path.basename(pb)} differs from its .json")
            fixtures_checked += 1

    for e in errors:
        print("MISMATCH", e)
    print(f"checked {len(msgs)} messages, {checked_fields} fields, {len(enums)} enums, "
          f"{len(services)} services, {fixtures_checked} fixtures against the published flyteidl2")
    print(f"{0 if errors else 1} passed, {1 if errors else 0} failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
