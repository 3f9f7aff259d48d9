"""With replicas: a 2025-11-25 session's task questions are rows in the shared store as well.

The upstream asks on the replica that runs the task's call, but the client's `tasks/result`
and its answer may land on any replica. So each such question is written as an input row
before the task shows `input_required`; another replica's `tasks/result` relays the pending
rows (`Questions.ask_stored`), under ids that say which task and question they are
(`stored_id`), so an answer is understood wherever it lands. An answer that lands elsewhere
is stored; the runner's replica hears of it (`answered_elsewhere`, through the store's
wake-ups and every lease round) and sends it upstream. With SQLite (one process) none of
this runs: the session's own streams carry its questions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from gateway.protocol import jsonrpc
from gateway.tasks.models import InputRequest, names_nothing_stored
from gateway.tasks.store import TaskStore

#: The downstream id of a question kept in the store: it names the task and the question.
_STORED_PREFIX = "task-input/"


def stored_id(task_id: str, key: str) -> str:
    return f"{_STORED_PREFIX}{task_id}/{key}"


def parse_stored_id(down_id: object) -> tuple[str, str] | None:
    """(task id, key) of an id made by `stored_id`, else None. Neither holds a '/': task ids
    are URL-safe base64, and keys are made by the gateway."""
    if not isinstance(down_id, str) or not down_id.startswith(_STORED_PREFIX):
        return None
    task_id, slash, key = down_id[len(_STORED_PREFIX) :].partition("/")
    if not task_id or not slash or not key or "/" in key or names_nothing_stored(down_id):
        return None
    return task_id, key


class AnswerHost(Protocol):
    """Where the answers to a running task's questions go: the replica running its call."""

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool: ...

    async def decline(self, key: str, error: jsonrpc.ErrorResponse) -> bool: ...

    async def take_stored_answers(self) -> None: ...


class Hosts(Protocol):
    """Whom answers for a task are routed through on this replica (`ModernTaskApi`)."""

    def running(self, task_id: str, host: AnswerHost) -> None: ...

    def ended(self, task_id: str) -> None: ...


class QuestionBoard:
    """The store side of the questions of sessions held here, one per replica."""

    def __init__(self, store: TaskStore, clock: Callable[[], datetime], hosts: Hosts) -> None:
        self._store = store
        self._clock = clock
        self.hosts = hosts

    async def asked(self, task_id: str, key: str, request: jsonrpc.Request) -> bool:
        """Write the question; False if the task ended meanwhile."""
        row = InputRequest(
            task_id=task_id,
            key=key,
            method=request.method,
            params=request.params or {},
            upstream_id=request.id,
            created_at=self._clock(),
        )
        return await self._store.add_input(row)

    async def answered(self, task_id: str, key: str, response: jsonrpc.JsonObject) -> bool:
        """Settle the row with the client's answer; False if it was settled already (an
        answer that landed on another replica came first)."""
        return await self._store.answer_input(task_id, key, response, self._clock()) is not None

    async def withdrawn(self, task_id: str, key: str) -> None:
        await self._store.withdraw_inputs(task_id, self._clock(), [key])

    async def answers(self, task_id: str) -> dict[str, jsonrpc.JsonObject]:
        """The answers stored for the task's questions (by any replica)."""
        return await self._store.answered_inputs(task_id)
