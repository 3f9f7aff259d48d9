"""Durable tasks, outcomes and sessions on SQLite, behind the `TaskStore` seam.

Callers type against `TaskStore`, which speaks only `models`, so a PostgreSQL backend for
several replicas can replace this one without touching them. With synchronous=FULL every
COMMIT is an fsync, so all writes go through one writer coroutine that commits whatever is
queued in one transaction (group commit); a caller returns only once its write is durable.
Reads use a second connection and, under WAL, see committed rows only.

One process at a time: `open_store` takes an exclusive lock on `<file>.lock` before its
first statement and holds it for the store's lifetime, so a second gateway started on the
same file stops (`StoreInUse`) instead of failing the first one's running tasks as
"interrupted". The kernel drops the lock when the process ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiosqlite

from gateway.aio import TaskSet
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import SessionRecord, Task, TaskStatus, may_transition

T = TypeVar("T")

#: The statuses of a task that is still running.
_LIVE = tuple(s for s in TaskStatus if not s.terminal)
#: The same, spelled exactly as the `tasks_live` partial index's WHERE: SQLite uses that index
#: only for a query that repeats its condition literally (bound parameters do not count).
_LIVE_SQL = "status IN ('working', 'input_required')"

#: Applied in order once each; PRAGMA user_version counts those applied. Append, never edit.
MIGRATIONS = [
    """
    CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        route TEXT NOT NULL,
        tool TEXT NOT NULL,
        status TEXT NOT NULL,
        status_message TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        expires_at INTEGER,
        ttl_ms INTEGER,
        poll_interval_ms INTEGER NOT NULL,
        progress_token TEXT
    );
    CREATE INDEX tasks_by_owner ON tasks (owner, created_at, task_id);
    CREATE INDEX tasks_by_expiry ON tasks (expires_at);
    CREATE TABLE outcomes (
        task_id TEXT PRIMARY KEY REFERENCES tasks ON DELETE CASCADE,
        kind TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        route TEXT NOT NULL,
        principal TEXT,
        protocol_version TEXT NOT NULL,
        initialize TEXT NOT NULL,
        initialized TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
    INSERT INTO meta VALUES ('cursor_secret', randomblob(32));
    """,
    # Sessions get a last-seen time so that records of clients that never return are pruned;
    # the live-task index keeps the active-task cap cheap however many finished rows there are.
    """
    ALTER TABLE sessions ADD COLUMN last_seen INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET last_seen = created_at;
    CREATE INDEX sessions_by_last_seen ON sessions (last_seen);
    CREATE INDEX tasks_live ON tasks (owner) WHERE status IN ('working', 'input_required');
    """,
]

_COUNT_LIVE = f"SELECT COUNT(*) FROM tasks WHERE owner = ? AND {_LIVE_SQL}"
_PRAGMAS = "PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;"
_COLUMNS = (
    "task_id, owner, route, tool, status, status_message, created_at, updated_at, ttl_ms,"
    " poll_interval_ms, progress_token"
)
# Integer microseconds keep ordering and equality exact, which ISO strings with offsets do not.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _us(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _at(us: int) -> datetime:
    return _EPOCH + us * _MICROSECOND


def _task(row: sqlite3.Row) -> Task:
    token = row["progress_token"]
    return Task(
        task_id=row["task_id"],
        owner=row["owner"],
        route=row["route"],
        tool=row["tool"],
        status=TaskStatus(row["status"]),
        status_message=row["status_message"],
        created_at=_at(row["created_at"]),
        updated_at=_at(row["updated_at"]),
        ttl_ms=row["ttl_ms"],
        poll_interval_ms=row["poll_interval_ms"],
        # JSON text keeps an int token an int and a str token a str.
        progress_token=None if token is None else json.loads(token),
    )


def _json(value: Any) -> str | None:
    # ensure_ascii (the default) escapes lone surrogates, which UTF-8 storage would reject.
    return None if value is None else json.dumps(value)


class TaskStore(Protocol):
    """Durable tasks, their outcomes and sessions. Each write is committed before it returns."""

    async def create_task(self, task: Task, max_active: int | None = None) -> bool:
        """Insert a task, durable on return. With `max_active`, only while its owner has fewer
        live tasks than that, checked in the same transaction; False if refused."""

    async def get_task(self, task_id: str) -> Task | None:
        """Any owner's task, expired or not: callers decide what they may see."""

    async def find_task(self, task_id: str, owner: str) -> Task | None:
        """The owner's task, expired or not; None for an unknown id and another owner's alike,
        found by one indexed query either way so that the two cannot be told apart by time."""

    async def list_tasks(
        self, owner: str, after: tuple[datetime, str] | None, limit: int, now: datetime
    ) -> list[Task]:
        """Up to `limit` of the owner's unexpired tasks past `after`, by (created_at, task_id)."""

    async def update_task(
        self, task_id: str, status: TaskStatus, status_message: str | None, now: datetime
    ) -> Task | None:
        """A lifecycle move or a message-only update; None if the task is unknown or may not move.

        Raises: ValueError if `status` is terminal (that is `finish_task`'s job).
        """

    async def note_task(self, task_id: str, status_message: str, now: datetime) -> Task | None:
        """Set a running task's statusMessage, leaving its status as it is; None if terminal.

        Progress uses this: a message must never move a task back from input_required.
        """

    async def finish_task(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        outcome: Outcome | None,
        now: datetime,
    ) -> Task | None:
        """The one terminal write, with its outcome; None if the task is unknown or already final.

        Raises: ValueError if `status` is not terminal.
        """

    async def get_outcome(self, task_id: str) -> Outcome | None: ...

    async def count_active(self, owner: str) -> int:
        """How many of the owner's tasks are not terminal (for the active-task limit)."""

    async def delete_expired(self, now: datetime) -> list[str]:
        """Deletes tasks (and outcomes) whose expiry is at or before `now`; returns their ids."""

    async def fail_interrupted(self, message: str, now: datetime) -> list[Task]:
        """Start-up recovery: every live task fails with `message` and an internal-error outcome."""

    async def fail_running(
        self, task_ids: Collection[str], message: str, now: datetime
    ) -> list[Task]:
        """Shutdown: those of `task_ids` still live fail as `fail_interrupted` fails them, all
        in one transaction; returns the tasks it moved (a later terminal write is refused)."""

    async def save_session(self, record: SessionRecord) -> None:
        """Insert or update a record; an update keeps the record's last-seen time."""

    async def get_session(self, session_id: str) -> SessionRecord | None: ...
    async def delete_session(self, session_id: str) -> None: ...

    async def prune_sessions(
        self, live: Collection[str], now: datetime, idle_before: datetime
    ) -> list[str]:
        """Mark the `live` sessions seen at `now`, then delete every record last seen before
        `idle_before`; returns the deleted ids. One transaction."""

    async def secret(self) -> bytes:
        """32 random bytes made once per database, for signing list cursors."""

    async def check_writable(self) -> None:
        """One durable write through the writer, for health checks. Raises if it cannot."""

    @property
    def last_commit(self) -> float:
        """`time.monotonic()` of the latest successful commit (0.0 before the first)."""

    async def close(self) -> None: ...


@dataclass(eq=False)
class _Write:
    run: Callable[[aiosqlite.Connection], Awaitable[Any]]
    future: asyncio.Future[Any]


class SqliteTaskStore:
    """`TaskStore` on one SQLite file. `commits` counts COMMITs, to make batching visible."""

    def __init__(
        self,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        on_timing: Callable[[str, float], None] | None = None,
        lock: int | None = None,
    ) -> None:
        self._db = writer
        self._reader = reader
        #: The descriptor holding the file's lock (see `open_store`), closed last.
        self._lock = lock
        self._on_timing = on_timing
        self.commits = 0
        self._last_commit = 0.0
        self._queue: list[_Write] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._tasks = TaskSet("task store")
        self._writer = self._tasks.spawn(self._write_loop(), name="task-store-writer")

    async def create_task(self, task: Task, max_active: int | None = None) -> bool:
        expires = task.expires_at
        row = (
            *(task.task_id, task.owner, task.route, task.tool, task.status, task.status_message),
            *(_us(task.created_at), _us(task.updated_at), task.ttl_ms, task.poll_interval_ms),
            _json(task.progress_token),
            None if expires is None else _us(expires),
        )
        sql = f"INSERT INTO tasks ({_COLUMNS}, expires_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"

        async def create(db: aiosqlite.Connection) -> bool:
            # The single writer makes check-then-insert atomic: no batch can slip past the cap.
            if max_active is not None:
                (active,) = next(iter(await db.execute_fetchall(_COUNT_LIVE, (task.owner,))))
                if active >= max_active:
                    return False
            await db.execute(sql, row)
            return True

        return await self._write(create)

    async def find_task(self, task_id: str, owner: str) -> Task | None:
        sql = f"SELECT {_COLUMNS} FROM tasks WHERE task_id = ? AND owner = ?"
        return next((_task(row) for row in await self._read(sql, task_id, owner)), None)

    async def get_task(self, task_id: str) -> Task | None:
        sql = f"SELECT {_COLUMNS} FROM tasks WHERE task_id = ?"
        return next((_task(row) for row in await self._read(sql, task_id)), None)

    async def list_tasks(
        self, owner: str, after: tuple[datetime, str] | None, limit: int, now: datetime
    ) -> list[Task]:
        keyset = "" if after is None else "AND (created_at, task_id) > (?, ?)"
        start = () if after is None else (_us(after[0]), after[1])
        sql = (
            f"SELECT {_COLUMNS} FROM tasks WHERE owner = ? {keyset}"
            " AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at, task_id LIMIT ?"
        )
        return [_task(row) for row in await self._read(sql, owner, *start, _us(now), limit)]

    async def update_task(
        self, task_id: str, status: TaskStatus, status_message: str | None, now: datetime
    ) -> Task | None:
        if status.terminal:
            raise ValueError(f"{status} is terminal: use finish_task")
        sources = [s for s in TaskStatus if s == status or may_transition(s, status)]

        async def update(db: aiosqlite.Connection) -> Task | None:
            moved = await _transition(db, task_id, sources, status, status_message, now)
            return next(iter(moved), None)

        return await self._write(update)

    async def note_task(self, task_id: str, status_message: str, now: datetime) -> Task | None:
        running = _LIVE
        marks = ",".join("?" * len(running))
        sql = (
            "UPDATE tasks SET status_message = ?, updated_at = ?"
            f" WHERE task_id = ? AND status IN ({marks}) RETURNING {_COLUMNS}"
        )

        async def note(db: aiosqlite.Connection) -> Task | None:
            rows = await db.execute_fetchall(sql, (status_message, _us(now), task_id, *running))
            return next((_task(row) for row in rows), None)

        return await self._write(note)

    async def finish_task(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        outcome: Outcome | None,
        now: datetime,
    ) -> Task | None:
        if not status.terminal:
            raise ValueError(f"{status} is not terminal: use update_task")
        sources = [s for s in TaskStatus if may_transition(s, status)]

        async def finish(db: aiosqlite.Connection) -> Task | None:
            moved = await _transition(db, task_id, sources, status, status_message, now)
            if outcome is not None:
                await _insert_outcomes(db, moved, outcome)
            return next(iter(moved), None)

        return await self._write(finish)

    async def count_active(self, owner: str) -> int:
        rows = await self._read(_COUNT_LIVE, owner)
        return int(next(iter(rows))[0])

    async def get_outcome(self, task_id: str) -> Outcome | None:
        rows = await self._read("SELECT kind, body FROM outcomes WHERE task_id = ?", task_id)
        return next((Outcome(kind=r["kind"], body=json.loads(r["body"])) for r in rows), None)

    async def delete_expired(self, now: datetime) -> list[str]:
        sql = "DELETE FROM tasks WHERE expires_at <= ? RETURNING task_id"
        rows = await self._write(lambda db: db.execute_fetchall(sql, (_us(now),)))
        return [row["task_id"] for row in rows]

    async def fail_interrupted(self, message: str, now: datetime) -> list[Task]:
        failed = TaskStatus.FAILED
        sources = [s for s in TaskStatus if may_transition(s, failed)]

        async def fail(db: aiosqlite.Connection) -> list[Task]:
            tasks = await _transition(db, None, sources, failed, message, now)
            await _insert_outcomes(db, tasks, Outcome.error(-32603, message))
            return tasks

        return await self._write(fail)

    async def fail_running(
        self, task_ids: Collection[str], message: str, now: datetime
    ) -> list[Task]:
        failed = TaskStatus.FAILED
        sources = [s for s in TaskStatus if may_transition(s, failed)]
        ids = list(task_ids)

        async def fail(db: aiosqlite.Connection) -> list[Task]:
            tasks = await _transition(db, ids, sources, failed, message, now)
            await _insert_outcomes(db, tasks, Outcome.error(-32603, message))
            return tasks

        return await self._write(fail)

    async def save_session(self, record: SessionRecord) -> None:
        created = _us(record.created_at)
        row = (
            *(record.session_id, record.route, record.principal, record.protocol_version),
            *(_json(record.initialize), _json(record.initialized), created, created),
        )
        # Not INSERT OR REPLACE: rewriting a record (its `initialized` arrives later) must not
        # set its last-seen time back to its creation.
        sql = (
            "INSERT INTO sessions (session_id, route, principal, protocol_version, initialize,"
            " initialized, created_at, last_seen) VALUES (?,?,?,?,?,?,?,?)"
            " ON CONFLICT (session_id) DO UPDATE SET route = excluded.route,"
            " principal = excluded.principal, protocol_version = excluded.protocol_version,"
            " initialize = excluded.initialize, initialized = excluded.initialized,"
            " created_at = excluded.created_at, last_seen = max(last_seen, excluded.last_seen)"
        )
        await self._write(lambda db: db.execute(sql, row))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._read("SELECT * FROM sessions WHERE session_id = ?", session_id)
        for row in rows:
            initialized = row["initialized"]
            return SessionRecord(
                session_id=row["session_id"],
                route=row["route"],
                principal=row["principal"],
                protocol_version=row["protocol_version"],
                initialize=json.loads(row["initialize"]),
                initialized=None if initialized is None else json.loads(initialized),
                created_at=_at(row["created_at"]),
            )
        return None

    async def delete_session(self, session_id: str) -> None:
        sql = "DELETE FROM sessions WHERE session_id = ?"
        await self._write(lambda db: db.execute(sql, (session_id,)))

    async def prune_sessions(
        self, live: Collection[str], now: datetime, idle_before: datetime
    ) -> list[str]:
        # One JSON array parameter, however many sessions are live (SQLite caps parameters).
        touch = (
            "UPDATE sessions SET last_seen = ?"
            " WHERE session_id IN (SELECT value FROM json_each(?)) AND last_seen < ?"
        )
        prune = "DELETE FROM sessions WHERE last_seen < ? RETURNING session_id"
        seen, ids = _us(now), json.dumps(list(live))

        async def run(db: aiosqlite.Connection) -> list[str]:
            await db.execute(touch, (seen, ids, seen))
            return [
                row["session_id"] for row in await db.execute_fetchall(prune, (_us(idle_before),))
            ]

        return await self._write(run)

    @property
    def last_commit(self) -> float:
        return self._last_commit

    async def check_writable(self) -> None:
        sql = "INSERT OR REPLACE INTO meta VALUES ('health_check', ?)"
        await self._write(lambda db: db.execute(sql, (str(time.time()),)))

    async def secret(self) -> bytes:
        rows = await self._read("SELECT value FROM meta WHERE key = 'cursor_secret'")
        return bytes(next(iter(rows))["value"])

    async def close(self) -> None:
        """Commits the writes already queued, refuses new ones, closes the file, then lets
        another process have it."""
        self._closing = True
        self._wake.set()
        try:
            await self._writer
        finally:
            try:
                await self._tasks.close()
                await self._db.close()
                await self._reader.close()
            finally:
                if self._lock is not None:
                    os.close(self._lock)
                    self._lock = None

    async def _read(self, sql: str, *params: Any) -> Iterable[sqlite3.Row]:
        started = time.perf_counter()
        rows = await self._reader.execute_fetchall(sql, params)
        if self._on_timing is not None:
            self._on_timing("read", time.perf_counter() - started)
        return rows

    async def _write(self, run: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        if self._closing:
            raise RuntimeError("the task store is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append(_Write(run, future))
        self._wake.set()
        return await future

    async def _write_loop(self) -> None:
        try:
            while self._queue or not self._closing:
                if not self._queue:
                    await self._wake.wait()
                    self._wake.clear()
                    continue
                batch, self._queue = self._queue, []
                await self._commit(batch)
        finally:
            # Reached early only if the writer itself was cancelled: nobody may wait forever.
            self._closing = True
            _fail(self._queue, RuntimeError("the task store is closed"))

    async def _commit(self, batch: list[_Write]) -> None:
        # Optimistic first: the whole batch in one transaction, no savepoints (each is a
        # round trip to SQLite's thread). Only if a write fails is the batch rolled back and
        # replayed with a savepoint per write, so that failure stays its caller's alone.
        started = time.perf_counter()
        try:
            try:
                settled = await self._transaction(batch, isolate=False)
            except _WriteFailed:
                settled = await self._transaction(batch, isolate=True)
        except Exception as exc:  # BEGIN or COMMIT failed: nothing of the batch was written
            _fail(batch, exc)
            return
        except BaseException:
            _fail(batch, RuntimeError("the task store is closed"))
            raise
        self.commits += 1
        self._last_commit = time.monotonic()
        if self._on_timing is not None:
            self._on_timing("commit", time.perf_counter() - started)
        for write, value, error in settled:
            if write.future.done():  # the caller was cancelled; its write stands regardless
                continue
            if error is None:
                write.future.set_result(value)
            else:
                write.future.set_exception(error)

    async def _transaction(
        self, batch: list[_Write], isolate: bool
    ) -> list[tuple[_Write, Any, Exception | None]]:
        """Run and commit `batch`, rolled back entirely on any exception it raises.

        Raises:
            _WriteFailed: a write failed and `isolate` was off.
        """
        settled: list[tuple[_Write, Any, Exception | None]] = []
        await self._db.execute("BEGIN IMMEDIATE")
        try:
            for write in batch:
                if not isolate:
                    try:
                        settled.append((write, await write.run(self._db), None))
                    except Exception as exc:
                        raise _WriteFailed from exc
                    continue
                await self._db.execute("SAVEPOINT write")
                try:
                    settled.append((write, await write.run(self._db), None))
                except Exception as exc:
                    await self._db.execute("ROLLBACK TO write")
                    settled.append((write, None, exc))
                await self._db.execute("RELEASE write")
            await self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                await self._db.execute("ROLLBACK")
            raise
        return settled


class _WriteFailed(Exception):
    """One write of an optimistic batch failed: replay the batch with isolation."""


def _fail(writes: list[_Write], error: Exception) -> None:
    for write in writes:
        if not write.future.done():
            write.future.set_exception(error)


async def _transition(
    db: aiosqlite.Connection,
    which: str | Collection[str] | None,
    sources: list[TaskStatus],
    status: TaskStatus,
    message: str | None,
    now: datetime,
) -> list[Task]:
    """Moves the task `which` names (or those it lists, or with None every task) whose status
    is in `sources`."""
    # The status check sits in the UPDATE's WHERE: check and write are one statement.
    key: tuple[str, ...]
    if which is None:
        one, key = "", ()
    elif isinstance(which, str):
        one, key = "task_id = ? AND", (which,)
    else:  # one JSON array parameter, however many ids (SQLite caps the parameters)
        one, key = "task_id IN (SELECT value FROM json_each(?)) AND", (json.dumps(list(which)),)
    marks = ",".join("?" * len(sources))
    sql = (
        "UPDATE tasks SET status = ?, status_message = ?, updated_at = ?"
        f" WHERE {one} status IN ({marks}) RETURNING {_COLUMNS}"
    )
    rows = await db.execute_fetchall(sql, (status, message, _us(now), *key, *sources))
    return [_task(row) for row in rows]


async def _insert_outcomes(db: aiosqlite.Connection, tasks: list[Task], outcome: Outcome) -> None:
    body = json.dumps(outcome.body)
    sql = "INSERT INTO outcomes VALUES (?, ?, ?)"
    await db.executemany(sql, [(task.task_id, outcome.kind, body) for task in tasks])


async def _connect(path: Path) -> aiosqlite.Connection:
    # isolation_level=None: transactions are exactly the BEGIN/COMMIT the writer issues.
    db = await aiosqlite.connect(path, isolation_level=None)
    db.row_factory = sqlite3.Row
    try:
        await db.executescript(_PRAGMAS)
    except BaseException:
        await db.close()
        raise
    return db


async def _migrate(db: aiosqlite.Connection) -> None:
    rows = list(await db.execute_fetchall("PRAGMA user_version"))
    version = int(rows[0][0])
    if version > len(MIGRATIONS):
        raise RuntimeError(f"database schema {version} is newer than this gateway knows")
    for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
        await db.executescript(
            f"BEGIN IMMEDIATE; {script}; PRAGMA user_version = {number}; COMMIT;"
        )


class StoreInUse(Exception):
    """Another process holds the store; the message names the file and what to change."""


def _lock(path: Path) -> int:
    """The open descriptor of `<path>.lock`, exclusively locked for as long as it stays open.

    Raises:
        StoreInUse: another process (or another store in this one) holds the lock.
    """
    lock = path.with_name(path.name + ".lock")
    # Python opens descriptors non-inheritable: a stdio child never holds the lock on.
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        by = f"gateway process {holder}" if holder.isdigit() else "another gateway process"
        raise StoreInUse(
            f"the store {path} is in use by {by} (it holds {lock}); stop that one, or give "
            "this one another store.path"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    # Who holds it, for the message above; only a hint, the lock is what counts.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


async def open_store(
    path: str | Path, on_timing: Callable[[str, float], None] | None = None
) -> SqliteTaskStore:
    """Opens (creating if need be) the database file and brings its schema up to date.

    `on_timing(operation, seconds)` hears how long each read and each commit took.

    Raises:
        StoreInUse: another process has the file open as its store; nothing was read or written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(path)
    try:
        writer = await _connect(path)
        try:
            await writer.execute("PRAGMA journal_mode = WAL")
            await _migrate(writer)
            reader = await _connect(path)
        except BaseException:
            await writer.close()
            raise
    except BaseException:
        os.close(lock)
        raise
    return SqliteTaskStore(writer, reader, on_timing, lock)
