"""The PostgreSQL backend of `TaskStore`: the database several replicas share (DESIGN.md,
"Several replicas"). Its reads are those both backends share (`reads.SharedReads`), some
answered from what it keeps (`kept`); its writes it delegates, by the rows they change, to
`tasks`, `inputs`, `attempts` and `sessions`.

Each write is one transaction on a pooled connection (`pool`), durable on return. A task's
runner is the replica that created or claimed it, and the runner's writes are fenced on it: a
replica taken for dead can no longer write to the tasks a survivor took over, while a client's
cancel or answer lands on any replica. `opening` is a replica's start on the database,
`schema` keeps the schema current, `listener` hears the wake-ups.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from datetime import datetime
from typing import Any, TypeVar

from asyncpg import Record

from gateway.protocol.jsonrpc import JsonObject, RequestId
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import (
    TERMINAL,
    InputRequest,
    SessionRecord,
    Task,
    TaskFilter,
    TaskStatus,
    epoch_us,
)
from gateway.tasks.store.filters import tasks_where
from gateway.tasks.store.postgres import attempts, inputs, sessions, tasks
from gateway.tasks.store.postgres.kept import Kept, KeptReads
from gateway.tasks.store.postgres.listener import Listener
from gateway.tasks.store.postgres.pool import Pool, application_name
from gateway.tasks.store.postgres.schema import (
    CHANNEL,
    DELETED_CHANNEL,
    SESSION_CHANNEL,
    SQL,
    Connection,
)
from gateway.tasks.store.rows import task_from_row
from gateway.tasks.store.writes import check_request, failure, finish_sources, update_sources

T = TypeVar("T")

#: Copies kept (`kept`): a session record per session held here, and the tasks finished here
#: lately with their outcomes, those whose outcome is small (as stored, in JSON).
_SESSIONS_KEPT = 10_000
_ENDED_KEPT = 1024
_ENDED_BODY_BYTES = 16 * 1024


class PostgresTaskStore(KeptReads):
    """`TaskStore` on a PostgreSQL database, as the replica `replica`."""

    _sql = SQL

    def __init__(
        self, db: Pool, url: str, replica: str, lease_seconds: float, secret: bytes
    ) -> None:
        self._db = db
        self._url = url
        self._replica = replica
        self._lease_seconds = lease_seconds
        self._secret = secret
        self._listener: Listener | None = None
        # Filled only while this store is watched: the listener brings them the news.
        self._sessions: Kept[SessionRecord] = Kept(_SESSIONS_KEPT)
        self._ended: Kept[tuple[Task, Outcome]] = Kept(_ENDED_KEPT)

    async def create_task(
        self, task: Task, max_active: int | None = None, request: JsonObject | None = None
    ) -> bool:
        check_request(task, request)
        if request is None:
            sql, params = tasks.inserting(task, self._replica, max_active)
            inserted = await self._db.commit(sql, *params)
            return max_active is None or bool(inserted)
        return await self._write(
            lambda db: tasks.create(db, task, max_active, request, self._replica)
        )

    async def purge_tasks(self, choice: TaskFilter) -> list[str]:
        where, params = tasks_where(choice, SQL.mark, TERMINAL)
        # SKIP LOCKED: a row another replica is writing just now waits for the next purge.
        sql = (
            f"DELETE FROM tasks WHERE task_id IN (SELECT task_id FROM tasks WHERE {where}"
            f" ORDER BY created_at, task_id LIMIT {SQL.mark(len(params) + 1)}"
            " FOR UPDATE SKIP LOCKED) RETURNING task_id"
        )
        rows = await self._write(lambda db: db.fetch(sql, *params, choice.limit))
        return self._deleted(row["task_id"] for row in rows)

    async def update_task(
        self, task_id: str, status: TaskStatus, status_message: str | None, now: datetime
    ) -> Task | None:
        sources = update_sources(status)
        move = tasks.transition(task_id, sources, status, status_message, now, self._replica)
        return next(iter(await self._write(move)), None)

    async def note_task(self, task_id: str, status_message: str, now: datetime) -> Task | None:
        return await self._write(
            lambda db: tasks.note(db, task_id, status_message, now, self._replica)
        )

    async def finish_task(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        outcome: Outcome | None,
        now: datetime,
    ) -> Task | None:
        sources = finish_sources(status)
        # A client's cancel lands on whichever replica it reached, not only on the runner.
        runner = None if status == TaskStatus.CANCELLED else self._replica
        body = None if outcome is None else json.dumps(outcome.body)
        stored = None if outcome is None or body is None else (outcome.kind, body)
        epoch = self._ended.epoch
        sql, params = tasks.finishing(task_id, sources, status, status_message, now, runner, stored)
        task = next(map(task_from_row, await self._db.commit(sql, *params)), None)
        if task is not None and outcome is not None and len(body or "") <= _ENDED_BODY_BYTES:
            self._ended.keep(task_id, (task, outcome), epoch)
        return task

    async def erase_principal(self, principal: str) -> tuple[int, int]:
        async def erase(db: Connection) -> tuple[int, int]:
            erased = await db.fetch(SQL.erase_tasks, principal)
            status: str = await db.execute(SQL.erase_sessions, principal)
            return len(erased), int(status.split()[-1])

        try:
            return await self._write(erase)
        finally:
            self._sessions.drop(None)
            self._ended.drop(None)

    async def stored_bytes(self, owner: str) -> int:
        rows = await self._read(tasks.STORED_BYTES, owner)
        return int(rows[0][0])

    async def add_input(self, request: InputRequest) -> bool:
        return await self._write(lambda db: inputs.add(db, request, self._replica))

    async def answer_input(
        self, task_id: str, key: str, response: JsonObject, now: datetime
    ) -> InputRequest | None:
        return await self._write(lambda db: inputs.answer(db, task_id, key, response, now))

    async def withdraw_inputs(
        self, task_id: str, now: datetime, keys: Collection[str] | None = None
    ) -> list[InputRequest]:
        return await self._write(lambda db: inputs.withdraw(db, task_id, now, keys, self._replica))

    async def delete_expired(self, now: datetime) -> list[str]:
        rows = await self._write(lambda db: db.fetch(SQL.delete_expired, epoch_us(now)))
        return self._deleted(row["task_id"] for row in rows)

    async def fail_running(
        self, task_ids: Collection[str], message: str, now: datetime
    ) -> list[Task]:
        failed = TaskStatus.FAILED
        sources = finish_sources(failed)
        move = tasks.transition(list(task_ids), sources, failed, message, now, self._replica)
        return await self._write(tasks.ending(move, failure(message), now))

    async def begin_attempt(
        self, task_id: str, attempt: int, status_message: str, now: datetime
    ) -> Task | None:
        return await self._write(
            lambda db: attempts.begin(db, task_id, attempt, status_message, now, self._replica)
        )

    async def note_upstream_call(
        self, task_id: str, session_id: str | None, request_id: RequestId
    ) -> None:
        await self._write(
            lambda db: attempts.note(db, task_id, session_id, request_id, self._replica)
        )

    async def claim_orphans(self) -> list[Task]:
        return await self._write(lambda db: attempts.claim(db, self._replica))

    async def renew_lease(self) -> int:
        sql, lease = attempts.RENEW, self._lease_seconds
        live: int = await self._db.ahead(sql, self._replica, lease)
        return live

    async def watch(self, changed: Callable[[str | None], None]) -> None:
        """Raises: RuntimeError if this store is watched already; what asyncpg raises if the
        listener's connection cannot be made."""
        if self._listener is not None:
            raise RuntimeError("the task store is watched already")

        def deleted(task_id: str | None) -> None:
            self._ended.drop(task_id)
            if task_id is not None:  # (None comes on every channel at once)
                changed(task_id)

        heard = {DELETED_CHANNEL: deleted, CHANNEL: changed, SESSION_CHANNEL: self._sessions.drop}
        listener = Listener(self._url, application_name(self._replica), heard)
        await listener.start()
        self._listener = listener
        self._sessions.live = self._ended.live = lambda: listener.connected

    async def heed_task(self, task_id: str) -> Task | None:
        return next(map(task_from_row, await self._db.commit(tasks.HEED, task_id)), None)

    async def save_session(self, record: SessionRecord) -> None:
        epoch = self._sessions.epoch
        await self._write(lambda db: sessions.save(db, record))
        self._sessions.keep(record.session_id, record, epoch)

    async def update_session(self, record: SessionRecord) -> bool:
        epoch = self._sessions.epoch
        if not await self._write(lambda db: sessions.update(db, record)):
            return False
        self._sessions.keep(record.session_id, record, epoch)
        return True

    async def delete_session(self, session_id: str) -> None:
        self._sessions.drop(session_id)
        await self._write(lambda db: db.execute(SQL.delete_session, session_id))
        self._sessions.drop(session_id)

    async def prune_sessions(
        self, live: Collection[str], now: datetime, idle_before: datetime
    ) -> list[str]:
        pruned = await self._write(lambda db: sessions.prune(db, live, now, idle_before))
        for session_id in pruned:
            self._sessions.drop(session_id)
        return pruned

    @property
    def last_commit(self) -> float:
        return self._db.last_commit

    async def check_writable(self) -> None:
        sql = (
            "INSERT INTO meta VALUES ('health_check', $1)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        await self._write(lambda db: db.execute(sql, str(time.time()).encode()))

    async def secret(self) -> bytes:
        return self._secret

    async def close(self) -> None:
        """Stops listening, gives up this replica's lease (its live tasks are the others' to
        claim at once), then closes the pool once the writes under way have ended; later
        calls are refused."""
        if not self._db.refuse():
            return
        try:
            if self._listener is not None:
                await self._listener.close()
            async with self._db.acquire() as db:
                await db.execute(attempts.RELEASE, self._replica)
        finally:
            await self._db.close()

    def _deleted(self, task_ids: Iterable[str]) -> list[str]:
        deleted = list(task_ids)
        for task_id in deleted:
            self._ended.drop(task_id)
        return deleted

    async def _read(self, sql: str, *params: Any) -> list[Record]:
        return await self._db.read(sql, *params)

    async def _write(self, run: Callable[[Connection], Awaitable[T]]) -> T:
        return await self._db.write(run)
