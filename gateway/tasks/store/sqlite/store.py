"""The SQLite backend of `TaskStore`: the task and outcome queries on one file, and the
session, input-request and attempt ones (`sessions`, `inputs`, `attempts`) it delegates to.

Writes go through the file's single `GroupCommitWriter` (`writer`), so each returns once
durable; reads use a second connection and, under WAL, see committed rows only and never wait
in the writer's queue. `schema` opens and locks the file and keeps its schema current.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
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
    UpstreamCall,
    epoch_us,
    from_epoch_us,
)
from gateway.tasks.store.filters import sessions_where, tasks_where
from gateway.tasks.store.rows import (
    TASK_COLUMNS,
    answer_from_row,
    input_from_row,
    json_text,
    outcome_from_row,
    request_from_row,
    session_from_row,
    task_from_row,
    upstream_call_from_row,
)
from gateway.tasks.store.sqlite import attempts, inputs, sessions
from gateway.tasks.store.sqlite.schema import IN_JSON_ARRAY, LIVE_SQL, Database, open_database
from gateway.tasks.store.sqlite.writer import GroupCommitWriter
from gateway.tasks.store.writes import check_request, failure, finish_sources, update_sources

T = TypeVar("T")

#: Live tasks kept in memory (see `SqliteTaskStore._live`): a few MiB at most, and room for
#: every task a busy client polls.
_LIVE_KEPT = 1024

#: Tasks just finished, kept in memory with their outcomes (`SqliteTaskStore._ended`): the
#: poll that sees `completed` and the `tasks/result` after it come within moments of the
#: terminal write. At most this many, and this many bytes of outcomes (as stored, in JSON).
_ENDED_KEPT = 1024
_ENDED_BYTES = 16 * 1024 * 1024


def _mark(number: int) -> str:
    return "?"


def _marks(values: Collection[Any]) -> str:
    """One `?` placeholder per value, comma-separated."""
    return ",".join("?" * len(values))


#: The statuses of a task that is still running, as bound: plain strings, as every status
#: and flag here is (why: the adapter note in `schema`).
_LIVE = tuple(s.value for s in TaskStatus if not s.terminal)
_COUNT_LIVE = f"SELECT COUNT(*) FROM tasks WHERE owner = ? AND {LIVE_SQL}"
_CREATE = (
    f"INSERT INTO tasks ({TASK_COLUMNS}, expires_at) VALUES ({_marks(TASK_COLUMNS.split(','))}, ?)"
)


# The owner of a principal's task names its route (`owner_of`): matched whole, so that one
# principal's name never matches the end of another's.
_ERASE_TASKS = "DELETE FROM tasks WHERE owner = 'principal:' || route || ':' || ? RETURNING task_id"

# Bytes, not characters: a TEXT cast to BLOB is measured in its UTF-8 encoding.
_STORED_BYTES = (
    "SELECT coalesce(sum(length(CAST(o.body AS BLOB))), 0)"
    " + coalesce(sum(length(CAST(c.request AS BLOB))), 0)"
    " FROM tasks t LEFT JOIN outcomes o USING (task_id) LEFT JOIN task_calls c USING (task_id)"
    " WHERE t.owner = ?"
)


class SqliteTaskStore:
    """`TaskStore` on one SQLite file. `commits` counts COMMITs, to make batching visible."""

    def __init__(
        self, database: Database, on_timing: Callable[[str, float], None] | None = None
    ) -> None:
        self._database = database
        self._reader = database.reader
        self._on_timing = on_timing
        self._writer = GroupCommitWriter(database.writer, database.thread, on_timing)
        #: The most recently written live tasks as last committed. This process is the
        #: file's only writer (its lock says so), so every change passes here: a poll of a
        #: running task is answered from memory, without a read on SQLite's thread (see
        #: `find_task`). Bounded: ten thousand tasks in flight keep their memory.
        self._live: collections.OrderedDict[str, Task] = collections.OrderedDict()
        #: The tasks `finish_task` ended most recently, as committed, with their outcomes
        #: and the outcomes' stored sizes: a terminal task changes no more, so the copy
        #: stays true until the row is deleted (every delete drops it here, `_forget`).
        self._ended: collections.OrderedDict[str, tuple[Task, Outcome, int]] = (
            collections.OrderedDict()
        )
        self._ended_bytes = 0

    def _committed(self, tasks: Iterable[Task | None]) -> None:
        """What a write committed: live tasks are kept, terminal ones dropped."""
        for task in tasks:
            if task is None:
                continue
            self._live.pop(task.task_id, None)
            if not task.status.terminal:
                self._live[task.task_id] = task
                if len(self._live) > _LIVE_KEPT:
                    self._live.popitem(last=False)  # the next read of it goes to the file

    def _ended_with(self, task: Task, outcome: Outcome, size: int) -> None:
        """A terminal write that stored `outcome` (`size` bytes): kept with its task."""
        if size > _ENDED_BYTES // 16:
            return  # one large outcome would push out a thousand small ones
        self._ended[task.task_id] = (task, outcome, size)
        self._ended_bytes += size
        while len(self._ended) > _ENDED_KEPT or self._ended_bytes > _ENDED_BYTES:
            _, (_, _, dropped) = self._ended.popitem(last=False)
            self._ended_bytes -= dropped

    def _forget(self, task_ids: Iterable[str]) -> None:
        """Deleted rows: no copy of them may outlive them."""
        for task_id in task_ids:
            self._live.pop(task_id, None)
            ended = self._ended.pop(task_id, None)
            if ended is not None:
                self._ended_bytes -= ended[2]

    def _kept(self, task_id: str) -> Task | None:
        live = self._live.get(task_id)
        if live is not None:
            return live
        ended = self._ended.get(task_id)
        return None if ended is None else ended[0]

    async def create_task(
        self, task: Task, max_active: int | None = None, request: JsonObject | None = None
    ) -> bool:
        check_request(task, request)
        expires = task.expires_at
        created, updated = epoch_us(task.created_at), epoch_us(task.updated_at)
        row = (
            *(task.task_id, task.owner, task.route, task.tool, task.status.value),
            *(task.status_message, created, updated, task.ttl_ms, task.poll_interval_ms),
            *(json_text(task.progress_token), task.generation, int(task.repeatable), task.attempt),
            None if expires is None else epoch_us(expires),
        )
        # As stored (UTC, to the microsecond), as every later read sees it.
        times = {"created_at": from_epoch_us(created), "updated_at": from_epoch_us(updated)}
        stored = task.model_copy(update=times)

        def create(db: sqlite3.Connection) -> bool:
            # The single writer makes check-then-insert atomic: no batch can slip past the cap.
            if max_active is not None:
                (active,) = db.execute(_COUNT_LIVE, (task.owner,)).fetchone()
                if active >= max_active:
                    return False
            db.execute(_CREATE, row)
            if request is not None:
                attempts.save_request(db, task.task_id, request)
            return True

        if not await self._write(create):
            return False
        self._committed([stored])
        return True

    async def find_task(self, task_id: str, owner: str) -> Task | None:
        kept = self._kept(task_id)
        if kept is not None and kept.owner == owner:
            return kept
        # Another owner's kept task costs the read an unknown id costs: the time taken must
        # not tell a caller that someone else's task exists.
        sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ? AND owner = ?"
        return next((task_from_row(row) for row in await self._read(sql, task_id, owner)), None)

    async def get_task(self, task_id: str) -> Task | None:
        kept = self._kept(task_id)
        if kept is not None:
            return kept
        sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?"
        return next((task_from_row(row) for row in await self._read(sql, task_id)), None)

    async def list_tasks(
        self, owner: str, after: tuple[datetime, str] | None, limit: int, now: datetime
    ) -> list[Task]:
        keyset = "" if after is None else "AND (created_at, task_id) > (?, ?)"
        start = () if after is None else (epoch_us(after[0]), after[1])
        sql = (
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE owner = ? {keyset}"
            " AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at, task_id LIMIT ?"
        )
        rows = await self._read(sql, owner, *start, epoch_us(now), limit)
        return [task_from_row(row) for row in rows]

    async def query_tasks(self, choice: TaskFilter) -> list[Task]:
        where, params = tasks_where(choice, _mark)
        sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE {where} ORDER BY created_at, task_id LIMIT ?"
        return [task_from_row(row) for row in await self._read(sql, *params, choice.limit)]

    async def purge_tasks(self, choice: TaskFilter) -> list[str]:
        where, params = tasks_where(choice, _mark, TERMINAL)
        sql = (
            f"DELETE FROM tasks WHERE task_id IN (SELECT task_id FROM tasks WHERE {where}"
            " ORDER BY created_at, task_id LIMIT ?) RETURNING task_id"
        )
        rows = await self._write(
            lambda db: db.execute(sql, (*params, choice.limit)).fetchall(), bulk=True
        )
        purged = [row["task_id"] for row in rows]
        self._forget(purged)
        return purged

    async def update_task(
        self, task_id: str, status: TaskStatus, status_message: str | None, now: datetime
    ) -> Task | None:
        sources = update_sources(status)

        def update(db: sqlite3.Connection) -> Task | None:
            moved = _transition(db, task_id, sources, status, status_message, now)
            return next(iter(moved), None)

        updated = await self._write(update)
        self._committed([updated])
        return updated

    async def note_task(self, task_id: str, status_message: str, now: datetime) -> Task | None:
        sql = (
            "UPDATE tasks SET status_message = ?, updated_at = ?"
            f" WHERE task_id = ? AND status IN ({_marks(_LIVE)}) RETURNING {TASK_COLUMNS}"
        )

        def note(db: sqlite3.Connection) -> Task | None:
            rows = db.execute(sql, (status_message, epoch_us(now), task_id, *_LIVE)).fetchall()
            return next((task_from_row(row) for row in rows), None)

        noted = await self._write(note)
        self._committed([noted])
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

        def finish(db: sqlite3.Connection) -> tuple[Task | None, int]:
            moved = _transition(db, task_id, sources, status, status_message, now)
            size = 0 if outcome is None else _insert_outcomes(db, moved, outcome)
            _ended(db, moved, now)
            return next(iter(moved), None), size

        finished, size = await self._write(finish)
        self._committed([finished])
        if finished is not None and outcome is not None:
            self._ended_with(finished, outcome, size)
        return finished

    async def get_outcome(self, task_id: str) -> Outcome | None:
        ended = self._ended.get(task_id)
        if ended is not None:
            return ended[1]
        rows = await self._read("SELECT kind, body FROM outcomes WHERE task_id = ?", task_id)
        return next(map(outcome_from_row, rows), None)

    async def erase_principal(self, principal: str) -> tuple[int, int]:
        def erase(db: sqlite3.Connection) -> tuple[list[str], int]:
            tasks = [row[0] for row in db.execute(_ERASE_TASKS, (principal,)).fetchall()]
            sessions = db.execute("DELETE FROM sessions WHERE principal = ?", (principal,))
            return tasks, sessions.rowcount

        tasks, sessions = await self._write(erase, bulk=True)
        self._forget(tasks)
        return len(tasks), sessions

    async def stored_bytes(self, owner: str) -> int:
        (row,) = await self._read(_STORED_BYTES, owner)
        return int(row[0])

    async def add_input(self, request: InputRequest) -> bool:
        return await self._write(lambda db: inputs.add(db, request))

    async def pending_inputs(self, task_id: str) -> list[InputRequest]:
        return [input_from_row(row) for row in await self._read(inputs.PENDING, task_id)]

    async def answered_inputs(self, task_id: str) -> dict[str, JsonObject]:
        rows = await self._read(inputs.ANSWERED, task_id)
        return dict(map(answer_from_row, rows))

    async def answer_input(
        self, task_id: str, key: str, response: JsonObject, now: datetime
    ) -> InputRequest | None:
        return await self._write(lambda db: inputs.answer(db, task_id, key, response, now))

    async def withdraw_inputs(
        self, task_id: str, now: datetime, keys: Collection[str] | None = None
    ) -> list[InputRequest]:
        return await self._write(lambda db: inputs.withdraw(db, task_id, now, keys))

    async def delete_expired(self, now: datetime) -> list[str]:
        # Their outcomes and input rows go with them: the foreign keys cascade.
        sql = "DELETE FROM tasks WHERE expires_at <= ? RETURNING task_id"
        rows = await self._write(lambda db: db.execute(sql, (epoch_us(now),)).fetchall(), bulk=True)
        deleted = [row["task_id"] for row in rows]
        self._forget(deleted)
        return deleted

    async def fail_running(
        self, task_ids: Collection[str], message: str, now: datetime
    ) -> list[Task]:
        failed = TaskStatus.FAILED
        sources = finish_sources(failed)

        def fail(db: sqlite3.Connection) -> list[Task]:
            tasks = _transition(db, list(task_ids), sources, failed, message, now)
            _insert_outcomes(db, tasks, failure(message))
            _ended(db, tasks, now)
            return tasks

        failed_tasks = await self._write(fail, bulk=True)
        self._committed(failed_tasks)
        return failed_tasks

    async def get_request(self, task_id: str) -> JsonObject | None:
        rows = await self._read(attempts.REQUEST, task_id)
        return next(map(request_from_row, rows), None)

    async def begin_attempt(
        self, task_id: str, attempt: int, status_message: str, now: datetime
    ) -> Task | None:
        begun = await self._write(
            lambda db: attempts.begin(db, task_id, attempt, status_message, now)
        )
        self._committed([begun])
        return begun

    async def note_upstream_call(
        self, task_id: str, session_id: str | None, request_id: RequestId
    ) -> None:
        await self._write(lambda db: attempts.note(db, task_id, session_id, request_id))

    async def get_upstream_call(self, task_id: str) -> UpstreamCall | None:
        rows = await self._read(attempts.UPSTREAM_CALL, task_id)
        return next(map(upstream_call_from_row, rows), None)

    async def claim_orphans(self) -> list[Task]:
        return [task_from_row(row) for row in await self._read(attempts.LIVE_TASKS)]

    async def renew_lease(self) -> None:
        """Nothing: the file's lock, held until `close`, is this process's lease."""

    async def watch(self, changed: Callable[[str | None], None]) -> None:
        """Nothing: no other process writes to the file."""

    async def save_session(self, record: SessionRecord) -> None:
        await self._write(lambda db: sessions.save(db, record))

    async def update_session(self, record: SessionRecord) -> bool:
        return await self._write(lambda db: sessions.update(db, record))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._read(sessions.GET, session_id)
        return next(map(session_from_row, rows), None)

    async def query_sessions(
        self, route: str | None, principal: str | None, limit: int
    ) -> list[SessionRecord]:
        where, params = sessions_where(route, principal, _mark)
        sql = f"SELECT * FROM sessions WHERE {where} ORDER BY created_at, session_id LIMIT ?"
        return [session_from_row(row) for row in await self._read(sql, *params, limit)]

    async def delete_session(self, session_id: str) -> None:
        await self._write(lambda db: db.execute(sessions.DELETE, (session_id,)))

    async def prune_sessions(
        self, live: Collection[str], now: datetime, idle_before: datetime
    ) -> list[str]:
        return await self._write(lambda db: sessions.prune(db, live, now, idle_before), bulk=True)

    @property
    def commits(self) -> int:
        return self._writer.commits

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


def _transition(
    db: sqlite3.Connection,
    which: str | Collection[str],
    sources: Sequence[TaskStatus],
    status: TaskStatus,
    message: str | None,
    now: datetime,
) -> list[Task]:
    """Moves the task `which` names (or those it lists) whose status is in `sources`."""
    # The status check sits in the UPDATE's WHERE: check and write are one statement.
    if isinstance(which, str):
        named, key = "task_id = ?", which
    else:
        named, key = f"task_id {IN_JSON_ARRAY}", json.dumps(list(which))
    sql = (
        "UPDATE tasks SET status = ?, status_message = ?, updated_at = ?"
        f" WHERE {named} AND status IN ({_marks(sources)}) RETURNING {TASK_COLUMNS}"
    )
    params = (status.value, message, epoch_us(now), key, *(source.value for source in sources))
    rows = db.execute(sql, params).fetchall()
    return [task_from_row(row) for row in rows]


def _ended(db: sqlite3.Connection, tasks: list[Task], now: datetime) -> None:
    """What goes with a terminal write: the tasks' pending questions are withdrawn and the
    upstream calls kept to run them again forgotten (only repeatable tasks have those)."""
    inputs.withdraw_all(db, [task.task_id for task in tasks], now)
    attempts.forget(db, [task.task_id for task in tasks if task.repeatable])


def _insert_outcomes(db: sqlite3.Connection, tasks: list[Task], outcome: Outcome) -> int:
    """Returns the size of the body as stored."""
    body = json.dumps(outcome.body)
    sql = "INSERT INTO outcomes VALUES (?, ?, ?)"
    db.executemany(sql, [(task.task_id, outcome.kind, body) for task in tasks])
    return len(body)


async def open_store(
    path: str | Path, on_timing: Callable[[str, float], None] | None = None
) -> SqliteTaskStore:
    """Opens (creating if need be) the database file and brings its schema up to date.

    `on_timing(operation, seconds)` hears how long each read and each commit took.

    Raises:
        StoreInUse: another process has the file open as its store; nothing was read or written.
    """
    return SqliteTaskStore(await open_database(Path(path)), on_timing)
