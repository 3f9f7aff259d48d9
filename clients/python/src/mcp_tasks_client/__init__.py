"""The MCP tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) for mcp 2.x's `Client`.

    async with Client(url, extensions=[TasksExtension(on_status=show)]) as client:
        result = await client.call_tool("build_report", {"year": 2025})

A call the server turns into a task is followed to its end: `tasks/get` at the task's
`pollIntervalMs`, its questions answered through the client's elicitation, sampling and roots
callbacks with `tasks/update`, each status change reported to `on_status`, and the result
returned as if the call had been plain; cancelling the call sends `tasks/cancel`.

For the task itself: `task = await start_task(client, name, args)`, then `task.id`,
`await task.status()`, `await task.result()`, `await task.cancel()`; `resume_task(client, id)`
after a restart.

Modules, in the order a call meets them: `extension` (the SDK hook), `handle` (the task
handle), `follow` (the poll loop and the outcome), `rpc` (the `tasks/*` requests), `models`
(the wire).
"""

from mcp_tasks_client.extension import TasksExtension
from mcp_tasks_client.follow import StatusCallback, TaskCancelledError
from mcp_tasks_client.handle import TaskHandle, resume_task, start_task
from mcp_tasks_client.models import (
    EXTENSION_ID,
    TERMINAL,
    CreateTaskResult,
    DetailedTask,
    TaskStatus,
)

__all__ = [
    "EXTENSION_ID",
    "TERMINAL",
    "CreateTaskResult",
    "DetailedTask",
    "StatusCallback",
    "TaskCancelledError",
    "TaskHandle",
    "TaskStatus",
    "TasksExtension",
    "resume_task",
    "start_task",
]
