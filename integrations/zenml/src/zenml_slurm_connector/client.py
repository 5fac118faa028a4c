"""The connector's gRPC API (`flyteidl2.connector.AsyncConnectorService`), as the two components
use it.

gRPC rather than the `slurm-connector` CLI: the ZenML client then needs no connector binary (only
its address), every answer is typed (phase, message, the job's facts in `custom_info`, including
the cluster's accounting), GetTaskLogs pages a running job's logs with a token (nothing read twice),
and a cancel is one call. The CLI (`slurm-connector submit`) is itself a client of this API.
"""

import json
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import grpc
from flyteidl2.connector import connector_pb2, service_pb2_grpc
from flyteidl2.core import execution_pb2
from google.protobuf import json_format
from zenml.enums import ExecutionStatus

Phase = execution_pb2.TaskExecution.Phase

TERMINAL_PHASES = {
    Phase.Value("SUCCEEDED"),
    Phase.Value("ABORTED"),
    Phase.Value("FAILED"),
    Phase.Value("RETRYABLE_FAILED"),
}


def zenml_status(phase: int) -> ExecutionStatus:
    """A connector phase as ZenML's status.

    Args:
        phase: `flyteidl2.core.TaskExecution.Phase`.

    Returns:
        The status.
    """
    name = Phase.Name(phase) if phase in Phase.values() else "UNDEFINED"
    return {
        "RUNNING": ExecutionStatus.RUNNING,
        "SUCCEEDED": ExecutionStatus.COMPLETED,
        "ABORTED": ExecutionStatus.STOPPED,
        "FAILED": ExecutionStatus.FAILED,
        "RETRYABLE_FAILED": ExecutionStatus.FAILED,
    }.get(name, ExecutionStatus.QUEUED)


class ConnectorError(RuntimeError):
    """A call to the connector failed; the message names the call and the address."""


@dataclass
class TaskState:
    """GetTask's answer, flattened.

    Attributes:
        phase: the connector's phase.
        message: its message (for a failure: Slurm's state, reason and the stderr tail).
        info: `custom_info` (cluster, job_id, state, reason, exit_code, accounting, ...).
    """

    phase: int
    message: str
    info: Dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """Whether the task ended.

        Returns:
            True once SUCCEEDED, ABORTED, FAILED or RETRYABLE_FAILED.
        """
        return self.phase in TERMINAL_PHASES

    @property
    def status(self) -> ExecutionStatus:
        """ZenML's status of it.

        Returns:
            The status.
        """
        return zenml_status(self.phase)

    @property
    def job_id(self) -> int:
        """The Slurm job id (0 while a deferred submit has none yet).

        Returns:
            The id.
        """
        try:
            return int(self.info.get("job_id") or 0)
        except (TypeError, ValueError):
            return 0


def meta_job(resource_meta: bytes) -> Tuple[str, int]:
    """The cluster and job id in the connector's `resource_meta` (JSON, version 1).

    Args:
        resource_meta: CreateTask's answer.

    Returns:
        (cluster, job id; 0 for a submit the connector deferred).
    """
    try:
        m = json.loads(resource_meta.decode())
        return str(m.get("cluster", "")), int(m.get("job_id") or 0)
    except (ValueError, UnicodeDecodeError, TypeError, AttributeError):
        return "", 0


