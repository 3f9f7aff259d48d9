"""The tasks extension's wire (SEP-2663, `io.modelcontextprotocol/tasks`) as typed models.

Only what a requester sends and reads: the `CreateTaskResult` a `tools/call` may answer with,
the `DetailedTask` that `tasks/get` returns, and the three `tasks/*` requests. Each request names
its task in the `Mcp-Name` header (`name_param`), which the extension requires on Streamable HTTP;
the SDK's session adds `Mcp-Method`, the protocol version and the per-request capabilities
(where `TasksExtension` declares the extension).

What is read is parsed leniently where the spec allows servers latitude (timestamps, `ttlMs`,
the `resultType` of a `tasks/get` answer), and strictly where a wrong value would mislead
(`taskId`, `status`).
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

from mcp.types import EmptyResult, ErrorData, InputResponses, Request, RequestParams, Result

EXTENSION_ID: Final = "io.modelcontextprotocol/tasks"
"""The extension's identifier, as declared in each request's client capabilities."""

TaskStatus: TypeAlias = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: Final[frozenset[TaskStatus]] = frozenset({"completed", "failed", "cancelled"})
"""Statuses a task never leaves."""


class TaskFields(Result):
    """The fields every task view carries (the spec's `Task`)."""

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    """How long the server keeps the task after its creation; `None`: unlimited."""
    poll_interval_ms: int | None = None
    """How often the server asks to be polled."""


class CreateTaskResult(TaskFields):
    """A `tools/call` answered with a task instead of its result (`resultType: "task"`)."""

    result_type: Literal["task"]


class DetailedTask(TaskFields):
    """A task as `tasks/get` shows it: its questions while `input_required`, its outcome at the end.

    `result` (a `CallToolResult`, `isError` ones included) when `completed`, `error` (a JSON-RPC
    error) when `failed`, `input_requests` (keyed, each key unique for the task's lifetime) when
    `input_required`.
    """

    result_type: str | None = None
    input_requests: dict[str, dict[str, Any]] | None = None
    result: dict[str, Any] | None = None
    error: ErrorData | None = None

    @classmethod
    def from_created(cls, created: CreateTaskResult) -> DetailedTask:
        """The view a `CreateTaskResult` gives before the first `tasks/get`."""
        return cls.model_validate(created.model_dump(by_alias=True, exclude={"result_type"}))


class TaskRequestParams(RequestParams):
    task_id: str


class UpdateTaskRequestParams(TaskRequestParams):
    input_responses: InputResponses


class GetTaskRequest(Request[TaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskRequestParams
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskRequestParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskRequestParams
    name_param = "taskId"


class CancelTaskRequest(Request[TaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskRequestParams
    name_param = "taskId"


TaskAck: TypeAlias = EmptyResult
"""What `tasks/update` and `tasks/cancel` answer: an empty acknowledgement."""
