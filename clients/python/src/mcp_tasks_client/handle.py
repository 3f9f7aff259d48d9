"""A handle on one task, for callers that want the task itself rather than only its result.

`start_task()` calls a tool and returns as soon as the server has created the task (or, when
the server answered at once, a handle on that answer, whose `id` is `None`). `resume_task()`
makes a handle from a task id kept from earlier, after the caller restarted. Both need a
`Client` built with `TasksExtension()` and connected on the 2026-07-28 generation.
"""

from __future__ import annotations

from typing import Any

from mcp import Client
from mcp.types import CallToolResult, RequestParamsMeta
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from mcp_tasks_client.extension import _CAPTURE, TasksExtension, _Captured
from mcp_tasks_client.follow import Follower, settle
from mcp_tasks_client.models import CreateTaskResult, DetailedTask


def _extension_of(client: Client) -> TasksExtension:
    for extension in client.extensions or ():
        if isinstance(extension, TasksExtension):
            return extension
    raise ValueError(
        "the client has no TasksExtension: pass Client(url, extensions=[TasksExtension()])"
    )


class TaskHandle:
    """One task on one client: `id`, `status()`, `result()`, `cancel()`."""

    def __init__(
        self,
        client: Client,
        task_id: str | None,
        *,
        created: CreateTaskResult | None = None,
        immediate: CallToolResult | None = None,
    ) -> None:
        self._client = client
        self._extension = _extension_of(client)
        self._id = task_id
        self._created = created
        self._immediate = immediate
        self._follower: Follower | None = None

    @property
    def id(self) -> str | None:
        """The task id, to keep for `resume_task()`; `None` when the server answered at once."""
        return self._id

    def _follow(self) -> Follower:
        if self._id is None:
            raise RuntimeError("no task: the server answered the call at once (see result())")
        if self._client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise RuntimeError(
                f"the client speaks {self._client.protocol_version}; the tasks extension needs "
                "a 2026-07-28 server"
            )
        if self._follower is None:
            self._follower = self._extension.follower(self._client.session, self._id)
        return self._follower

    async def status(self) -> DetailedTask:
        """The task as the server shows it now: one `tasks/get` (its questions wait for `result()`).

        Raises:
            MCPError: The server refused (-32602: unknown or expired task).
            RuntimeError: There is no task (`id` is `None`).
        """
        follower = self._follow()
        return await follower.poll()

    async def result(self) -> CallToolResult:
        """Wait for the end, answering the task's questions, and return its result.

        Cancelling the wait leaves the task running (`cancel()` stops it).

        Raises:
            MCPError: The task failed (its JSON-RPC error), or a request was refused.
            TaskCancelledError: The task was cancelled.
        """
        if self._id is None:
            assert self._immediate is not None
            return self._immediate
        follower = self._follow()
        if follower.last is None and self._created is not None:
            await follower.observe(DetailedTask.from_created(self._created))
        return await settle(follower, cancel_if_abandoned=False)

    async def cancel(self) -> None:
        """Ask the server to cancel the task (acknowledged at once; the task may still complete).

        Raises:
            MCPError: The server refused (for instance, an unknown task).
        """
        if self._id is None:
            return
        await self._follow().cancel()


async def start_task(
    client: Client,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    read_timeout_seconds: float | None = None,
    meta: RequestParamsMeta | None = None,
) -> TaskHandle:
    """Call tool `name` and return a handle on the task the server made of the call.

    A call the server answers at once gives a handle whose `id` is `None` and whose
    `result()` is that answer. Questions the server asks before creating the task (MRTR
    rounds) go to the client's callbacks, as for `client.call_tool()`.

    Raises:
        ValueError: The client was built without `TasksExtension()`.
        MCPError: The server refused the call.
    """
    _extension_of(client)
    captured: list[CreateTaskResult] = []
    token = _CAPTURE.set(captured)
    try:
        result = await client.call_tool(name, arguments, read_timeout_seconds, meta=meta)
    except _Captured:
        created = captured[0]
        return TaskHandle(client, created.task_id, created=created)
    finally:
        _CAPTURE.reset(token)
    return TaskHandle(client, None, immediate=result)


def resume_task(client: Client, task_id: str) -> TaskHandle:
    """A handle on a task created earlier (by this caller before a restart, say).

    Nothing is sent until the handle is used; an unknown or expired id then raises `MCPError`.

    Raises:
        ValueError: The client was built without `TasksExtension()`.
    """
    return TaskHandle(client, task_id)
