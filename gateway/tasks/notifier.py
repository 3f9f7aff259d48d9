"""Wake-ups between the parts of one gateway process (DESIGN.md, decision 9).

Correctness never depends on a wake-up arriving: a waiter always re-reads the store, and
waits with a timeout as a backstop. So a later multi-replica notifier (PostgreSQL
LISTEN/NOTIFY) can lose a message without losing a task.
"""

from __future__ import annotations

import asyncio
import collections

from gateway import timers


class Notifier:
    def __init__(self) -> None:
        self._waiting: collections.defaultdict[str, set[asyncio.Event]] = collections.defaultdict(
            set
        )

    def task_changed(self, task_id: str) -> None:
        for event in self._waiting.pop(task_id, ()):
            event.set()

    def all_changed(self) -> None:
        """Any task may have changed (wake-ups from other replicas may have been lost)."""
        for waiters in self._waiting.values():
            for event in waiters:
                event.set()
        self._waiting.clear()

    async def wait_task(self, task_id: str, backstop_seconds: float) -> None:
        """Return when `task_id` changes, or after `backstop_seconds`, whichever is first."""
        event = asyncio.Event()
        self._waiting[task_id].add(event)
        try:
            async with timers.deadline(backstop_seconds):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            waiters = self._waiting.get(task_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiting[task_id]
