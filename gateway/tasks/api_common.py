"""What the task API of each generation shares: finding the caller's task, reading its
outcome, and answering. The generations differ in their wire (`session.task_api`, `calls.task_api`);
who may see a task, and what is audited when someone reads one, they share.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from gateway.observability.audit import audit
from gateway.protocol import jsonrpc
from gateway.protocol.errors import TaskError
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task, names_nothing_stored
from gateway.tasks.store import TaskStore

NOT_FOUND = "Failed to retrieve task: Task not found"
EXPIRED = "Failed to retrieve task: Task has expired"

#: Runs an audit after the answer has gone (the 2025-11-25 session's `spawn`).
Later = Callable[[Coroutine[Any, Any, None]], None]


def ok(request: jsonrpc.Request, result: jsonrpc.JsonObject) -> jsonrpc.Response:
    return jsonrpc.Response(jsonrpc="2.0", id=request.id, result=result)


async def find(
    store: TaskStore,
    task_id: object,
    owner: str,
    principal: str | None,
    now: Callable[[], datetime],
    later: Later | None = None,
) -> Task:
    """The owner's task `task_id`, unexpired. A miss is audited when the id names another
    owner's task: after the answer with `later`, else before it.

    Raises:
        TaskError: `task_id` is not a string, names no task of the owner's, or the task
            has expired.
    """
    # The taskId parameter is the source of truth; related-task meta or a stray `task`
    # field on the request (the TS client sends one) is ignored, as the spec requires.
    if not isinstance(task_id, str):
        raise TaskError("params.taskId must be a string")
    if names_nothing_stored(task_id):
        raise TaskError(NOT_FOUND)
    # One query by id and owner: another owner's task and an unknown id cost the same,
    # so neither the answer nor its timing tells them apart.
    task = await store.find_task(task_id, owner)
    if task is None:
        miss = audit_miss(store, task_id, owner, principal)
        if later is None:
            await miss
        else:
            later(miss)
        raise TaskError(NOT_FOUND)
    if task.expired(now()):
        raise TaskError(EXPIRED)
    return task


async def audit_miss(store: TaskStore, task_id: str, owner: str, principal: str | None) -> None:
    """Only the audit trail learns that a task the caller asked for is someone else's."""
    task = await store.get_task(task_id)
    if task is not None and task.owner != owner:
        audit("task_access_denied", principal=principal, task_id=task_id, route=task.route)


async def read_outcome(store: TaskStore, task_id: str) -> Outcome | None:
    """A finished task's outcome, as its reader gets it: every read is audited."""
    return retrieved(task_id, await store.get_outcome(task_id))


def retrieved(task_id: str, outcome: Outcome | None) -> Outcome | None:
    """`outcome`, audited as read (the outcome a run here has just written, say)."""
    audit(
        "task_result_retrieved", task_id=task_id, kind=outcome.kind if outcome is not None else None
    )
    return outcome
