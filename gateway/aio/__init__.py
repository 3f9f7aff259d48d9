"""Owned background tasks (nothing is fire-and-forget), and turns taken per key."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

log = logging.getLogger(__name__)

_SWEEP_AT_LEAST = 64


class TaskSet:
    """Holds references to the tasks it starts and cancels them all on `close()`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        #: When the set holds this many, `spawn_quiet` drops the finished ones.
        self._sweep_at = _SWEEP_AT_LEAST

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)  # noqa: TID251 - referenced until done
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def spawn_quiet(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """As `spawn`, for a coroutine that catches and reports its own failures: no done
        callback, which is one turn of the event loop less per task (a relayed call is one).
        Finished tasks are dropped once the set has doubled since the last sweep."""
        task = asyncio.create_task(coro, name=name)  # noqa: TID251 - referenced until swept
        self._tasks.add(task)
        if len(self._tasks) >= self._sweep_at:
            self._tasks = {t for t in self._tasks if not t.done()}
            self._sweep_at = max(_SWEEP_AT_LEAST, 2 * len(self._tasks))
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "%s: background task %s failed",
                self._name,
                task.get_name(),
                exc_info=task.exception(),
            )

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Turns:
    """One holder at a time per key, the others waiting their turn; a key nobody holds or
    waits for costs nothing."""

    def __init__(self) -> None:
        #: Per key: its lock, and how many hold it or wait for it.
        self._turns: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        lock, users = self._turns.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._turns[key]

    def __len__(self) -> int:
        return len(self._turns)
