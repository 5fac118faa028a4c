"""Fixtures of the end-to-end tiers: a `slurm-connector serve`, a ZenML store with the flavors
registered and stacks using them, a code folder, and the driver that runs a scenario.

Tiers:
- `e2e` (hermetic): the connector's embedded default (no cluster configured: an in-process
  slurmrestd stand-in that runs jobs on this machine), a local SQLite ZenML store. Needs the
  connector binary: SLURM_CONNECTOR_BIN, else the repository's target/debug/slurm-connector.
- `real`: a real Slurm (the dev cluster's environment exported: FLYTE_SLURM_RESTD_URL,
  SLURM_DEV_CLUSTER_ROOT, ...) and a Python with ZenML in its chroot (SLURM_DEV_CLUSTER_ZENML_VENV,
  from `dev-cluster zenml`).

A tier whose environment is missing skips with the reason, unless ZENML_SLURM_REQUIRE names it
(`e2e`, `real`, comma-separated; CI sets it): then the skip is a failure.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def require_or_skip(tier: str, reason: str) -> None:
    """Skips the test, or fails it when CI said the tier is provided.

    Args:
        tier: `e2e` or `real`.
        reason: why it cannot run.
    """
    wanted = {t.strip() for t in os.environ.get("ZENML_SLURM_REQUIRE", "").split(",")}
    if tier in wanted or "all" in wanted:
        pytest.fail(f"ZENML_SLURM_REQUIRE names `{tier}`, but: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connector_bin() -> Optional[Path]:
    env = os.environ.get("SLURM_CONNECTOR_BIN")
    if env:
        return Path(env)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    p = target / "debug" / "slurm-connector"
    return p if p.exists() else None


@dataclass
class Connector:
    url: str
    data_dir: Path
    proc: subprocess.Popen
    log: Path


def start_connector(tmp: Path, extra_env: Dict[str, str]) -> Connector:
    binary = connector_bin()
    assert binary is not None
    port, metrics = free_port(), free_port()
    data = tmp / "connector-data"
    data.mkdir(parents=True, exist_ok=True)
    log = tmp / "connector.log"
    env = dict(os.environ)
    env.update(
        {
            "FLYTE_SLURM_DATA_DIR": str(data),
            "FLYTE_SLURM_POLL_INTERVAL": "1s",
            "RUST_LOG": "info",
        }
    )
    env.update(extra_env)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(binary),
                "serve",
                "--listen",
                f"127.0.0.1:{port}",
                "--metrics-listen",
                f"127.0.0.1:{metrics}",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"slurm-connector serve exited: {log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise RuntimeError("slurm-connector serve did not listen within 60 s")
    return Connector(url=f"127.0.0.1:{port}", data_dir=data, proc=proc, log=log)


@dataclass
class Zen:
    """A ZenML store in `config`, the code folder, and how to run ZenML there."""

    config: Path
    code: Path
    python: str
    env: Dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            cwd=self.code,
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def zenml(self, *commands: List[str]) -> str:
        """Runs `zenml` commands, in one process.

        Args:
            *commands: each command's arguments.

        Returns:
            Their output.
        """
        r = self.run(
            self.python, str(HERE / "zenml_cli_batch.py"), json.dumps(list(commands)), check=False
        )
        if r.returncode != 0:
            raise RuntimeError(f"zenml commands failed:\n{r.stdout}\n{r.stderr}")
        return r.stdout

    def scenario(self, name: str, stack: str, **env: str) -> dict:
        e = dict(self.env)
        e.update(env)
        e["E2E_STACK"] = stack
        r = subprocess.run(
            [self.python, "e2e_pipeline.py", name],
            cwd=self.code,
            env=e,
            capture_output=True,
            text=True,
            timeout=900,
        )
        lines = [l for l in r.stdout.splitlines() if l.startswith("E2E-RESULT ")]
        if not lines:
            raise AssertionError(
                f"scenario {name} printed no result (exit {r.returncode}):\n"
                f"{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
            )
        out = json.loads(lines[-1][len("E2E-RESULT ") :])
        out["stdout"] = r.stdout
        out["stderr"] = r.stderr
        return out


def make_zen(tmp: Path, code: Path, python: str, store_env: Dict[str, str]) -> Zen:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ZENML_") or k == "ZENML_SLURM_REQUIRE"
    }
    env.update(
        {
            "ZENML_CONFIG_PATH": str(tmp / "zenml-config"),
            "ZENML_ANALYTICS_OPT_IN": "false",
            "ZENML_ENABLE_RICH_TRACEBACK": "false",
            "ZENML_LOGGING_COLORS_DISABLED": "true",
            "AUTO_OPEN_DASHBOARD": "false",
        }
    )
    env.update(store_env)
    code.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "e2e_pipeline.py", code / "e2e_pipeline.py")
    zen = Zen(config=tmp / "zenml-config", code=code, python=python, env=env)
    return zen


def register_stacks(
    zen: Zen,
    connector_url: str,
    python: str,
    artifact_store: str,
    extra: List[str],
) -> None:
    """The flavors and the stacks the scenarios use, with the commands docs/zenml.md gives."""
    common = [f"--connector_url={connector_url}", *extra]
    broken = "--python=/nonexistent/venv/bin/python"
    zen.zenml(
        ["init"],
        ["step-operator", "flavor", "register",
         "zenml_slurm_connector.flavors.SlurmConnectorStepOperatorFlavor"],
        ["orchestrator", "flavor", "register",
         "zenml_slurm_connector.flavors.SlurmConnectorOrchestratorFlavor"],
        ["step-operator", "register", "slurm-so", "--flavor=slurm_connector", f"--python={python}", *common],
        ["step-operator", "register", "slurm-so-broken", "--flavor=slurm_connector", broken, *common],
        ["orchestrator", "register", "slurm-orch", "--flavor=slurm_connector", f"--python={python}", *common],
        ["orchestrator", "register", "slurm-orch-async", "--flavor=slurm_connector",
         f"--python={python}", "--synchronous=False", *common],
        ["orchestrator", "register", "slurm-orch-broken", "--flavor=slurm_connector", broken, *common],
        ["artifact-store", "register", "shared-store", "--flavor=local", f"--path={artifact_store}"],
        ["stack", "register", "so-stack", "-o", "default", "-a", "shared-store", "-s", "slurm-so"],
        ["stack", "register", "so-broken-stack", "-o", "default", "-a", "shared-store", "-s", "slurm-so-broken"],
        ["stack", "register", "orch-stack", "-o", "slurm-orch", "-a", "shared-store"],
        ["stack", "register", "orch-async-stack", "-o", "slurm-orch-async", "-a", "shared-store"],
        ["stack", "register", "orch-broken-stack", "-o", "slurm-orch-broken", "-a", "shared-store"],
    )


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """The hermetic tier: the embedded connector and a ZenML store with the stacks."""
    if connector_bin() is None:
        require_or_skip(
            "e2e",
            "no slurm-connector binary: build it (`cargo build`) or set SLURM_CONNECTOR_BIN",
        )
    for v in ("FLYTE_SLURM_RESTD_URL", "FLYTE_SLURM_CONFIG"):
        if os.environ.get(v):
            pytest.skip(f"{v} is set: the embedded default would not start")
    tmp = tmp_path_factory.mktemp("embedded")
    conn = start_connector(tmp, {})
    try:
        zen = make_zen(tmp, tmp / "code", sys.executable, {})
        register_stacks(zen, conn.url, sys.executable, str(tmp / "artifacts"), [])
        yield conn, zen
    finally:
        conn.proc.terminate()
        try:
            conn.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            conn.proc.kill()
