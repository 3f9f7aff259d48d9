"""The three `tasks/*` requests, sent through the SDK's `ClientSession`.

The session stamps each one with the 2026-07-28 envelope (protocol version, client info and the
per-request client capabilities, which carry the extension once `TasksExtension` is among the
client's extensions) and the `Mcp-Method` header; the request classes add `Mcp-Name: <taskId>`.
"""

from __future__ import annotations

from mcp.client.session import ClientSession
from mcp.types import InputResponses

from mcp_tasks_client.models import (
    CancelTaskRequest,
    DetailedTask,
    GetTaskRequest,
    TaskAck,
    TaskRequestParams,
    UpdateTaskRequest,
    UpdateTaskRequestParams,
)


async def get_task(
    session: ClientSession, task_id: str, read_timeout_seconds: float | None = None
) -> DetailedTask:
    """`tasks/get`: the task as it is now, its outcome inlined once it has ended.

    Raises:
        MCPError: The server refused (-32602: unknown or expired task).
        RuntimeError: The answer describes another task.
    """
    request = GetTaskRequest(params=TaskRequestParams(task_id=task_id))
    task = await session.send_request(
        request, DetailedTask, request_read_timeout_seconds=read_timeout_seconds
    )
    if task.task_id != task_id:
        raise RuntimeError(f"tasks/get for {task_id} answered for {task.task_id}")
    return task


async def update_task(
    session: ClientSession,
    task_id: str,
    responses: InputResponses,
    read_timeout_seconds: float | None = None,
) -> None:
    """`tasks/update`: answers to some of the task's `inputRequests`, by key.

    Raises:
        MCPError: The server refused (for instance, an unknown task).
    """
    params = UpdateTaskRequestParams(task_id=task_id, input_responses=responses)
    await session.send_request(
        UpdateTaskRequest(params=params), TaskAck, request_read_timeout_seconds=read_timeout_seconds
    )


async def cancel_task(
    session: ClientSession, task_id: str, read_timeout_seconds: float | None = None
) -> None:
    """`tasks/cancel`: asks the server to stop the task (cooperative; acknowledged at once).

    Raises:
        MCPError: The server refused (for instance, an unknown task).
    """
    request = CancelTaskRequest(params=TaskRequestParams(task_id=task_id))
    await session.send_request(request, TaskAck, request_read_timeout_seconds=read_timeout_seconds)
