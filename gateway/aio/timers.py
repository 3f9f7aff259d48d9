"""Timers for what every request sets and almost always cancels: the JSON window, a call's
time limit.

An asyncio timer per request costs more than most of the request's own bookkeeping: a
`TimerHandle`, a push onto the loop's heap, and, once cancelled, a dead entry the loop sifts
past later. The relay's two of them were 5 % of a relayed call's instructions (callgrind,
docs/performance.md). Alarms of one delay go off in the order they were set, so one queue per
delay and one loop timer for the head of each queue serve them all; cancelling an alarm only
marks it, and the queue drops marked ones as they come due or when they are most of it.

`after(delay, callback, *args)` is `loop.call_later` for such delays; `deadline(seconds)` is
`asyncio.timeout(seconds)` on one of these alarms, with the same semantics.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

#: An alarm this close to its time goes off with the ones that are due (the loop's own
#: timers may fire as early as its clock resolution).
_EARLY = 0.001
#: A queue holding more cancelled alarms than this, and more than live ones, is compacted.
_COMPACT_AT = 64


class Alarm:
    """One pending callback; `cancel()` it once it is not needed."""

    __slots__ = ("when", "callback", "args", "cancelled", "_queue")

    def __init__(
        self, when: float, callback: Callable[..., object], args: tuple[Any, ...], queue: _Queue
    ) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False
        self._queue = queue

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            # A cancelled alarm waits in its queue until due (a call's time limit: up to
            # hours) or compacted away: it must not keep its callback's objects alive so long.
            self.callback = _nothing
            self.args = ()
            self._queue.dropped()


def _nothing() -> None:
    """A cancelled alarm's callback, never called."""


class _Queue:
    """The alarms of one delay on one loop, in the order set, which is the order due."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, delay: float, owner: dict[float, _Queue]
    ) -> None:
        self._loop = loop
        self._delay = delay
        self._owner = owner
        self._alarms: collections.deque[Alarm] = collections.deque()
        self._cancelled = 0
        self._timer: asyncio.TimerHandle | None = None

    def add(self, callback: Callable[..., object], args: tuple[Any, ...]) -> Alarm:
        alarm = Alarm(self._loop.time() + self._delay, callback, args, self)
        self._alarms.append(alarm)
        if self._timer is None:
            self._timer = self._loop.call_at(alarm.when, self._ring)
        return alarm

    def dropped(self) -> None:
        self._cancelled += 1
        alarms = self._alarms
        if self._cancelled > _COMPACT_AT and 2 * self._cancelled > len(alarms):
            self._alarms = collections.deque(a for a in alarms if not a.cancelled)
            self._cancelled = 0

    def _ring(self) -> None:
        self._timer = None
        due = self._loop.time() + _EARLY
        alarms = self._alarms
        while alarms and (alarms[0].cancelled or alarms[0].when <= due):
            alarm = alarms.popleft()
            if alarm.cancelled:
                self._cancelled -= 1
                continue
            alarm.cancelled = True
            try:
                alarm.callback(*alarm.args)
            except Exception as exc:  # as the loop does with a failing callback
                self._loop.call_exception_handler(
                    {"message": "an alarm's callback failed", "exception": exc}
                )
            alarms = self._alarms  # (a callback may have compacted the queue)
        if self._timer is not None:  # a callback set an alarm of this delay: the head decides
            self._timer.cancel()
        if alarms:
            self._timer = self._loop.call_at(alarms[0].when, self._ring)
        else:
            del self._owner[self._delay]  # an empty queue is not kept: delays vary


#: Each loop's queues by delay (tests run many loops; a closed one takes its queues along).
_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _Queue]] = (
    weakref.WeakKeyDictionary()
)


def after(
    delay: float,
    callback: Callable[..., object],
    *args: Any,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Alarm:
    """Call `callback(*args)` on `loop` (the running one) in `delay` seconds, unless
    cancelled. A caller that has the loop passes it: on Python 3.11 each lookup of the
    running loop is a getpid() system call."""
    loop = loop or asyncio.get_running_loop()
    queues = _queues.get(loop)
    if queues is None:
        queues = _queues[loop] = {}
    queue = queues.get(delay)
    if queue is None:
        queue = queues[delay] = _Queue(loop, delay, queues)
    return queue.add(callback, args)


class deadline:  # noqa: N801 - used as asyncio.timeout is: `async with deadline(s):`
    """`asyncio.timeout(seconds)` on an alarm: the block is cancelled after `seconds` (None:
    never) and TimeoutError raised in its place; a cancellation from elsewhere stays one."""

    __slots__ = ("_seconds", "_task", "_cancelling", "_alarm", "_expired")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._alarm: Alarm | None = None
        self._expired = False

    async def __aenter__(self) -> deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("deadline() is used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        if self._seconds is not None:
            self._alarm = after(self._seconds, self._expire, loop=task.get_loop())
        return self

    def _expire(self) -> None:
        self._expired = True
        self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._alarm is not None:
            self._alarm.cancel()
            # The alarm's callback is a method of ours: a reference cycle (with the task, its
            # coroutine and context hanging off it) that only the garbage collector would
            # break, one per upstream call.
            self._alarm = None
        if (
            self._expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc
