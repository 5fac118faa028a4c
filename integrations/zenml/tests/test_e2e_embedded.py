"""End to end on the connector's embedded default: ZenML pipelines through the real
`slurm-connector serve` (gRPC), its jobs run by the in-process slurmrestd stand-in on this
machine. No Slurm, no SSH."""

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import connector_bin, require_or_skip
from zenml_slurm_connector.client import ConnectorClient
from zenml_slurm_connector.flavors import SlurmConnectorSettings
from zenml_slurm_connector.task import StepTask, create_task_request

pytestmark = pytest.mark.e2e


def _job_ids(step: dict) -> int:
    md = step["metadata"]
    assert isinstance(md.get("slurm_job_id"), int) and md["slurm_job_id"] > 0, md
    return int(md["slurm_job_id"])


def test_step_operator_runs_the_middle_step_as_a_job(embedded: tuple) -> None:
    conn, zen = embedded
    token = "tok-" + uuid.uuid4().hex
    out = zen.scenario(
        "step_operator", "so-stack", E2E_STEP_OPERATOR="slurm-so", E2E_TOKEN_VALUE=token
    )
    assert out["status"] == "completed", out["stdout"][-4000:] + out["stderr"][-4000:]
    steps = out["steps"]
    assert [steps[s]["status"] for s in ("load_data", "train", "evaluate")] == ["completed"] * 3
    train = steps["train"]
    job = _job_ids(train)
    md = train["metadata"]
    assert md["slurm_state"] == "COMPLETED" and md["slurm_cluster"] == "embedded", md
    assert md["slurm_phase"] == "completed"
    assert "slurm_connector_resource_meta" in md
    # the artifact passed through the store: evaluate read train's output
    assert steps["evaluate"]["outputs"]["output"] == ["1.0"]
    # the other steps ran in the client's process, not as jobs
    assert "slurm_job_id" not in steps["load_data"]["metadata"]
    # the job's own lines reached the step operator's logs while it waited
    assert f"training on 4 points in job {job}" in out["stdout"] + out["stderr"]
    # the step's environment reached the job, and its value neither the connector's log nor
    # the client's output (the job description: test_the_job_description_keeps_the_token_in_
    # its_environment)
    assert f"token present, {len(token)} characters" in out["stdout"] + out["stderr"]
    assert token not in out["stdout"] + out["stderr"]
    assert token not in conn.log.read_text()


