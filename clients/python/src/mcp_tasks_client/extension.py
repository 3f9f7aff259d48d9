"""`TasksExtension`: the tasks extension plugged into the SDK's `Client(extensions=[...])`.

Passed to `Client`, it declares `io.modelcontextprotocol/tasks` in every request's client
capabilities (the SDK does that for each extension it is given) and claims the `resultType:
"task"` answer of `tools/call`. `client.call_tool()` then hands such an answer to `_resolve`,
which follows the task to its end and returns its result, so the call looks plain to the caller.
`start_task()` (in `handle`) goes through the same `call_tool()`, so a call's MRTR rounds before
the task are answered as usual, and takes the task instead of its result (`_CAPTURE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.types import CallToolResult

from mcp_tasks_client.follow import Follower, StatusCallback, settle
from mcp_tasks_client.models import EXTENSION_ID, CreateTaskResult, DetailedTask

_CAPTURE: ContextVar[list[CreateTaskResult] | None] = ContextVar(
    "mcp_tasks_client_capture", default=None
)
"""Set by `start_task()` around its `call_tool()`: where the created task goes."""


class _Captured(Exception):
    """Ends a `start_task()` call once the task is created (never seen by callers)."""


class TasksExtension(ClientExtension):
    """Makes `client.call_tool()` follow a call the server turned into a task.

    `on_status` is awaited with the task whenever its status or status message changes
    (progress arrives as status messages), for the transparent call and `TaskHandle.result()`.
    Questions the task asks go to the client's own elicitation, sampling and roots callbacks.
    """

    identifier = EXTENSION_ID

    def __init__(self, *, on_status: StatusCallback | None = None) -> None:
        self.on_status = on_status

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve),)

    def follower(
        self, session: ClientSession, task_id: str, read_timeout_seconds: float | None = None
    ) -> Follower:
        """A `Follower` of one task, reporting to this extension's `on_status`."""
        return Follower(session, task_id, self.on_status, read_timeout_seconds)

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        captured = _CAPTURE.get()
        if captured is not None:
            captured.append(created)
            raise _Captured
        follower = self.follower(ctx.session, created.task_id, ctx.read_timeout_seconds)
        await follower.observe(DetailedTask.from_created(created))
        return await settle(follower, cancel_if_abandoned=True)
