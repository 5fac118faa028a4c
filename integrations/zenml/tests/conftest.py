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


def start_connector(tmp: Path, extra_env: Dict[str, str], embedded: bool = False) -> Connector:
    binary = connector_bin()
    assert binary is not None
    port, metrics = free_port(), free_port()
    data = tmp / "connector-data"
    data.mkdir(parents=True, exist_ok=True)
    log = tmp / "connector.log"
    env = dict(os.environ)
    if embedded:
        # No cluster configured, whatever this process's environment names: the embedded default.
        env = {k: v for k, v in env.items() if not k.startswith("FLYTE_SLURM_")}
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
    # The real tier: the store and artifacts are written by this user and by the job's user.
    shared_umask: bool = False

    def _preexec(self) -> None:
        if self.shared_umask:
            os.umask(0)

    def run(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            cwd=self.code,
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            preexec_fn=self._preexec,
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
            preexec_fn=self._preexec,
        )
        lines = [x for x in r.stdout.splitlines() if x.startswith("E2E-RESULT ")]
        if not lines:
            raise AssertionError(
                f"scenario {name} printed no result (exit {r.returncode}):\n"
                f"{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
            )
        out = json.loads(lines[-1][len("E2E-RESULT ") :])
        out["stdout"] = r.stdout
        out["stderr"] = r.stderr
        return out


def make_zen(
    tmp: Path, code: Path, python: str, store_env: Dict[str, str], shared_umask: bool = False
) -> Zen:
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
    zen = Zen(
        config=tmp / "zenml-config", code=code, python=python, env=env, shared_umask=shared_umask
    )
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
        [
            "step-operator",
            "flavor",
            "register",
            "zenml_slurm_connector.flavors.SlurmConnectorStepOperatorFlavor",
        ],
        [
            "orchestrator",
            "flavor",
            "register",
            "zenml_slurm_connector.flavors.SlurmConnectorOrchestratorFlavor",
        ],
        [
            "step-operator",
            "register",
            "slurm-so",
            "--flavor=slurm_connector",
            f"--python={python}",
            *common,
        ],
        [
            "step-operator",
            "register",
            "slurm-so-broken",
            "--flavor=slurm_connector",
            broken,
            *common,
        ],
        [
            "orchestrator",
            "register",
            "slurm-orch",
            "--flavor=slurm_connector",
            f"--python={python}",
            *common,
        ],
        [
            "orchestrator",
            "register",
            "slurm-orch-async",
            "--flavor=slurm_connector",
            f"--python={python}",
            "--synchronous=False",
            *common,
        ],
        [
            "orchestrator",
            "register",
            "slurm-orch-broken",
            "--flavor=slurm_connector",
            broken,
            *common,
        ],
        [
            "artifact-store",
            "register",
            "shared-store",
            "--flavor=local",
            f"--path={artifact_store}",
        ],
        ["stack", "register", "so-stack", "-o", "default", "-a", "shared-store", "-s", "slurm-so"],
        [
            "stack",
            "register",
            "so-broken-stack",
            "-o",
            "default",
            "-a",
            "shared-store",
            "-s",
            "slurm-so-broken",
        ],
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
    tmp = tmp_path_factory.mktemp("embedded")
    conn = start_connector(tmp, {}, embedded=True)
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


@pytest.fixture(scope="session")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """The real tier: the connector against the dev cluster, ZenML steps in its chroot's Python.

    The client's store (SQLite), artifact store and code live on the cluster's shared folder,
    at one path valid on both sides: the host's path of the chroot's /shared is bind-mounted at
    the same path inside the chroot, so the client's absolute paths (the store URL in each
    job's environment, the artifact store's path, the code folder) resolve in the jobs too.
    """
    need = ["FLYTE_SLURM_RESTD_URL", "SLURM_DEV_CLUSTER_ROOT", "SLURM_DEV_CLUSTER_ZENML_VENV"]
    missing = [v for v in need if not os.environ.get(v)]
    if missing:
        require_or_skip(
            "real",
            f"{', '.join(missing)} not set: run under `dev-cluster run` after `dev-cluster zenml`",
        )
    if connector_bin() is None:
        require_or_skip("real", "no slurm-connector binary: `cargo build` or SLURM_CONNECTOR_BIN")
    root = Path(os.environ["SLURM_DEV_CLUSTER_ROOT"])
    # A bind mount, not a symlink: ZenML resolves an artifact's real path and refuses one
    # outside the artifact store's path.
    alias = Path(str(root) + str(root)) / "shared"
    alias.mkdir(parents=True, exist_ok=True)
    mounted = False
    if not os.path.ismount(alias):
        subprocess.run(["mount", "--bind", str(root / "shared"), str(alias)], check=True)
        mounted = True
    base = root / "shared" / f"zenml-real-{os.getpid()}-{int(time.time())}"
    for d in (base, base / "code", base / "artifacts"):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o777)
    tmp = tmp_path_factory.mktemp("real")
    conn = start_connector(tmp, {})
    python = os.environ["SLURM_DEV_CLUSTER_ZENML_VENV"] + "/bin/python"
    try:
        zen = make_zen(base, base / "code", sys.executable, {}, shared_umask=True)
        # The package beside the code: on the job's PYTHONPATH (the chroot's venv has ZenML).
        shutil.copytree(
            HERE.parent / "src" / "zenml_slurm_connector",
            base / "code" / "zenml_slurm_connector",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        register_stacks(zen, conn.url, python, str(base / "artifacts"), [])
        # SQLite creates its database 0644 whatever the umask; the jobs' user writes it too.
        for d, _, files in os.walk(base / "zenml-config"):
            os.chmod(d, 0o777)
            for f in files:
                os.chmod(os.path.join(d, f), 0o666)
        yield conn, zen
    finally:
        conn.proc.terminate()
        try:
            conn.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            conn.proc.kill()
        if mounted and subprocess.run(["umount", str(alias)], check=False).returncode != 0:
            # Busy (a job's process still holds it): detach it now, gone once released.
            subprocess.run(["umount", "-l", str(alias)], check=False)


def dev_cluster(*args: str) -> str:
    """A command in the running dev cluster's chroot (`dev-cluster exec`)."""
    script = os.environ["SLURM_DEV_CLUSTER_SCRIPT"]
    release = os.environ["SLURM_DEV_CLUSTER_RELEASE"]
    r = subprocess.run(
        [script, "--release", release, "exec", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return r.stdout + r.stderr
