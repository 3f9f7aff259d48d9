"""The reads both backends make alike, written once: each is a shared statement (`sql`) read
into models by the shared mappers (`rows`).

Each backend's store class derives from `SharedReads`, giving its statements and its `_read`
(how a statement reaches its database), and defines every other `TaskStore` member itself;
SQLite answers some of these reads from memory first (`sqlite.cache`), then from here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar

from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Outcome
from gateway.tasks.history import TaskHistory
from gateway.tasks.models import (
    AttemptCall,
    InputRequest,
    SessionRecord,
    Task,
    TaskFilter,
    epoch_us,
)
from gateway.tasks.store.filters import select_sessions, select_tasks
from gateway.tasks.store.rows import (
    Row,
    answer_from_row,
    history_from_row,
    input_from_row,
    outcome_from_row,
    request_from_row,
    session_from_row,
    task_from_row,
    upstream_call_from_row,
)
from gateway.tasks.store.sql import Statements


class SharedReads(ABC):
    """`TaskStore`'s reads of the shared statements, for a backend's store class to inherit."""

    #: The backend's statements, in its placeholders.
    _sql: ClassVar[Statements]

    @abstractmethod
    async def _read(self, sql: str, *params: Any) -> Iterable[Row]:
        """The rows `sql` reads with `params`: the backend's way to its database."""

    async def get_task(self, task_id: str) -> Task | None:
        return next(map(task_from_row, await self._read(self._sql.task, task_id)), None)

    async def find_task(self, task_id: str, owner: str) -> Task | None:
        rows = await self._read(self._sql.owners_task, task_id, owner)
        return next(map(task_from_row, rows), None)

    async def list_tasks(
        self, owner: str, after: tuple[datetime, str] | None, limit: int, now: datetime
    ) -> list[Task]:
        if after is None:
            rows = await self._read(self._sql.list_tasks, owner, epoch_us(now), limit)
        else:
            start = (epoch_us(after[0]), after[1])
            rows = await self._read(self._sql.list_tasks_after, owner, *start, epoch_us(now), limit)
        return [task_from_row(row) for row in rows]

    async def query_tasks(self, choice: TaskFilter) -> list[Task]:
        sql, params = select_tasks(choice, self._sql.mark)
        return [task_from_row(row) for row in await self._read(sql, *params)]

    async def get_history(self, task_id: str) -> TaskHistory | None:
        return next(map(history_from_row, await self._read(self._sql.history, task_id)), None)

    async def get_outcome(self, task_id: str) -> Outcome | None:
        return next(map(outcome_from_row, await self._read(self._sql.outcome, task_id)), None)

    async def pending_inputs(self, task_id: str) -> list[InputRequest]:
        rows = await self._read(self._sql.pending_inputs, task_id)
        return [input_from_row(row) for row in rows]

    async def answered_inputs(self, task_id: str) -> dict[str, JsonObject]:
        return dict(map(answer_from_row, await self._read(self._sql.answered_inputs, task_id)))

    async def get_request(self, task_id: str) -> JsonObject | None:
        return next(map(request_from_row, await self._read(self._sql.request, task_id)), None)

    async def get_upstream_call(self, task_id: str) -> AttemptCall | None:
        rows = await self._read(self._sql.upstream_call, task_id)
        return next(map(upstream_call_from_row, rows), None)

    async def get_session(self, session_id: str, fresh: bool = False) -> SessionRecord | None:
        return next(map(session_from_row, await self._read(self._sql.session, session_id)), None)

    async def query_sessions(
        self, route: str | None, principal: str | None, limit: int
    ) -> list[SessionRecord]:
        sql, params = select_sessions(route, principal, limit, self._sql.mark)
        return [session_from_row(row) for row in await self._read(sql, *params)]

    async def caller_sessions(self, route: str, principal: str, limit: int) -> list[str]:
        rows = await self._read(self._sql.caller_sessions, route, principal, limit)
        return [row["session_id"] for row in rows]
