#!/usr/bin/env python3
"""Render the Helm chart with every values file in its ci/ folder and check the manifests, without
a cluster. Run through deploy/validate-chart.sh, which installs the tools (pinned, from PyPI).

What it checks, and why:
- `helm lint --strict` and `helm template` with Helm's own Go engine (helm-python-sdk binds Helm
  v4's Go SDK), so the templates behave exactly as `helm install` would render them.
- Every manifest against Kubernetes' OpenAPI schemas (kubernetes-validate, strict: unknown fields
  are errors) for the oldest and the newest Kubernetes the chart supports.
- What a schema cannot see: non-root and read-only root filesystem in every container, gRPC health
  probes on the gRPC port (with TLS on it: GET /healthz on the metrics port, as the kubelet's gRPC
  probe cannot speak TLS), a NetworkPolicy that selects the pods, restricts ingress only and admits
  the gRPC port from selected peers only (never from every pod), declared to the connector in
  FLYTE_SLURM_INGRESS_POLICY, identity rules never without one, replicas that stay available (a rolling update that starts a new pod
  before stopping one, a PodDisruptionBudget that allows a drain yet keeps one, anti-affinity
  over the pod's labels, a terminationGracePeriodSeconds covering the drain deadline), the Service's ports reaching named container ports, every file path
  given in an env var (token, key, clusters file, stager token, TLS certificate and key) lying on a
  mount of that container and not on a subPath mount (which never sees Secret updates),
  shared-filesystem mappings pointing at mounted paths, no credential inlined in the environment,
  and every FLYTE_SLURM_* variable and clusters-file key being one the connector's code reads (read
  from src/, so the chart cannot drift from the code). One port value per listener: --listen /
  --metrics-listen in args == container port == probe port == Service target (the headless one
  too). The uid each container runs as (its own, else the pod's) is not 0.
- The opt-in PrometheusRule (shape checked here: no published schema) and Grafana dashboard use
  only metrics src/service/rpc/metrics.rs registers, and the dashboard shows each of them.
- Flyte's own charts, pinned (deploy/flyte/charts/: flyte-core v1.16.8 for Flyte 1, flyte-binary
  v2.0.43 for Flyte 2), rendered with deploy/flyte/'s values files beside this chart's defaults:
  the backend workload (flytepropeller; flyte-binary's backend) mounts the ConfigMap that routes
  the Slurm task types and is admitted to the gRPC port by the NetworkPolicy, Flyte's other pods are
  not, and that routing sends every Slurm task type to the plugin the connector serves
  (agent-service for Flyte 1, connector-service for Flyte 2) with the headless Service as endpoint,
  round_robin and a deadline above the connector's CreateTask wait.
- Values that must be refused are refused, with a message naming the key.
- The checks themselves fail on known-bad manifests (a self-test), so a silent checker cannot pass.
Exit status: 0 when everything passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import copy
import functools
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "slurm-connector"
# Oldest supported (gRPC probes are GA from 1.27) and the newest the schemas ship.
KUBE_VERSIONS = ["1.27.0", "1.37.0"]
# Env vars whose value is a file the process reads: it must be on a mount of the same container.
FILE_VARS = [
    "FLYTE_SLURM_JWT_FILE",
    "FLYTE_SLURM_JWT_KEY_FILE",
    "FLYTE_SLURM_STAGER_TOKEN_FILE",
    "FLYTE_SLURM_CONFIG",
    "FLYTE_SLURM_CA_FILE",
    "FLYTE_SLURM_TLS_CERT_FILE",
    "FLYTE_SLURM_TLS_KEY_FILE",
]
JWT_LIKE = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.")


# ---------------------------------------------------------------------------------------------
# Facts read from the connector's code.


def code_env_vars() -> set[str]:
    """Every FLYTE_SLURM_* name that appears as a string literal in src/ or crates/."""
    names: set[str] = set()
    for f in [*(REPO / "src").rglob("*.rs"), *(REPO / "crates").rglob("*.rs")]:
        names.update(re.findall(r'"(FLYTE_SLURM_[A-Z0-9_]+)"', f.read_text()))
    if not names:
        raise SystemExit("found no FLYTE_SLURM_* literal in src/: is the checkout complete?")
    return names


def struct_fields(source: str, struct: str) -> set[str]:
    m = re.search(r"struct " + struct + r" \{(.*?)\n\}", source, re.S)
    if not m:
        raise SystemExit(f"src/config/file.rs: struct {struct} not found (update validate_chart.py)")
    return set(re.findall(r"^\s*(\w+):", m.group(1), re.M))


def code_file_keys() -> tuple[set[str], set[str]]:
    """Top-level and per-cluster keys of the TOML clusters file (serde deny_unknown_fields)."""
    src = (REPO / "src" / "config" / "file.rs").read_text()
    return struct_fields(src, "FileConfig"), struct_fields(src, "FileCluster")


@functools.cache
def code_metrics() -> dict[str, str]:
    """Every metric src/ registers, as {name: counter|gauge|histogram}: the Metrics struct's field
    types joined with `registry.register("name", "help", self.field.clone())` (or `m.field`)."""
    src = (REPO / "src" / "service" / "rpc" / "metrics.rs").read_text()
    kinds = {f: k.lower() for f, k in re.findall(r"pub (\w+): Family<\w+, (Counter|Gauge|Histogram)(?:<[^<>]*>)?>", src)}
    regs = re.findall(r'\.register\(\s*"(\w+)",\s*"(?:[^"\\]|\\.)*",\s*(?:m|self)\.(\w+)\.clone\(\)', src)
    if not regs or any(f not in kinds for _, f in regs):
        raise SystemExit("src/service/rpc/metrics.rs: could not read the registered metrics and their types (update validate_chart.py)")
    out = {name: kinds[f] for name, f in regs}
    # The task usage counters are registered in a loop over tallies.rs's USAGE_FIGURES (one
    # family each, `task_usage`): their names are that table's.
    tallies = (REPO / "src" / "service" / "cluster" / "tallies.rs").read_text()
    table = re.search(r"pub const USAGE_FIGURES[^=]*= \[(.*?)\n\];", tallies, re.S)
    if not re.search(r"\b(?:m|self)\.task_usage\b", src) or not table:
        raise SystemExit("src/service/rpc/metrics.rs: could not read the task usage counters (update validate_chart.py)")
    out |= {name: "counter" for name in re.findall(r'"(slurm_connector_task_\w+)"', table.group(1))}
    return out


def code_series() -> set[str]:
    """The series names Prometheus sees: prometheus-client appends _total to counters; a
    histogram is _bucket, _sum and _count."""
    out = set()
    for name, kind in code_metrics().items():
        out |= {"counter": {name + "_total"}, "gauge": {name},
                "histogram": {name + "_bucket", name + "_sum", name + "_count"}}[kind]
    return out


PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "inf", "nan"}


def promql_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside strings, label
    matchers, ranges and grouping clauses that are not function calls or keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", e):
        if not m.group(2) and m.group(1).lower() not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


@functools.cache
def code_operations() -> set[str]:
    """The `operation` label values src/ can produce: the string literals of the slurmrestd client
    (its calls' names) and of the gRPC edge (`create`, `get`, ...)."""
    names: set[str] = set()
    for d in (REPO / "crates" / "slurmrestd" / "src", REPO / "src" / "service" / "rpc"):
        for f in d.rglob("*.rs"):
            names.update(re.findall(r'"([a-z][a-z_]*)"', f.read_text()))
    return names


def promql_operations(expr: str) -> set[str]:
    """The values an expression's `operation` matchers name (alternatives of a regex split)."""
    return promql_label_values(expr, "operation")


def promql_label_values(expr: str, label: str) -> set[str]:
    """The values an expression's matchers of `label` name (alternatives of a regex split)."""
    out = set()
    for m in re.finditer(r'\b' + label + r'\s*(?:=~|!~|!=|=)\s*"([^"]*)"', expr):
        out |= {v for v in m.group(1).split("|") if v}
    return out


@functools.cache
def code_exchange_labels() -> dict[str, set[str]]:
    """The `daemon` and `status` label values of slurm_connector_slurmrestd_requests_total: the
    literals of `Daemon::as_str` and `Reply::label` in the slurmrestd crate (a status is also
    any HTTP status, matched by a pattern such as `5..`)."""
    src = (REPO / "crates" / "slurmrestd" / "src" / "exchange.rs").read_text()
    daemon = re.search(r"fn as_str\(self\)[^{]*\{(.*?)\n    \}", src, re.S)
    reply = re.search(r"fn label\(self\)[^{]*\{(.*?)\n    \}", src, re.S)
    if not daemon or not reply:
        raise SystemExit("crates/slurmrestd/src/exchange.rs: could not read Daemon::as_str / Reply::label (update validate_chart.py)")
    return {"daemon": set(re.findall(r'=> "(\w+)"', daemon.group(1))),
            "status": set(re.findall(r'=> "(\w+)"', reply.group(1)))}


def unknown_exchange_labels(expr: str) -> list[str]:
    """The `daemon` and non-numeric `status` values an expression matches that src/ never
    produces."""
    out = []
    for label, known in code_exchange_labels().items():
        for v in sorted(promql_label_values(expr, label) - known):
            if label == "status" and re.fullmatch(r"[0-9.]+", v):
                continue
            out.append(f'{label}="{v}"')
    return out


def doc_anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", path.read_text(), re.M)}


def check_observability(docs: list[dict]) -> list[str]:
    """PrometheusRule (no published schema: its shape is checked here) and the Grafana dashboard
    ConfigMap: every metric they use is one src/ registers, so they cannot drift from the code."""
    errs: list[str] = []
    series = code_series()
    anchors = doc_anchors(REPO / "docs" / "operations.md")
    for pr in by_kind(docs, "PrometheusRule"):
        groups = pr.get("spec", {}).get("groups")
        if not isinstance(groups, list) or not groups:
            errs.append("PrometheusRule: spec.groups must be a non-empty list")
            continue
        for g in groups:
            rules = g.get("rules")
            if not g.get("name") or not isinstance(rules, list) or not rules:
                errs.append(f"PrometheusRule group {g.get('name')!r}: needs a name and a non-empty rules list")
                continue
            for r in rules:
                what = f"PrometheusRule alert {r.get('alert')!r}"
                if not re.fullmatch(r"[A-Z][A-Za-z0-9]+", str(r.get("alert", ""))):
                    errs.append(f"{what}: alert must be a CamelCase name")
                if not isinstance(r.get("expr"), str) or not r["expr"].strip():
                    errs.append(f"{what}: no expr")
                else:
                    unknown = promql_metrics(r["expr"]) - series
                    if not promql_metrics(r["expr"]):
                        errs.append(f"{what}: expr selects no metric: {r['expr']}")
                    if unknown:
                        errs.append(f"{what}: expr uses {sorted(unknown)}, which src/ does not export")
                    ops = promql_operations(r["expr"]) - code_operations()
                    if ops:
                        errs.append(f"{what}: expr matches operation {sorted(ops)}, which src/ never labels a request with")
                    if unknown_exchange_labels(r["expr"]):
                        errs.append(f"{what}: expr matches {unknown_exchange_labels(r['expr'])}, which src/ never labels a request with (crates/slurmrestd/src/exchange.rs)")
                if not re.fullmatch(r"[0-9]+[smhdwy]", str(r.get("for", ""))):
                    errs.append(f"{what}: for {r.get('for')!r} is not a duration")
                if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                    errs.append(f"{what}: labels.severity {r.get('labels', {}).get('severity')!r} is not critical/warning/info")
                ann = r.get("annotations", {})
                for k in ("summary", "description"):
                    if not ann.get(k):
                        errs.append(f"{what}: no annotations.{k}")
                # One runbook per alert: the section of docs/operations.md named after it.
                m = re.match(r"docs/operations\.md#([\w-]+)", ann.get("runbook", ""))
                if not m or m.group(1) not in anchors:
                    errs.append(f"{what}: annotations.runbook {ann.get('runbook')!r} is not a section of docs/operations.md")
                elif m.group(1) != str(r.get("alert", "")).lower():
                    errs.append(f"{what}: annotations.runbook {ann.get('runbook')!r} is not the alert's own section #{str(r.get('alert', '')).lower()}")
                if "runbook_url" in ann and (not m or not ann["runbook_url"].endswith("#" + m.group(1))):
                    errs.append(f"{what}: runbook_url {ann['runbook_url']!r} does not point at the runbook section")
                if "runbook_url" in ann and not re.match(r"https?://[^#]+#[\w-]+$", ann["runbook_url"]):
                    errs.append(f"{what}: runbook_url {ann['runbook_url']!r} is not a URL with a section")
        names = [r.get("alert") for g in groups for r in (g.get("rules") or [])]
        if len(names) != len(set(names)):
            errs.append(f"PrometheusRule: alert names repeat: {names}")
    for cm in by_kind(docs, "ConfigMap"):
        for key, text in cm.get("data", {}).items():
            if not key.endswith(".json"):
                continue
            try:
                dash = json.loads(text)
            except json.JSONDecodeError as e:
                errs.append(f"ConfigMap {cm['metadata']['name']}: {key} is not JSON: {e}")
                continue
            if cm["metadata"].get("labels", {}).get("grafana_dashboard") is None:
                errs.append(f"ConfigMap {cm['metadata']['name']}: no grafana_dashboard label (Grafana's sidecar would not load it)")
            exprs = [t.get("expr", "") for pnl in dash.get("panels", []) for t in pnl.get("targets", [])]
            if not exprs:
                errs.append(f"dashboard {key}: no panel queries anything")
            used = set()
            for e in exprs:
                names = promql_metrics(e)
                used |= names
                if names - series:
                    errs.append(f"dashboard {key}: query uses {sorted(names - series)}, which src/ does not export: {e}")
            # The namespace / instance variables exist and every metric a query selects is narrowed
            # by both, so one release (and one pod) can be picked where several are scraped.
            tvars = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
            for var in ("namespace", "instance"):
                if var not in tvars or tvars[var].get("type") != "query" or "slurm_connector_build_info" not in str(tvars[var].get("query")):
                    errs.append(f"dashboard {key}: no ${var} variable (a query over slurm_connector_build_info)")
            for e in exprs:
                for name in promql_metrics(e):
                    for m in re.finditer(re.escape(name) + r"(\{[^}]*\})?", e):
                        sel = m.group(1) or ""
                        if 'namespace=~"$namespace"' not in sel or 'instance=~"$instance"' not in sel:
                            errs.append(f"dashboard {key}: {name} is not narrowed to $namespace and $instance: {e}")
                            break
            # Every metric the connector exports has a panel.
            for name in code_metrics():
                if not any(u == name or u.startswith(name + "_") for u in used):
                    errs.append(f"dashboard {key}: no panel shows {name}")
    return errs


# ---------------------------------------------------------------------------------------------
# Checks on one rendered release. Each returns a list of problems (empty = fine).


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def under(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/") or "/"
    return path == prefix or path.startswith(prefix + "/") or prefix == "/"


def listen_port(args: list[str], flag: str) -> int | None:
    """The port of `flag ADDR` / `flag=ADDR` in a container's args (None: absent or unparsable)."""
    for i, a in enumerate(args):
        addr = args[i + 1] if a == flag and i + 1 < len(args) else a[len(flag) + 1:] if a.startswith(flag + "=") else None
        if addr is not None:
            m = re.fullmatch(r".*:([0-9]+)", addr)
            return int(m.group(1)) if m else None
    return None


def effective_uid(pod: dict, c: dict) -> int | None:
    """The uid a container runs as: its own runAsUser if set, else the pod's (None: the image's)."""
    return c.get("securityContext", {}).get("runAsUser", pod.get("securityContext", {}).get("runAsUser"))


def check_release(docs: list[dict], env_names: set[str], file_keys: tuple[set[str], set[str]]) -> list[str]:
    errs: list[str] = []
    deps = by_kind(docs, "Deployment")
    all_svcs = by_kind(docs, "Service")
    svcs = [s for s in all_svcs if s["spec"].get("clusterIP") != "None"]
    headless = [s for s in all_svcs if s["spec"].get("clusterIP") == "None"]
    if len(deps) != 1 or len(svcs) != 1 or len(headless) > 1:
        return [f"expected one Deployment, one Service and at most one headless Service, got {len(deps)}, {len(svcs)} and {len(headless)}"]
    dep, svc = deps[0], svcs[0]
    pod = dep["spec"]["template"]["spec"]
    pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
    volumes = {v["name"]: v for v in pod.get("volumes", [])}

    psc = pod.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True:
        errs.append("pod securityContext.runAsNonRoot is not true")
    if psc.get("runAsUser", 1) == 0:
        errs.append("pod securityContext.runAsUser is 0 (root)")

    containers = {c["name"]: c for c in pod["containers"]}
    if "connector" not in containers:
        return errs + ["no container named connector"]
    for name, c in containers.items():
        sc = c.get("securityContext", {})
        if sc.get("runAsNonRoot") is not True:
            errs.append(f"container {name}: securityContext.runAsNonRoot is not true")
        # The uid the process gets: the container's runAsUser overrides the pod's.
        if effective_uid(pod, c) == 0:
            errs.append(f"container {name}: runs as uid 0 (root): runAsUser {sc.get('runAsUser')} in the container, {psc.get('runAsUser')} in the pod")
        if sc.get("readOnlyRootFilesystem") is not True:
            errs.append(f"container {name}: readOnlyRootFilesystem is not true")
        if sc.get("allowPrivilegeEscalation") is not False:
            errs.append(f"container {name}: allowPrivilegeEscalation is not false")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            errs.append(f"container {name}: capabilities.drop lacks ALL")
        mounts = c.get("volumeMounts", [])
        paths = [m["mountPath"] for m in mounts]
        if len(paths) != len(set(paths)):
            errs.append(f"container {name}: two volumeMounts share a mountPath: {paths}")
        for m in mounts:
            if m["name"] not in volumes:
                errs.append(f"container {name}: volumeMount {m['name']} has no volume")
        if not any(m["mountPath"] == "/tmp" for m in mounts):
            errs.append(f"container {name}: no writable /tmp (the root filesystem is read-only)")
        errs += check_env(name, c, volumes, env_names)

    # One port value feeds everything: the container ports are what the process listens on
    # (--listen / --metrics-listen), what the probes probe and what the Services target.
    conn = containers["connector"]
    ports = {p["name"]: p["containerPort"] for p in conn.get("ports", [])}
    args = [str(a) for a in conn.get("args", [])]
    if "grpc" not in ports or "metrics" not in ports:
        errs.append(f"connector must have container ports named grpc and metrics, got {ports}")
    if not args or args[0] != "serve":
        errs.append(f"connector args must start with serve, got {args}")
    for flag, pname in (("--listen", "grpc"), ("--metrics-listen", "metrics")):
        n = sum(a == flag or a.startswith(flag + "=") for a in args)
        if n != 1:
            errs.append(f"connector args give {flag} {n} times (want once, from the port value): {args}")
        elif listen_port(args, flag) != ports.get(pname):
            errs.append(f"connector {flag} port {listen_port(args, flag)} is not the {pname} container port {ports.get(pname)}")
    env = {e["name"]: e.get("value") for e in conn.get("env", [])}
    # `check` run in the pod reads the port from the environment, not serve's arguments.
    listen_env = str(env.get("FLYTE_SLURM_LISTEN") or "")
    if listen_env.rpartition(":")[2] != str(ports.get("grpc")):
        errs.append(f"connector env FLYTE_SLURM_LISTEN={listen_env!r} is not on the grpc container port {ports.get('grpc')}")
    # Without TLS: grpc.health.v1 on the gRPC port. With TLS the kubelet's gRPC probe (plaintext)
    # cannot reach it: GET /healthz on the metrics listener instead.
    tls = [n for n in ("FLYTE_SLURM_TLS_CERT_FILE", "FLYTE_SLURM_TLS_KEY_FILE") if n in env]
    if len(tls) == 1:
        errs.append(f"connector: {tls[0]} without its pair (TLS needs both the certificate and the key)")
    for probe in ("readinessProbe", "livenessProbe"):
        p = conn.get(probe)
        if tls:
            h = (p or {}).get("httpGet")
            if not h or h.get("path") != "/healthz" or h.get("port") != ports.get("metrics") or h.get("scheme", "HTTP") != "HTTP":
                errs.append(f"connector: with TLS on the gRPC port, {probe} must GET /healthz on the metrics port {ports.get('metrics')}, got {p}")
        elif not p or "grpc" not in p:
            errs.append(f"connector: {probe} is not a gRPC probe")
        elif p["grpc"].get("port") != ports.get("grpc"):
            errs.append(f"connector: {probe} probes port {p['grpc'].get('port')}, not the gRPC port {ports.get('grpc')}")
    has_stager_url = "FLYTE_SLURM_STAGER_URL" in env
    if has_stager_url and "FLYTE_SLURM_SHARED_MOUNTS" in env:
        errs.append("connector has both FLYTE_SLURM_STAGER_URL and FLYTE_SLURM_SHARED_MOUNTS: the stager would win silently")
    if "stager" in containers:
        st = containers["stager"]
        sport = {p["name"]: p["containerPort"] for p in st.get("ports", [])}.get("stager")
        sargs = [str(a) for a in st.get("args", [])]
        if not sargs or sargs[0] != "stager":
            errs.append(f"stager args must start with stager, got {sargs}")
        if sum(a == "--listen" or a.startswith("--listen=") for a in sargs) != 1 or listen_port(sargs, "--listen") != sport:
            errs.append(f"stager args {sargs} must give --listen once, on the stager container port {sport}")
        if env.get("FLYTE_SLURM_STAGER_URL") != f"http://127.0.0.1:{sport}":
            errs.append(f"connector's FLYTE_SLURM_STAGER_URL {env.get('FLYTE_SLURM_STAGER_URL')} is not the sidecar on loopback :{sport}")
        senv = {e["name"]: e.get("value") for e in st.get("env", [])}
        if not senv.get("FLYTE_SLURM_SHARED_MOUNTS"):
            errs.append("stager has no FLYTE_SLURM_SHARED_MOUNTS (its confinement roots)")
        for probe in ("readinessProbe", "livenessProbe"):
            p = st.get(probe, {}).get("httpGet")
            if not p or p.get("path") != "/healthz" or p.get("port") != sport:
                errs.append(f"stager: {probe} must GET /healthz on the stager port {sport}")
        if any(m["name"] in ("slurmrestd-auth",) for m in st.get("volumeMounts", [])):
            errs.append("stager mounts the slurmrestd credential: it must not need it")

    # Service → container ports, selector → pod labels.
    for sp in svc["spec"]["ports"]:
        if sp.get("targetPort") not in ports:
            errs.append(f"Service port {sp['name']} targets {sp.get('targetPort')}, not a connector port name")
        elif sp.get("targetPort") != sp["name"] or sp.get("port") != ports[sp["targetPort"]]:
            errs.append(f"Service port {sp['name']}:{sp.get('port')} → {sp.get('targetPort')}: want the same name and number as the container port {ports[sp['targetPort']]}")
    if sorted(p["name"] for p in svc["spec"]["ports"]) != ["grpc", "metrics"]:
        errs.append(f"Service must expose grpc and metrics, got {svc['spec']['ports']}")
    for s in all_svcs:
        for sp in s["spec"]["ports"]:
            if sp["name"] == "grpc" and sp.get("appProtocol") != "grpc":
                errs.append(f"Service {s['metadata']['name']}: port grpc has appProtocol {sp.get('appProtocol')!r}, not grpc (also with TLS)")
    sel = svc["spec"].get("selector", {})
    if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
        errs.append(f"Service selector {sel} does not select the pod labels {pod_labels}")
    # The headless Service (Flyte's client-side round_robin): the gRPC port of ready pods only.
    for h in headless:
        hsel = h["spec"].get("selector", {})
        if not hsel or any(pod_labels.get(k) != v for k, v in hsel.items()):
            errs.append(f"headless Service selector {hsel} does not select the pod labels {pod_labels}")
        hp = h["spec"].get("ports", [])
        if [(p.get("name"), p.get("port"), p.get("targetPort")) for p in hp] != [("grpc", ports.get("grpc"), "grpc")]:
            errs.append(f"headless Service must expose only grpc:{ports.get('grpc')} → grpc, got {hp}")
        if h["spec"].get("publishNotReadyAddresses"):
            errs.append("headless Service publishes not-ready addresses: Flyte would call starting or draining pods")
        if h["metadata"]["name"] != svc["metadata"]["name"] + "-headless":
            errs.append(f"headless Service is named {h['metadata']['name']}, not {svc['metadata']['name']}-headless")
    dsel = dep["spec"]["selector"]["matchLabels"]
    if any(pod_labels.get(k) != v for k, v in dsel.items()):
        errs.append("Deployment selector does not match its pod labels")

    errs += check_availability(docs, dep, pod, pod_labels, env)
    errs += check_network_policy(docs, pod_labels, ports, env)
    errs += [f"Deployment {dep['metadata']['name']}: {e}" for e in psa_restricted(pod, volumes=False)]
    errs += check_probe(docs, dep, headless, ports, env)

    for sm in by_kind(docs, "ServiceMonitor"):
        for ep in sm["spec"].get("endpoints", []):
            if ep.get("port") not in {p["name"] for p in svc["spec"]["ports"]}:
                errs.append(f"ServiceMonitor scrapes port {ep.get('port')}, which the Service lacks")
        if any(svc["metadata"]["labels"].get(k) != v for k, v in sm["spec"]["selector"]["matchLabels"].items()):
            errs.append("ServiceMonitor selector does not select the Service")

    for sa in by_kind(docs, "ServiceAccount"):
        if sa["metadata"]["name"] != pod.get("serviceAccountName"):
            errs.append("the chart's ServiceAccount is not the one the pod uses")

    for cm in by_kind(docs, "ConfigMap"):
        if "clusters.toml" in cm.get("data", {}):
            errs += check_clusters_toml(cm["data"]["clusters.toml"], file_keys)
            rules = [n for n, c in tomllib.loads(cm["data"]["clusters.toml"]).get("clusters", {}).items() if c.get("identities")]
            if rules and not by_kind(docs, "NetworkPolicy") and not env.get("FLYTE_SLURM_INGRESS_POLICY"):
                errs.append(f"clusters {rules} have identity rules, but no NetworkPolicy restricts who reaches the gRPC port and no FLYTE_SLURM_INGRESS_POLICY names another restriction")
    errs += check_observability(docs)
    return errs


def peer_admits_all(peer: dict) -> bool:
    """A NetworkPolicyPeer that admits every pod of the cluster (or any address)."""
    if "ipBlock" in peer:
        return peer["ipBlock"].get("cidr") in ("0.0.0.0/0", "::/0")
    ns, pods = peer.get("namespaceSelector"), peer.get("podSelector")
    empty = lambda sel: sel is not None and not sel.get("matchLabels") and not sel.get("matchExpressions")
    return empty(ns) and (pods is None or empty(pods))


def check_network_policy(docs: list[dict], pod_labels: dict, ports: dict, env: dict) -> list[str]:
    """The NetworkPolicy selects the connector's pods, restricts ingress only (egress to slurmrestd
    and object stores stays open), admits the gRPC port from selected peers only, and the connector
    is told what it admits (FLYTE_SLURM_INGRESS_POLICY)."""
    errs: list[str] = []
    nps = by_kind(docs, "NetworkPolicy")
    if not nps:
        return errs
    if len(nps) != 1:
        return [f"{len(nps)} NetworkPolicies, want one"]
    np = nps[0]
    spec = np["spec"]
    sel = spec.get("podSelector", {}).get("matchLabels", {})
    if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
        errs.append(f"NetworkPolicy podSelector {sel} does not select the connector's pods {pod_labels}")
    if spec.get("policyTypes") != ["Ingress"]:
        errs.append(f"NetworkPolicy policyTypes {spec.get('policyTypes')}: want [Ingress] (egress to slurmrestd, object stores and DNS stays open)")
    grpc_rules = []
    for i, rule in enumerate(spec.get("ingress", [])):
        rports = [p.get("port") for p in rule.get("ports", [])]
        # A rule without ports admits every port; one without from (or with an empty peer) admits everyone.
        if not rports or ports.get("grpc") in rports or "grpc" in rports:
            grpc_rules.append(i)
            if not rule.get("from"):
                errs.append(f"NetworkPolicy ingress[{i}] admits the gRPC port from every source (no from)")
            for peer in rule.get("from", []):
                if peer_admits_all(peer):
                    errs.append(f"NetworkPolicy ingress[{i}] admits the gRPC port from every pod: {peer}")
    if not grpc_rules:
        errs.append("NetworkPolicy admits nothing to the gRPC port: Flyte could not reach the connector")
    first = (spec.get("ingress") or [{}])[0]
    if [p.get("port") for p in first.get("ports", [])] != [ports.get("grpc")]:
        errs.append(f"NetworkPolicy ingress[0] must be the gRPC port {ports.get('grpc')} rule, got {first.get('ports')}")
    metrics = [r for r in spec.get("ingress", []) if [p.get("port") for p in r.get("ports", [])] == [ports.get("metrics")]]
    if not metrics:
        errs.append(f"NetworkPolicy has no rule for the metrics port {ports.get('metrics')}")
    declared = env.get("FLYTE_SLURM_INGRESS_POLICY") or ""
    if not declared.startswith(f"NetworkPolicy {np['metadata']['name']}: gRPC port {ports.get('grpc')} from "):
        errs.append(f"connector: FLYTE_SLURM_INGRESS_POLICY {declared!r} does not describe NetworkPolicy {np['metadata']['name']} (gRPC port {ports.get('grpc')})")
    return errs


def seconds(duration: str | None) -> float | None:
    """FLYTE_SLURM_SHUTDOWN_GRACE as the chart writes it (`20s`), or a plain number."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)s?", duration or "")
    return float(m.group(1)) if m else None


def check_availability(docs: list[dict], dep: dict, pod: dict, pod_labels: dict, env: dict) -> list[str]:
    """Replicas keep serving through rollouts, drains and a node's loss; SIGTERM drains in time."""
    errs: list[str] = []
    replicas = dep["spec"].get("replicas", 1)
    strat = dep["spec"].get("strategy", {})
    ru = strat.get("rollingUpdate", {})
    if strat.get("type") != "RollingUpdate" or ru.get("maxUnavailable") != 0 or not ru.get("maxSurge"):
        errs.append(f"Deployment strategy must be RollingUpdate with maxUnavailable 0 and a maxSurge (a new pod Ready before an old one stops), got {strat}")
    grace = seconds(env.get("FLYTE_SLURM_SHUTDOWN_GRACE"))
    tgps = pod.get("terminationGracePeriodSeconds")
    if grace is None:
        errs.append(f"connector: FLYTE_SLURM_SHUTDOWN_GRACE missing or not seconds: {env.get('FLYTE_SLURM_SHUTDOWN_GRACE')!r}")
    elif not isinstance(tgps, int) or tgps < grace + 5:
        errs.append(f"terminationGracePeriodSeconds {tgps} does not cover the drain deadline {grace:g}s plus a margin of 5s or more: the kubelet's SIGKILL would cut the drain")
    if "FLYTE_SLURM_DATA_DIR" in env and replicas != 1:
        errs.append(f"the embedded demo with {replicas} replicas: each would run its own stand-in cluster")
    pdbs = by_kind(docs, "PodDisruptionBudget")
    if replicas > 1:
        if len(pdbs) != 1:
            errs.append(f"{replicas} replicas but {len(pdbs)} PodDisruptionBudgets (want one)")
        for pdb in pdbs:
            sel = pdb["spec"].get("selector", {}).get("matchLabels", {})
            if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
                errs.append(f"PodDisruptionBudget selector {sel} does not select the pod labels")
            lo, hi = pdb["spec"].get("minAvailable"), pdb["spec"].get("maxUnavailable")
            if (lo is None) == (hi is None):
                errs.append(f"PodDisruptionBudget must set exactly one of minAvailable / maxUnavailable: {pdb['spec']}")
            elif isinstance(lo, int) and not 1 <= lo < replicas:
                errs.append(f"PodDisruptionBudget minAvailable {lo} with {replicas} replicas: keeps none, or blocks every eviction")
            elif isinstance(hi, int) and not 1 <= hi < replicas:
                errs.append(f"PodDisruptionBudget maxUnavailable {hi} with {replicas} replicas: blocks every eviction, or allows all down")
        anti = pod.get("affinity", {}).get("podAntiAffinity", {})
        terms = [t.get("podAffinityTerm", {}) for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
        terms += anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
        spread = [t for t in terms if t.get("topologyKey") and all(
            pod_labels.get(k) == v for k, v in t.get("labelSelector", {}).get("matchLabels", {"-": None}).items())]
        if not spread:
            errs.append(f"{replicas} replicas without a pod anti-affinity over the pod's own labels: they may all land on one node")
    elif pdbs:
        errs.append("a PodDisruptionBudget over one replica blocks every node drain")
    return errs


def check_env(name: str, c: dict, volumes: dict, env_names: set[str]) -> list[str]:
    errs: list[str] = []
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    for e in c.get("env", []):
        n, v = e["name"], e.get("value")
        if n.startswith("FLYTE_SLURM_") and n not in env_names:
            errs.append(f"container {name}: {n} is not a variable the connector reads (see src/)")
        if n == "FLYTE_SLURM_JWT" and v:
            errs.append(f"container {name}: FLYTE_SLURM_JWT inlined in the manifest; mount a Secret and use FLYTE_SLURM_JWT_FILE")
        if isinstance(v, str) and JWT_LIKE.search(v):
            errs.append(f"container {name}: env {n} holds what looks like a JWT")
        if n in FILE_VARS and v is not None:
            owner = [p for p in mounts if under(v, p)]
            if not owner:
                errs.append(f"container {name}: {n}={v} is on no volumeMount of this container")
                continue
            m = mounts[max(owner, key=len)]
            if m.get("subPath") or m.get("subPathExpr"):
                errs.append(f"container {name}: {n}={v} is on a subPath mount, which never sees updates of its Secret/ConfigMap (renewed tokens, keys, certificates)")
            vol = volumes.get(m["name"], {})
            src = vol.get("secret") or vol.get("configMap")
            rel = v[len(m["mountPath"].rstrip("/")) + 1:]
            if src and src.get("items") and rel not in [i["path"] for i in src["items"]]:
                errs.append(f"container {name}: {n}={v}, but volume {m['name']} projects only {[i['path'] for i in src['items']]}")
        if n == "FLYTE_SLURM_DATA_DIR" and v is not None:
            owner = [p for p in mounts if under(v, p)]
            if not owner or mounts[max(owner, key=len)].get("readOnly"):
                errs.append(f"container {name}: FLYTE_SLURM_DATA_DIR={v} is not on a writable mount (the root fs is read-only)")
        if n == "FLYTE_SLURM_SHARED_MOUNTS" and v is not None:
            for pair in filter(None, v.split(",")):
                cluster, _, local = pair.partition("=")
                if not (cluster.startswith("/") and local.startswith("/")):
                    errs.append(f"container {name}: FLYTE_SLURM_SHARED_MOUNTS entry {pair!r} is not /cluster=/local")
                elif not any(under(local, p) and p not in ("/tmp",) for p in mounts):
                    errs.append(f"container {name}: FLYTE_SLURM_SHARED_MOUNTS maps {cluster} to {local}, which is not mounted here")
        if n in ("FLYTE_SLURM_RESTD_URL", "FLYTE_SLURM_STAGER_URL") and v is not None and not re.match(r"^https?://[^/]", v):
            errs.append(f"container {name}: {n}={v!r} is not an http(s) URL")
    return errs


def check_clusters_toml(text: str, file_keys: tuple[set[str], set[str]]) -> list[str]:
    top, cluster = file_keys
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return [f"clusters.toml does not parse: {e}"]
    errs = [f"clusters.toml: unknown key {k!r} (the connector refuses it)" for k in doc if k not in top]
    for name, c in doc.get("clusters", {}).items():
        errs += [f"clusters.toml: cluster {name}: unknown key {k!r}" for k in c if k not in cluster]
        if "restd_url" not in c:
            errs.append(f"clusters.toml: cluster {name} has no restd_url")
        if "jwt" in c or any("token" == k for k in c):
            errs.append(f"clusters.toml: cluster {name} inlines a token")
    return errs


def check_docs(env_names: set[str], file_keys: tuple[set[str], set[str]]) -> list[str]:
    """docs/configuration.md must document every variable and clusters-file key the code reads."""
    path = REPO / "docs" / "configuration.md"
    text = path.read_text()
    errs = [f"{path.name} does not document {n}" for n in sorted(env_names) if f"`{n}`" not in text]
    top, cluster = file_keys
    errs += [f"{path.name} does not document the clusters-file key {k}"
             for k in sorted((top | cluster) - {"clusters"}) if f"`{k}`" not in text]
    return errs


# ---------------------------------------------------------------------------------------------
# Flyte's own charts (deploy/flyte/charts/, pinned) rendered with deploy/flyte/'s values files,
# beside this chart: does the backend reach the connector, and is it routed there properly?

FLYTE_DIR = REPO / "deploy" / "flyte"
# The gRPC service config both Flyte plugins use by default (Flyte 2: connector/config.go
# DefaultConnector.DefaultServiceConfig at v2.0.43; Flyte 1: agent/config.go DefaultAgent at
# v1.16.8). An entry under `connectors` / `agents` inherits nothing from the default entry, so the
# values files repeat it: without it gRPC picks one pod (pick_first).
ROUND_ROBIN = {"loadBalancingConfig": [{"round_robin": {}}]}
# CreateTask waits this long for its submit before answering deferred (FLYTE_SLURM_SUBMIT_WAIT's
# default, src/config): a deadline at or below it cuts CreateTasks that are still waiting.
SUBMIT_WAIT_SECONDS = 5
FLYTE_BACKENDS = [
    {"name": "Flyte 2, flyte-binary v2.0.43", "chart": "charts/flyte-binary-v2.0.43/flyte-binary", "values": "values-flyte2-binary.yaml",
     # the backend workload (the one process that runs the plugin): the chart's fullname
     "backend": ("Deployment", "flyte-flyte-binary"),
     "plugin": "connector-service", "deployments": "connectors", "routing": "connectorForTaskTypes",
     "task_types": ["slurm", "slurm_script"],
     # The executor has no enabled-plugins key (executor/pkg/config/task_plugin_config.go, v2.0.43):
     # every plugin it is built with loads, and routing is default-for-task-types alone.
     "enabled_list": False},
    {"name": "Flyte 1, flyte-core v1.16.8", "chart": "charts/flyte-core-v1.16.8/flyte-core", "values": "values-flyte1-core.yaml",
     "backend": ("Deployment", "flytepropeller"),
     # Flyte 1.15+'s connector-service speaks flyteidl.service.AsyncConnectorService, which the
     # connector does not serve: the Slurm types must go to the agent plugin.
     "plugin": "agent-service", "deployments": "agents", "routing": "agentForTaskTypes",
     "task_types": ["slurm_fn", "slurm"], "unserved_plugins": ["connector-service"], "enabled_list": True},
]
FLYTE_RELEASE, FLYTE_NAMESPACE = "flyte", "flyte"


# Pod Security Admission `restricted` (Kubernetes' Pod Security Standards): what a pod must say.
PSA_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}


def psa_restricted(pod: dict, volumes: bool = True) -> list[str]:
    """Why a namespace enforcing PSA `restricted` would refuse this pod spec (empty: admitted).
    `volumes=False` leaves out the volume types (the operator's `sharedFilesystem` choice)."""
    errs = []
    psc = pod.get("securityContext") or {}
    for v in pod.get("volumes", []) if volumes else []:
        kinds = set(v) - {"name"}
        if not kinds <= PSA_VOLUMES:
            errs.append(f"volume {v['name']} is {sorted(kinds)}: restricted allows only {sorted(PSA_VOLUMES)}")
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            errs.append(f"container {name}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            errs.append(f"container {name}: capabilities must drop ALL (and add at most NET_BIND_SERVICE)")
        if not (sc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)):
            errs.append(f"container {name}: runAsNonRoot must be true (pod or container)")
        if 0 in (sc.get("runAsUser"), psc.get("runAsUser")):
            errs.append(f"container {name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            errs.append(f"container {name}: seccompProfile.type is {seccomp!r}, not RuntimeDefault or Localhost")
        if sc.get("privileged"):
            errs.append(f"container {name}: privileged")
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        errs.append("host namespaces")
    return errs


def check_probe(docs: list[dict], dep: dict, headless: list[dict], ports: dict, env: dict) -> list[str]:
    """The `helm test` pod (templates/tests/connector-probe.yaml): what it runs is a real `check
    --connector` of the headless Service (the image's entrypoint is the binary, so its args start
    with the subcommand), it is admitted by PSA `restricted` and pulls like the connector's pod,
    and the NetworkPolicy treats it as Flyte's backend. None with TLS on the gRPC port."""
    probes = [d for d in by_kind(docs, "Pod") if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
    if "FLYTE_SLURM_TLS_CERT_FILE" in env:
        return [f"a helm test pod with TLS on the gRPC port: check --connector speaks plaintext only"] if probes else []
    if len(probes) != 1:
        return [f"expected one helm test pod (the connector probe), got {len(probes)}"]
    probe = probes[0]
    spec = probe["spec"]
    pod = dep["spec"]["template"]["spec"]
    errs = [f"helm test pod: {e}" for e in psa_restricted(spec)]
    c = spec["containers"][0]
    if c.get("image") != pod["containers"][0].get("image") or spec.get("imagePullSecrets") != pod.get("imagePullSecrets"):
        errs.append("helm test pod: not the connector's image and imagePullSecrets")
    if c.get("command"):
        errs.append(f"helm test pod: command {c['command']} replaces the image's entrypoint (the binary)")
    want = f"{(headless or [{'metadata': {'name': '?'}}])[0]['metadata']['name']}.flyte.svc.cluster.local:{ports.get('grpc')}"
    if [str(a) for a in c.get("args", [])] != ["check", "--connector", want]:
        errs.append(f"helm test pod: args {c.get('args')} are not check --connector {want}")
    labels = probe["metadata"].get("labels") or {}
    nps = by_kind(docs, "NetworkPolicy")
    if nps and not grpc_admits(nps[0], ports.get("grpc"), "flyte", labels):
        errs.append(f"helm test pod: the NetworkPolicy does not admit its labels {labels}: it would not test Flyte's path")
    sel = dep["spec"]["selector"]["matchLabels"]
    if all(labels.get(k) == v for k, v in sel.items()):
        errs.append("helm test pod: the connector's Services would select it")
    return errs


def selector_matches(sel: dict | None, labels: dict) -> bool:
    """Kubernetes LabelSelector semantics (an absent selector is handled by the caller)."""
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        op, key, vals = e.get("operator"), e.get("key"), e.get("values") or []
        if (op == "In" and labels.get(key) not in vals) or (op == "NotIn" and key in labels and labels[key] in vals) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def grpc_admits(np: dict, grpc_port: int, namespace: str, pod_labels: dict) -> bool:
    """Does the connector's NetworkPolicy admit a pod with these labels in this namespace to the
    gRPC port? (namespace labels: what Kubernetes sets on every namespace.)"""
    ns_labels = {"kubernetes.io/metadata.name": namespace}
    own_ns = np["metadata"].get("namespace", "flyte")
    for rule in np["spec"].get("ingress", []):
        ports = [p.get("port") for p in rule.get("ports", [])]
        if ports and grpc_port not in ports and "grpc" not in ports:
            continue
        if not rule.get("from"):
            return True
        for peer in rule["from"]:
            if "ipBlock" in peer:
                continue
            nss = peer.get("namespaceSelector")
            in_ns = selector_matches(nss, ns_labels) if nss is not None else namespace == own_ns
            pods = peer.get("podSelector")
            if in_ns and (pods is None or selector_matches(pods, pod_labels)):
                return True
    return False


def workloads(docs: list[dict]) -> list[tuple[str, str, dict, dict]]:
    """(kind, name, pod labels, pod spec) of every workload and pod template."""
    out = []
    for d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
            t = d["spec"]["template"]
        elif d.get("kind") == "PodTemplate":
            t = d["template"]
        else:
            continue
        out.append((d["kind"], d["metadata"]["name"], t.get("metadata", {}).get("labels", {}), t.get("spec", {})))
    return out


def deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def flyte_configs(docs: list[dict]) -> dict[str, dict]:
    """Each ConfigMap's YAML files merged in name order, as Flyte's config loader reads a folder."""
    out = {}
    for cm in by_kind(docs, "ConfigMap"):
        merged: dict = {}
        for key in sorted(cm.get("data") or {}):
            if key.endswith((".yaml", ".yml")):
                try:
                    doc = yaml.safe_load(cm["data"][key])
                except yaml.YAMLError:
                    continue
                if isinstance(doc, dict):
                    merged = deep_merge(merged, doc)
        out[cm["metadata"]["name"]] = merged
    return out


def mounted_configmaps(spec: dict) -> set[str]:
    names = set()
    for v in spec.get("volumes", []):
        if "configMap" in v:
            names.add(v["configMap"].get("name"))
        for src in v.get("projected", {}).get("sources", []):
            if "configMap" in src:
                names.add(src["configMap"].get("name"))
    return names


def go_duration_seconds(text) -> float | None:
    """A Go duration as Flyte's config reads it (`10s`, `1m30s`, `500ms`)."""
    parts = re.findall(r"([0-9.]+)(ms|s|m|h)", str(text or ""))
    if not parts or "".join(n + u for n, u in parts) != str(text):
        return None
    return sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts)


def check_flyte_backend(spec: dict, flyte_docs: list[dict], namespace: str, connector_docs: list[dict]) -> list[str]:
    """The Flyte chart, rendered with its values file: the backend's pods reach the connector
    through its NetworkPolicy (and Flyte's other pods do not), and the backend's configuration
    routes every Slurm task type to the connector's headless Service with round_robin and a deadline."""
    errs: list[str] = []
    np = by_kind(connector_docs, "NetworkPolicy")[0]
    grpc = [p["containerPort"] for p in pod_of(connector_docs)["containers"][0]["ports"] if p["name"] == "grpc"][0]
    headless = [s for s in by_kind(connector_docs, "Service") if s["spec"].get("clusterIP") == "None"][0]
    want_endpoint = f"dns:///{headless['metadata']['name']}.{namespace}.svc.cluster.local:{grpc}"
    # Which ConfigMap routes the task types, and which workloads read it.
    configs = flyte_configs(flyte_docs)
    routing = {n: c for n, c in configs.items() if isinstance(c.get("plugins"), dict) and spec["plugin"] in c["plugins"]}
    if len(routing) != 1:
        return [f"{len(routing)} rendered ConfigMaps configure plugins.{spec['plugin']} (want one): is the values file in the block the chart renders?"]
    cm_name, cfg = next(iter(routing.items()))
    kind, name = spec["backend"]
    backend = [w for w in workloads(flyte_docs) if (w[0], w[1]) == (kind, name)]
    if not backend:
        errs.append(f"no {kind} {name} rendered (the backend workload)")
    for k, n, labels, pod in backend:
        if cm_name not in mounted_configmaps(pod):
            errs.append(f"{k} {n} does not mount ConfigMap {cm_name}: the routing never reaches the backend")
        if not grpc_admits(np, grpc, namespace, labels):
            errs.append(f"the connector's NetworkPolicy does not admit {k} {n} (namespace {namespace}, labels {labels}) to the gRPC port {grpc}: every call would time out")
    for k, n, labels, pod in workloads(flyte_docs):
        if (k, n) != (kind, name) and grpc_admits(np, grpc, namespace, labels):
            errs.append(f"the connector's NetworkPolicy admits {k} {n} ({labels}), which is not the backend that calls connectors")
    # The routing itself.
    tp = (cfg.get("tasks") or {}).get("task-plugins") or {}
    plugin = cfg["plugins"][spec["plugin"]] or {}
    if spec["enabled_list"] and spec["plugin"] not in (tp.get("enabled-plugins") or []):
        errs.append(f"{cm_name}: {spec['plugin']} is not in tasks.task-plugins.enabled-plugins {tp.get('enabled-plugins')}")
    if not spec["enabled_list"] and "enabled-plugins" in tp:
        errs.append(f"{cm_name}: tasks.task-plugins.enabled-plugins {tp['enabled-plugins']}: {spec['name']}'s executor has no such key (it loads every plugin); it would be silently ignored")
    # Routing the Slurm types keeps the chart's own routes: nothing replaced.
    for t, want in (("container", "container"), ("container_array", "k8s-array")):
        if (tp.get("default-for-task-types") or {}).get(t) != want:
            errs.append(f"{cm_name}: default-for-task-types.{t} is {(tp.get('default-for-task-types') or {}).get(t)!r}, not the chart's {want}: the values file replaced the chart's routes")
    for t in spec["task_types"]:
        got = (tp.get("default-for-task-types") or {}).get(t)
        if got != spec["plugin"]:
            hint = " (it speaks flyteidl.service.AsyncConnectorService, which slurm-connector does not serve: UNIMPLEMENTED)" if got in spec.get("unserved_plugins", []) else ""
            errs.append(f"{cm_name}: default-for-task-types.{t} is {got!r}, not {spec['plugin']}{hint}")
        cid = (plugin.get(spec["routing"]) or {}).get(t)
        dep = (plugin.get(spec["deployments"]) or {}).get(cid) if cid else None
        if not dep:
            errs.append(f"{cm_name}: plugins.{spec['plugin']}.{spec['routing']}.{t} names {cid!r}, which is not under {spec['deployments']}")
            continue
        what = f"{cm_name}: plugins.{spec['plugin']}.{spec['deployments']}.{cid}"
        if dep.get("endpoint") != want_endpoint:
            errs.append(f"{what}: endpoint {dep.get('endpoint')!r} is not the connector's headless Service {want_endpoint} (round_robin needs every pod's address)")
        try:
            sc = json.loads(dep.get("defaultServiceConfig") or "null")
        except json.JSONDecodeError as e:
            sc = f"invalid JSON: {e}"
        if sc != ROUND_ROBIN:
            errs.append(f"{what}: defaultServiceConfig {sc!r} is not {ROUND_ROBIN!r} (without it gRPC sends every call to one pod)")
        timeouts = {"default": dep.get("defaultTimeout"), **{op: v for op, v in (dep.get("timeouts") or {}).items()}}
        secs = go_duration_seconds(timeouts["default"])
        if secs is None:
            errs.append(f"{what}: no defaultTimeout (got {timeouts['default']!r}): the plugin then sets no deadline on any call")
        elif not SUBMIT_WAIT_SECONDS < secs <= 60:
            errs.append(f"{what}: defaultTimeout {timeouts['default']} is not above the connector's {SUBMIT_WAIT_SECONDS}s CreateTask wait (and at most 60s)")
        if dep.get("insecure") is not True:
            errs.append(f"{what}: insecure must be true (the chart's gRPC port is plaintext without tls.existingSecret)")
    return errs


def flyte_self_test(spec: dict, flyte_docs: list[dict], connector_docs: list[dict]) -> tuple[list[str], int]:
    """Each mutation of a good Flyte render breaks one property; check_flyte_backend must say so."""
    kind, name = spec["backend"]

    def pod_labels(d):
        return [w for w in workloads(d) if (w[0], w[1]) == (kind, name)][0][2]

    def routing(d, edit):
        for cm in by_kind(d, "ConfigMap"):
            for key, text in (cm.get("data") or {}).items():
                if key.endswith(".yaml") and f"{spec['plugin']}:" in text and "plugins:" in text:
                    doc = yaml.safe_load(text)
                    if isinstance(doc, dict) and spec["plugin"] in (doc.get("plugins") or {}):
                        edit(doc)
                        cm["data"][key] = yaml.safe_dump(doc)
                        return
        raise KeyError("no routing ConfigMap")

    def dep(doc):
        p = doc["plugins"][spec["plugin"]]
        return p[spec["deployments"]][p[spec["routing"]][spec["task_types"][0]]]

    t0 = spec["task_types"][0]
    mutations = {
        "backend pod relabelled": lambda d: pod_labels(d).update({"app.kubernetes.io/name": "flyte-backend"}),
        "backend not mounting the routing config": lambda d: [w[3].update(volumes=[]) for w in workloads(d) if (w[0], w[1]) == (kind, name)],
        "the policy admitting another Flyte pod": lambda d: [w[2].update(pod_labels(d)) for w in workloads(d) if (w[0], w[1]) != (kind, name)][:1],
        "no defaultTimeout": lambda d: routing(d, lambda doc: dep(doc).pop("defaultTimeout")),
        "defaultTimeout below the CreateTask wait": lambda d: routing(d, lambda doc: dep(doc).update(defaultTimeout="3s")),
        "pick_first": lambda d: routing(d, lambda doc: dep(doc).update(defaultServiceConfig='{"loadBalancingConfig": [{"pick_first":{}}]}')),
        "endpoint on the ClusterIP Service": lambda d: routing(d, lambda doc: dep(doc).update(endpoint="dns:///slurm-connector.flyte.svc.cluster.local:8000")),
        **({"plugin not enabled": lambda d: routing(d, lambda doc: doc["tasks"]["task-plugins"]["enabled-plugins"].remove(spec["plugin"]))} if spec["enabled_list"] else
           {"an enabled-plugins list the executor does not read": lambda d: routing(d, lambda doc: doc["tasks"]["task-plugins"].update({"enabled-plugins": ["container", spec["plugin"]]}))}),
        f"{t0} routed to another plugin": lambda d: routing(d, lambda doc: doc["tasks"]["task-plugins"]["default-for-task-types"].update({t0: spec.get("unserved_plugins", ["container"])[0]})),
        f"{t0} to an undefined deployment": lambda d: routing(d, lambda doc: doc["plugins"][spec["plugin"]][spec["routing"]].update({t0: "nope"})),
    }
    problems = []
    for what, mutate in mutations.items():
        docs = copy.deepcopy(flyte_docs)
        try:
            mutate(docs)
        except (IndexError, KeyError, ValueError) as e:
            problems.append(f"self-test {what!r}: the reference render lacks what the mutation changes ({e})")
            continue
        if not check_flyte_backend(spec, docs, FLYTE_NAMESPACE, connector_docs):
            problems.append(f"self-test {what!r}: the checks did not notice")
    # Flyte installed in another namespace than the policy's default selects.
    n = len(mutations) + 1
    if not check_flyte_backend(spec, flyte_docs, "flyte-prod", connector_docs):
        problems.append("self-test 'backend in another namespace': the checks did not notice")
    return problems, n


def check_enabled_plugins_merge(helm, spec: dict) -> list[str]:
    """The quick start's Flyte 1 upgrade: the site's values (`helm get values --all`: the chart's
    defaults plus a site that enabled spark), values-flyte1-core.yaml, then what
    enabled-plugins.py made of the first, in that order as Helm merges them. The rendered list
    keeps spark and has the agent plugin; without the third file spark is gone (why it exists)."""
    chart_values = yaml.safe_load((FLYTE_DIR / spec["chart"] / "values.yaml").read_text())
    site = deep_merge(chart_values, {"configmap": {"enabled_plugins": {"tasks": {"task-plugins": {
        "enabled-plugins": ["container", "sidecar", "k8s-array", "spark", "connector-service", "echo"]}}}}})
    out = subprocess.run([sys.executable, str(FLYTE_DIR / "enabled-plugins.py"), spec["plugin"]],
                         input=json.dumps(site), capture_output=True, text=True)
    if out.returncode != 0:
        return [f"enabled-plugins.py failed: {out.stderr.strip()}"]
    ours = yaml.safe_load((FLYTE_DIR / spec["values"]).read_text())
    errs = []
    for files, want_spark in (((site, ours, json.loads(out.stdout)), True), ((site, ours), False)):
        values: dict = {}
        for f in files:
            values = deep_merge(values, f)
        docs = render_chart(helm, FLYTE_DIR / spec["chart"], values, FLYTE_RELEASE, FLYTE_NAMESPACE)
        tp = [c for c in flyte_configs(docs).values() if (c.get("tasks") or {}).get("task-plugins")]
        got = ((tp[0]["tasks"]["task-plugins"]) if tp else {}).get("enabled-plugins") or []
        if spec["plugin"] not in got or ("spark" in got) != want_spark:
            errs.append(f"{len(files)} values files: rendered enabled-plugins {got} (want {spec['plugin']}, and spark {'kept' if want_spark else 'dropped, as Helm replaces lists'})")
    return errs


def render_flyte(helm, spec: dict) -> list[dict]:
    values = yaml.safe_load((FLYTE_DIR / spec["values"]).read_text())
    return render_chart(helm, FLYTE_DIR / spec["chart"], values, FLYTE_RELEASE, FLYTE_NAMESPACE)


# ---------------------------------------------------------------------------------------------
# The quick start names only what exists: chart values, `slurm-connector` subcommands and flags
# (read from the clap definitions in src/, not by running the binary), and repository paths.

QUICKSTART = REPO / "docs" / "quickstart-kubernetes.md"


def clap_flags(block: str) -> set[str]:
    """The long flags of a clap derive block: each `#[arg(...long...)]` and the field after it."""
    flags = set()
    for m in re.finditer(r"#\[arg\((.*?)\)\]\s*(?:///[^\n]*\n\s*)*(?:pub\s+)?(\w+)\s*:", block, re.S):
        attrs, field = m.group(1), m.group(2)
        named = re.search(r'\blong\s*=\s*"([a-z0-9-]+)"', attrs)
        if named:
            flags.add(named.group(1))
        elif re.search(r"\blong\b", attrs):
            flags.add(field.replace("_", "-"))
    return flags


@functools.cache
def cli_surface() -> dict[str, set[str]]:
    """{subcommand: its long flags} from src/main.rs's `enum Command` (a variant wrapping an args
    struct is read from that struct in src/cli/), plus "" for the top level."""
    main = (REPO / "src" / "main.rs").read_text()
    start = main.index("enum Command {")
    body = main[start:main.index("\n}\n", start)]
    variants = list(re.finditer(r"^    ([A-Z]\w*)\s*(?:\{|\(([\w:]+)\))", body, re.M))
    out: dict[str, set[str]] = {"": {"help", "version"}}
    for i, v in enumerate(variants):
        name = re.sub(r"(?<!^)([A-Z])", r"-\1", v.group(1)).lower()
        if v.group(2):
            struct = v.group(2).split("::")[-1]
            module = v.group(2).split("::")[-2] if "::" in v.group(2) else None
            src = (REPO / "src" / "cli" / f"{module}.rs").read_text() if module else main
            m = re.search(r"struct " + struct + r" \{(.*?)\n\}", src, re.S)
            region = m.group(1) if m else ""
        else:
            region = body[v.end():variants[i + 1].start() if i + 1 < len(variants) else len(body)]
        out[name] = clap_flags(region) | {"help"}
    if "serve" not in out or "listen" not in out["serve"] or "output-prefix" not in out.get("check", set()):
        raise SystemExit(f"src/main.rs: could not read the CLI's subcommands and flags (update validate_chart.py): {out}")
    return out


def chart_value_exists(values, path: str) -> bool:
    """As tests/it/docs_names.rs: below a list, an empty map or a scalar anything is accepted."""
    node = values
    for seg in path.split("."):
        key = seg.split("[")[0]
        if not isinstance(node, dict) or not node:
            return True
        if key not in node:
            return False
        node = node[key]
        if "[" in seg:
            return True
    return True


def check_quickstart(text: str) -> list[str]:
    """Every chart value (`a.b` under a values.yaml top key, or after --set), every
    `slurm-connector SUB --flag`, and every repository path the quick start names exists."""
    errs: list[str] = []
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    cli = cli_surface()
    joined = text.replace("\\\n", " ")
    for n, line in enumerate(joined.splitlines(), 1):
        names = re.findall(r"`([A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_\[\]]+)+)(?:[=:][^`]*)?`", line)
        names += re.findall(r"--set(?:-string|-file)?[ =]([A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_\[\]]+)+)=", line)
        for name in names:
            top = re.split(r"[.\[]", name)[0]
            if top in values and not re.search(r"\.(crt|key|pem|toml|yaml|yml|json|md|sh|py)$", name) \
                    and not chart_value_exists(values, name):
                errs.append(f"{QUICKSTART.name}:{n}: chart value {name} is not in values.yaml")
        for m in re.finditer(r"\bslurm-connector\s+([a-z][a-z-]*|--[a-z-]+)([^|;&`\n]*)", line):
            sub, rest = m.group(1), m.group(2)
            if sub.startswith("--"):
                sub, rest = "", sub + rest
            elif sub not in cli:
                if sub in ("check", "serve", "render", "submit", "stager") or re.match(r"^\s*--", rest):
                    errs.append(f"{QUICKSTART.name}:{n}: slurm-connector has no subcommand {sub}")
                continue
            for f in re.findall(r"(?:^|\s)--([a-z][a-z0-9-]*)", rest):
                if f not in cli[sub]:
                    errs.append(f"{QUICKSTART.name}:{n}: slurm-connector {sub or ''} has no flag --{f}".replace("  ", " "))
        for path in re.findall(r"(?<![\w/.])((?:deploy|docs|src|tests|scripts)/[\w./-]*\w)", line):
            if "kubectl" in line and re.fullmatch(r"deploy/[\w-]+", path) and not (REPO / path).is_dir():
                continue  # kubectl's deploy/NAME, a Deployment
            if not (REPO / path).exists():
                errs.append(f"{QUICKSTART.name}:{n}: {path} does not exist")
    return errs


def quickstart_self_test() -> tuple[list[str], int]:
    """check_quickstart flags a made-up name of each kind."""
    bad = {
        "a misspelt chart value": "Set `cluster.workDir` to the directory.",
        "a made-up --set key": "helm install x --set auth.token=abc",
        "a flag check lacks": "kubectl exec ... -- slurm-connector check --port 8000",
        "a subcommand that does not exist": "slurm-connector preflight --output-prefix s3://b",
        "a renamed values file": "helm upgrade flyte flyteorg/flyte-binary -f deploy/flyte/values-connector.yaml",
    }
    problems = [f"self-test {what!r}: not flagged" for what, text in bad.items() if not check_quickstart(text)]
    good = "`cluster.workingDir`, --set cluster.restdUrl=http://x, `slurm-connector check --output-prefix s3://b`"
    if check_quickstart(good):
        problems.append(f"self-test: a correct line is flagged: {check_quickstart(good)}")
    return problems, len(bad) + 1


# ---------------------------------------------------------------------------------------------
# The operator's two pages, docs/quickstart-kubernetes.md and docs/deploy.md: every fenced block
# is parsed as what it is, and every name in it that the chart or the CLI defines is checked
# against the rendered quick-start release and src/'s CLI. A block of a kind nothing here reads
# fails, so a new block cannot slip past. (tests/it/docs_names.rs checks the same commands'
# subcommands and flags against the built binary's --help.)

OPERATOR_DOCS = [REPO / "docs" / "quickstart-kubernetes.md", REPO / "docs" / "deploy.md"]
# What the pages run, besides kubectl, helm and slurm-connector (checked in detail below).
SHELL_COMMANDS = {
    "sudo", "sh", "install", "useradd", "systemctl", "mkdir", "chown", "chmod", "head", "rm", "cp", "cat",
    "id", "sacctmgr", "scontrol", "findmnt", "exportfs", "docker", "git", "pip", "python", "python3",
    "python3.11", "flyte", "pyflyte", "sha256sum", "curl", "ls", "echo", "export", ".", "DOCKER_BUILDKIT=1",
    "deploy/validate-chart.sh", "squeue", "sacct", "ssh", "umask", "sed",
}
# Values files the pages tell the reader to write (or fetch) before using them.
FLYTE_CHART_VERSIONS = {"flyteorg/flyte-binary": "v2.0.43", "flyteorg/flyte-core": "v1.16.8"}


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, info string, body dedented) of each fenced block, indented ones included."""
    out = []
    for m in re.finditer(r"^( *)```([\w-]*)[^\n]*\n(.*?)^\1```[ \t]*$", text, re.M | re.S):
        indent = len(m.group(1))
        body = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in m.group(3).splitlines())
        out.append((text.count("\n", 0, m.start()) + 1, m.group(2), body))
    return out


def near(a: str, b: str) -> bool:
    """A misspelling of a camelCase key of 5 letters or more: an edit distance of 1 (3 from 10
    letters: networkPolicies for networkPolicy), as tests/it/docs_names.rs's `misspelt`."""
    if a == b or min(len(a), len(b)) < 5 or "_" in a:
        return False
    limit = 1 if min(len(a), len(b)) < 10 else 3
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1] <= limit


class Release:
    """The quick start's release as rendered: its objects' names, for the pages' commands."""

    def __init__(self, docs: list[dict]):
        self.deployments = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
        self.services = {d["metadata"]["name"] for d in by_kind(docs, "Service")}
        self.tests = [d for d in by_kind(docs, "Pod") if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
        self.pod_labels = {n: d["spec"]["template"]["metadata"]["labels"] for n, d in self.deployments.items()}
        self.containers = {n: {c["name"] for c in d["spec"]["template"]["spec"]["containers"]} for n, d in self.deployments.items()}
        self.values = yaml.safe_load((CHART / "values.yaml").read_text())


def check_slurm_connector(args: list[str], where: str) -> list[str]:
    """`slurm-connector ARGS` (the binary's own arguments) against src/'s CLI."""
    cli = cli_surface()
    if not args:
        return [f"{where}: slurm-connector without a subcommand"]
    sub, rest = ("", args) if args[0].startswith("--") else (args[0], args[1:])
    if sub and sub not in cli:
        return [f"{where}: slurm-connector has no subcommand {sub!r} (it has {', '.join(sorted(s for s in cli if s))})"]
    return [f"{where}: slurm-connector {sub} has no flag {a.split('=')[0]}".replace("  ", " ")
            for a in rest if a.startswith("--") and a[2:].split("=")[0] not in cli[sub]]


def shell_commands(body: str) -> list[tuple[list[str], str | None]]:
    """Each simple command of a shell block (continuations joined, comments dropped), with the
    body of its here-document if it has one."""
    lines = body.replace("\\\n", " ").splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        tokens = list(lex)
        heredoc = None
        if "<<" in tokens:
            word = tokens[tokens.index("<<") + 1].lstrip("-")
            start = i
            while i < len(lines) and lines[i].strip() != word:
                i += 1
            heredoc = "\n".join(lines[start:i])
            i += 1
        cmd: list[str] = []
        for t in tokens + [";"]:
            if t in ("|", "||", "&&", ";", "&", "(", ")"):
                if cmd:
                    out.append((cmd, heredoc if "<<" in cmd else None))
                cmd = []
            else:
                cmd.append(t)
    return out


def check_kubectl(argv: list[str], rel: Release, where: str, heredoc: str | None) -> list[str]:
    errs = []
    ns, args, i = None, [], 1
    while i < len(argv):
        a = argv[i]
        if a in ("-n", "--namespace"):
            ns, i = argv[i + 1], i + 2
            continue
        args.append(a)
        i += 1
    if ns not in (None, "flyte"):
        errs.append(f"{where}: kubectl -n {ns}: the pages install into namespace flyte")
    if not args:
        return errs + [f"{where}: kubectl without a verb"]
    verb = args[0]
    container = args[args.index("-c") + 1] if "-c" in args else None
    target = next((a for a in args[1:] if a.startswith(("deploy/", "deployment/"))), None)
    dep = target.split("/", 1)[1] if target else None
    if dep is not None and dep not in rel.deployments:
        errs.append(f"{where}: kubectl {verb} {target}: the release has no Deployment {dep} (it has {', '.join(rel.deployments)})")
    if container is not None:
        pods = [dep] if dep in rel.deployments else list(rel.deployments)
        if not any(container in rel.containers[p] for p in pods):
            errs.append(f"{where}: kubectl {verb} -c {container}: no container {container!r} (the connector's pod has {', '.join(sorted(set().union(*rel.containers.values())))})")
    if "-l" in args:
        sel = dict(kv.split("=", 1) for kv in args[args.index("-l") + 1].split(",") if "=" in kv)
        if sel.get("app.kubernetes.io/name") == "slurm-connector" and not any(
                all(labels.get(k) == v for k, v in sel.items()) for labels in rel.pod_labels.values()):
            errs.append(f"{where}: kubectl -l {args[args.index('-l') + 1]} selects none of the release's pods")
    if verb == "run":
        errs.append(f"{where}: kubectl run: a pod made so has no securityContext (Pod Security Admission `restricted` refuses it) "
                    f"and no imagePullSecrets, and its arguments follow the image's entrypoint (already the binary); "
                    f"use `helm test` (the chart's probe pod) or `kubectl exec deploy/... -c connector -- slurm-connector ...`")
    if verb == "exec":
        if "--" not in args:
            errs.append(f"{where}: kubectl exec without `--` before the command")
        else:
            cmd = args[args.index("--") + 1:]
            if cmd and cmd[0] == "slurm-connector":
                errs += check_slurm_connector(cmd[1:], where)
    if verb in ("get", "describe") and len(args) > 2 and args[1] in ("svc", "service", "endpoints", "ep") and args[2] not in rel.services:
        errs.append(f"{where}: kubectl {verb} {args[1]} {args[2]}: the release has no Service {args[2]}")
    if verb == "apply" and heredoc is not None:
        for doc in yaml.safe_load_all(heredoc):
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                errs.append(f"{where}: kubectl apply: a document without kind/apiVersion")
    return errs


def check_helm(argv: list[str], rel: Release, where: str, created: set[str]) -> list[str]:
    errs = []
    args = argv[1:]
    verb = args[0] if args else ""
    files = [args[i + 1] for i, a in enumerate(args) if a in ("-f", "--values")]
    for f in files:
        if f not in created and not (REPO / f).exists():
            errs.append(f"{where}: helm {verb} -f {f}: neither a file of the repository nor one the page made before")
    if verb in ("install", "upgrade", "template"):
        positional = [a for i, a in enumerate(args[1:], 1) if not a.startswith("-") and args[i - 1] not in ("-f", "--values", "-n", "--namespace", "--version", "--set")]
        chart = positional[1] if len(positional) > 1 else ""
        if chart in FLYTE_CHART_VERSIONS:
            version = args[args.index("--version") + 1] if "--version" in args else None
            if version is None:
                errs.append(f"{where}: helm {verb} {chart} without --version: it would take the newest chart and upgrade Flyte itself")
            elif version != FLYTE_CHART_VERSIONS[chart]:
                errs.append(f"{where}: helm {verb} {chart} --version {version}: the pages are tested with {FLYTE_CHART_VERSIONS[chart]}")
        elif chart.startswith("deploy/") and not (REPO / chart).is_dir():
            errs.append(f"{where}: helm {verb} {chart}: no such chart in the repository")
    if verb == "test" and not rel.tests:
        errs.append(f"{where}: helm test: the release renders no test pod")
    return errs


def check_yaml_block(body: str, rel: Release, where: str, helm) -> list[str]:
    """A values block of this chart renders (merged over the quick start's values; the chart's
    schema refuses unknown keys); Flyte's, the SDKs' and Kubernetes' blocks parse; a top-level key
    one letter off this chart's is a misspelling."""
    try:
        docs = [d for d in yaml.safe_load_all(body) if d is not None]
    except yaml.YAMLError as e:
        return [f"{where}: not YAML: {e}"]
    errs = []
    tops = set(rel.values)
    for doc in docs:
        if not isinstance(doc, dict):
            errs.append(f"{where}: a YAML block that is not a map")
            continue
        keys = set(doc)
        if {"apiVersion", "kind"} <= keys:
            continue  # a Kubernetes object (cert-manager's Certificate, a PersistentVolume)
        if keys <= {"tasks", "plugins", "configmap", "configuration"}:
            continue  # Flyte's configuration: deploy/flyte/'s files, rendered with Flyte's charts
        if keys <= {"admin", "image", "task", "logger"}:
            continue  # the Flyte SDKs' config files
        for k in keys - tops:
            close = [t for t in tops if near(k, t)]
            errs.append(f"{where}: top-level key {k!r} is not a value of the chart" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if keys - tops:
            continue
        values = deep_merge(yaml.safe_load((CHART / "ci" / "quickstart-values.yaml").read_text()), doc)
        try:
            render(helm, values)
        except helm.HelmError as e:
            errs.append(f"{where}: the chart refuses these values: {' '.join(str(e).split())[:500]}")
    return errs


CHECK_ROW = re.compile(r"^[✓✗] (\S+) +(.+?) {2,}|^[✓✗] (\S+) +(\S.*)$")


def check_operator_doc(path: Path, text: str, rel: Release, helm) -> list[str]:
    errs: list[str] = []
    name = path.name
    created: set[str] = set()
    check_names = set(re.findall(r'"([A-Za-z][^"\n]{2,40})"', (REPO / "src" / "cli" / "check.rs").read_text()
                                 + (REPO / "src" / "cli" / "connector_check.rs").read_text()))
    for line_no, lang, body in fenced_blocks(text):
        where = f"{name}:{line_no}"
        # Service names, wherever a block writes one (endpoints, certificates, commands, output).
        for svc, ns in re.findall(r"\b([a-z0-9][a-z0-9-]*)\.([a-z0-9-]+)\.svc\.cluster\.local", body):
            if ns == "flyte" and svc not in rel.services:
                errs.append(f"{where}: {svc}.{ns}.svc.cluster.local: the release has no Service {svc} (it has {', '.join(sorted(rel.services))})")
        if lang == "sh":
            for argv, heredoc in shell_commands(body):
                words = [w for w in argv if not re.fullmatch(r"[A-Z_]+=\S*", w)] or argv
                cmd = words[0]
                if cmd == "sudo":
                    words = words[1:] or ["sudo"]
                    cmd = words[0]
                for i, w in enumerate(argv):
                    if w == ">" and i + 1 < len(argv):
                        created.add(argv[i + 1])
                if cmd == "cp" and len(words) >= 3:
                    created.add(words[-1])
                if cmd == "kubectl":
                    errs += check_kubectl(words, rel, where, heredoc)
                elif cmd == "helm":
                    errs += check_helm(words, rel, where, created)
                elif cmd == "slurm-connector":
                    errs += check_slurm_connector(words[1:], where)
                elif cmd in ("python3", "python") and len(words) > 1 and words[1].startswith("deploy/"):
                    if not (REPO / words[1]).exists():
                        errs.append(f"{where}: {words[1]} does not exist")
                elif cmd not in SHELL_COMMANDS:
                    errs.append(f"{where}: {cmd!r}: a command these pages do not otherwise run (a typo? add it to SHELL_COMMANDS)")
        elif lang == "yaml":
            # A block headed `# NAME.yaml` is that file, written by the reader.
            if m := re.match(r"# ([\w.-]+\.ya?ml)\s*$", body.splitlines()[0] if body else ""):
                created.add(m.group(1))
            errs += check_yaml_block(body, rel, where, helm)
        elif lang == "python":
            try:
                ast.parse(body)
            except SyntaxError as e:
                errs.append(f"{where}: not Python: {e}")
        elif lang == "text":
            for row in body.splitlines():
                m = re.match(r"^[✓✗] \S+ +(.+?)(?: {2,}| {1,}(?=\S))", row)
                what = re.match(r"^[✓✗] \S+ +(\S.*?)  ", row)
                if not row.startswith(("✓", "✗", "…")):
                    errs.append(f"{where}: {row[:60]!r} is not a line `slurm-connector check` prints")
                elif what and what.group(1).strip() not in check_names:
                    errs.append(f"{where}: `check` has no line {what.group(1).strip()!r}")
        elif lang == "" and all(re.fullmatch(r"[A-Za-z]+=\S+", l) for l in body.splitlines() if l.strip()):
            continue  # slurm.conf / slurmdbd.conf lines
        else:
            errs.append(f"{where}: a ```{lang} block that no check reads (docs/quickstart-kubernetes.md and docs/deploy.md are checked block by block)")
    # Dotted names in the prose: this chart's values, and misspelt ones (a top-level key one letter
    # off), which the older check skipped.
    tops = set(rel.values)
    for m in re.finditer(r"`([A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_\[\]]+)+)(?:[=:][^`]*)?`", text):
        dotted, n = m.group(1), text.count("\n", 0, m.start()) + 1
        top = re.split(r"[.\[]", dotted)[0]
        if top not in tops and any(near(top, t) for t in tops) and not re.search(r"\.(crt|key|pem|toml|yaml|yml|json|md|sh|py|io|com|org|example|conf)\b", dotted):
            errs.append(f"{name}:{n}: `{dotted}`: {top!r} is not a top-level value of the chart (did you mean {[t for t in tops if near(top, t)][0]!r}?)")
    # The older line-by-line check: values under a known top key, --set keys, paths, CLI names.
    errs += [e.replace(QUICKSTART.name, name) for e in check_quickstart(text)]
    return errs


def operator_docs_self_test(helm, rel: Release) -> tuple[list[str], int]:
    """The five ways issue 55 found the pages wrong, each made in a copy of a page: each fails."""
    qs, dep = OPERATOR_DOCS[0].read_text(), OPERATOR_DOCS[1].read_text()
    mutations = {
        "an unknown top-level key (networkPolicies.…)": (QUICKSTART, qs.replace("`networkPolicy.flyte.namespaceSelector`", "`networkPolicies.flyte.namespaceSelector`", 1)),
        "an unknown top-level key (connecter.logLevel)": (QUICKSTART, qs.replace("`connector.logLevel:", "`connecter.logLevel:", 1)),
        "a wrong container name": (QUICKSTART, qs.replace("exec deploy/slurm-connector -c connector --", "exec deploy/slurm-connector -c conector --", 1)),
        "a wrong Service name": (OPERATOR_DOCS[1], dep.replace("slurm-connector check --connector slurm-connector-headless.flyte", "slurm-connector check --connector slurm-connector-grpc.flyte", 1)),
        "a subcommand written without its flags": (QUICKSTART, qs.replace("-- slurm-connector check\n", "-- slurm-connector chek\n", 1)),
        "a key inside a YAML block": (OPERATOR_DOCS[1], dep.replace("    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: flyte-prod}}", "    namespaceSelecter: {matchLabels: {kubernetes.io/metadata.name: flyte-prod}}", 1)),
        "the broken kubectl run": (OPERATOR_DOCS[1], dep.replace("```sh\nhelm test slurm-connector -n flyte --logs\n```",
            "```sh\nkubectl -n flyte run connector-probe --rm -i --restart=Never \\\n  --image=registry.example/hpc/slurm-connector:0.1.0 \\\n"
            "  --labels=app.kubernetes.io/name=flytepropeller -- \\\n  slurm-connector check --connector slurm-connector-headless.flyte.svc.cluster.local:8000\n```", 1)),
        "helm upgrade of Flyte without --version": (QUICKSTART, qs.replace("flyteorg/flyte-core -n flyte --version v1.16.8", "flyteorg/flyte-core -n flyte", 1)),
        "a values file nobody made": (QUICKSTART, qs.replace("-f your-flyte-values.yaml -f deploy/flyte/values-flyte2-binary.yaml", "-f your-values.yaml -f deploy/flyte/values-flyte2-binary.yaml", 1)),
        "a block of an unknown kind": (QUICKSTART, qs + "\n```ini\n[x]\n```\n"),
    }
    problems = []
    before = {p: set(check_operator_doc(p, p.read_text(), rel, helm)) for p in OPERATOR_DOCS}
    for what, (path, text) in mutations.items():
        if text == path.read_text():
            problems.append(f"self-test {what!r}: the page no longer has what the mutation changes")
        elif not set(check_operator_doc(path, text, rel, helm)) - before[path]:
            problems.append(f"self-test {what!r}: not caught")
    return problems, len(mutations)


# ---------------------------------------------------------------------------------------------
# Driving Helm and the schema validator.


def render(helm, values: dict) -> list[dict]:
    return render_chart(helm, CHART, values, "slurm-connector", "flyte")


def render_chart(helm, path: Path, values: dict, name: str, namespace: str) -> list[dict]:
    with helm.Chart.load(str(path)) as chart:
        out = chart.render(values, name=name, namespace=namespace, is_install=True)
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def schema_errors(kv, docs: list[dict]) -> tuple[list[str], int]:
    errs, checked = [], 0
    for d in docs:
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: structure checked in check_release
        for ver in KUBE_VERSIONS:
            try:
                kv.validate(d, ver, strict=True)
                checked += 1
            except kv.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                errs.append(f"{d['kind']}/{d['metadata']['name']} vs Kubernetes {ver}: {path}: {e.message}")
            except kv.SchemaNotFoundError:
                errs.append(f"{d['kind']} {d['apiVersion']}: no schema in Kubernetes {ver}")
    return errs, checked


# A cluster described by values: a working dir is required with it (no clusters file).
CLUSTER = {"restdUrl": "http://s:6820", "workingDir": "/shared/flyte"}
BASE_NONE = {"cluster": CLUSTER, "auth": {"mode": "none"}}
IDENTITY_TOML = """[clusters.hpc1]
restd_url = "http://s:6820"
username = "flyte"

[[clusters.hpc1.identities]]
project = "ml"
slurm_user = "alice"
"""
# Values that must be refused, and what the refusal must contain (it names the key): the chart's
# own `fail` message (dotted key) or Helm's values.schema.json error (JSON pointer). A string or a
# tuple: any of them; a list: all of them.
MUST_FAIL = [
    ("no cluster at all", {"auth": {"mode": "none"}}, "no Slurm cluster configured"),
    ("token mode without a Secret", {"cluster": CLUSTER, "auth": {"mode": "tokenFile"}}, "auth.existingSecret"),
    ("key mode (the default) without a Secret", {"cluster": {**CLUSTER, "username": "flyte"}}, ["auth.mode=keyFile needs auth.existingSecret", "jwt_hs256.key"]),
    ("key mode without a user", {"cluster": CLUSTER, "auth": {"mode": "keyFile", "existingSecret": "k"}}, "cluster.username"),
    ("unknown auth mode", {"cluster": CLUSTER, "auth": {"mode": "password"}}, ("auth.mode", "/auth/mode")),
    ("URL without scheme", {"cluster": {**CLUSTER, "restdUrl": "slurmrestd:6820"}, "auth": {"mode": "none"}}, ("cluster.restdUrl", "/cluster/restdUrl")),
    ("relative working dir", {"cluster": {**CLUSTER, "workingDir": "jobs"}, "auth": {"mode": "none"}}, ("cluster.workingDir", "/cluster/workingDir")),
    ("stager without mounts", {"cluster": CLUSTER, "auth": {"mode": "none"}, "stager": {"enabled": True, "tokenSecret": "t"}}, "sharedFilesystem.mounts"),
    ("stager without token", {"cluster": CLUSTER, "auth": {"mode": "none"}, "stager": {"url": "http://dtn:8090"}}, "stager.tokenSecret"),
    ("relative mount path", {"cluster": CLUSTER, "auth": {"mode": "none"},
                             "sharedFilesystem": {"mounts": [{"name": "s", "clusterPath": "shared", "mountPath": "/s", "volume": {"emptyDir": {}}}]}}, "must both be absolute"),
    ("misspelt key", {"cluster": {**CLUSTER, "restdURL": "http://s:6820"}, "auth": {"mode": "none"}}, "restdURL"),
    # The published Flyte plugin sends no working_dir: without one from the chart every CreateTask is refused.
    ("restdUrl without a working dir", {"cluster": {"restdUrl": "http://s:6820"}, "auth": {"mode": "none"}},
     ["cluster.workingDir", "working_dir", "every CreateTask would be refused", "--set cluster.workingDir=/shared/flyte"]),
    # The listen addresses come from the port values (which the probes and Services use).
    ("--listen in connector.args", {"cluster": CLUSTER, "auth": {"mode": "none"}, "connector": {"args": ["serve", "--listen", "0.0.0.0:8001"]}},
     ["connector.args contains --listen", "connector.grpcPort"]),
    ("--metrics-listen= in connector.extraArgs", {"cluster": CLUSTER, "auth": {"mode": "none"}, "connector": {"extraArgs": ["--metrics-listen=0.0.0.0:1"]}},
     ["connector.extraArgs contains --metrics-listen=0.0.0.0:1", "connector.metricsPort"]),
    ("--listen in stager.args", {"cluster": CLUSTER, "auth": {"mode": "none"}, "stager": {"args": ["stager", "--listen", "0.0.0.0:1"]}},
     ["stager.args contains --listen", "stager.port"]),
    ("a probe carrying its own port", {"cluster": CLUSTER, "auth": {"mode": "none"}, "connector": {"readinessProbe": {"grpc": {"port": 8001}}}},
     ("/connector/readinessProbe", "connector.readinessProbe")),
    ("misspelt section", {"cluster": CLUSTER, "auth": {"mode": "none"}, "sharedFilesystems": {}}, "sharedFilesystems"),
    ("requeue budget not a number", {"cluster": CLUSTER, "auth": {"mode": "none"},
                                     "connector": {"requeueBudget": "three"}}, ("connector.requeueBudget", "/connector/requeueBudget")),
    ("mount without volume", {"cluster": CLUSTER, "auth": {"mode": "none"},
                              "sharedFilesystem": {"mounts": [{"name": "s", "clusterPath": "/shared", "mountPath": "/s"}]}}, ("sharedFilesystem.mounts[0]", "/sharedFilesystem/mounts/0")),
    ("embedded demo on two replicas", {"allowEmbeddedDemo": True, "auth": {"mode": "none"}}, "replicaCount=2 with the embedded demo"),
    # A claims store without conditional writes is safe with one pod at a time only.
    ("single-replica claims on two replicas", {"cluster": CLUSTER, "auth": {"mode": "none"}, "claims": {"singleReplica": True}},
     ["claims.singleReplica=true with replicaCount=2", "updateStrategy.type=Recreate"]),
    ("single-replica claims under a rolling update", {"cluster": CLUSTER, "auth": {"mode": "none"}, "replicaCount": 1, "claims": {"singleReplica": True}},
     ["claims.singleReplica=true with replicaCount=1 and updateStrategy.type=RollingUpdate", "updateStrategy.type=Recreate"]),
    ("claims lease not a string", {"cluster": CLUSTER, "auth": {"mode": "none"}, "claims": {"lease": 180}}, ("claims.lease", "/claims/lease")),
    ("both disruption-budget bounds", {"cluster": CLUSTER, "auth": {"mode": "none"},
                                       "podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}}, "set only one of minAvailable and maxUnavailable"),
    ("disruption budget blocking every drain", {"cluster": CLUSTER, "auth": {"mode": "none"},
                                                "podDisruptionBudget": {"minAvailable": 2}}, "podDisruptionBudget.minAvailable=2 with replicaCount=2"),
    ("disruption budget not a number", {"cluster": CLUSTER, "auth": {"mode": "none"},
                                        "podDisruptionBudget": {"maxUnavailable": "one"}}, ("podDisruptionBudget.maxUnavailable", "/podDisruptionBudget/maxUnavailable")),
    ("unknown anti-affinity type", {"cluster": CLUSTER, "auth": {"mode": "none"},
                                    "podAntiAffinity": {"type": "soft"}}, ("podAntiAffinity.type", "/podAntiAffinity/type")),
    ("no drain deadline", {"cluster": CLUSTER, "auth": {"mode": "none"},
                           "connector": {"shutdownGraceSeconds": 0}}, ("connector.shutdownGraceSeconds", "/connector/shutdownGraceSeconds")),
    # Identity rules are sound only while nothing but Flyte's backend reaches the gRPC port.
    ("identity rules with the NetworkPolicy off", {"auth": {"mode": "none"}, "cluster": {"name": "hpc1"},
                                                  "clustersFile": {"content": IDENTITY_TOML}, "networkPolicy": {"enabled": False}},
     ["networkPolicy.enabled=false", "clustersFile.content mentions identities", "networkPolicy.acknowledgeOpen=true"]),
    ("an unreadable clusters ConfigMap with the NetworkPolicy off", {"auth": {"mode": "none"}, "cluster": {"name": "hpc1"},
                                                                    "clustersFile": {"existingConfigMap": "hpc-clusters"}, "networkPolicy": {"enabled": False}},
     ["networkPolicy.enabled=false", "clustersFile.existingConfigMap=hpc-clusters", "networkPolicy.acknowledgeOpen=true"]),
    # A clusters file the chart cannot read can hold identity rules too (values.yaml suggests --config in extraArgs).
    ("--config in connector.extraArgs with the NetworkPolicy off", {**BASE_NONE, "networkPolicy": {"enabled": False},
                                                                    "connector": {"extraArgs": ["--config", "/etc/x/clusters.toml"]}},
     ["networkPolicy.enabled=false", "connector.extraArgs passes --config", "networkPolicy.acknowledgeOpen=true"]),
    ("--config= in connector.args with the NetworkPolicy off", {**BASE_NONE, "networkPolicy": {"enabled": False},
                                                               "connector": {"args": ["serve", "--config=/etc/x/clusters.toml"]}},
     ["networkPolicy.enabled=false", "connector.args passes --config"]),
    ("FLYTE_SLURM_CONFIG in connector.extraEnv with the NetworkPolicy off", {**BASE_NONE, "networkPolicy": {"enabled": False},
                                                                           "connector": {"extraEnv": [{"name": "FLYTE_SLURM_CONFIG", "value": "/etc/x/clusters.toml"}]}},
     ["networkPolicy.enabled=false", "connector.extraEnv sets FLYTE_SLURM_CONFIG"]),
    ("NetworkPolicy admitting every pod (both flyte selectors empty)", {**BASE_NONE, "networkPolicy": {"flyte": {"namespaceSelector": {}, "podSelector": {}}}},
     ["networkPolicy.flyte", "admits every pod"]),
    ("FLYTE_SLURM_INGRESS_POLICY in extraEnv beside the chart's", {**BASE_NONE, "connector": {"extraEnv": [{"name": "FLYTE_SLURM_INGRESS_POLICY", "value": "mesh"}]}},
     ["connector.extraEnv sets FLYTE_SLURM_INGRESS_POLICY", "networkPolicy.enabled"]),
    ("a selector operator Kubernetes lacks", {**BASE_NONE, "networkPolicy": {"flyte": {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}}}},
     ("/networkPolicy/flyte/podSelector", "networkPolicy.flyte.podSelector")),
    ("unknown log format", {**BASE_NONE, "connector": {"logFormat": "yaml"}}, ("/connector/logFormat", "connector.logFormat")),
    ("relative TLS mount path", {**BASE_NONE, "tls": {"existingSecret": "t", "mountPath": "tls"}}, ("/tls/mountPath", "tls.mountPath")),
    ("misspelt networkPolicy key", {**BASE_NONE, "networkPolicy": {"enable": False}}, "enable"),
]


# Renders of the availability values and what each must produce: (what, values, check on the docs).
BASE = {"cluster": CLUSTER, "auth": {"mode": "none"}}


def merged(extra: dict) -> dict:
    out = copy.deepcopy(BASE)
    for k, v in extra.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out


def pod_of(docs):
    return by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]


def env_of(docs):
    return {e["name"]: e.get("value") for e in pod_of(docs)["containers"][0].get("env", [])}


def pdb_spec(docs):
    return [{k: v for k, v in p["spec"].items() if k != "selector"} for p in by_kind(docs, "PodDisruptionBudget")]


HOSTNAME = "kubernetes.io/hostname"
AVAILABILITY = [
    ("defaults: 2 replicas, PDB minAvailable 1, preferred spread by hostname, rollout 0/1, 20s drain in a 30s grace period",
     {}, lambda d: [
         by_kind(d, "Deployment")[0]["spec"]["replicas"] == 2,
         pdb_spec(d) == [{"minAvailable": 1}],
         pod_of(d)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == HOSTNAME,
         pod_of(d)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100,
         by_kind(d, "Deployment")[0]["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
         env_of(d).get("FLYTE_SLURM_SHUTDOWN_GRACE") == "20s",
         pod_of(d)["terminationGracePeriodSeconds"] == 30,
     ]),
    ("podDisruptionBudget.maxUnavailable: 1 replaces minAvailable", {"podDisruptionBudget": {"maxUnavailable": 1}},
     lambda d: [pdb_spec(d) == [{"maxUnavailable": 1}]]),
    ("podDisruptionBudget.minAvailable: 50% (a percentage)", {"replicaCount": 4, "podDisruptionBudget": {"minAvailable": "50%"}},
     lambda d: [pdb_spec(d) == [{"minAvailable": "50%"}]]),
    ("podDisruptionBudget.enabled: false renders none", {"podDisruptionBudget": {"enabled": False}},
     lambda d: [not by_kind(d, "PodDisruptionBudget")]),
    ("replicaCount 1: no PDB, no anti-affinity", {"replicaCount": 1},
     lambda d: [not by_kind(d, "PodDisruptionBudget"), "affinity" not in pod_of(d)]),
    ("podAntiAffinity.type: required, by zone", {"podAntiAffinity": {"type": "required", "topologyKey": "topology.kubernetes.io/zone"}},
     lambda d: [pod_of(d)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "topology.kubernetes.io/zone",
                "preferredDuringSchedulingIgnoredDuringExecution" not in pod_of(d)["affinity"]["podAntiAffinity"]]),
    ("podAntiAffinity.type: none", {"podAntiAffinity": {"type": "none"}}, lambda d: ["affinity" not in pod_of(d)]),
    ("affinity given: used as is, instead of podAntiAffinity",
     {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}]}}}},
     lambda d: [list(pod_of(d)["affinity"]) == ["nodeAffinity"]]),
    ("connector.shutdownGraceSeconds: 45 → FLYTE_SLURM_SHUTDOWN_GRACE=45s, grace period 55",
     {"connector": {"shutdownGraceSeconds": 45}},
     lambda d: [env_of(d).get("FLYTE_SLURM_SHUTDOWN_GRACE") == "45s", pod_of(d)["terminationGracePeriodSeconds"] == 55]),
    ("readiness probe: grpc.health.v1 on the gRPC port (NOT_SERVING during the drain)", {},
     lambda d: [pod_of(d)["containers"][0]["readinessProbe"]["grpc"]["port"] == 8000]),
    ("defaults: no PrometheusRule, no dashboard ConfigMap (both opt-in)", {},
     lambda d: [not by_kind(d, "PrometheusRule"), not [c for c in by_kind(d, "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]]]),
    ("defaults: containers set no uid of their own (podSecurityContext's 65532 applies)", {},
     lambda d: [all("runAsUser" not in c["securityContext"] for c in pod_of(d)["containers"]),
                container_facts(d)["connector"]["uid"] == 65532]),
    ("connector.extraArgs come after the listen addresses", {"connector": {"extraArgs": ["--config", "/etc/x/clusters.toml"]}},
     lambda d: [pod_of(d)["containers"][0]["args"] == ["serve", "--listen", "0.0.0.0:8000", "--metrics-listen", "0.0.0.0:9090", "--config", "/etc/x/clusters.toml"]]),
    ("clustersFile.existingConfigMapChecksum is the pod's checksum/clusters annotation",
     {"clustersFile": {"existingConfigMap": "hpc-clusters", "existingConfigMapChecksum": "0123abcd4567ef89"}},
     lambda d: [by_kind(d, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"].get("checksum/clusters") == "0123abcd4567ef89"]),
    ("slurmrestdCA.existingConfigMapChecksum is the pod's checksum/slurmrestd-ca annotation (the CA is read at start only)",
     {"slurmrestdCA": {"existingConfigMap": "site-ca", "existingConfigMapChecksum": "fedcba9876543210"}},
     lambda d: [by_kind(d, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"].get("checksum/slurmrestd-ca") == "fedcba9876543210"]),
    ("stager.tokenSecretChecksum is the pod's checksum/stager-token annotation (the token is read at start only)",
     {"stager": {"url": "http://dtn1:8090", "tokenSecret": "stager-token", "tokenSecretChecksum": "00ff00ff00ff00ff"}},
     lambda d: [by_kind(d, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"].get("checksum/stager-token") == "00ff00ff00ff00ff"]),
    ("under helm template (no cluster to look up): no CA or stager-token checksum without a value, no empty annotation",
     {"slurmrestdCA": {"existingConfigMap": "site-ca"}, "stager": {"url": "http://dtn1:8090", "tokenSecret": "stager-token"}},
     lambda d: [not {"checksum/slurmrestd-ca", "checksum/stager-token"} & set(by_kind(d, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"])]),
    ("clustersFile.content: checksum/clusters follows the content",
     {"clustersFile": {"content": 'poll_interval = "5s"\n'}},
     lambda d: [len(by_kind(d, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"].get("checksum/clusters", "")) == 16]),
]


def np_ingress(docs):
    return by_kind(docs, "NetworkPolicy")[0]["spec"]["ingress"]


FLYTE_BINARY_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "flyte"}},
                     "podSelector": {"matchLabels": {"app.kubernetes.io/name": "flyte-binary", "app.kubernetes.io/component": "flyte-binary"}}}
FLYTEPROPELLER_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "flyte"}},
                       "podSelector": {"matchLabels": {"app.kubernetes.io/name": "flytepropeller"}}}
DEFAULT_FLYTE_PEERS = [FLYTE_BINARY_PEER, FLYTEPROPELLER_PEER]
# Renders of the ingress, TLS and log values and what each must produce.
INGRESS = [
    ("defaults: NetworkPolicy, gRPC from flyte-binary's backend pod and flyte-core's flytepropeller in namespace flyte, metrics from namespace monitoring, Ingress only; the connector told so",
     {}, lambda d: [
         np_ingress(d)[0] == {"from": DEFAULT_FLYTE_PEERS, "ports": [{"port": 8000, "protocol": "TCP"}]},
         np_ingress(d)[1] == {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}], "ports": [{"port": 9090, "protocol": "TCP"}]},
         len(np_ingress(d)) == 2,
         by_kind(d, "NetworkPolicy")[0]["spec"]["policyTypes"] == ["Ingress"],
         env_of(d).get("FLYTE_SLURM_INGRESS_POLICY") == "NetworkPolicy slurm-connector: gRPC port 8000 from namespace flyte, pods app.kubernetes.io/component=flyte-binary,app.kubernetes.io/name=flyte-binary or pods app.kubernetes.io/name=flytepropeller",
     ]),
    ("a selector replaces the default whole, both backends' peers (Helm would merge a default map key by key)",
     {"networkPolicy": {"flyte": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "flyte"}}}}},
     lambda d: [np_ingress(d)[0]["from"][0]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "flyte"}},
                len(np_ingress(d)[0]["from"]) == 1,
                np_ingress(d)[0]["from"][0]["namespaceSelector"] == FLYTE_BINARY_PEER["namespaceSelector"]]),
    ("networkPolicy.flyte.podSelector: {} admits every pod of the selected namespaces (no podSelector rendered)",
     {"networkPolicy": {"flyte": {"podSelector": {}}}},
     lambda d: ["podSelector" not in np_ingress(d)[0]["from"][0],
                env_of(d).get("FLYTE_SLURM_INGRESS_POLICY", "").endswith("from namespace flyte, every pod")]),
    ("custom ports reach the NetworkPolicy", {"connector": {"grpcPort": 8443, "metricsPort": 9464}},
     lambda d: [[r["ports"] for r in np_ingress(d)] == [[{"port": 8443, "protocol": "TCP"}], [{"port": 9464, "protocol": "TCP"}]],
                "gRPC port 8443 from" in env_of(d).get("FLYTE_SLURM_INGRESS_POLICY", "")]),
    ("networkPolicy.extraIngress is appended and counted in FLYTE_SLURM_INGRESS_POLICY",
     {"networkPolicy": {"extraIngress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "executor-system"}}}], "ports": [{"port": 8000}]}]}},
     lambda d: [len(np_ingress(d)) == 3, np_ingress(d)[2]["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "executor-system"},
                env_of(d).get("FLYTE_SLURM_INGRESS_POLICY", "").endswith("; plus 1 rule(s) from networkPolicy.extraIngress")]),
    ("networkPolicy.enabled: false without identity rules: no policy, no FLYTE_SLURM_INGRESS_POLICY",
     {"networkPolicy": {"enabled": False}},
     lambda d: [not by_kind(d, "NetworkPolicy"), "FLYTE_SLURM_INGRESS_POLICY" not in env_of(d)]),
    ("identity rules, policy off, acknowledgeOpen: renders, the operator's own declaration passes through extraEnv",
     {"cluster": {"name": "hpc1"}, "clustersFile": {"content": IDENTITY_TOML}, "networkPolicy": {"enabled": False, "acknowledgeOpen": True},
      "connector": {"extraEnv": [{"name": "FLYTE_SLURM_INGRESS_POLICY", "value": "Istio AuthorizationPolicy flyte-only"}]}},
     lambda d: [not by_kind(d, "NetworkPolicy"), env_of(d).get("FLYTE_SLURM_INGRESS_POLICY") == "Istio AuthorizationPolicy flyte-only"]),
    ("defaults: plaintext gRPC (no TLS variables, gRPC probes), FLYTE_SLURM_LOG_FORMAT=text", {},
     lambda d: [not any(k.startswith("FLYTE_SLURM_TLS_") for k in env_of(d)), "grpc" in pod_of(d)["containers"][0]["livenessProbe"],
                env_of(d).get("FLYTE_SLURM_LOG_FORMAT") == "text"]),
    ("tls.existingSecret + mountPath: the Secret's tls.crt/tls.key, whole-volume read-only mount, /healthz probes on the metrics port",
     {"tls": {"existingSecret": "conn-tls", "mountPath": "/etc/grpc-tls"}, "connector": {"metricsPort": 9464, "logFormat": "json"}},
     lambda d: [env_of(d).get("FLYTE_SLURM_TLS_CERT_FILE") == "/etc/grpc-tls/tls.crt", env_of(d).get("FLYTE_SLURM_TLS_KEY_FILE") == "/etc/grpc-tls/tls.key",
                [m for m in pod_of(d)["containers"][0]["volumeMounts"] if m["mountPath"] == "/etc/grpc-tls"] == [{"name": "grpc-tls", "mountPath": "/etc/grpc-tls", "readOnly": True}],
                [v["secret"]["secretName"] for v in pod_of(d)["volumes"] if v["name"] == "grpc-tls"] == ["conn-tls"],
                all(pod_of(d)["containers"][0][p]["httpGet"] == {"path": "/healthz", "port": 9464} for p in ("readinessProbe", "livenessProbe")),
                env_of(d).get("FLYTE_SLURM_LOG_FORMAT") == "json"]),
]


def container_facts(docs: list[dict]) -> dict[str, dict]:
    """Per container: the uid it runs as, its listen ports from args, its probe ports."""
    pod = pod_of(docs)
    out = {}
    for c in pod["containers"]:
        args = [str(a) for a in c.get("args", [])]
        probes = [c.get(p, {}) for p in ("readinessProbe", "livenessProbe")]
        out[c["name"]] = {
            "uid": effective_uid(pod, c),
            "listen": listen_port(args, "--listen"),
            "metrics_listen": listen_port(args, "--metrics-listen"),
            "probe_ports": [(p.get("grpc") or p.get("httpGet") or {}).get("port") for p in probes],
            "ports": {p["name"]: p["containerPort"] for p in c.get("ports", [])},
        }
    return out


def expect_quickstart(docs: list[dict]) -> list[str]:
    """The quick-start doc quotes ci/quickstart-values.yaml: its pod runs as the job user (1000,
    set once in podSecurityContext) and serves on the default ports."""
    errs = []
    for name, f in container_facts(docs).items():
        if f["uid"] != 1000:
            errs.append(f"container {name} runs as uid {f['uid']}, not the podSecurityContext's 1000 (a container-level runAsUser overrides it)")
    conn = container_facts(docs)["connector"]
    if (conn["listen"], conn["metrics_listen"], conn["probe_ports"]) != (8000, 9090, [8000, 8000]):
        errs.append(f"connector: want --listen :8000, --metrics-listen :9090, probes on 8000; got {conn}")
    # The quick start says its pod meets PSA `restricted` (hence the PVC): volumes included.
    errs += [f"PSA restricted: {e}" for e in psa_restricted(pod_of(docs))]
    return errs


def expect_observability(docs: list[dict]) -> list[str]:
    """Both opt-ins render: a PrometheusRule with an alert per docs/operations.md item, a dashboard."""
    errs = []
    rules = [r for pr in by_kind(docs, "PrometheusRule") for g in pr["spec"]["groups"] for r in g["rules"]]
    want = {"SlurmConnectorDown", "SlurmConnectorReplicasMissing", "SlurmConnectorGetTaskFailing", "SlurmConnectorCreateTaskFailing",
            "SlurmConnectorSlurmrestdUnreachable", "SlurmConnectorSlurmctldErrors", "SlurmConnectorSlurmdbdUnavailable",
            "SlurmConnectorCredentialRejected", "SlurmConnectorPollSlow", "SlurmConnectorSubmitsThrottled",
            "SlurmConnectorInfrastructureFailures", "SlurmConnectorOutputUploadsFailing"}
    if {r.get("alert") for r in rules} != want:
        errs.append(f"want the {len(want)} alerts docs/operations.md describes, got {sorted(r.get('alert') for r in rules)}")
    target = 'namespace="flyte",job="slurm-connector"'
    if [r["expr"] for r in rules if r["alert"] == "SlurmConnectorDown"] != [f"absent(slurm_connector_build_info{{{target}}})"]:
        errs.append(f"SlurmConnectorDown does not select this release's series ({target})")
    # Each outage alert selects the failure class the code gives it (tests/it/alert_drills.rs runs
    # the three outages through these rules with promtool).
    for r in rules:
        if r["alert"] == "SlurmConnectorSlurmctldErrors" and ("unless on (namespace, cluster)" not in r["expr"] or 'daemon="slurmctld"' not in r["expr"]):
            errs.append("SlurmConnectorSlurmctldErrors must select daemon=\"slurmctld\" and exclude throttling (it would fire on slurmdbd down or slurmctld's rate limiting)")
        if r["alert"] == "SlurmConnectorSlurmdbdUnavailable" and 'daemon="slurmdbd"' not in r["expr"]:
            errs.append("SlurmConnectorSlurmdbdUnavailable does not select daemon=\"slurmdbd\"")
        if r["alert"] == "SlurmConnectorSlurmrestdUnreachable" and (
                "unreachable" not in promql_label_values(r["expr"], "status") or "unless" in r["expr"] or "timeout" in promql_label_values(r["expr"], "status")):
            errs.append("SlurmConnectorSlurmrestdUnreachable must select status=\"unreachable\" (connect timeouts included), not late answers, and nothing may silence it")
    if any(r["labels"].get("team") != "hpc" or not r["annotations"].get("runbook_url") for r in rules):
        errs.append("prometheusRule.alertLabels / runbookBaseUrl did not reach every alert")
    dash = [cm for cm in by_kind(docs, "ConfigMap") if cm["metadata"]["labels"].get("grafana_dashboard") == "1"]
    if len(dash) != 1 or "slurm-connector.json" not in dash[0].get("data", {}):
        errs.append("no ConfigMap labelled grafana_dashboard: \"1\" holding slurm-connector.json")
    return errs


def expect_custom_ports(docs: list[dict]) -> list[str]:
    """Non-default ports reach the args, probes, container ports and both Services."""
    f = container_facts(docs)
    errs = []
    if (f["connector"]["listen"], f["connector"]["metrics_listen"], f["connector"]["probe_ports"]) != (8443, 9464, [8443, 8443]):
        errs.append(f"connector: want --listen :8443, --metrics-listen :9464, probes on 8443; got {f['connector']}")
    if "stager" not in f or (f["stager"]["listen"], f["stager"]["probe_ports"]) != (9191, [9191, 9191]):
        errs.append(f"stager: want --listen :9191 and probes on 9191; got {f.get('stager')}")
    got = sorted((s["metadata"]["name"], p["name"], p["port"]) for s in by_kind(docs, "Service") for p in s["spec"]["ports"])
    want = [("slurm-connector", "grpc", 8443), ("slurm-connector", "metrics", 9464), ("slurm-connector-headless", "grpc", 8443)]
    if got != want:
        errs.append(f"Service ports {got}, want {want}")
    if env_of(docs).get("FLYTE_SLURM_STAGER_URL") != "http://127.0.0.1:9191":
        errs.append(f"FLYTE_SLURM_STAGER_URL is {env_of(docs).get('FLYTE_SLURM_STAGER_URL')}, not the sidecar on :9191")
    return errs


def expect_identity_rules(docs: list[dict]) -> list[str]:
    """Identity rules ship with the NetworkPolicy on, and the connector knows it."""
    errs = []
    if not by_kind(docs, "NetworkPolicy"):
        errs.append("no NetworkPolicy rendered beside identity rules")
    elif np_ingress(docs)[0]["from"] != DEFAULT_FLYTE_PEERS:
        errs.append(f"gRPC admitted from {np_ingress(docs)[0]['from']}, not the default (flyte-binary and flytepropeller)")
    if not env_of(docs).get("FLYTE_SLURM_INGRESS_POLICY", "").startswith("NetworkPolicy slurm-connector: gRPC port 8000 from namespace flyte"):
        errs.append(f"FLYTE_SLURM_INGRESS_POLICY is {env_of(docs).get('FLYTE_SLURM_INGRESS_POLICY')!r}")
    return errs


def expect_grpc_tls(docs: list[dict]) -> list[str]:
    """TLS from the Secret, /healthz probes on the metrics port, JSON logs, adapted selectors."""
    errs = []
    env = env_of(docs)
    if (env.get("FLYTE_SLURM_TLS_CERT_FILE"), env.get("FLYTE_SLURM_TLS_KEY_FILE")) != (
            "/var/run/secrets/slurm-connector/tls/tls.crt", "/var/run/secrets/slurm-connector/tls/tls.key"):
        errs.append(f"TLS files {env.get('FLYTE_SLURM_TLS_CERT_FILE')}, {env.get('FLYTE_SLURM_TLS_KEY_FILE')}")
    if container_facts(docs)["connector"]["probe_ports"] != [9090, 9090]:
        errs.append(f"probes on {container_facts(docs)['connector']['probe_ports']}, not the metrics port 9090")
    if env.get("FLYTE_SLURM_LOG_FORMAT") != "json":
        errs.append(f"FLYTE_SLURM_LOG_FORMAT {env.get('FLYTE_SLURM_LOG_FORMAT')!r}")
    peer = np_ingress(docs)[0]["from"][0]
    if peer["podSelector"] != {"matchLabels": {"app.kubernetes.io/name": "flyte", "app.kubernetes.io/instance": "flyte2"}} or "matchLabels" in peer["namespaceSelector"]:
        errs.append(f"the given selectors did not replace the defaults whole: {peer}")
    return errs


# What particular ci files must render, beyond the checks every release gets.
CASE_EXPECT = {
    "identity-rules-values.yaml": ("identity rules with the default NetworkPolicy, declared in FLYTE_SLURM_INGRESS_POLICY", expect_identity_rules),
    "grpc-tls-values.yaml": ("TLS files from the Secret, /healthz probes on the metrics port, JSON logs, selectors replaced whole", expect_grpc_tls),
    "quickstart-values.yaml": ("containers run as uid 1000 (podSecurityContext), listen and probe on 8000", expect_quickstart),
    "custom-ports-values.yaml": ("ports 8443/9464/9191 reach args, container ports, probes, Services, stager URL", expect_custom_ports),
    "observability-values.yaml": ("PrometheusRule (12 alerts, labels, runbook URLs) and Grafana dashboard ConfigMap render", expect_observability),
}


def observability_self_test(good: list[dict]) -> tuple[list[str], int]:
    """The metric-name and shape checks notice a drifted alert or panel."""
    def rule(d, i=0):
        return by_kind(d, "PrometheusRule")[0]["spec"]["groups"][0]["rules"][i]

    def dashboard(d):
        cm = [c for c in by_kind(d, "ConfigMap") if "slurm-connector.json" in c.get("data", {})][0]
        return cm

    def renamed_panel_metric(d):
        cm = dashboard(d)
        cm["data"]["slurm-connector.json"] = cm["data"]["slurm-connector.json"].replace("slurm_connector_tracked_jobs", "slurm_connector_jobs_tracked")

    mutations = {
        "alert on a metric src/ lacks": lambda d: rule(d).update(expr="rate(slurm_connector_jobs_failed_total[5m]) > 0"),
        "counter without _total": lambda d: rule(d, 2).update(expr=rule(d, 2)["expr"].replace("failure_total", "failure")),
        "alert without severity": lambda d: rule(d)["labels"].pop("severity"),
        "alert without description": lambda d: rule(d)["annotations"].pop("description"),
        "runbook to a missing section": lambda d: rule(d)["annotations"].update(runbook="docs/operations.md#no-such-section"),
        "two alerts sharing one runbook section": lambda d: rule(d, 1)["annotations"].update(runbook=rule(d)["annotations"]["runbook"]),
        "runbook_url to another section": lambda d: rule(d)["annotations"].update(runbook_url=rule(d, 1)["annotations"]["runbook_url"]),
        "alert on an operation src/ never labels": lambda d: rule(d, 2).update(expr=rule(d, 2)["expr"].replace('operation="get"', 'operation="get_task"')),
        "alert on a daemon src/ never labels": lambda d: rule(d, 6).update(expr=rule(d, 6)["expr"].replace('daemon="slurmdbd"', 'daemon="slurmdb"')),
        "alert on a status src/ never labels": lambda d: rule(d, 4).update(expr=rule(d, 4)["expr"].replace("unreachable|closed", "none")),
        "alert name repeated": lambda d: rule(d, 1).update(alert=rule(d)["alert"]),
        "rule group without rules": lambda d: by_kind(d, "PrometheusRule")[0]["spec"]["groups"][0].update(rules=[]),
        "panel on a renamed metric": renamed_panel_metric,
        "dashboard without the sidecar label": lambda d: dashboard(d)["metadata"]["labels"].pop("grafana_dashboard"),
        "a query not narrowed to $instance": lambda d: dashboard(d)["data"].update({"slurm-connector.json": dashboard(d)["data"]["slurm-connector.json"].replace(
            'slurm_connector_tracked_jobs{namespace=~\\"$namespace\\", instance=~\\"$instance\\"}', 'slurm_connector_tracked_jobs{namespace=~\\"$namespace\\"}', 1)}),
        "no $namespace variable": lambda d: dashboard(d)["data"].update({"slurm-connector.json": dashboard(d)["data"]["slurm-connector.json"].replace('"name": "namespace"', '"name": "ns"', 1)}),
    }
    return mutants_caught(good, mutations, check_observability)


def mutants_caught(good: list[dict], mutations: dict, check) -> tuple[list[str], int]:
    """Applies each mutation to a copy of the good release; `check` must report every one."""
    problems = []
    for what, mutate in mutations.items():
        docs = copy.deepcopy(good)
        try:
            mutate(docs)
        except (IndexError, KeyError):
            problems.append(f"self-test {what!r}: the reference release lacks what the mutation changes")
            continue
        if not check(docs):
            problems.append(f"self-test {what!r}: the checks did not notice")
    return problems, len(mutations)


def self_test(good: list[dict], env_names: set[str], file_keys) -> tuple[list[str], int]:
    """Each mutation breaks one property; the checks must report it."""

    def dep(docs):
        return by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]

    def conn(docs):
        return [c for c in dep(docs)["containers"] if c["name"] == "connector"][0]

    def probe(docs):
        return by_kind(docs, "Pod")[0]["spec"]

    def with_tls(docs):
        """TLS files mounted properly, but the probes left on gRPC."""
        dep(docs)["volumes"].append({"name": "grpc-tls", "secret": {"secretName": "t", "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}})
        conn(docs)["volumeMounts"].append({"name": "grpc-tls", "mountPath": "/tls", "readOnly": True})
        conn(docs)["env"] += [{"name": "FLYTE_SLURM_TLS_CERT_FILE", "value": "/tls/tls.crt"}, {"name": "FLYTE_SLURM_TLS_KEY_FILE", "value": "/tls/tls.key"}]

    mutations = {
        "root user": lambda d: dep(d)["securityContext"].update(runAsNonRoot=False),
        "writable root fs": lambda d: conn(d)["securityContext"].update(readOnlyRootFilesystem=False),
        "no readiness probe": lambda d: conn(d).pop("readinessProbe"),
        "probe on the wrong port": lambda d: conn(d)["livenessProbe"]["grpc"].update(port=9090),
        "container running as root": lambda d: conn(d)["securityContext"].update(runAsUser=0),
        "--listen off the gRPC port": lambda d: conn(d).update(args=[a.replace(":8000", ":8001") for a in conn(d)["args"]]),
        "no --metrics-listen": lambda d: conn(d).update(args=conn(d)["args"][:2]),
        "Service port number off the container's": lambda d: by_kind(d, "Service")[0]["spec"]["ports"][1].update(port=9091),
        "headless Service to the metrics port": lambda d: [s for s in by_kind(d, "Service") if s["spec"].get("clusterIP") == "None"][0]["spec"]["ports"][0].update(targetPort="metrics"),
        "headless Service publishing unready pods": lambda d: [s for s in by_kind(d, "Service") if s["spec"].get("clusterIP") == "None"][0]["spec"].update(publishNotReadyAddresses=True),
        "mount without volume": lambda d: dep(d)["volumes"].pop(),
        "inlined token": lambda d: conn(d)["env"].append({"name": "FLYTE_SLURM_JWT", "value": "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJmbHl0ZSJ9.x"}),
        "unknown variable": lambda d: conn(d)["env"].append({"name": "FLYTE_SLURM_RESTD_ULR", "value": "http://x:1"}),
        "token file off its mount": lambda d: [e.update(value="/etc/token") for e in conn(d)["env"] if e["name"] in FILE_VARS],
        "service to a missing port": lambda d: by_kind(d, "Service")[0]["spec"]["ports"][0].update(targetPort="grpcx"),
        "bad clusters key": lambda d: by_kind(d, "ConfigMap")[0]["data"].update({"clusters.toml": 'poll = "5s"\n'}),
        "rollout stopping a replica first": lambda d: by_kind(d, "Deployment")[0]["spec"]["strategy"]["rollingUpdate"].update(maxUnavailable=1),
        "grace period shorter than the drain": lambda d: dep(d).update(terminationGracePeriodSeconds=20),
        "no disruption budget": lambda d: d.remove(by_kind(d, "PodDisruptionBudget")[0]),
        "budget blocking every drain": lambda d: by_kind(d, "PodDisruptionBudget")[0]["spec"].update(minAvailable=2),
        "replicas not spread": lambda d: dep(d).pop("affinity"),
        "NetworkPolicy not selecting the pods": lambda d: by_kind(d, "NetworkPolicy")[0]["spec"]["podSelector"]["matchLabels"].update({"app.kubernetes.io/name": "other"}),
        "NetworkPolicy restricting egress too": lambda d: by_kind(d, "NetworkPolicy")[0]["spec"].update(policyTypes=["Ingress", "Egress"]),
        "gRPC rule without from": lambda d: by_kind(d, "NetworkPolicy")[0]["spec"]["ingress"][0].pop("from"),
        "gRPC from every pod": lambda d: by_kind(d, "NetworkPolicy")[0]["spec"]["ingress"][0].update({"from": [{"namespaceSelector": {}}]}),
        "extra rule opening every port": lambda d: by_kind(d, "NetworkPolicy")[0]["spec"]["ingress"].append({"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}),
        "policy not declared to the connector": lambda d: conn(d).update(env=[e for e in conn(d)["env"] if e["name"] != "FLYTE_SLURM_INGRESS_POLICY"]),
        "identity rules without a policy": lambda d: (d.remove(by_kind(d, "NetworkPolicy")[0]), conn(d).update(env=[e for e in conn(d)["env"] if e["name"] != "FLYTE_SLURM_INGRESS_POLICY"]),
                                                      by_kind(d, "ConfigMap")[0]["data"].update({"clusters.toml": IDENTITY_TOML})),
        "TLS with gRPC probes kept": with_tls,
        "TLS certificate on a subPath mount": lambda d: (with_tls(d), conn(d)["volumeMounts"][-1].update(subPath="tls.crt")),
        "TLS certificate without its key": lambda d: (with_tls(d), conn(d).update(env=[e for e in conn(d)["env"] if e["name"] != "FLYTE_SLURM_TLS_KEY_FILE"]),
                                                     [conn(d)[p].update({"httpGet": {"path": "/healthz", "port": 9090}}) or conn(d)[p].pop("grpc") for p in ("readinessProbe", "livenessProbe")]),
        "gRPC Service port without appProtocol grpc": lambda d: by_kind(d, "Service")[0]["spec"]["ports"][0].update(appProtocol="https"),
        "probe repeating the binary (the image's entrypoint)": lambda d: probe(d)["containers"][0].update(args=["slurm-connector", "check", "--connector", "x:8000"]),
        "probe on the ClusterIP Service": lambda d: probe(d)["containers"][0]["args"].__setitem__(2, "slurm-connector.flyte.svc.cluster.local:8000"),
        "probe without a seccomp profile (PSA restricted)": lambda d: probe(d)["securityContext"].pop("seccompProfile"),
        "probe privileged-escalating (PSA restricted)": lambda d: probe(d)["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        "probe without the backend's labels": lambda d: by_kind(d, "Pod")[0]["metadata"].update(labels={"app": "probe"}),
        "probe selected by the connector's Services": lambda d: by_kind(d, "Pod")[0]["metadata"]["labels"].update(by_kind(d, "Deployment")[0]["spec"]["selector"]["matchLabels"]),
    }
    return mutants_caught(good, mutations, lambda docs: check_release(docs, env_names, file_keys))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prometheus-rules", action="store_true",
                    help="only print the PrometheusRule's rule groups as the chart renders them with "
                         "ci/observability-values.yaml (release slurm-connector in namespace flyte), as a "
                         "promtool rule file (JSON): what tests/it/alert_drills.rs runs its outages through")
    args = ap.parse_args()
    import helm_python as helm
    if args.prometheus_rules:
        values = yaml.safe_load((CHART / "ci" / "observability-values.yaml").read_text())
        rules = by_kind(render(helm, values), "PrometheusRule")
        if len(rules) != 1:
            print(f"ci/observability-values.yaml rendered {len(rules)} PrometheusRules, not 1", file=sys.stderr)
            return 1
        print(json.dumps({"groups": rules[0]["spec"]["groups"]}, indent=1))
        return 0
    import kubernetes_validate as kv

    env_names = code_env_vars()
    file_keys = code_file_keys()
    print(f"helm {helm.helm_sdk_version()} (helm-python-sdk), kubernetes-validate {kv.__version__}, "
          f"schemas for Kubernetes {' and '.join(KUBE_VERSIONS)}; {len(env_names)} FLYTE_SLURM_* names and "
          f"{len(file_keys[0]) + len(file_keys[1])} clusters-file keys and {len(code_metrics())} metrics read from src/")
    passed, failed = 0, 0

    def report(ok: bool, what: str, detail: list[str]):
        nonlocal passed, failed
        print(("  ok    " if ok else "  FAIL  ") + what)
        for line in detail:
            print("        - " + line)
        passed, failed = passed + ok, failed + (not ok)

    cases = sorted((CHART / "ci").glob("*-values.yaml"))
    if not cases:
        print(f"no values files in {CHART / 'ci'}")
        return 1
    reference = observed = None
    for case in cases:
        values = yaml.safe_load(case.read_text()) or {}
        lint = helm.lint(str(CHART), values, strict=True, namespace="flyte")
        bad = [m for m in lint.get("messages", []) if m.get("severity", 0) >= 2] + [
            {"error": e} for e in lint.get("errors", []) or []]
        report(not bad, f"{case.name}: helm lint --strict", [str(m.get("error")) for m in bad])
        try:
            docs = render(helm, values)
        except helm.HelmError as e:
            report(False, f"{case.name}: helm template", [str(e)])
            continue
        kinds = ", ".join(sorted(f"{d['kind']}" for d in docs))
        errs, n = schema_errors(kv, docs)
        report(not errs, f"{case.name}: {n} manifest validations against Kubernetes schemas ({kinds})", errs)
        errs = check_release(docs, env_names, file_keys)
        report(not errs, f"{case.name}: non-root, read-only root fs, gRPC probes, ports, mounts, env, config keys", errs)
        if case.name in CASE_EXPECT:
            what, expect = CASE_EXPECT[case.name]
            errs = expect(docs)
            report(not errs, f"{case.name}: {what}", errs)
        if by_kind(docs, "ConfigMap") and by_kind(docs, "ServiceAccount") and reference is None:
            reference = docs
        if by_kind(docs, "PrometheusRule") and observed is None:
            observed = docs

    for what, values, fragment in MUST_FAIL:
        try:
            render(helm, values)
            report(False, f"refused: {what}", ["rendered without error"])
        except helm.HelmError as e:
            frags = (fragment,) if isinstance(fragment, str) else fragment
            ok = (all if isinstance(frags, list) else any)(f in str(e) for f in frags)
            joiner = " and " if isinstance(frags, list) else " or "
            report(ok, f"refused: {what}", [] if ok else [f"message lacks {joiner.join(map(repr, frags))}: {e}"])

    # A budget of 0 (never requeue) must reach the pod: a template `with` would drop it as falsy.
    env = {}
    for d in by_kind(render(helm, {"cluster": CLUSTER, "auth": {"mode": "none"},
                                   "connector": {"requeueBudget": 0}}), "Deployment"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            env.update({e["name"]: e.get("value") for e in c.get("env", [])})
    got = env.get("FLYTE_SLURM_REQUEUE_BUDGET")
    report(got == "0", "connector.requeueBudget: 0 renders FLYTE_SLURM_REQUEUE_BUDGET=0",
           [] if got == "0" else [f"got {got!r}"])

    for what, extra, check in AVAILABILITY + INGRESS:
        try:
            docs = render(helm, merged(extra))
            results = check(docs)
            report(all(results), what, [] if all(results) else [f"check {i} failed: {r}" for i, r in enumerate(results) if not r])
        except (helm.HelmError, KeyError, IndexError) as e:
            report(False, what, [f"{type(e).__name__}: {e}"])

    errs = check_docs(env_names, file_keys)
    report(not errs, "docs/configuration.md documents every FLYTE_SLURM_* variable and clusters-file key in src/", errs)

    connector_default = render(helm, BASE)
    for spec in FLYTE_BACKENDS:
        what = f"{spec['name']} (deploy/flyte/{spec['values']}) with this chart's defaults"
        try:
            flyte_docs = render_flyte(helm, spec)
        except helm.HelmError as e:
            report(False, f"{what}: helm template", [str(e)])
            continue
        errs = check_flyte_backend(spec, flyte_docs, FLYTE_NAMESPACE, connector_default)
        report(not errs, f"{what}: {spec['backend'][0]} {spec['backend'][1]} admitted by the NetworkPolicy (no other Flyte pod is); "
               f"{', '.join(spec['task_types'])} → {spec['plugin']} → the headless Service, round_robin, a deadline", errs)
        problems, n = flyte_self_test(spec, flyte_docs, connector_default)
        report(not problems, f"self-test: each of {n} broken {spec['name']} renders is caught", problems)
        if spec["enabled_list"]:
            errs = check_enabled_plugins_merge(helm, spec)
            report(not errs, f"{spec['name']}: deploy/flyte/enabled-plugins.py keeps a site's own plugins (spark) beside {spec['plugin']}", errs)

    surface = cli_surface()
    rel = Release(render(helm, yaml.safe_load((CHART / "ci" / "quickstart-values.yaml").read_text())))
    for page in OPERATOR_DOCS:
        errs = check_operator_doc(page, page.read_text(), rel, helm)
        report(not errs, f"docs/{page.name}: every block parsed as what it is; its commands' Deployments, containers, Services, "
               f"helm charts (Flyte's pinned with --version) and `slurm-connector` subcommands and flags exist "
               f"({len(surface) - 1} subcommands, {sum(map(len, surface.values()))} flags read from src/); chart values exist, values blocks render", errs)
    problems, n = operator_docs_self_test(helm, rel)
    report(not problems, f"self-test: each of {n} mutations of the operator pages is caught", problems)
    problems, n = quickstart_self_test()
    report(not problems, f"self-test: each of {n} made-up quick-start names is flagged (and a correct line is not)", problems)

    if reference is None:
        report(False, "self-test", ["no ci values file renders a ConfigMap and a ServiceAccount to mutate"])
    else:
        problems, n = self_test(reference, env_names, file_keys)
        report(not problems, f"self-test: each of {n} broken manifests is caught", problems)
    if observed is None:
        report(False, "self-test (observability)", ["no ci values file renders a PrometheusRule and a dashboard to mutate"])
    else:
        problems, n = observability_self_test(observed)
        report(not problems, f"self-test: each of {n} broken alerts/dashboards is caught", problems)

    print(f"chart-validation: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