class ConnectorClient:
    """One channel to the connector."""

    def __init__(
        self,
        url: str,
        tls: bool = False,
        tls_ca_file: Optional[str] = None,
        timeout: float = 60.0,
    ) -> None:
        """Opens the channel (lazily: the first call connects).

        Args:
            url: `host:port`, or with `http://` / `https://`.
            tls: use TLS.
            tls_ca_file: CA bundle for the connector's certificate.
            timeout: per-call deadline in seconds.
        """
        target = url
        if target.startswith("https://"):
            tls = True
            target = target[len("https://") :]
        elif target.startswith("http://"):
            target = target[len("http://") :]
        self.target = target.rstrip("/")
        self.timeout = timeout
        if tls:
            root = None
            if tls_ca_file:
                with open(tls_ca_file, "rb") as f:
                    root = f.read()
            creds = grpc.ssl_channel_credentials(root_certificates=root)
            self._channel = grpc.secure_channel(self.target, creds)
        else:
            self._channel = grpc.insecure_channel(self.target)
        self._stub = service_pb2_grpc.AsyncConnectorServiceStub(self._channel)

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def _fail(self, call: str, e: grpc.RpcError) -> ConnectorError:
        code = e.code().name if hasattr(e, "code") else "?"
        detail = e.details() if hasattr(e, "details") else str(e)
        hint = ""
        if code == "UNAVAILABLE":
            hint = " (is `slurm-connector serve` running there? set `connector_url`)"
        return ConnectorError(
            f"{call} to the connector at {self.target} failed: {code}: {detail}{hint}"
        )

    def create(self, request: Any) -> bytes:
        """CreateTask.

        Args:
            request: a CreateTaskRequest.

        Returns:
            The task's `resource_meta`.

        Raises:
            ConnectorError: the connector refused it (the message names the setting) or is
                unreachable.
        """
        try:
            return bytes(self._stub.CreateTask(request, timeout=self.timeout).resource_meta)
        except grpc.RpcError as e:
            raise self._fail("CreateTask", e) from None

    def get(self, resource_meta: bytes, task_type: str = "") -> TaskState:
        """GetTask.

        Args:
            resource_meta: the task's.
            task_type: its type (the connector does not need it).

        Returns:
            The task's state.

        Raises:
            ConnectorError: the call failed.
        """
        req = connector_pb2.GetTaskRequest(
            resource_meta=resource_meta,
            task_category=connector_pb2.TaskCategory(name=task_type),
        )
        try:
            r = self._stub.GetTask(req, timeout=self.timeout).resource
        except grpc.RpcError as e:
            raise self._fail("GetTask", e) from None
        info = json_format.MessageToDict(r.custom_info) if r.HasField("custom_info") else {}
        return TaskState(phase=r.phase, message=r.message, info=info)

    def delete(self, resource_meta: bytes) -> None:
        """DeleteTask (scancel of the job).

        Args:
            resource_meta: the task's.

        Raises:
            ConnectorError: the call failed.
        """
        try:
            self._stub.DeleteTask(
                connector_pb2.DeleteTaskRequest(resource_meta=resource_meta),
                timeout=self.timeout,
            )
        except grpc.RpcError as e:
            raise self._fail("DeleteTask", e) from None

    def logs(
        self, resource_meta: bytes, token: str = "", lines: int = 500
    ) -> Tuple[List[str], str]:
        """One page of GetTaskLogs: the lines written since `token`.

        Args:
            resource_meta: the task's.
            token: the previous page's token ("" for the first page).
            lines: at most this many lines.

        Returns:
            (lines, the next token: empty once the job ended and every stream was read).

        Raises:
            ConnectorError: the call failed.
        """
        req = connector_pb2.GetTaskLogsRequest(
            resource_meta=resource_meta, token=token, lines=lines
        )
        out: List[str] = []
        next_token = ""
        try:
            for msg in self._stub.GetTaskLogs(req, timeout=self.timeout):
                part = msg.WhichOneof("part")
                if part == "header":
                    next_token = msg.header.token
                elif part == "body":
                    out.extend(
                        f"[{line.short_pod_name}] {line.message}"
                        if line.short_pod_name
                        else line.message
                        for line in msg.body.lines
                    )
                    out.extend(msg.body.results)
        except grpc.RpcError as e:
            raise self._fail("GetTaskLogs", e) from None
        return out, next_token

    def wait_for_job_id(
        self, resource_meta: bytes, timeout: float = 300.0, poll: float = 0.5
    ) -> int:
        """The job id of a task whose submit the connector deferred (paced behind others, or
        retried after slurmrestd hiccupped): GetTask until it has one.

        Args:
            resource_meta: the task's.
            timeout: give up after this many seconds.
            poll: seconds between asks.

        Returns:
            The job id.

        Raises:
            ConnectorError: no job after `timeout`, or the task ended without one.
        """
        _, job_id = meta_job(resource_meta)
        if job_id:
            return job_id
        deadline = time.monotonic() + timeout
        while True:
            state = self.get(resource_meta)
            if state.job_id:
                return state.job_id
            if state.terminal:
                raise ConnectorError(f"the task ended before Slurm gave it a job: {state.message}")
            if time.monotonic() > deadline:
                raise ConnectorError(
                    f"no Slurm job for the task after {timeout:.0f}s: {state.message}"
                )
            time.sleep(poll)
