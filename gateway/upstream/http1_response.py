"""The response an `http1` connection reads: its status and headers at once, its body
streamed to the caller as it arrives, and `Http1Error`, which the exchange fails with.

Reading pauses while `HIGH_WATER` of the body waits for its reader. Whether the connection is
kept is decided here, as the caller lets go of the response (`close`, `finish_soon`; see
`http1`). A response knows its connection only as a `Carrier`, as a connection knows its pool
only as an `Owner`: neither module imports the one that uses it.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Protocol

from multidict import CIMultiDict, CIMultiDictProxy

from gateway.aio import timers

#: Reading pauses while this much of a response's body waits for its reader.
HIGH_WATER = 256 * 1024
#: How long a body may take to end after `finish_soon` before its connection is closed rather
#: than kept: the SDK servers end an answer's SSE stream with the answer or just after it.
END_GRACE_SECONDS = 0.1


class Carrier(Protocol):
    """What a response asks of the connection that carries it (`http1.Connection`)."""

    loop: asyncio.AbstractEventLoop

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def abandon(self) -> None: ...


class Http1Error(ConnectionError):
    """The exchange failed: no connection, the connection lost, or an unreadable response."""


class Http1Response:
    """One response: its status and headers at once, its body as it arrives."""

    def __init__(self, connection: Carrier, status: int, headers: CIMultiDict[str]) -> None:
        self._connection: Carrier | None = connection
        self.status = status
        self.headers = CIMultiDictProxy(headers)
        length = headers.get("Content-Length")
        self.content_length = int(length) if length is not None and length.isdigit() else None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._complete = False
        self._error: Http1Error | None = None
        #: Set by `finish_soon`: the connection is closed when it goes off, unless the body
        #: ended before; nobody reads what still comes.
        self._lingering: timers.Alarm | None = None

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body, chunk by chunk as it arrives. Raises Http1Error if it is cut short."""
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._connection is not None and self._buffered < HIGH_WATER:
                    self._connection.resume()
                yield chunk
            if self._error is not None:
                raise self._error
            if self._complete:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def whole(self) -> bytes | None:
        """The whole body if it has all arrived and nothing has read any of it, else None."""
        if not self._complete or self._error is not None:
            return None
        chunks, self._chunks = self._chunks, collections.deque()
        self._buffered = 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    def close(self) -> None:
        """Done with it, read whole or not: an unfinished response takes its connection
        (after `finish_soon`, only once that has given up waiting)."""
        if self._lingering is None:
            self._give_up()

    def finish_soon(self) -> None:
        """Done with it before its body ended: the connection goes back to the pool if the
        body ends within `END_GRACE_SECONDS`, and is closed otherwise."""
        connection = self._connection
        if connection is None or self._complete or self._lingering is not None:
            self.close()
            return
        self._chunks.clear()
        self._buffered = 0
        connection.resume()
        self._lingering = timers.after(END_GRACE_SECONDS, self._give_up, loop=connection.loop)

    def _give_up(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not self._complete:
            connection.abandon()

    # -- fed by the connection

    def _feed(self, chunk: bytes) -> None:
        if self._lingering is not None:
            # Read to find the body's end, and dropped; an upstream that keeps sending after
            # the answer gets as much as a reader may leave unread, then its connection goes.
            self._buffered += len(chunk)
            if self._buffered > HIGH_WATER:
                self._give_up()
            return
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered >= HIGH_WATER and self._connection is not None:
            self._connection.pause()
        self._wake()

    def _finish(self, error: Http1Error | None = None) -> None:
        if error is None:
            self._complete = True
        else:
            self._error = error
        self._connection = None  # given back to the pool, or being closed
        if self._lingering is not None:
            self._lingering.cancel()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def __aenter__(self) -> Http1Response:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
