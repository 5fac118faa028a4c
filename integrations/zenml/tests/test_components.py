"""The components' own logic against a fake connector: submission order and dependencies, the
rollback of a failed submission, schedules refused, the run's status from its jobs."""

import json
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Dict, List
from uuid import uuid4

import pytest
from zenml.enums import ExecutionStatus, StackComponentType

from zenml_slurm_connector import orchestrator as orch_mod
from zenml_slurm_connector.client import ConnectorError, TaskState, meta_job, zenml_status
from zenml_slurm_connector.flavors import SlurmConnectorOrchestratorConfig
from zenml_slurm_connector.orchestrator import (
    SlurmConnectorOrchestrator,
    run_status,
    summary,
)

RUNNING, SUCCEEDED, ABORTED, FAILED, RETRYABLE = 2, 3, 4, 5, 8


class FakeConnector:
    """Answers CreateTask with job ids 100, 101, ...; refuses the n-th when asked to."""

    def __init__(self, fail_at: int = -1) -> None:
        self.created: List[Any] = []
        self.deleted: List[bytes] = []
        self.fail_at = fail_at
        self.phases: Dict[int, int] = {}

    def create(self, request: Any) -> bytes:
        if len(self.created) == self.fail_at:
            raise ConnectorError("CreateTask to the connector at x failed: INVALID_ARGUMENT: nope")
        self.created.append(request)
        job = 99 + len(self.created)
        return json.dumps({"v": 1, "cluster": "c", "job_id": job}).encode()

    def wait_for_job_id(self, meta: bytes, **_: Any) -> int:
        return meta_job(meta)[1]

    def delete(self, meta: bytes) -> None:
        self.deleted.append(meta)
        self.phases[meta_job(meta)[1]] = ABORTED

    def get(self, meta: bytes) -> TaskState:
        job = meta_job(meta)[1]
        return TaskState(
            phase=self.phases.get(job, RUNNING), message="", info={"job_id": job, "state": "X"}
        )


def orchestrator(fake: FakeConnector) -> SlurmConnectorOrchestrator:
    o = SlurmConnectorOrchestrator(
        name="slurm",
        id=uuid4(),
        config=SlurmConnectorOrchestratorConfig(python="/opt/zenml/bin/python", code_dir="/code"),
        flavor="slurm_connector",
        type=StackComponentType.ORCHESTRATOR,
        user=None,
        created=datetime.now(),
        updated=datetime.now(),
    )
    o._client = fake  # type: ignore[assignment]
    return o


def snapshot(schedule: Any = None) -> Any:
    def step(*upstream: str) -> Any:
        return SimpleNamespace(
            config=SimpleNamespace(settings={}, resource_settings=None),
            spec=SimpleNamespace(upstream_steps=list(upstream)),
            pipeline_configuration=SimpleNamespace(settings={}),
        )

    return SimpleNamespace(
        id=uuid4(),
        schedule=schedule,
        pipeline_configuration=SimpleNamespace(name="p", settings={}),
        step_configurations={
            "load": step(),
            "train": step("load"),
            "features": step("load"),
            "evaluate": step("train", "features"),
        },
    )


def deps(request: Any) -> str:
    opts = request.template.custom.fields["sbatch_options"].struct_value.fields
    return opts["dependency"].string_value if "dependency" in opts else ""


def test_steps_are_submitted_upstream_first_each_after_its_upstream_jobs() -> None:
    fake = FakeConnector()
    result = orchestrator(fake).submit_pipeline(
        snapshot=snapshot(), stack=None, base_environment={}, step_environments={}
    )
    assert [r.template.id.name for r in fake.created] == [
        "zenml.p.load",
        "zenml.p.train",
        "zenml.p.features",
        "zenml.p.evaluate",
    ]
    assert [deps(r) for r in fake.created] == ["", "afterok:100", "afterok:100", "afterok:101:102"]
    env = fake.created[0].task_execution_metadata.environment_variables
    assert env["ZENML_SLURM_CONNECTOR_RUN_ID"]
    jobs = result.metadata["slurm_connector_jobs"]
    assert {n: j["job_id"] for n, j in jobs.items()} == {
        "load": 100,
        "train": 101,
        "features": 102,
        "evaluate": 103,
    }
    assert jobs["evaluate"]["after"] == ["train", "features"]
    assert result.wait_for_completion is None  # no placeholder run: nothing to wait on


