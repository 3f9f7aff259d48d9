"""A lean HTTP/1.1 client for the busiest exchange upstream: the POST of one message.

Every relayed call and every task's call is one POST to a Streamable HTTP upstream. aiohttp's
client spends about 155 µs of CPU on such a request on the development machine (its request
and response objects, signals, timers, URL handling, cookie and redirect logic), where a plain
HTTP/1.1 exchange over a kept-alive connection takes about 57 µs (`docs/performance.md`). This
client does only what those POSTs need: kept-alive connections to one origin, a request with a
Content-Length, and a response read by llhttp (`httptools`) with a Content-Length, chunked or
until the connection closes, streamed to the caller (an SSE answer may last as long as the
call). It sends `Accept-Encoding: identity`, so no body comes compressed, and follows no
redirect: the transport hands a 3xx to aiohttp's client, which does. The GET stream, its
resumption and the DELETE stay on aiohttp: they are rare.

This module is one connection and its response; `http1_pool` keeps the connections and
sends the POST. A connection goes back to the pool only after a whole response was read from
it; a response abandoned midway (cancelled, too large) closes its connection. One whose
caller has what it needs before the body ends (the answer on an SSE stream) is left to end
for a moment (`finish_soon`): the SDK servers end an answer's stream just after it, and
closing at once cost a new connection for every call. Like aiohttp, a POST is never sent
twice: a kept-alive connection that the upstream closed at the moment it was reused fails
the call (`Http1Error`), as it would there.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Protocol, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.aio import timers

#: Reading pauses while this much of a response's body waits for its reader.
HIGH_WATER = 256 * 1024
#: A response head larger than this is refused (aiohttp's own limits come to about as much).
MAX_HEAD_BYTES = 64 * 1024
#: How long a body may take to end after `finish_soon` before its connection is closed rather
#: than kept: the SDK servers end an answer's SSE stream with the answer or just after it.
END_GRACE_SECONDS = 0.1


class Owner(Protocol):
    """What a connection tells the pool it belongs to (`http1_pool.Http1Pool`)."""

    def release(self, connection: Connection) -> None: ...

    def forget(self, connection: Connection) -> None: ...


class Http1Error(ConnectionError):
    """The exchange failed: no connection, the connection lost, or an unreadable response."""


class Http1Response:
    """One response: its status and headers at once, its body as it arrives."""

    def __init__(self, connection: Connection, status: int, headers: CIMultiDict[str]) -> None:
        self._connection: Connection | None = connection
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


class Connection(asyncio.Protocol):
    """One kept-alive connection: a request at a time, its response parsed as it comes."""

    def __init__(self, pool: Owner) -> None:
        self._pool = pool
        # Made by loop.create_connection, so on the running loop; kept, as each lookup of
        # the running loop is a getpid() system call on Python 3.11.
        self.loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self._head: asyncio.Future[Http1Response] | None = None
        self._response: Http1Response | None = None
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._head_bytes = 0
        self._until_close = False
        self._paused = False
        self.idle_since = 0.0
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (A stream transport, though uvloop's do not derive from asyncio.Transport.)
        self.transport = cast(asyncio.Transport, transport)
        self.open = True

    def send(self, data: bytes) -> asyncio.Future[Http1Response]:
        assert self.transport is not None
        self._head = self.loop.create_future()
        self._headers = CIMultiDict()
        self._head_bytes = 0
        self.transport.write(data)
        return self._head

    def carries(self, head: asyncio.Future[Http1Response]) -> bool:
        """Whether the request `send` returned `head` for is still this connection's: it has
        not been answered whole, which gave the connection back to the pool."""
        return self._head is head

    # -- httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise Http1Error(f"the upstream's response head is over {MAX_HEAD_BYTES} bytes")
        self._headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            self._headers = CIMultiDict()  # an interim answer (103): the real one follows
            return
        response = self._response = Http1Response(self, status, self._headers)
        # Without a length or chunks a body runs until the connection closes, except where
        # a status has none (RFC 9112 6.3).
        self._until_close = (
            response.content_length is None
            and "Transfer-Encoding" not in self._headers
            and status not in (204, 304)
        )
        if self._head is not None and not self._head.done():
            self._head.set_result(response)

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        response, self._response = self._response, None
        if response is None:
            return  # an interim answer's end
        keep = self._parser.should_keep_alive() and not self._until_close
        self._head = None  # answered whole: the connection is no longer its request's
        response._finish()
        if keep and self.open:
            # The read that paused it for a slow reader may have ended the response too: the
            # reader can no longer resume it, and the next POST on it would never be read.
            self.resume()
            self._pool.release(self)
        else:
            self.abandon()

    # -- asyncio's callbacks

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # A callback's own error arrives wrapped in the parser's.
            cause = exc.__context__
            error = (
                cause
                if isinstance(cause, Http1Error)
                else Http1Error(f"the upstream sent an invalid HTTP response: {exc}")
            )
            self._fail(error)
            self.abandon()

    def eof_received(self) -> bool:
        return False  # close: no request can follow on a connection the peer has ended

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._pool.forget(self)
        if self._response is not None and self._until_close and exc is None:
            response, self._response = self._response, None
            response._finish()  # a body without a length ends with its connection
            return
        self._fail(Http1Error("the upstream closed the connection before its answer ended"))

    # -- flow control and ending

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and self.open:
            self._paused = False
            self.transport.resume_reading()

    def abandon(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: Http1Error) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        response, self._response = self._response, None
        if response is not None:
            response._finish(error)
