"""`Landings`: a run's terminal write, and the reads of its task that come while it lands.

A run's call can end, and a client poll or blocking wait read the task, before the terminal
write lands: the read would say `working` for a task whose answer is in hand. The runner makes
each write through `land`, which marks it `under_way`; a read takes `landing()` before it
reads, and `current()` after, which gives the task as written once the write has landed (a few
milliseconds). A write that meets a shared store unreachable waits for it.

A run `begun` with a poll window (`tasks.poll_window_ms`) is young for that long: its owner's
read of the task meanwhile waits for the call's end instead (`early_end`), and is answered
with the task as its terminal write left it, without a read of its own (a round trip to a
shared PostgreSQL); a question, a cancel, or the window's close sends it to the read. Clients
poll once at once and then every `pollInterval` (the Python SDK's `poll_task` does): without
the wait, a quick tool's task was `working` at that first poll, and seen a whole interval later.
The owner's read that comes once the call has ended, while its terminal write is under way (a
busy shared store takes milliseconds), waits for that write in the same way, read-free.
`latest` is all of it in order, as a poll (`tasks/get`, in either generation) makes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime

from gateway.aio import timers
from gateway.protocol.errors import StoreUnreachable
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)

#: Longest a read of a task waits for its terminal write under way here (`current`).
_FINISH_WAIT = 1.0


class Landings:
    def __init__(self, store: TaskStore, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock
        #: Runs whose call has ended and whose terminal write is under way: their task's
        #: owner, and the reads waiting for that write.
        self._finishing: dict[str, tuple[str, set[asyncio.Future[Task | None]]]] = {}
        #: Runs whose call is under way and young: the loop time their window closes at,
        #: their task's owner, and the owner's reads waiting for the call's end.
        self._young: dict[str, tuple[float, str, set[asyncio.Future[Task | None]]]] = {}

    def begun(self, task_id: str, owner: str, window: float) -> None:
        """A run's call has begun here: for `window` seconds, `early_end` waits for it."""
        now = asyncio.get_running_loop().time()
        # Closed windows go as new ones open, oldest first: a run that lasts hours keeps no
        # entry past its window, and a hundred thousand in flight keep none but the young.
        while self._young and (oldest := next(iter(self._young.items())))[1][0] <= now:
            del self._young[oldest[0]]
        if window > 0:
            self._young[task_id] = (now + window, owner, set())

    def settled(self, task_id: str) -> None:
        """The run's call has ended without a terminal write here, or its task has changed
        otherwise (a question, a cancel): the reads waiting for its end go and read it."""
        young = self._young.pop(task_id, None)
        for reader in young[2] if young is not None else ():
            if not reader.done():
                reader.set_result(None)

    async def early_end(self, task_id: object, owner: str, now: datetime) -> Task | None:
        """For `owner`'s read of a task whose call is young, or has ended with its terminal
        write under way: the task as that write left it, once it has landed (within the
        window, or `_FINISH_WAIT` for a write under way); None at once for any other read
        (another caller's too), and None when the window closes first, or the task changes
        otherwise, or it has expired meanwhile: then the caller reads the task itself."""
        if not isinstance(task_id, str):
            return None
        loop = asyncio.get_running_loop()
        if (young := self._young.get(task_id)) is not None:
            if young[1] != owner or (wait := young[0] - loop.time()) <= 0:
                return None
            readers = young[2]
        elif (finishing := self._finishing.get(task_id)) is not None and finishing[0] == owner:
            wait, readers = _FINISH_WAIT, finishing[1]
        else:
            return None
        landed: asyncio.Future[Task | None] = loop.create_future()
        readers.add(landed)
        try:
            async with timers.deadline(wait):
                written = await landed
        except TimeoutError:
            return None
        finally:
            readers.discard(landed)  # (the same set, moved to `_finishing` once it ends)
        return written if written is not None and not written.expired(now) else None

    async def latest(
        self, task_id: object, owner: str, now: datetime, read: Callable[[], Awaitable[Task]]
    ) -> Task:
        """The task a poll of `owner`'s answers with: its young call's end, read-free
        (`early_end`), else `read()` made after `landing()` and brought up to a terminal write
        that was under way meanwhile (`current`).

        Raises: what `read` raises (the task is not found, or not `owner`'s).
        """
        ended = await self.early_end(task_id, owner, now)
        if ended is not None:
            return ended
        landing = self.landing(task_id)  # before the read, as a watch is
        return await self.current(await read(), landing)

    async def land(
        self, task: Task, status: TaskStatus, message: str | None, outcome: Outcome
    ) -> Task | None:
        """A run's terminal write of `task` (None: it had ended already), tried again while a
        shared store is unreachable: the outcome is in hand and is the one thing not to lose.
        A shutdown meanwhile cancels this and leaves the task live, for the next process (or
        a surviving replica) to settle."""
        task_id = task.task_id
        with self.under_way(task_id, task.owner) as landed:
            delay = 0.1
            while True:
                try:
                    done = await self._store.finish_task(
                        task_id, status, message, outcome, self._clock()
                    )
                    landed.append(done)
                    return done
                except StoreUnreachable:
                    log.warning(
                        "a task's outcome waits for the store; trying again in %.1f s", delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)

    @contextlib.contextmanager
    def under_way(self, task_id: str, owner: str) -> Iterator[list[Task | None]]:
        """Around the terminal write of `owner`'s task: the reads that came meanwhile resume
        after it, with the task as written when the block appended it (None: they read it
        again)."""
        young = self._young.pop(task_id, None)  # the reads waiting for the end wait for this
        readers: set[asyncio.Future[Task | None]] = young[2] if young is not None else set()
        self._finishing[task_id] = (owner, readers)
        landed: list[Task | None] = []
        try:
            yield landed
        finally:
            del self._finishing[task_id]
            written = landed[0] if landed else None
            for reader in readers:
                if not reader.done():  # (a read cancelled meanwhile)
                    reader.set_result(written)

    def landing(self, task_id: object) -> asyncio.Future[Task | None] | None:
        """Taken before a read of the task: when its call here has ended and its terminal
        write is under way, a future that resolves once the write has landed (else None).

        Taken after the read, a write landing between the two would go unseen, and a poll
        that came after the call's end would read `working`.
        """
        finishing = self._finishing.get(task_id) if isinstance(task_id, str) else None
        if finishing is None:
            return None
        # A future of this read's own, resolved by the run itself: the read resumes on the
        # loop's next turn after the write, where waiting on a shared one (which a cancelled
        # read must not cancel, so behind a shield) took two more.
        landed: asyncio.Future[Task | None] = asyncio.get_running_loop().create_future()
        finishing[1].add(landed)
        return landed

    async def current(self, task: Task, landing: asyncio.Future[Task | None] | None) -> Task:
        """`task` as read after `landing(task.task_id)`, or, when that found a terminal write
        under way and the read came before it landed, the task once it has (a few
        milliseconds, within `_FINISH_WAIT`): as the write returned it, without a read (a
        round trip to a shared PostgreSQL), unless it found the task ended already."""
        if landing is None:
            return task
        try:
            if task.status.terminal:
                return task
            async with timers.deadline(_FINISH_WAIT):
                written = await landing
        except TimeoutError:
            return task  # the store is slow or away: the status as last written
        finally:
            finishing = self._finishing.get(task.task_id)
            if finishing is not None:
                finishing[1].discard(landing)  # (a store away for long meets many reads)
        return written or await self._store.get_task(task.task_id) or task
