"""Wake-ups between the parts of one gateway process (DESIGN.md, decision 9).

A waiter takes a `Watch` on its task *before* it reads the task, and keeps it across its
re-reads: a change written between the read and the wait has already set the watch, so the
wait returns at once instead of missing it. Correctness never depends on a wake-up arriving
(a waiter always re-reads the store, and waits with a timeout as a backstop), so a wake-up
from another replica (PostgreSQL LISTEN/NOTIFY) may be lost without losing a task: only the
backstop's timing, which a metric counts, shows it.

A run that ends here hands its watches the terminal task and outcome as well (`task_ended`): a
terminal task changes no more, so they are what a re-read would give, and a waiter with an
`on_end` answers from them in the run's own turn of the loop, without a read or a turn of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.aio import timers
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task

log = logging.getLogger(__name__)


class Watch:
    """One waiter's subscription to one task's changes, from `Notifier.watch` to `close`."""

    __slots__ = ("_notifier", "_task_id", "_event", "on_end")

    def __init__(self, notifier: Notifier, task_id: str) -> None:
        self._notifier = notifier
        self._task_id = task_id
        self._event = asyncio.Event()
        #: Called once, with the task and its outcome, when a run here writes it terminal.
        self.on_end: Callable[[Task, Outcome], None] | None = None

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
        self.on_end = None
        self._notifier._forget(self._task_id, self)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Notifier:
    def __init__(self) -> None:
        self._waiting: dict[str, set[Watch]] = {}

    def watch(self, task_id: str) -> Watch:
        """A subscription to `task_id`'s changes: take it before reading the task."""
        watch = Watch(self, task_id)
        self._waiting.setdefault(task_id, set()).add(watch)
        return watch

    def task_changed(self, task_id: str) -> None:
        for watch in self._waiting.get(task_id, ()):
            watch._event.set()

    def task_ended(self, task: Task, outcome: Outcome) -> None:
        """`task` has just been written terminal here, with `outcome`: a change for every
        watch, and for each with an `on_end`, the two."""
        # (A copy: an `on_end` may close its watch.)
        for watch in tuple(self._waiting.get(task.task_id, ())):
            end, watch.on_end = watch.on_end, None
            if end is not None:
                try:
                    end(task, outcome)
                except Exception:  # the run that called this must still end as it should
                    log.exception("a waiter failed to take its task's outcome")
            # After `end`: what it woke (the reader of its answer) goes first.
            watch._event.set()

    def all_changed(self) -> None:
        """Any task may have changed (wake-ups from other replicas may have been lost)."""
        for waiters in self._waiting.values():
            for watch in waiters:
                watch._event.set()

    def _forget(self, task_id: str, watch: Watch) -> None:
        waiters = self._waiting.get(task_id)
        if waiters is not None:
            waiters.discard(watch)
            if not waiters:
                del self._waiting[task_id]
