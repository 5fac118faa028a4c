"""The user code of the end-to-end tests: a 3-step pipeline (data -> train -> evaluate) and the
driver that runs one scenario of it and prints what ZenML recorded, as JSON on the last line.

Copied into each test's code folder (the pipeline's source root, where the jobs import it from),
and run there in a process of its own: ZenML's global configuration is per process.

    python e2e_pipeline.py SCENARIO   (step_operator | orchestrator | raise | no_python | cancel)
"""

import json
import os
import sys
import time
from typing import Any, Dict, List

from zenml import pipeline, step
from zenml.client import Client
from zenml.enums import ExecutionStatus


@step
def load_data() -> List[int]:
    return [1, 2, 3, 4]


@step
def train(data: List[int], mode: str = "ok") -> Dict[str, float]:
    print(f"training on {len(data)} points in job {os.environ.get('SLURM_JOB_ID')}")
    if os.environ.get("E2E_TOKEN"):
        print(f"token present, {len(os.environ['E2E_TOKEN'])} characters")
    if mode == "raise":
        raise ValueError("boom: the model diverged")
    if mode == "sleep":
        time.sleep(600)
    return {"w": float(sum(data))}


@step
def evaluate(model: Dict[str, float]) -> float:
    return model["w"] / 10


def make_pipeline(train_step_operator: str = "", mode: str = "ok") -> Any:
    # A stand-in for a credential the step needs (E2E_TOKEN_VALUE, from the test): it must reach
    # the step's environment and no command line, script or log.
    token = os.environ.get("E2E_TOKEN_VALUE")
    settings = (
        {"step_operator.slurm_connector": {"environment": {"E2E_TOKEN": token}}} if token else {}
    )
    train_step = (
        train.with_options(step_operator=train_step_operator, settings=settings)
        if train_step_operator
        else train
    )

    @pipeline(name="zenml_slurm_e2e", enable_cache=False)
    def zenml_slurm_e2e() -> None:
        data = load_data()
        model = train_step(data, mode=mode)
        evaluate(model)

    return zenml_slurm_e2e


def describe(run_id: Any) -> Dict[str, Any]:
    run = Client().get_pipeline_run(run_id)
    steps = {}
    for name, s in run.steps.items():
        s = Client().get_run_step(s.id)
        ex = s.exception_info
        steps[name] = {
            "status": s.status.value,
            "metadata": {k: v for k, v in s.run_metadata.items()},
            "exception": (ex.message or ex.traceback) if ex else None,
            "outputs": {
                k: [str(a.load()) for a in v] if s.status == ExecutionStatus.COMPLETED else []
                for k, v in s.outputs.items()
            },
        }
    return {
        "run_id": str(run.id),
        "status": run.status.value,
        "status_reason": run.get_body().status_reason,
        "run_metadata": {k: v for k, v in run.run_metadata.items()},
        "steps": steps,
    }


def main(scenario: str) -> None:
    error = None
    run_id = None
    before_stop = None
    stack = os.environ["E2E_STACK"]
    Client().activate_stack(stack)
    so = os.environ.get("E2E_STEP_OPERATOR", "")
    mode = {"raise": "raise", "cancel": "sleep"}.get(scenario, "ok")
    p = make_pipeline(
        so if scenario in ("step_operator",) or os.environ.get("E2E_USE_SO") else "", mode
    )
    try:
        r = p()
        run_id = r.id if r is not None else None
    except Exception as e:  # the run's failure is what some scenarios test
        error = f"{type(e).__name__}: {e}"
    if run_id is None:
        runs = Client().list_pipeline_runs(sort_by="desc:created", size=1)
        run_id = runs.items[0].id
    if scenario == "cancel":
        # Wait until train's job runs, then stop the run as `zenml pipeline runs stop` does.
        deadline = time.time() + 120
        while time.time() < deadline:
            run = Client().get_pipeline_run(run_id)
            if "train" in run.steps and run.steps["train"].status == ExecutionStatus.RUNNING:
                break
            time.sleep(1)
        run = Client().get_pipeline_run(run_id)
        # What the test wants to see while the jobs are queued and running (the real tier:
        # `scontrol show job` of each), with each step's job id in E2E_JOB_<STEP>.
        before = os.environ.get("E2E_BEFORE_STOP")
        if before:
            import subprocess

            jobs = run.run_metadata.get("slurm_connector_jobs") or {}
            env = dict(os.environ)
            for name, j in jobs.items():
                env[f"E2E_JOB_{name.upper()}"] = str(j["job_id"])
            r = subprocess.run(
                before, shell=True, env=env, capture_output=True, text=True, timeout=120
            )
            before_stop = r.stdout + r.stderr
        from zenml.utils.run_utils import stop_run

        stop_run(Client().get_pipeline_run(run_id), graceful=False)
        deadline = time.time() + 120
        while time.time() < deadline:
            run = Client().get_pipeline_run(run_id)
            from zenml.utils.run_utils import refresh_run_status

            run = refresh_run_status(run, include_step_updates=True)
            if run.status.is_finished:
                break
            time.sleep(1)
    elif os.environ.get("E2E_REFRESH"):
        from zenml.utils.run_utils import refresh_run_status

        deadline = time.time() + 180
        while time.time() < deadline:
            run = refresh_run_status(Client().get_pipeline_run(run_id), include_step_updates=True)
            if run.status.is_finished:
                break
            time.sleep(1)
    out = describe(run_id)
    out["error"] = error
    out["before_stop"] = before_stop
    print("E2E-RESULT " + json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
