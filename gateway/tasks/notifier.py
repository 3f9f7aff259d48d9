"""Wake-ups between the parts of one gateway process (DESIGN.md, decision 9).

A waiter takes a `Watch` on its task *before* it reads the task, and keeps it across its
re-reads: a change written between the read and the wait has already set the watch, so the
wait returns at once instead of missing it. Correctness never depends on a wake-up arriving
(a waiter always re-reads the store, and waits with a timeout as a backstop), so a wake-up
from another replica (PostgreSQL LISTEN/NOTIFY) may be lost without losing a task: only the
backstop's timing, which a metric counts, shows it.
"""

from __future__ import annotations

import asyncio

from gateway.aio import timers


class Watch:
    """One waiter's subscription to one task's changes, from `Notifier.watch` to `close`."""

    __slots__ = ("_notifier", "_task_id", "_event")

    def __init__(self, notifier: Notifier, task_id: str) -> None:
        self._notifier = notifier
        self._task_id = task_id
        self._event = asyncio.Event()

    async def wait(self, backstop_seconds: float) -> bool:
        """Return once the task has changed since the last wait (or since the watch began),
        or after `backstop_seconds`: True when a change woke it, False for the backstop."""
        try:
            if not self._event.is_set():
                async with timers.deadline(backstop_seconds):
                    await self._event.wait()
        except TimeoutError:
            return False
        self._event.clear()  # (before the caller's re-read: a later change sets it again)
        return True

    def close(self) -> None:
        self._notifier._forget(self._task_id, self._event)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Notifier:
    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}

    def watch(self, task_id: str) -> Watch:
        """A subscription to `task_id`'s changes: take it before reading the task."""
        watch = Watch(self, task_id)
        self._waiting.setdefault(task_id, set()).add(watch._event)
        return watch

    def task_changed(self, task_id: str) -> None:
        for event in self._waiting.get(task_id, ()):
            event.set()

    def all_changed(self) -> None:
        """Any task may have changed (wake-ups from other replicas may have been lost)."""
        for waiters in self._waiting.values():
            for event in waiters:
                event.set()

    def _forget(self, task_id: str, event: asyncio.Event) -> None:
        waiters = self._waiting.get(task_id)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                del self._waiting[task_id]
