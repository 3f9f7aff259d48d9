"""The SQLite backend of `TaskStore`: one file, one process. Its reads are those both
backends share (`reads.SharedReads`), the tasks it wrote last answered from memory first
(`cache`); its writes it hands to the file's single writer (`writer`), by the rows they
change: `tasks`, `inputs`, `attempts` and `sessions`.

Each write returns once durable; reads use a second connection and, under WAL, see committed
rows only and never wait in the writer's queue. `schema` opens and locks the file and keeps
its schema current.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

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
    from_epoch_us,
)
from gateway.tasks.store.filters import tasks_where
from gateway.tasks.store.reads import SharedReads
from gateway.tasks.store.rows import task_from_row
from gateway.tasks.store.sqlite import attempts, inputs, sessions, tasks
from gateway.tasks.store.sqlite.cache import TaskCache
from gateway.tasks.store.sqlite.schema import SQL, Database, open_database
from gateway.tasks.store.sqlite.writer import GroupCommitWriter
from gateway.tasks.store.writes import check_request, failure, finish_sources, update_sources

T = TypeVar("T")

# Bytes, not characters: a TEXT cast to BLOB is measured in its UTF-8 encoding.
_STORED_BYTES = (
    "SELECT coalesce(sum(length(CAST(o.body AS BLOB))), 0)"
    " + coalesce(sum(length(CAST(c.request AS BLOB))), 0)"
    " FROM tasks t LEFT JOIN outcomes o USING (task_id) LEFT JOIN task_calls c USING (task_id)"
    " WHERE t.owner = ?"
)


class SqliteTaskStore(SharedReads):
    """`TaskStore` on one SQLite file."""

    _sql = SQL

    def __init__(
        self, database: Database, on_timing: Callable[[str, float], None] | None = None
    ) -> None:
        self._database = database
        self._reader = database.reader
        self._on_timing = on_timing
        self._writer = GroupCommitWriter(database.writer, database.thread, on_timing)
        self._cache = TaskCache()

    async def create_task(
        self, task: Task, max_active: int | None = None, request: JsonObject | None = None
    ) -> bool:
        check_request(task, request)
        if not await self._write(lambda db: tasks.create(db, task, max_active, request)):
            return False
        self._cache.committed([_as_stored(task)])
        return True

    async def find_task(self, task_id: str, owner: str) -> Task | None:
        kept = self._cache.task(task_id)
        if kept is not None and kept.owner == owner:
            return kept
        # Another owner's kept task costs the read an unknown id costs: the time taken must
        # not tell a caller that someone else's task exists.
        return await super().find_task(task_id, owner)

    async def get_task(self, task_id: str) -> Task | None:
        kept = self._cache.task(task_id)
        return kept if kept is not None else await super().get_task(task_id)

    async def purge_tasks(self, choice: TaskFilter) -> list[str]:
        where, params = tasks_where(choice, SQL.mark, TERMINAL)
        sql = (
            f"DELETE FROM tasks WHERE task_id IN (SELECT task_id FROM tasks WHERE {where}"
            " ORDER BY created_at, task_id LIMIT ?) RETURNING task_id"
        )
        rows = await self._write(
            lambda db: db.execute(sql, (*params, choice.limit)).fetchall(), bulk=True
        )
        purged = [row["task_id"] for row in rows]
        self._cache.forget(purged)
        return purged

    async def update_task(
        self, task_id: str, status: TaskStatus, status_message: str | None, now: datetime
    ) -> Task | None:
        sources = update_sources(status)

        def update(db: sqlite3.Connection) -> Task | None:
            moved = tasks.transition(db, task_id, sources, status, status_message, now)
            return next(iter(moved), None)

        updated = await self._write(update)
        self._cache.committed([updated])
        return updated

    async def note_task(self, task_id: str, status_message: str, now: datetime) -> Task | None:
        noted = await self._write(lambda db: tasks.note(db, task_id, status_message, now))
        self._cache.committed([noted])
        return noted

    async def finish_task(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        outcome: Outcome | None,
        now: datetime,
    ) -> Task | None:
        sources = finish_sources(status)
        kept = self._cache.live(task_id)

        def finish(db: sqlite3.Connection) -> tuple[Task | None, int]:
            if kept is None:
                moved = tasks.transition(db, task_id, sources, status, status_message, now)
            else:
                moved = tasks.transition_kept(db, kept, sources, status, status_message, now)
            size = tasks.ending(db, moved, outcome, now)
            return next(iter(moved), None), size

        finished, size = await self._write(finish)
        self._cache.committed([finished])
        if finished is not None and outcome is not None:
            self._cache.ended(finished, outcome, size)
        return finished

    async def get_outcome(self, task_id: str) -> Outcome | None:
        kept = self._cache.outcome(task_id)
        return kept if kept is not None else await super().get_outcome(task_id)

    async def erase_principal(self, principal: str) -> tuple[int, int]:
        def erase(db: sqlite3.Connection) -> tuple[list[str], int]:
            erased = [row[0] for row in db.execute(SQL.erase_tasks, (principal,)).fetchall()]
            return erased, db.execute(SQL.erase_sessions, (principal,)).rowcount

        erased, sessions = await self._write(erase, bulk=True)
        self._cache.forget(erased)
        return len(erased), sessions

    async def stored_bytes(self, owner: str) -> int:
        (row,) = await self._read(_STORED_BYTES, owner)
        return int(row[0])

    async def add_input(self, request: InputRequest) -> bool:
        return await self._write(lambda db: inputs.add(db, request))

    async def answer_input(
        self, task_id: str, key: str, response: JsonObject, now: datetime
    ) -> InputRequest | None:
        return await self._write(lambda db: inputs.answer(db, task_id, key, response, now))

    async def withdraw_inputs(
        self, task_id: str, now: datetime, keys: Collection[str] | None = None
    ) -> list[InputRequest]:
        return await self._write(lambda db: inputs.withdraw(db, task_id, now, keys))

    async def delete_expired(self, now: datetime) -> list[str]:
        expired = (epoch_us(now),)
        rows = await self._write(
            lambda db: db.execute(SQL.delete_expired, expired).fetchall(), bulk=True
        )
        deleted = [row["task_id"] for row in rows]
        self._cache.forget(deleted)
        return deleted

    async def fail_running(
        self, task_ids: Collection[str], message: str, now: datetime
    ) -> list[Task]:
        failed = TaskStatus.FAILED
        sources = finish_sources(failed)

        def fail(db: sqlite3.Connection) -> list[Task]:
            moved = tasks.transition(db, list(task_ids), sources, failed, message, now)
            tasks.ending(db, moved, failure(message), now)
            return moved

        failed_tasks = await self._write(fail, bulk=True)
        self._cache.committed(failed_tasks)
        return failed_tasks

    async def begin_attempt(
        self, task_id: str, attempt: int, status_message: str, now: datetime
    ) -> Task | None:
        begun = await self._write(
            lambda db: attempts.begin(db, task_id, attempt, status_message, now)
        )
        self._cache.committed([begun])
        return begun

    async def note_upstream_call(
        self, task_id: str, session_id: str | None, request_id: RequestId
    ) -> None:
        await self._write(lambda db: attempts.note(db, task_id, session_id, request_id))

    async def claim_orphans(self) -> list[Task]:
        return [task_from_row(row) for row in await self._read(attempts.LIVE_TASKS)]

    async def renew_lease(self) -> int:
        """Nothing: the file's lock, held until `close`, is this process's lease; the one
        process there is."""
        return 1

    async def watch(self, changed: Callable[[str | None], None]) -> None:
        """Nothing: no other process writes to the file."""

    async def heed_task(self, task_id: str) -> Task | None:
        return await self.get_task(task_id)

    async def save_session(self, record: SessionRecord) -> None:
        await self._write(lambda db: sessions.save(db, record))

    async def update_session(self, record: SessionRecord) -> bool:
        return await self._write(lambda db: sessions.update(db, record))

    async def delete_session(self, session_id: str) -> None:
        await self._write(lambda db: db.execute(SQL.delete_session, (session_id,)))

    async def prune_sessions(
        self, live: Collection[str], now: datetime, idle_before: datetime
    ) -> list[str]:
        return await self._write(lambda db: sessions.prune(db, live, now, idle_before), bulk=True)

    @property
    def last_commit(self) -> float:
        return self._writer.last_commit

    async def check_writable(self) -> None:
        sql = "INSERT OR REPLACE INTO meta VALUES ('health_check', ?)"
        await self._write(lambda db: db.execute(sql, (str(time.time()),)))

    async def secret(self) -> bytes:
        rows = await self._read("SELECT value FROM meta WHERE key = 'cursor_secret'")
        return bytes(next(iter(rows))["value"])

    async def close(self) -> None:
        """Commits the writes already queued, refuses new ones, closes the file, then lets
        another process have it."""
        try:
            await self._writer.close()
        finally:
            await self._database.close()

    async def _read(self, sql: str, *params: Any) -> Iterable[sqlite3.Row]:
        started = time.perf_counter()
        rows = await self._reader.execute_fetchall(sql, params)
        if self._on_timing is not None:
            self._on_timing("read", time.perf_counter() - started)
        return rows

    async def _write(self, run: Callable[[sqlite3.Connection], T], bulk: bool = False) -> T:
        return await self._writer.write(run, bulk)


def _as_stored(task: Task) -> Task:
    """`task` with its times as stored (UTC, to the microsecond), as every later read sees
    them: itself when they are so already, as the gateway's clock gives them, rather than a
    copy of the model on every creation."""
    created, updated = task.created_at, task.updated_at
    if created.tzinfo is UTC and updated.tzinfo is UTC:
        return task  # (a datetime holds whole microseconds: nothing to round)
    return replace(
        task,
        created_at=from_epoch_us(epoch_us(created)),
        updated_at=from_epoch_us(epoch_us(updated)),
    )


async def open_store(
    path: str | Path, on_timing: Callable[[str, float], None] | None = None
) -> SqliteTaskStore:
    """Opens (creating if need be) the database file and brings its schema up to date.

    `on_timing(operation, seconds)` hears how long each read and each commit took.

    Raises:
        StoreInUse: another process has the file open as its store; nothing was read or written.
    """
    return SqliteTaskStore(await open_database(Path(path)), on_timing)
