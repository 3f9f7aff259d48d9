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

This module is one connection; `http1_response` is the response read from it, and
`http1_pool` keeps the connections and sends the POST. A connection goes back to the pool
only after a whole response was read from it; a response abandoned midway (cancelled, too
large) closes its connection. One whose caller has what it needs before the body ends (the
answer on an SSE stream) is left to end for a moment (`finish_soon`): the SDK servers end an
answer's stream just after it, and closing at once cost a new connection for every call.
Like aiohttp, a POST is never sent twice: a kept-alive connection that the upstream closed at
the moment it was reused fails the call (`Http1Error`), as it would there.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

import httptools
from multidict import CIMultiDict

from gateway.upstream.http1_response import Http1Error, Http1Response

#: A response head larger than this is refused (aiohttp's own limits come to about as much).
MAX_HEAD_BYTES = 64 * 1024


class Owner(Protocol):
    """What a connection tells the pool it belongs to (`http1_pool.Http1Pool`)."""

    def release(self, connection: Connection) -> None: ...

    def forget(self, connection: Connection) -> None: ...


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
