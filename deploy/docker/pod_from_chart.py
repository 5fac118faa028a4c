#!/usr/bin/env python3
"""Render the chart with a values file and print the `podman run` arguments that run its
connector container as Kubernetes would: the same args, environment, user and group, read-only
root, mounts at the same paths. Used by deploy/docker/quickstart-pod.sh to start the quick-start's
pod against the dev cluster, where there is no Kubernetes.

    pod_from_chart.py VALUES.yaml --set cluster.restdUrl=URL [--set k=v ...] \
        --volume NAME=HOST_DIR [--volume ...]

Each of the pod's volumes the container mounts must be given a host folder with --volume
(a Secret's items, an NFS export, a PVC: whatever stands in for it here), except emptyDirs, which
become tmpfs mounts. A value in the environment that Kubernetes would fill from elsewhere
(valueFrom, envFrom) is refused: the quick-start has none, and a silent gap would pass a check
the real pod fails. Prints one argument a line. Needs the venv deploy/validate-chart.sh makes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import validate_chart  # noqa: E402  (the chart's renderer, shared with the validation)


def set_path(values: dict, dotted: str, value: str) -> None:
    *parents, leaf = dotted.split(".")
    node = values
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = yaml.safe_load(value)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("values")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--volume", action="append", default=[], metavar="NAME=HOST_DIR")
    a = ap.parse_args()

    values = yaml.safe_load(Path(a.values).read_text()) or {}
    for kv in a.set:
        k, _, v = kv.partition("=")
        set_path(values, k, v)
    hosts = dict(v.split("=", 1) for v in a.volume)

    import helm_python as helm

    docs = validate_chart.render(helm, values)
    (dep,) = validate_chart.by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (conn,) = [c for c in pod["containers"] if c["name"] == "connector"]
    psc, csc = pod.get("securityContext", {}), conn.get("securityContext", {})
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
    if uid is None:
        sys.exit("the pod sets no runAsUser")
    out = ["--user", f"{uid}:{gid}"]
    if psc.get("fsGroup") is not None:
        out += ["--group-add", str(psc["fsGroup"])]
    if csc.get("readOnlyRootFilesystem"):
        out.append("--read-only")
    if "ALL" in csc.get("capabilities", {}).get("drop", []):
        out += ["--cap-drop", "ALL"]
    if csc.get("allowPrivilegeEscalation") is False:
        out += ["--security-opt", "no-new-privileges"]
    if conn.get("envFrom"):
        sys.exit(f"the connector takes envFrom {conn['envFrom']}: not reproducible here")
    # What the downward API would give the one pod here: a name as a ReplicaSet's pods have.
    pod_name = f"{dep['metadata']['name']}-0123456789-ab1cd"
    for e in conn.get("env", []):
        field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field == "metadata.name":
            value = pod_name
        elif "value" in e:
            value = e["value"]
        else:
            sys.exit(f"env {e['name']} is not a plain value ({e}): not reproducible here")
        out += ["--env", f"{e['name']}={value}"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in conn.get("volumeMounts", []):
        vol = volumes[m["name"]]
        if "emptyDir" in vol:
            out += ["--tmpfs", f"{m['mountPath']}:rw,mode=1777"]
            continue
        if m["name"] not in hosts:
            sys.exit(f"volume {m['name']} ({vol}) mounted at {m['mountPath']}: give it --volume {m['name']}=HOST_DIR")
        ro = ":ro" if m.get("readOnly") else ""
        out += ["--volume", f"{hosts[m['name']]}:{m['mountPath']}{ro}"]
    out.append("--")
    out += conn.get("args", [])
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
