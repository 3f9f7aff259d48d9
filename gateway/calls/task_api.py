"""The tasks extension's API (SEP-2663, 2026-07-28): tasks/get, tasks/update, tasks/cancel.

The same store as the 2025-11-25 API, rendered by this generation's rules: the result, the
error or the pending input requests inlined in `tasks/get` (there is no tasks/result); a tool
result with `isError` is `completed` here although a 2025-11-25 reader sees that task
`failed` (the store keeps the raw outcome, and each reader derives its status); `ttlMs` and
`pollIntervalMs`; no related-task meta. `tasks/update` answers input requests by key (unknown
or settled keys are ignored, as the extension says); `tasks/cancel` is an acknowledgement,
for terminal tasks too. Either generation's tasks may be read here by the same owner.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from gateway.calls.call import UpstreamCall
from gateway.calls.task_host import CallTaskHost
from gateway.config import TaskPolicy
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, TaskError
from gateway.protocol.jsonrpc import Answer
from gateway.protocol.outcome import Outcome
from gateway.tasks.api_common import find, ok, read_outcome
from gateway.tasks.inputs import TaskInputs
from gateway.tasks.models import (
    InputRequest,
    Task,
    TaskStatus,
    iso,
    status_2026,
)
from gateway.tasks.runner import TaskRunner
from gateway.tasks.store import TaskStore


def task_fields(task: Task, outcome: Outcome | None = None) -> jsonrpc.JsonObject:
    """The extension's `Task` object: the status as this generation derives it."""
    status, message = status_2026(task, outcome)
    out: jsonrpc.JsonObject = {
        "taskId": task.task_id,
        "status": status.value,
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": task.poll_interval_ms,
    }
    if message is not None:
        out["statusMessage"] = message
    return out


def create_task_result(request_id: jsonrpc.RequestId, task: Task) -> jsonrpc.Response:
    """The flat CreateTaskResult: no nested task, no result, no requestState."""
    return jsonrpc.Response(
        jsonrpc="2.0", id=request_id, result={"resultType": "task", **task_fields(task)}
    )


def detailed(task: Task, outcome: Outcome | None, inputs: list[InputRequest]) -> jsonrpc.JsonObject:
    """The DetailedTask of tasks/get: what the status says the reader needs, inlined."""
    fields = task_fields(task, outcome)
    status = fields["status"]
    if status == "completed" and outcome is not None and outcome.kind == "result":
        # Inlined as the call's own 2026-07-28 result would be, `resultType` and all.
        fields["result"] = {"resultType": "complete", **outcome.body}
    elif status == "failed":
        fields["error"] = (
            outcome.body
            if outcome is not None and outcome.kind == "error"
            else {"code": INTERNAL_ERROR, "message": task.status_message or "the task failed"}
        )
    elif status == "input_required":
        fields["inputRequests"] = {
            row.key: {"method": row.method, "params": row.params} for row in inputs
        }
    return fields


class ModernTaskApi:
    def __init__(
        self,
        store: TaskStore,
        runner: TaskRunner,
        inputs: TaskInputs,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._runner = runner
        self._inputs = inputs
        self._clock = clock

    def host_for(
        self, call: UpstreamCall, owner: str, principal: str | None, policy: TaskPolicy
    ) -> CallTaskHost:
        """The runner's seam for a call about to become a task."""
        return CallTaskHost(call, owner, principal, self._inputs, policy.input_timeout_seconds)

    async def answer(self, request: jsonrpc.Request, owner: str, principal: str | None) -> Answer:
        try:
            task_id = jsonrpc.param(request, "taskId")
            if request.method == "tasks/get":
                task = await self._runner.latest(
                    task_id,
                    owner,
                    self._clock(),
                    lambda: find(self._store, task_id, owner, principal, self._clock),
                )
                return ok(request, {"resultType": "complete", **await self._get(task)})
            task = await find(self._store, task_id, owner, principal, self._clock)
            if request.method == "tasks/update":
                await self._update(task, jsonrpc.param(request, "inputResponses"))
            else:
                await self._cancel(task, principal)
            return ok(request, {"resultType": "complete"})
        except TaskError as exc:
            return jsonrpc.error_response(request.id, exc.code, exc.message)

    async def _get(self, task: Task) -> jsonrpc.JsonObject:
        outcome = None
        inputs: list[InputRequest] = []
        if task.status.terminal:
            outcome = await read_outcome(self._store, task.task_id)
        elif task.status is TaskStatus.INPUT_REQUIRED:
            inputs = await self._inputs.pending(task.task_id)
        return detailed(task, outcome, inputs)

    async def _update(self, task: Task, responses: object) -> None:
        if not isinstance(responses, dict):
            raise TaskError("params.inputResponses must be an object of answers by key")
        for key, response in responses.items():
            if not isinstance(response, dict):
                raise TaskError(f"params.inputResponses[{key!r}] must be an object")
        if task.status.terminal:
            return  # nothing waits: the extension says such answers are ignored
        for key, response in responses.items():
            await self._inputs.answer(task.task_id, key, response)

    async def _cancel(self, task: Task, principal: str | None) -> None:
        if task.status.terminal:
            return  # the extension acknowledges a cancel of a finished task
        try:
            await self._runner.cancel(task)
        except TaskError:
            pass  # it finished meanwhile: still an acknowledgement
