"""The single writer of a SQLite store: optimistic group commit, one thread hop per batch.

With synchronous=FULL every COMMIT is an fsync, so every write is queued for the file's one
writer, which commits whatever is queued in one transaction; a caller returns only once its
write is durable. A write that fails fails its own caller only (see `_commit`).

The writes are plain functions of a `sqlite3.Connection`. A batch's statements (BEGIN and
every write) run on the event loop, and only its COMMIT, which waits for the disk, on the
connection's own thread: one trip per batch. Statements run on that thread instead each
took the GIL back from the busy event loop after every step SQLite made without it, and
under load a batch of some thirty writes spent 8 ms there, almost all of it waiting for
the GIL, where the same batch takes well under one on the loop. Writes that may touch many
rows (`bulk`: expiry, purges, erasure) still run whole on the thread, so that the loop never
waits for pages read from disk.

No task drives the batches: the first write of an idle writer schedules one for the end of
the loop's turn (so that the writes made in that turn share it), and the callback that
settles a batch begins the next with whatever queued meanwhile, in the same turn. A creation
waits for about one and a half COMMITs, so each turn of a busy loop between two of them was
latency on every durable write.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class _Write:
    run: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    bulk: bool


class GroupCommitWriter:
    """Runs writes on `db` in batches, one transaction each, on `thread` (the one thread that
    ever uses `db`). `on_timing("commit", seconds)` hears how long each COMMIT took."""

    def __init__(
        self,
        db: sqlite3.Connection,
        thread: concurrent.futures.ThreadPoolExecutor,
        on_timing: Callable[[str, float], None] | None = None,
    ) -> None:
        self._db = db
        self._thread = thread
        self._on_timing = on_timing
        #: `time.monotonic()` of the latest successful commit (0.0 before the first).
        self.last_commit = 0.0
        self._queue: list[_Write] = []
        self._closing = False
        #: A batch is begun or scheduled: the writes queued now wait for the next.
        self._busy = False
        #: Set while no batch is begun or scheduled (what `close` waits for).
        self._idle = asyncio.Event()
        self._idle.set()

    async def write(self, run: Callable[[sqlite3.Connection], T], bulk: bool = False) -> T:
        """`run(db)` inside the next batch's transaction; its value once that has committed.
        A `bulk` write (one that may touch many rows) makes its batch run on the thread.

        Raises:
            RuntimeError: the writer is closed.
        """
        if self._closing:
            raise RuntimeError("the task store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append(_Write(run, future, bulk))
        if not self._busy:
            self._busy = True
            self._idle.clear()
            loop.call_soon(self._next)
        return await future

    async def close(self) -> None:
        """Commits the writes already queued and refuses new ones; the connection stays open."""
        self._closing = True
        await self._idle.wait()

    def _next(self) -> None:
        """Begin a batch of what is queued, or rest."""
        batch, self._queue = self._queue, []
        if batch:
            self._commit(batch)
        else:
            self._busy = False
            self._idle.set()

    def _commit(self, batch: list[_Write]) -> None:
        # Optimistic first: the whole batch in one transaction, no savepoints. Only if a write
        # fails is the batch rolled back and replayed with a savepoint per write, so that
        # failure stays its caller's alone.
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        bulk = any(write.bulk for write in batch)
        try:
            settled = None if bulk else self._apply(batch)
        except Exception as exc:  # BEGIN failed: nothing of the batch was written
            _fail(batch, exc)
            loop.call_soon(self._next)
            return
        except BaseException:
            _fail(batch, RuntimeError("the task store is closed"))
            loop.call_soon(self._next)
            raise
        # The thread's end of the transaction settles the callers, and begins the next batch,
        # from one callback on the loop: awaiting run_in_executor (and a shield around it)
        # would put three turns of a busy loop between the COMMIT and the callers instead of
        # one, on every durable write.
        work = (lambda: self._transaction(batch)) if settled is None else self._end

        def landed(done: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is every caller
                loop.call_soon_threadsafe(self._settle, batch, settled, done, started)

        try:
            submitted = self._thread.submit(work)
        except RuntimeError as exc:  # the thread is shut down, and with it the store
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._closing = True
            _fail(batch, exc)
            loop.call_soon(self._next)  # (what queued meanwhile fails the same way)
            return
        submitted.add_done_callback(landed)

    def _settle(
        self,
        batch: list[_Write],
        settled: list[tuple[_Write, Any, Exception | None]] | None,
        done: concurrent.futures.Future[Any],
        started: float,
    ) -> None:
        """On the loop, once the thread has ended the batch's transaction: its callers learn
        how (each its own value or error, or the failed COMMIT's error for all), and the next
        batch begins at once."""
        try:
            self._settle_callers(batch, settled, done, started)
        finally:
            self._next()

    def _settle_callers(
        self,
        batch: list[_Write],
        settled: list[tuple[_Write, Any, Exception | None]] | None,
        done: concurrent.futures.Future[Any],
        started: float,
    ) -> None:
        error = RuntimeError("the task store is closed") if done.cancelled() else done.exception()
        if error is not None:  # COMMIT failed (or BEGIN, for a bulk batch): nothing written
            _fail(batch, error if isinstance(error, Exception) else RuntimeError(repr(error)))
            return
        self.last_commit = time.monotonic()
        if self._on_timing is not None:
            self._on_timing("commit", time.perf_counter() - started)
        for write, value, failure in settled if settled is not None else done.result():
            if write.future.done():  # the caller was cancelled; its write stands regardless
                continue
            if failure is None:
                write.future.set_result(value)
            else:
                write.future.set_exception(failure)

    def _transaction(self, batch: list[_Write]) -> list[tuple[_Write, Any, Exception | None]]:
        """On the writer's thread: `_apply`, then `_end`."""
        settled = self._apply(batch)
        self._end()
        return settled

    def _apply(self, batch: list[_Write]) -> list[tuple[_Write, Any, Exception | None]]:
        """The batch in one transaction, left open for `_end`; replayed with a savepoint per
        write if one of them fails."""
        try:
            return self._run(batch, isolate=False)
        except _WriteFailed:
            return self._run(batch, isolate=True)

    def _end(self) -> None:
        """COMMIT the open transaction (the fsync); rolled back if that fails."""
        try:
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _run(
        self, batch: list[_Write], isolate: bool
    ) -> list[tuple[_Write, Any, Exception | None]]:
        """Run `batch` after a BEGIN, rolled back entirely on any exception it raises.

        Raises:
            _WriteFailed: a write failed and `isolate` was off.
        """
        db = self._db
        settled: list[tuple[_Write, Any, Exception | None]] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            for write in batch:
                if not isolate:
                    try:
                        settled.append((write, write.run(db), None))
                    except Exception as exc:
                        raise _WriteFailed from exc
                    continue
                db.execute("SAVEPOINT write")
                try:
                    settled.append((write, write.run(db), None))
                except Exception as exc:
                    db.execute("ROLLBACK TO write")
                    settled.append((write, None, exc))
                db.execute("RELEASE write")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return settled


class _WriteFailed(Exception):
    """One write of an optimistic batch failed: replay the batch with isolation."""


def _fail(writes: list[_Write], error: Exception) -> None:
    for write in writes:
        if not write.future.done():
            write.future.set_exception(error)
