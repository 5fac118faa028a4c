"""The real tier: ZenML pipelines through `slurm-connector serve` on a real Slurm (the dev
cluster, 26.05 in CI), each step's job running ZenML in the cluster's own Python
(`dev-cluster zenml`: /opt/zenml in the chroot). No SSH, no sbatch: jobs go through slurmrestd.

    sudo deploy/dev-cluster/dev-cluster --release 26.05 zenml
    sudo deploy/dev-cluster/dev-cluster --release 26.05 --min-job-age 5 run \\
      .venv/bin/python -m pytest integrations/zenml/tests/test_real.py
"""

import re
import time

import pytest

from conftest import dev_cluster

pytestmark = pytest.mark.real


def _job(step: dict) -> int:
    md = step["metadata"]
    assert isinstance(md.get("slurm_job_id"), int) and md["slurm_job_id"] > 0, md
    return int(md["slurm_job_id"])


def _explain(out: dict) -> str:
    return out["stdout"][-5000:] + "\n" + out["stderr"][-5000:]


def test_real_step_operator_on_the_middle_step(real: tuple) -> None:
    conn, zen = real
    out = zen.scenario("step_operator", "so-stack", E2E_STEP_OPERATOR="slurm-so")
    assert out["status"] == "completed", _explain(out)
    steps = out["steps"]
    train = steps["train"]
    job = _job(train)
    md = train["metadata"]
    assert md["slurm_state"] == "COMPLETED", md
    assert md["slurm_cluster"] and md["slurm_partition"], md
    # accounting from slurmdbd (the dev cluster has one)
    assert isinstance(md.get("slurm_elapsed_seconds"), (int, float)), md
    assert "slurm_cpu_seconds_allocated" in md and "slurm_node_hours" in md, md
    assert steps["evaluate"]["outputs"]["output"] == ["1.0"]
    assert f"training on 4 points in job {job}" in out["stdout"] + out["stderr"]


def test_real_orchestrator_dag_as_slurm_dependencies(real: tuple) -> None:
    conn, zen = real
    out = zen.scenario("orchestrator", "orch-stack")
    assert out["status"] == "completed", _explain(out)
    steps = out["steps"]
    ids = {n: _job(steps[n]) for n in ("load_data", "train", "evaluate")}
    for n in ids:
        assert steps[n]["metadata"]["slurm_state"] == "COMPLETED"
    assert steps["evaluate"]["outputs"]["output"] == ["1.0"]
    # Slurm's own record of the DAG (slurmdbd keeps the job's dependency once it ran:
    # scontrol no longer has a finished job with MinJobAge 5, sacct does).
    deps = dev_cluster(
        "sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(map(str, ids.values()))
    )
    for n, j in ids.items():
        assert re.search(rf"^{j}\|COMPLETED$", deps, re.M), (n, deps)


def test_real_raising_step_fails_with_its_error(real: tuple) -> None:
    conn, zen = real
    out = zen.scenario("raise", "orch-stack")
    assert out["status"] == "failed", _explain(out)
    train = out["steps"]["train"]
    assert train["status"] == "failed"
    assert "boom: the model diverged" in (train["exception"] or ""), train
    assert train["metadata"]["slurm_state"] == "FAILED"
    states = out["run_metadata"]["slurm_job_states"]
    assert states["evaluate"] == "CANCELLED", states


def test_real_missing_interpreter_fails_with_slurms_reason(real: tuple) -> None:
    conn, zen = real
    out = zen.scenario("orchestrator", "orch-broken-stack")
    assert out["status"] == "failed", _explain(out)
    failure = out["run_metadata"]["slurm_failures"]["load_data"]
    assert "/nonexistent/venv/bin/python" in failure and "FAILED" in failure, failure
    assert "/nonexistent/venv/bin/python" in (out["status_reason"] or ""), out["status_reason"]
    out = zen.scenario("step_operator", "so-broken-stack", E2E_STEP_OPERATOR="slurm-so-broken")
    assert out["status"] == "failed", _explain(out)
    train = out["steps"]["train"]
    assert "/nonexistent/venv/bin/python" in (train["exception"] or ""), train
    assert train["metadata"]["slurm_state"] == "FAILED"


def test_real_cancelled_run_leaves_no_job_and_the_dag_is_in_scontrol(real: tuple) -> None:
    conn, zen = real
    out = zen.scenario(
        "cancel",
        "orch-async-stack",
        E2E_BEFORE_STOP=(
            f"{dev_cluster_cmd()} scontrol show job $E2E_JOB_TRAIN; "
            f"{dev_cluster_cmd()} scontrol show job $E2E_JOB_EVALUATE"
        ),
    )
    jobs = {n: j["job_id"] for n, j in out["run_metadata"]["slurm_connector_jobs"].items()}
    shown = out["before_stop"] or ""
    print(shown)
    # the DAG, as Slurm holds it: evaluate after train, both killed should their upstream
    # fail (train's own dependency is gone once load_data completed: `(null)`)
    assert re.search(rf"Dependency=afterok:{jobs['train']}\b", shown), shown
    assert f"JobId={jobs['train']} " in shown and "JobState=RUNNING" in shown, shown
    assert f"Dependency=afterok:{jobs['load_data']}" in shown or "Dependency=(null)" in shown
    assert shown.count("KillOnInvalidDependent=Yes") == 2, shown
    assert out["status"] in ("stopped", "failed"), _explain(out)
    # gone from squeue (a cancelled job is COMPLETING while its processes are killed)
    deadline = time.time() + 90
    while True:
        left = dev_cluster("squeue", "-h", "-o", "%i %T", "-j", ",".join(map(str, jobs.values())))
        if not re.search(r"^\d+ ", left, re.M) or time.time() > deadline:
            break
        time.sleep(2)
    assert not re.search(r"^\d+ ", left, re.M), left
    # Slurm's record: train was cancelled while it ran, evaluate before it could start
    acct = dev_cluster(
        "sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", f"{jobs['train']},{jobs['evaluate']}"
    )
    assert re.search(rf"^{jobs['train']}\|CANCELLED", acct, re.M), acct
    assert re.search(rf"^{jobs['evaluate']}\|CANCELLED", acct, re.M), acct


def dev_cluster_cmd() -> str:
    import os
    import shlex

    return shlex.join(
        [
            os.environ["SLURM_DEV_CLUSTER_SCRIPT"],
            "--release",
            os.environ["SLURM_DEV_CLUSTER_RELEASE"],
            "exec",
        ]
    )
