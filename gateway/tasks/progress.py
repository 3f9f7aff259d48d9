"""A task's progress as its statusMessage, so that a client that only polls still sees it.

The session relays every upstream progress notification to the client under the client's
own token; this module keeps only what `tasks/get` shows. An upstream may send hundreds of
notifications a second and each store write is an fsync, so the first is written at once and
then only the latest, at most once per interval, for as long as more comes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gateway.aio import TaskSet
from gateway.protocol.errors import StoreUnreachable
from gateway.tasks.models import storable_text
from gateway.tasks.notifier import Notifier
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)


def progress_message(params: dict[str, Any]) -> str | None:
    """A progress notification as a statusMessage, e.g. "3/10: parsing"."""
    progress = params.get("progress")
    if not isinstance(progress, int | float) or isinstance(progress, bool):
        return None
    total = params.get("total")
    text = f"{progress:g}/{total:g}" if isinstance(total, int | float) else f"{progress:g}"
    message = params.get("message")
    return f"{text}: {storable_text(message)}" if isinstance(message, str) and message else text


class ProgressNotes:
    """Writes each task's latest progress message, at most once per `interval` seconds."""

    def __init__(
        self,
        store: TaskStore,
        notifier: Notifier,
        clock: Callable[[], datetime],
        tasks: TaskSet,
        interval: float,
    ) -> None:
        self._store = store
        self._notifier = notifier
        self._clock = clock
        #: The runner's, so that its close() stops the writers too.
        self._tasks = tasks
        self._interval = interval
        #: Tasks with a writer at work, and the latest message it has yet to write.
        self._pending: dict[str, str | None] = {}

    def heard(self, task_id: str, params: dict[str, Any]) -> None:
        """An upstream progress notification for `task_id` arrived."""
        message = progress_message(params)
        if message is None:
            return
        writing = task_id in self._pending
        self._pending[task_id] = message  # the latest wins; the writer picks it up
        if not writing:
            self._tasks.spawn(self._write(task_id), name="task progress")

    async def _write(self, task_id: str) -> None:
        try:
            while (message := self._pending[task_id]) is not None:
                self._pending[task_id] = None
                try:
                    noted = await self._store.note_task(task_id, message, self._clock())
                except StoreUnreachable:
                    # Only the latest message is lost, and the next notification brings a
                    # newer one: a line for the operator, not a traceback per task.
                    log.warning("a task's progress was not kept: the store is unreachable")
                    return
                if noted is None:
                    return  # terminal: later progress has nothing to show
                self._notifier.task_changed(task_id)
                await asyncio.sleep(self._interval)
        finally:
            del self._pending[task_id]
