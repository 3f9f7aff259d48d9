"""The SQLite store's single writer (`GroupCommitWriter`) on a real file: where a batch's
statements run, and what a COMMIT that fails leaves behind."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gateway.tasks.store.sqlite.writer import GroupCommitWriter

SCHEMA = """
    CREATE TABLE parents (id TEXT PRIMARY KEY);
    CREATE TABLE children (id TEXT PRIMARY KEY, parent TEXT NOT NULL REFERENCES parents);
"""


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[tuple[GroupCommitWriter, Path]]:
    path = tmp_path / "w.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.executescript("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;" + SCHEMA)
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task-store-writer")
    writer = GroupCommitWriter(db, thread)
    yield writer, path
    await writer.close()
    db.close()
    thread.shutdown()


def at_rest(path: Path, table: str) -> list[str]:
    """The ids another connection reads: what was committed."""
    with sqlite3.connect(path) as db:
        rows = [row[0] for row in db.execute(f"SELECT id FROM {table} ORDER BY id")]
    db.close()
    return rows


def insert(table: str, row_id: str, seen: list[str]) -> Callable[[sqlite3.Connection], str]:
    def run(db: sqlite3.Connection) -> str:
        seen.append(threading.current_thread().name)
        db.execute(f"INSERT INTO {table} (id) VALUES (?)", (row_id,))
        return row_id

    return run


async def test_a_batchs_statements_run_on_the_loop_and_a_bulk_batch_whole_on_the_thread(
    writer: tuple[GroupCommitWriter, Path],
) -> None:
    # The statements of a batch are CPU work on pages in memory: on the loop they need no
    # GIL hand-over per SQLite step. Only a write that may touch many rows (and so read many
    # pages from disk) takes its batch to the thread. Either way the caller returns durable.
    w, path = writer
    seen: list[str] = []
    assert await asyncio.gather(*(w.write(insert("parents", p, seen)) for p in "ab")) == list("ab")
    assert at_rest(path, "parents") == ["a", "b"]
    assert seen == [threading.current_thread().name] * 2

    seen.clear()
    plain, bulk = w.write(insert("parents", "c", seen)), w.write(insert("parents", "d", seen), True)
    assert list(await asyncio.gather(plain, bulk)) == ["c", "d"]
    assert at_rest(path, "parents") == ["a", "b", "c", "d"]
    assert len(seen) == 2 and all(name.startswith("task-store-writer") for name in seen)


async def test_a_commit_that_fails_fails_its_whole_batch_writes_nothing_and_the_next_commits(
    writer: tuple[GroupCommitWriter, Path],
) -> None:
    w, path = writer

    def orphan(db: sqlite3.Connection) -> None:
        # A deferred foreign key is checked at COMMIT: the statements all succeed, and the
        # COMMIT, made on the thread, fails.
        db.execute("PRAGMA defer_foreign_keys = ON")
        db.execute("INSERT INTO children (id, parent) VALUES ('c1', 'nobody')")

    seen: list[str] = []
    results = await asyncio.gather(
        w.write(insert("parents", "p1", seen)), w.write(orphan), return_exceptions=True
    )

    assert all(isinstance(r, sqlite3.IntegrityError) for r in results), results
    assert at_rest(path, "parents") == [] and at_rest(path, "children") == []
    assert await w.write(insert("parents", "p2", seen)) == "p2"
    assert at_rest(path, "parents") == ["p2"]


class _CommitWatch:
    """The writer's connection, noting the event loop's turn as each COMMIT returns."""

    def __init__(self, db: sqlite3.Connection, turn: Callable[[], int]) -> None:
        self._db = db
        self._turn = turn
        self.commit_turns: list[int] = []

    @property
    def in_transaction(self) -> bool:
        return self._db.in_transaction

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = self._db.execute(sql, *args)
        if sql == "COMMIT":
            self.commit_turns.append(self._turn())
        return cursor


class _Turns:
    """Counts the loop's turns while `tick` runs beside the code under test."""

    def __init__(self) -> None:
        self.count = 0

    async def tick(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)


def _wal_db(tmp_path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
    db.executescript("PRAGMA journal_mode = WAL;" + SCHEMA)
    return db


async def test_a_writes_caller_resumes_on_the_loops_next_turns_after_its_commit(
    tmp_path: Path,
) -> None:
    # Under load every turn of the loop is long, so each turn between the COMMIT and the
    # caller is latency on every durable write: the thread's end of a transaction settles
    # the callers itself (one turn), and they resume on the next. Awaiting the executor's
    # future behind a shield, as before, took four.
    loop_turns = _Turns()
    db = _wal_db(tmp_path)
    watch = _CommitWatch(db, lambda: loop_turns.count)
    thread = ThreadPoolExecutor(max_workers=1)
    writer = GroupCommitWriter(watch, thread)  # type: ignore[arg-type]
    try:
        async with asyncio.TaskGroup() as group:
            ticker = group.create_task(loop_turns.tick())
            waited = []
            for n in range(5):
                await writer.write(insert("parents", f"p{n}", []))
                waited.append(loop_turns.count - watch.commit_turns[-1])
            ticker.cancel()
        assert max(waited) <= 3, waited
        assert at_rest(tmp_path / "w.db", "parents") == [f"p{n}" for n in range(5)]
    finally:
        await writer.close()
        db.close()
        thread.shutdown()


async def test_a_write_queued_during_a_commit_begins_its_batch_in_the_turn_that_commit_lands(
    tmp_path: Path,
) -> None:
    # A creation waits for about one and a half COMMITs, so a turn of a busy loop between one
    # batch's COMMIT and the next batch's BEGIN is latency on every durable write: the
    # callback that settles a batch begins the next, a turn before its own callers resume.
    loop_turns = _Turns()
    db = _wal_db(tmp_path)
    gate = threading.Event()
    begun: list[int] = []
    first_begun = asyncio.Event()  # (a BEGIN runs on the loop)

    class Gated(_CommitWatch):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql == "BEGIN IMMEDIATE":
                begun.append(loop_turns.count)
                first_begun.set()
            elif sql == "COMMIT":
                gate.wait(5)  # the first COMMIT lasts until the second write is queued
            return super().execute(sql, *args)

    thread = ThreadPoolExecutor(max_workers=1)
    writer = GroupCommitWriter(Gated(db, lambda: loop_turns.count), thread)  # type: ignore[arg-type]
    resumed: list[int] = []

    async def write(row_id: str) -> None:
        await writer.write(insert("parents", row_id, []))
        resumed.append(loop_turns.count)

    try:
        async with asyncio.timeout(5), asyncio.TaskGroup() as group:
            ticker = group.create_task(loop_turns.tick())
            first = group.create_task(write("p1"))
            await first_begun.wait()
            second = group.create_task(write("p2"))
            await asyncio.sleep(0)  # p2 is queued behind the COMMIT under way
            gate.set()
            await asyncio.gather(first, second)
            ticker.cancel()
        assert len(begun) == 2 and begun[1] < resumed[0], (begun, resumed)
        assert at_rest(tmp_path / "w.db", "parents") == ["p1", "p2"]
    finally:
        await writer.close()
        db.close()
        thread.shutdown()
