"""What the SQLite store keeps of its tasks in memory, so that a poll reads no file.

This process is the file's only writer (its lock says so), so every change passes through its
store, which hands each committed task here: a poll of a running task, and the poll and the
`tasks/result` that follow a terminal write within moments, are answered from memory without
a read on SQLite's thread. Every delete drops its tasks here too, so no copy outlives its row.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task

#: Live tasks kept: a few MiB at most, and room for every task a busy client polls.
_LIVE_KEPT = 1024

#: Tasks just finished, kept with their outcomes: at most this many, and this many bytes of
#: outcomes (as stored, in JSON).
_ENDED_KEPT = 1024
_ENDED_BYTES = 16 * 1024 * 1024


class TaskCache:
    """The most recently written tasks, as last committed, each bounded by count (and the
    finished ones' outcomes by size): ten thousand tasks in flight keep their memory."""

    def __init__(self) -> None:
        self._live: collections.OrderedDict[str, Task] = collections.OrderedDict()
        #: Each finished task with its outcome and the outcome's stored size: a terminal task
        #: changes no more, so the copy stays true until the row is deleted.
        self._ended: collections.OrderedDict[str, tuple[Task, Outcome, int]] = (
            collections.OrderedDict()
        )
        self._ended_bytes = 0

    def committed(self, tasks: Iterable[Task | None]) -> None:
        """What a write committed: live tasks are kept, terminal ones dropped."""
        for task in tasks:
            if task is None:
                continue
            self._live.pop(task.task_id, None)
            if not task.status.terminal:
                self._live[task.task_id] = task
                if len(self._live) > _LIVE_KEPT:
                    self._live.popitem(last=False)  # the next read of it goes to the file

    def ended(self, task: Task, outcome: Outcome, size: int) -> None:
        """A terminal write that stored `outcome` (`size` bytes): kept with its task."""
        if size > _ENDED_BYTES // 16:
            return  # one large outcome would push out a thousand small ones
        self._ended[task.task_id] = (task, outcome, size)
        self._ended_bytes += size
        while len(self._ended) > _ENDED_KEPT or self._ended_bytes > _ENDED_BYTES:
            _, (_, _, dropped) = self._ended.popitem(last=False)
            self._ended_bytes -= dropped

    def forget(self, task_ids: Iterable[str]) -> None:
        """Deleted rows: no copy of them may outlive them."""
        for task_id in task_ids:
            self._live.pop(task_id, None)
            ended = self._ended.pop(task_id, None)
            if ended is not None:
                self._ended_bytes -= ended[2]

    def task(self, task_id: str) -> Task | None:
        live = self._live.get(task_id)
        if live is not None:
            return live
        ended = self._ended.get(task_id)
        return None if ended is None else ended[0]

    def live(self, task_id: str) -> Task | None:
        """The task as last committed while it was live, if kept."""
        return self._live.get(task_id)

    def outcome(self, task_id: str) -> Outcome | None:
        ended = self._ended.get(task_id)
        return None if ended is None else ended[1]
