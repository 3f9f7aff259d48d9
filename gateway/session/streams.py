"""Resumable event streams of a session, toward the client.

An `EventStream` is one logical stream of a session (the GET stream, or the stream of one
POST). Its events are numbered and kept in a bounded buffer, so the HTTP connection that
carries them can drop and be replaced: a GET with `Last-Event-ID: <stream>:<n>` resumes after
event n. At most one connection reads a stream at a time, so no message is ever delivered on
two connections (the transport spec forbids broadcasting). `Streams` holds one session's
streams and knows where a message goes when its own stream has closed. `gateway.http.sse`
writes a stream to a connection; this module knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator

from gateway.aio import timers
from gateway.protocol import jsonrpc

log = logging.getLogger(__name__)

_KEPT_STREAMS = 64  # finished POST streams kept for Last-Event-ID resumption


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class EventStream:
    def __init__(self, key: str, capacity: int) -> None:
        self.key = key
        self._events: collections.deque[tuple[int, str]] = collections.deque(maxlen=capacity)
        self._next = 1
        # Created only when someone waits: most streams are answered before anyone does.
        self._changed: asyncio.Event | None = None
        self._first: asyncio.Future[None] | None = None
        self._reader = 0
        self.closed = False
        #: The last event handed to a connection: where a GET without Last-Event-ID starts.
        self.sent = 0
        #: The upstream framed this answer as SSE, so the client gets SSE too.
        self.sse = False
        self._cut_at: int | None = None
        #: A connection is reading this stream now.
        self.attached = False
        self._dropped = 0

    def push(self, data: str) -> None:
        """Append one event (a serialised JSON-RPC message)."""
        if self.closed:
            raise RuntimeError(f"stream {self.key} is closed")
        if len(self._events) == self._events.maxlen:
            self._dropped += 1
            if self._dropped == 1:
                # Once per stream: a GET stream that no client ever opens (polling clients
                # need none) would otherwise log a line for every task's every status.
                level = logging.WARNING if self._reader else logging.DEBUG
                log.log(
                    level,
                    "SSE stream %s dropped its oldest unread event (buffer full); later drops "
                    "on it are not logged",
                    self.key,
                )
        self._events.append((self._next, data))
        self._next += 1
        self._wake()

    def close(self) -> None:
        """No more events; readers finish once they have sent what is buffered."""
        self.closed = True
        self._wake()

    def want_sse(self) -> None:
        # No wake-up: the JSON window still waits for the answer, which then goes out as an
        # SSE response all at once (`sse.serve`); only events or the stream's end start one.
        self.sse = True

    def interrupt(self) -> None:
        """End the connection reading now (or the next one) after the events pushed so far.

        The upstream closed its stream at this point; what comes later goes only to the
        connection that resumes with a GET and Last-Event-ID, as it would without us.
        """
        self.sse = True
        self._cut_at = self._next - 1
        self._wake()

    def retract(self, seq: int) -> bool:
        """Take back event `seq` if no connection was handed it yet; True if taken back."""
        if seq <= self.sent:
            return False
        kept = [e for e in self._events if e[0] != seq]
        taken = len(kept) != len(self._events)
        self._events = collections.deque(kept, maxlen=self._events.maxlen)
        return taken

    @property
    def ever_read(self) -> bool:
        """A connection has read this stream at some time."""
        return self._reader > 0

    def first_event(self) -> str | None:
        return self._events[0][1] if self._events else None

    @property
    def pushed(self) -> int:
        return self._next - 1

    async def wait_changed(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()

    async def first_change(self, seconds: float) -> None:
        """Returns at the stream's first event, its close or its interruption, or after
        `seconds`, whichever comes first: the window in which a POST's answer may still go
        back whole, as plain JSON or (`sse`) as one SSE response. (One alarm and one future:
        this runs per request.)"""
        if self._next > 1 or self.closed or self._cut_at is not None:
            return
        loop = asyncio.get_running_loop()
        first = self._first = loop.create_future()
        alarm = timers.after(seconds, _resolve, first, loop=loop)
        try:
            await first
        finally:
            alarm.cancel()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        if self._first is not None:
            _resolve(self._first)
            self._first = None

    def event_id(self, seq: int) -> str:
        return f"{self.key}:{seq}"

    def take_rest(self, after: int) -> list[tuple[int, str]] | None:
        """Every event after `after` of a stream that is closed and has no cut waiting, handed
        out at once to a reader that ends with them, as `follow` would hand them; None for
        any other stream (follow it)."""
        if not self.closed or self._cut_at is not None:
            return None
        self._reader += 1
        self._wake()  # a previous reader sees it was replaced and ends
        rest = [event for event in self._events if event[0] > after]
        if rest:
            self.sent = rest[-1][0]
        return rest

    async def follow(self, after: int, idle: float) -> AsyncGenerator[tuple[int, str] | None, None]:
        """Events after `after`, then new ones as they come; None after `idle` quiet seconds.

        Ends when the stream is closed and drained, or when another reader takes over.
        """
        self._reader += 1
        me = self._reader
        self._wake()  # a previous reader sees it was replaced and ends
        self.attached = True
        try:
            async for item in self._follow(me, after, idle):
                yield item
        finally:
            if self._reader == me:
                self.attached = False

    async def _follow(
        self, me: int, after: int, idle: float
    ) -> AsyncIterator[tuple[int, str] | None]:
        while self._reader == me:
            cut = self._cut_at
            item = next(
                (e for e in self._events if e[0] > after and (cut is None or e[0] <= cut)), None
            )
            if item is not None:
                # Marked as handed out before it is written: from here on it cannot be
                # retracted to go to another stream instead (never delivered twice).
                after = self.sent = item[0]
                yield item
                continue
            if cut is not None:
                self._cut_at = None
                return
            if self.closed:
                return
            try:
                async with timers.deadline(idle):
                    await self.wait_changed()
            except TimeoutError:
                yield None


class Streams:
    """One session's streams: the GET stream, one per POST (the latest kept for resumption),
    and the stream of each task's open tasks/result call."""

    def __init__(self, capacity: int, tag: str) -> None:
        self._capacity = capacity
        self._tag = tag
        # Event ids must never repeat within a session, and a session outlives a restart of
        # the gateway: a random prefix per incarnation keeps old Last-Event-IDs from naming
        # new streams.
        self._prefix = secrets.token_hex(3)
        self._keys = itertools.count(1)
        #: The GET stream: what belongs to no request, and what outlives a request's stream.
        self.standalone = EventStream(f"{self._prefix}0", capacity)
        self._kept: collections.OrderedDict[str, EventStream] = collections.OrderedDict()
        self._results: dict[str, EventStream] = {}

    def new(self) -> EventStream:
        key = f"{self._prefix}{next(self._keys)}"
        stream = EventStream(key, self._capacity)
        self._kept[stream.key] = stream
        excess = len(self._kept) - _KEPT_STREAMS
        # The usual case first, without the scan: one over, and the oldest is closed.
        if excess == 1 and (oldest := next(iter(self._kept.values()))).closed:
            del self._kept[oldest.key]
        elif excess > 0:
            # The oldest closed ones go, also past streams still open: one stream open for
            # long (a tasks/result waiting on a long task) must not keep every later one.
            closed = (key for key, kept in self._kept.items() if kept.closed)
            for key in list(itertools.islice(closed, excess)):
                del self._kept[key]
        return stream

    def get(self, key: str) -> EventStream | None:
        return self.standalone if key == self.standalone.key else self._kept.get(key)

    def open_result(self, task_id: str) -> EventStream:
        """A new stream for a tasks/result call: the task's messages go there from now on."""
        stream = self.new()
        self._results[task_id] = stream
        return stream

    def close_result(self, task_id: str, stream: EventStream) -> None:
        stream.close()
        if self._results.get(task_id) is stream:
            del self._results[task_id]

    def of_task(self, task_id: str) -> EventStream:
        """Where a task's messages go: its open tasks/result stream, else the GET stream."""
        stream = self._results.get(task_id)
        if stream is not None and not stream.closed:
            return stream
        return self.standalone

    def writable(self, stream: EventStream) -> EventStream | None:
        """`stream`, else the GET stream, while open; None once the session is ending."""
        if not stream.closed:
            return stream
        return None if self.standalone.closed else self.standalone

    def push(self, stream: EventStream, message: jsonrpc.Message) -> None:
        """Send `message` on `stream`, else on the GET stream; dropped once both are closed."""
        target = self.writable(stream)
        if target is None:
            # Ended or shutting down: no client can read it any more. Upstream messages keep
            # coming for tasks that outlive their session (progress, logs, list_changed).
            log.debug("session %s: dropped %s", self._tag, type(message).__name__)
            return
        target.push(jsonrpc.dump(message))

    def close(self) -> None:
        self.standalone.close()
        for stream in self._kept.values():
            stream.close()
