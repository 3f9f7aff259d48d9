"""What a replica keeps in memory of rows any replica may change or delete: the session
records it reads (so that a request on a session held here does not read its record back
each time), and the tasks it has just finished with their outcomes (so that the poll and
the `tasks/result` that follow a terminal write within moments read nothing).

A copy is trusted only while the news of changes reaches this replica: triggers (`schema`)
send the id of each session record rewritten or deleted, and of each task changed or
deleted, on any replica, and the listener hands it to `drop`. While the listener is not
connected nothing is kept or served (`live`), and at each reconnection, when news may have
been lost, everything is dropped (`drop(None)`). A read that was under way when news came is
not kept (`epoch`), since it may predate the change. Each copy is kept for `KEPT_SECONDS` at
most: the backstop for news that never came, as the slow poll is for a task's waiter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.protocol.outcome import Outcome
from gateway.tasks.models import SessionRecord, Task
from gateway.tasks.store.reads import SharedReads

V = TypeVar("V")

#: How long a copy is trusted without a word from the database.
KEPT_SECONDS = 1.0


class Kept(Generic[V]):
    """Copies by id, each with the time it was read or written; at most `most` (the oldest
    go first)."""

    def __init__(self, most: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._most = most
        self._clock = clock
        self._copies: dict[str, tuple[float, V]] = {}
        #: Counts the news heard: a read begun in an earlier epoch is not kept.
        self.epoch = 0
        #: Whether news of changes reaches this replica now (the listener is connected).
        self.live: Callable[[], bool] = lambda: False

    def get(self, key: str) -> V | None:
        """The copy, if kept and still to be trusted."""
        kept = self._copies.get(key)
        if kept is None:
            return None
        if not self.live() or self._clock() - kept[0] > KEPT_SECONDS:
            del self._copies[key]
            return None
        return kept[1]

    def keep(self, key: str, value: V, epoch: int) -> None:
        """Keep `value`, read or written in `epoch`, unless news came since."""
        if epoch != self.epoch or not self.live():
            return
        self._copies.pop(key, None)
        if len(self._copies) >= self._most:
            del self._copies[next(iter(self._copies))]
        self._copies[key] = (self._clock(), value)

    def drop(self, key: str | None) -> None:
        """The row of `key` changed or went (None: any may have)."""
        self.epoch += 1
        if key is None:
            self._copies.clear()
        else:
            self._copies.pop(key, None)


class KeptReads(SharedReads):
    """`SharedReads` answered from the copies first, where one is kept: a session's record
    (every request on a session held here asks for it), a task finished here and its outcome
    (the poll and the `tasks/result` that follow the terminal write)."""

    _sessions: Kept[SessionRecord]
    _ended: Kept[tuple[Task, Outcome]]

    async def get_task(self, task_id: str) -> Task | None:
        if (ended := self._ended.get(task_id)) is not None:
            return ended[0]
        return await super().get_task(task_id)

    async def find_task(self, task_id: str, owner: str) -> Task | None:
        if (ended := self._ended.get(task_id)) is not None:
            return ended[0] if ended[0].owner == owner else None
        return await super().find_task(task_id, owner)

    async def get_outcome(self, task_id: str) -> Outcome | None:
        if (ended := self._ended.get(task_id)) is not None:
            return ended[1]
        return await super().get_outcome(task_id)

    async def get_session(self, session_id: str, fresh: bool = False) -> SessionRecord | None:
        if not fresh and (kept := self._sessions.get(session_id)) is not None:
            return kept
        epoch = self._sessions.epoch
        record = await super().get_session(session_id)
        if record is not None:
            self._sessions.keep(session_id, record, epoch)
        elif fresh:
            self._sessions.drop(session_id)  # ahead of its news, which is on its way
        return record
