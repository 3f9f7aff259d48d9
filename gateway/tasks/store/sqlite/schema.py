"""The SQLite file itself: its lock, its two connections, its tables, and the statements
shared with PostgreSQL in its placeholders (`SQL`).

One process at a time: `open_database` takes an exclusive lock on `<file>.lock` before its
first statement, and the store holds it for its lifetime, so a second gateway started on the
same file stops (`StoreInUse`) instead of failing the first one's running tasks as
"interrupted". The kernel drops the lock when the process ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from gateway.tasks.history import HISTORY_KEPT
from gateway.tasks.store.sql import Statements, qmark

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
    # Tasks remember the generation that made them; the questions a task's call asks are kept
    # (see `inputs`) so that the 2026-07-28 generation can show and answer them.
    """
    ALTER TABLE tasks ADD COLUMN generation TEXT NOT NULL DEFAULT '2025-11-25';
    CREATE TABLE task_inputs (
        task_id TEXT NOT NULL REFERENCES tasks ON DELETE CASCADE,
        key TEXT NOT NULL,
        method TEXT NOT NULL,
        params TEXT NOT NULL,
        upstream_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'answered', 'withdrawn')),
        response TEXT,
        created_at INTEGER NOT NULL,
        settled_at INTEGER,
        PRIMARY KEY (task_id, key)
    );
    """,
    # Tasks of tools safe to repeat run again after a restart: a task knows whether it is one
    # and which attempt runs. `task_calls` keeps what a re-run needs (the request, for those
    # tasks only) and the upstream request of the latest attempt, until the terminal write.
    """
    ALTER TABLE tasks ADD COLUMN repeatable INTEGER NOT NULL DEFAULT 0
        CHECK (repeatable IN (0, 1));
    ALTER TABLE tasks ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1);
    CREATE TABLE task_calls (
        task_id TEXT PRIMARY KEY REFERENCES tasks ON DELETE CASCADE,
        request TEXT,
        upstream_session_id TEXT,
        upstream_request_id TEXT
    );
    """,
    # A session keeps its HTTP upstream's own session id, to carry on with it after a restart.
    """
    ALTER TABLE sessions ADD COLUMN upstream_session_id TEXT;
    """,
    # ... and the protocol version it speaks, which each request to it names.
    """
    ALTER TABLE sessions ADD COLUMN upstream_protocol_version TEXT;
    """,
    # Tasks keep their latest status changes and progress for operators (`appending`). A task
    # made before kept none: its count of earlier changes is unknown (NULL), and stays so.
    """
    ALTER TABLE tasks ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE tasks ADD COLUMN history_dropped INTEGER;
    ALTER TABLE tasks ADD COLUMN progress TEXT;
    ALTER TABLE tasks ADD COLUMN progress_at INTEGER;
    """,
]

# The sqlite3 module binds an exact str, int, float or bytearray as it is and looks anything
# else up among its adapters; for None, which it knows how to bind, the failed lookup raised
# and formatted two AttributeErrors (some 4,000 instructions; a task's writes bind three or
# four Nones). Found among the adapters, None is bound as NULL, as before. (Process-wide, but
# the same NULL for every connection; enum members and bools are bound as plain values.)
sqlite3.register_adapter(type(None), lambda _: None)

#: The statements both backends share, in SQLite's placeholders.
SQL = Statements(qmark)

#: `IN` over any number of values through one JSON array parameter (SQLite caps parameters).
IN_JSON_ARRAY = "IN (SELECT value FROM json_each(?))"


def appending(moved: str) -> str:
    """The SET clause of a write that appends a history entry (`writes.change`, its one
    parameter) to each row where the condition `moved` holds, in the same statement as the
    move: the oldest entry is dropped, and counted, beyond `HISTORY_KEPT`. (SET reads the row
    as it was before the statement.)"""
    full = f"json_array_length(history) >= {HISTORY_KEPT}"
    kept = f"CASE WHEN {full} THEN json_remove(history, '$[0]') ELSE history END"
    return (
        f"history = CASE WHEN {moved} THEN json_insert({kept}, '$[#]', json(?))"
        f" ELSE history END, history_dropped = history_dropped + ({moved} AND {full})"
    )


_PRAGMAS = "PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;"

#: The writer's page cache (SQLite's default is 2 MiB). Wholly random task ids (the ids made
#: before they began with their time, which a store keeps for their ttl) put each task and
#: outcome on a leaf page of its own in the id indexes, and with the default cache most of
#: those were read again from the file on every write, on the event loop (see `writer`).
#: 32 MiB holds them for some hundred thousand tasks.
_WRITER_CACHE = "PRAGMA cache_size = -32768"


class StoreInUse(Exception):
    """Another process holds the store; the message names the file and what to change."""


@dataclass
class Database:
    """An open store file: the writer's connection and the one thread that uses it, the
    readers' connection, and the locked descriptor (see `_lock`), which is closed last."""

    writer: sqlite3.Connection
    thread: ThreadPoolExecutor
    reader: aiosqlite.Connection
    lock: int

    closed: bool = False

    async def close(self) -> None:
        """Closes both connections, then lets another process have the file; once."""
        if self.closed:
            return
        self.closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self.thread, self.writer.close)
            self.thread.shutdown()
            await self.reader.close()
        finally:
            os.close(self.lock)


async def open_database(path: Path) -> Database:
    """Lock the file, then open it (created if need be) with its schema up to date.

    Raises:
        StoreInUse: another process has the file open as its store; nothing was read or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(path)
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task-store-writer")
    loop = asyncio.get_running_loop()
    try:
        writer = await loop.run_in_executor(thread, _open_writer, path)
        try:
            reader = await _connect(path)
        except BaseException:
            await loop.run_in_executor(thread, writer.close)
            raise
    except BaseException:
        thread.shutdown()
        os.close(lock)
        raise
    return Database(writer, thread, reader, lock)


def _open_writer(path: Path) -> sqlite3.Connection:
    """On the writer's thread, which alone uses the connection from now on."""
    # isolation_level=None: transactions are exactly the BEGIN/COMMIT the writer issues.
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    try:
        db.executescript(_PRAGMAS)
        db.execute(_WRITER_CACHE)
        db.execute("PRAGMA journal_mode = WAL")
        _migrate(db)
    except BaseException:
        db.close()
        raise
    return db


async def _connect(path: Path) -> aiosqlite.Connection:
    db = await aiosqlite.connect(path, isolation_level=None)
    db.row_factory = sqlite3.Row
    try:
        await db.executescript(_PRAGMAS)
    except BaseException:
        await db.close()
        raise
    return db


def _migrate(db: sqlite3.Connection) -> None:
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):
        raise RuntimeError(f"database schema {version} is newer than this gateway knows")
    for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
        db.executescript(f"BEGIN IMMEDIATE; {script}; PRAGMA user_version = {number}; COMMIT;")


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
