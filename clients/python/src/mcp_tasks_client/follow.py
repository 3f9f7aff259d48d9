"""Following one task to its end: the poll loop both the transparent call and the handle use.

`Follower` polls `tasks/get` at the task's own `pollIntervalMs`, answers each new
`inputRequests` key once (through the client's elicitation, sampling and roots callbacks, sent
back with `tasks/update`), and reports every change of status or status message to `on_status`.
`outcome()` turns the terminal view into what a plain call would have given: the
`CallToolResult` (an `isError` one included), or the JSON-RPC error raised as `MCPError`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeAlias

import anyio
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ErrorData, InputRequest, InputResponses
from pydantic import TypeAdapter

from mcp_tasks_client.models import TERMINAL, DetailedTask, TaskStatus
from mcp_tasks_client.rpc import cancel_task, get_task, update_task

logger = logging.getLogger(__name__)

StatusCallback: TypeAlias = Callable[[DetailedTask], Awaitable[None]]
"""Called with the task each time its status or status message changes."""

DEFAULT_POLL_SECONDS = 1.0
"""The poll interval when the server suggests none."""
MIN_POLL_SECONDS = 0.01
CANCEL_SECONDS = 5.0
"""How long an abandoned call waits for its `tasks/cancel` to be acknowledged."""

_INPUT_REQUEST: TypeAdapter[InputRequest] = TypeAdapter(InputRequest)


class TaskCancelledError(Exception):
    """The task ended `cancelled` (by another caller, an operator or the server): no result."""

    def __init__(self, task: DetailedTask) -> None:
        super().__init__(f"task {task.task_id} was cancelled" + _detail(task.status_message))
        self.task = task


def _detail(message: str | None) -> str:
    return f": {message}" if message else ""


def poll_delay(task: DetailedTask) -> float:
    """Seconds until the next `tasks/get`, as the task asks."""
    if task.poll_interval_ms is None:
        return DEFAULT_POLL_SECONDS
    return max(MIN_POLL_SECONDS, task.poll_interval_ms / 1000)


def _has_outcome(task: DetailedTask) -> bool:
    """Whether `task` is terminal with what its status carries (a `CreateTaskResult` never is)."""
    if task.status == "completed":
        return task.result is not None
    if task.status == "failed":
        return task.error is not None
    return task.status == "cancelled"


def outcome(task: DetailedTask) -> CallToolResult:
    """The result a plain call would have returned, from a terminal task.

    Raises:
        MCPError: The task `failed`: its JSON-RPC error.
        TaskCancelledError: The task was `cancelled`.
        ValueError: The task has not ended, or ended without the payload its status requires.
    """
    if task.status == "completed":
        if task.result is None:
            raise ValueError(f"task {task.task_id} completed without a result")
        return CallToolResult.model_validate(task.result)
    if task.status == "failed":
        if task.error is None:
            raise ValueError(f"task {task.task_id} failed without an error")
        raise MCPError.from_error_data(task.error)
    if task.status == "cancelled":
        raise TaskCancelledError(task)
    raise ValueError(f"task {task.task_id} is still {task.status}")


@dataclass
class Follower:
    """One task, followed from one client session."""

    session: ClientSession
    task_id: str
    on_status: StatusCallback | None = None
    read_timeout_seconds: float | None = None
    """Each `tasks/*` request's read timeout (the session's when `None`)."""
    last: DetailedTask | None = None
    answered: set[str] = field(default_factory=set)
    """`inputRequests` keys already answered: keys are unique for a task's lifetime."""
    _reported: tuple[TaskStatus, str | None] | None = None

    async def observe(self, task: DetailedTask) -> None:
        """Take `task` as the latest view, reporting it if its status or message is new."""
        self.last = task
        seen = (task.status, task.status_message)
        if seen != self._reported:
            self._reported = seen
            if self.on_status is not None:
                await self.on_status(task)

    async def poll(self) -> DetailedTask:
        """`tasks/get` once."""
        task = await get_task(self.session, self.task_id, self.read_timeout_seconds)
        await self.observe(task)
        return task

    async def until_terminal(self) -> DetailedTask:
        """Poll (answering questions) until the task ends; return its terminal view.

        Raises:
            MCPError: A `tasks/*` request was refused, or a callback declined a question.
        """
        task = self.last
        if task is None or (task.status in TERMINAL and not _has_outcome(task)):
            task = await self.poll()
        while task.status not in TERMINAL:
            if task.status == "input_required":
                await self.answer(task)
            await anyio.sleep(poll_delay(task))
            task = await self.poll()
        return task

    async def answer(self, task: DetailedTask) -> None:
        """Answer the keys of `task.input_requests` not answered yet, in one `tasks/update`.

        Raises:
            MCPError: A callback declined (returned `ErrorData`): the extension has no way to
                send a refusal, so the caller learns it instead.
        """
        responses: InputResponses = {}
        for key, raw in (task.input_requests or {}).items():
            if key in self.answered:
                continue
            request = _INPUT_REQUEST.validate_python(raw)
            meta = request.params.meta if request.params is not None else None
            context = ClientRequestContext(session=self.session, request_id=key, meta=meta)
            response = await self.session.dispatch_input_request(context, request)
            if isinstance(response, ErrorData):
                raise MCPError.from_error_data(response)
            responses[key] = response
        if responses:
            await update_task(self.session, self.task_id, responses, self.read_timeout_seconds)
            self.answered.update(responses)

    async def cancel(self) -> None:
        """`tasks/cancel`.

        Raises:
            MCPError: The server refused.
        """
        await cancel_task(self.session, self.task_id, self.read_timeout_seconds)

    async def cancel_quietly(self) -> None:
        """`tasks/cancel` for a call being abandoned: shielded, bounded, failures only logged."""
        with anyio.move_on_after(CANCEL_SECONDS, shield=True) as scope:
            try:
                await self.cancel()
            except Exception as exc:  # the call is failing already; this must not mask why
                logger.warning("tasks/cancel for task %s failed: %s", self.task_id, exc)
        if scope.cancelled_caught:
            logger.warning("tasks/cancel for task %s was not acknowledged in time", self.task_id)


async def settle(follower: Follower, *, cancel_if_abandoned: bool) -> CallToolResult:
    """Follow the task to its end and return its outcome as a plain call would.

    With `cancel_if_abandoned`, leaving before the end (the caller's task cancelled, a callback
    raising, a request failing) sends `tasks/cancel` first.

    Raises:
        MCPError: The task failed (its error), or a `tasks/*` request was refused.
        TaskCancelledError: The task was cancelled elsewhere.
    """
    ended = False
    try:
        task = await follower.until_terminal()
        ended = True
    finally:
        if cancel_if_abandoned and not ended:
            await follower.cancel_quietly()
    return outcome(task)