def test_a_failed_submission_cancels_what_was_queued() -> None:
    fake = FakeConnector(fail_at=2)
    with pytest.raises(ConnectorError, match="INVALID_ARGUMENT"):
        orchestrator(fake).submit_pipeline(
            snapshot=snapshot(), stack=None, base_environment={}, step_environments={}
        )
    assert sorted(meta_job(m)[1] for m in fake.deleted) == [100, 101]


def test_a_schedule_is_refused_by_name() -> None:
    fake = FakeConnector()
    with pytest.raises(ValueError, match="^schedule:"):
        orchestrator(fake).submit_pipeline(
            snapshot=snapshot(schedule=object()),
            stack=None,
            base_environment={},
            step_environments={},
        )
    assert fake.created == []


def test_a_job_whose_upstream_failed_is_cancelled() -> None:
    fake = FakeConnector()
    o = orchestrator(fake)
    result = o.submit_pipeline(
        snapshot=snapshot(), stack=None, base_environment={}, step_environments={}
    )
    jobs = result.metadata["slurm_connector_jobs"]
    fake.phases[100] = SUCCEEDED
    fake.phases[101] = FAILED  # train failed: evaluate can never start; features still runs
    states = o._states(jobs)
    assert states["evaluate"].phase == ABORTED
    assert states["features"].phase == RUNNING
    assert [meta_job(m)[1] for m in fake.deleted] == [103]


def test_phases_and_run_status() -> None:
    assert zenml_status(SUCCEEDED) == ExecutionStatus.COMPLETED
    assert zenml_status(RETRYABLE) == ExecutionStatus.FAILED
    assert zenml_status(ABORTED) == ExecutionStatus.STOPPED
    assert zenml_status(1) == ExecutionStatus.QUEUED
    C, F, R, S = (
        ExecutionStatus.COMPLETED,
        ExecutionStatus.FAILED,
        ExecutionStatus.RUNNING,
        ExecutionStatus.STOPPED,
    )
    assert run_status({"a": C, "b": C}, False) == C
    assert run_status({"a": C, "b": F, "c": R}, False) == F
    assert run_status({"a": C, "b": R}, False) == R
    assert run_status({"a": C, "b": R}, True) == ExecutionStatus.STOPPING
    assert run_status({"a": C, "b": S}, True) == S


def test_summary_is_the_state_and_the_last_stderr_line() -> None:
    msg = (
        "[FAILED] job 4 exited with code 127 on node1\nSlurm job 4 is FAILED\n"
        "--- last lines of stderr ---\nfirst\nline 56: /x/python: No such file or directory\n"
        "Slurm accounting: 0 s elapsed"
    )
    assert summary(msg) == (
        "[FAILED] job 4 exited with code 127 on node1: "
        "line 56: /x/python: No such file or directory"
    )
    assert summary("[CANCELLED] by user") == "[CANCELLED] by user"
    assert summary("") == ""


def test_meta_job_reads_the_connectors_resource_meta() -> None:
    assert meta_job(b'{"v":1,"cluster":"hpc","job_id":42}') == ("hpc", 42)
    assert meta_job(b'{"v":1,"cluster":"hpc","job_id":0,"deferred":{}}') == ("hpc", 0)
    assert meta_job(b"garbage") == ("", 0)


def test_run_id_in_a_job() -> None:
    o = orchestrator(FakeConnector())
    with pytest.MonkeyPatch.context() as m:
        m.delenv(orch_mod.ENV_RUN_ID, raising=False)
        with pytest.raises(RuntimeError, match=orch_mod.ENV_RUN_ID):
            o.get_orchestrator_run_id()
        m.setenv(orch_mod.ENV_RUN_ID, "r1")
        assert o.get_orchestrator_run_id() == "r1"


def test_step_operator_cancels_and_follows_its_exact_job() -> None:
    from zenml_slurm_connector.flavors import SlurmConnectorStepOperatorConfig
    from zenml_slurm_connector.step_operator import SlurmConnectorStepOperator

    fake = FakeConnector()
    so = SlurmConnectorStepOperator(
        name="slurm",
        id=uuid4(),
        config=SlurmConnectorStepOperatorConfig(python="/p"),
        flavor="slurm_connector",
        type=StackComponentType.STEP_OPERATOR,
        user=None,
        created=datetime.now(),
        updated=datetime.now(),
    )
    so._client = fake  # type: ignore[assignment]
    step_run = SimpleNamespace(id=uuid4())
    meta = json.dumps({"v": 1, "cluster": "c", "job_id": 321}).encode()
    so._metas[step_run.id] = meta
    assert so.get_status(step_run) == ExecutionStatus.RUNNING  # type: ignore[arg-type]
    so.cancel(step_run)  # type: ignore[arg-type]
    assert fake.deleted == [meta]