def test_the_job_description_keeps_the_token_in_its_environment(tmp_path: Path) -> None:
    """What the connector would POST to slurmrestd for a step (`slurm-connector render`): the
    step's variables in the job's environment, none in its script, every word of the entrypoint
    quoted."""
    binary = connector_bin()
    if binary is None:
        require_or_skip("e2e", "no slurm-connector binary")
    t = StepTask(
        name="zenml.p.train",
        run_name="zs0123",
        step_name="train",
        command=["python", "-m", "zenml.entrypoints.entrypoint", "--step_name", "a; rm -rf /"],
        environment={"ZENML_STORE_API_TOKEN": "tok-s3cret", "ZENML_STORE_URL": "https://z"},
        settings=SlurmConnectorSettings(python="/opt/zenml/bin/python", partition="debug"),
        code_dir_default="/shared/code",
    )
    (tmp_path / "req.pb").write_bytes(create_task_request(t).SerializeToString())
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_SLURM_")}
    env["FLYTE_SLURM_DATA_DIR"] = str(tmp_path / "data")
    r = subprocess.run(
        [str(binary), "render", "--request", str(tmp_path / "req.pb")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    job = json.loads(r.stdout)["job"]
    assert "ZENML_STORE_API_TOKEN=tok-s3cret" in job["environment"]
    assert "tok-s3cret" not in job["script"]
    assert job["partition"] == "debug"
    assert (
        "exec /opt/zenml/bin/python -m zenml.entrypoints.entrypoint --step_name 'a; rm -rf /'\n"
        in job["script"]
    )


def test_orchestrator_runs_every_step_as_a_job_chained_by_the_dag(embedded: tuple) -> None:
    conn, zen = embedded
    out = zen.scenario("orchestrator", "orch-stack")
    assert out["status"] == "completed", out["stdout"][-4000:] + out["stderr"][-4000:]
    steps = out["steps"]
    ids = {name: _job_ids(steps[name]) for name in ("load_data", "train", "evaluate")}
    assert len(set(ids.values())) == 3
    assert ids["load_data"] < ids["train"] < ids["evaluate"]  # upstream first
    assert steps["evaluate"]["outputs"]["output"] == ["1.0"]
    jobs = out["run_metadata"]["slurm_connector_jobs"]
    assert {n: j["job_id"] for n, j in jobs.items()} == ids
    for name in ids:
        assert steps[name]["metadata"]["slurm_state"] == "COMPLETED", steps[name]["metadata"]
    # the DAG is the jobs' dependencies
    log = conn.log.read_text()
    assert out["run_metadata"]["slurm_job_states"] == {n: "COMPLETED" for n in ids}, log[-2000:]


def test_a_step_that_raises_is_failed_with_its_error(embedded: tuple) -> None:
    conn, zen = embedded
    out = zen.scenario("raise", "orch-stack")
    assert out["status"] == "failed"
    steps = out["steps"]
    assert steps["load_data"]["status"] == "completed"
    assert steps["train"]["status"] == "failed"
    assert "boom: the model diverged" in (steps["train"]["exception"] or ""), steps["train"]
    assert steps["train"]["metadata"]["slurm_state"] == "FAILED"
    # evaluate never ran: its job could never start, and was cancelled
    assert "evaluate" not in steps or steps["evaluate"]["status"] != "completed"
    assert out["error"] and "train" in out["error"], out["error"]


def test_a_step_that_raises_under_the_step_operator(embedded: tuple) -> None:
    conn, zen = embedded
    out = zen.scenario("raise", "so-stack", E2E_STEP_OPERATOR="slurm-so", E2E_USE_SO="1")
    assert out["status"] == "failed"
    train = out["steps"]["train"]
    assert train["status"] == "failed"
    assert "boom: the model diverged" in (train["exception"] or ""), train
    assert train["metadata"]["slurm_state"] == "FAILED"


def test_a_missing_interpreter_fails_with_slurms_reason_orchestrator(embedded: tuple) -> None:
    conn, zen = embedded
    out = zen.scenario("orchestrator", "orch-broken-stack")
    assert out["status"] == "failed", out
    states = out["run_metadata"]["slurm_job_states"]
    assert states["load_data"] == "FAILED", states
    failure = out["run_metadata"]["slurm_failures"]["load_data"]
    assert "/nonexistent/venv/bin/python" in failure, failure
    assert "[FAILED]" in failure or "exit" in failure, failure
    assert "load_data" in (out["status_reason"] or ""), out["status_reason"]
    assert out["error"] and "/nonexistent/venv/bin/python" in out["error"]


def test_a_missing_interpreter_fails_with_slurms_reason_step_operator(embedded: tuple) -> None:
    conn, zen = embedded
    out = zen.scenario("step_operator", "so-broken-stack", E2E_STEP_OPERATOR="slurm-so-broken")
    assert out["status"] == "failed", out
    train = out["steps"]["train"]
    assert train["status"] == "failed"
    assert "/nonexistent/venv/bin/python" in (train["exception"] or ""), train
    assert train["metadata"]["slurm_state"] == "FAILED"


def test_a_stopped_run_cancels_its_jobs(embedded: tuple) -> None:
    conn, zen = embedded
    out = zen.scenario("cancel", "orch-async-stack")
    assert out["status"] in ("stopped", "failed"), out
    jobs = out["run_metadata"]["slurm_connector_jobs"]
    client = ConnectorClient(conn.url)
    for name, j in jobs.items():
        # A cancelled job is CANCELLED+COMPLETING (not terminal) until its processes are gone:
        # on a loaded machine that outlasts the run's stop by a poll or two.
        deadline = time.monotonic() + 60
        state = client.get(j["resource_meta"].encode())
        while not state.terminal and time.monotonic() < deadline:
            time.sleep(0.5)
            state = client.get(j["resource_meta"].encode())
        assert state.terminal, (name, state)
        assert state.info.get("state") in ("COMPLETED", "CANCELLED"), (name, state.info)
    assert client.get(jobs["train"]["resource_meta"].encode()).info["state"] == "CANCELLED"
