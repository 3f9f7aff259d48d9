"""aiohttp's server with the connection rules of a public-facing gateway.

aiohttp parses requests well but trusts connections: a client may take as long as it likes to
send a request head, one address may open as many connections as the file descriptor limit
allows, and a header over 8 KiB is answered as a bare 400. `GuardedHandler` (aiohttp's
per-connection protocol, extended) and `ConnectionGuard` (their shared bookkeeping) add:

* a deadline for each request head (`http.header_timeout_seconds`): a slow sender gets 408;
* a cap per client address (`http.max_connections_per_address`): beyond it, 429 and close;
* a cap in all (`http.max_connections`, by default half the descriptor limit): at the cap the
  oldest connection that is only waiting for a request head is closed to let the new one in,
  so a flood of idle or slow connections cannot keep /healthz or real clients out;
* 431 for header fields over aiohttp's limits, logged as one line, not a traceback.

`gateway.http.listen` binds the port and runs the app on this server.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from typing import Any, cast

from aiohttp import web, web_protocol
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from gateway.config import HttpConfig
from gateway.http import forwarded
from gateway.http.lingering import LingeringTransport
from gateway.observability.logs import printable

log = logging.getLogger(__name__)

#: What aiohttp's parsers say of a head over their limits (431); any other fault is a 400.
_TOO_BIG = ("overflow", "too many headers", "too large", "too long")
#: Where aiohttp's message begins to quote the request: `: b'...'`, `'...'`.
_QUOTED = re.compile(r"[:'\"]")
_TOO_MANY = (
    b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 52\r\n\r\n"
    b"too many open connections from your address; retry\n"
)
_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 46\r\n\r\n"
    b"the gateway is at its connection limit; retry\n"
)
_SLOW = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 53\r\n\r\n"
    b"the request head did not arrive in time; send faster\n"
)


class ConnectionGuard:
    """What all connections of one listener share: counts per address, and who may be evicted."""

    def __init__(self, http: HttpConfig, max_connections: int) -> None:
        self.http = http
        self.max_connections = max_connections
        self.per_address: dict[str, int] = {}
        #: A reverse proxy's connections carry every client behind it: not capped per address.
        self._proxies = http.proxy_networks
        #: Connections waiting for a request head, oldest first: the ones a newcomer may evict.
        self.waiting: OrderedDict[GuardedHandler, None] = OrderedDict()
        self.open = 0

    def admit(self, handler: GuardedHandler, address: str) -> bytes | None:
        """Count a new connection in; return the refusal to send instead, if it may not stay."""
        cap = self.http.max_connections_per_address
        if (
            cap is not None
            and self.per_address.get(address, 0) >= cap
            and not forwarded.trusted(address, self._proxies)
        ):
            log.warning("connection from %s refused: it holds %d already", address, cap)
            return _TOO_MANY
        if self.open >= self.max_connections:
            if not self.waiting:
                log.warning("connection from %s refused: %d open", address, self.open)
                return _FULL
            oldest = next(iter(self.waiting))
            self.waiting.pop(oldest)
            oldest.evict()
        self.per_address[address] = self.per_address.get(address, 0) + 1
        self.open += 1
        return None

    def release(self, handler: GuardedHandler, address: str) -> None:
        self.waiting.pop(handler, None)
        self.open -= 1
        left = self.per_address.get(address, 1) - 1
        if left > 0:
            self.per_address[address] = left
        else:
            self.per_address.pop(address, None)


class GuardedHandler(web_protocol.RequestHandler):
    """aiohttp's connection protocol with a head deadline, caps, and quiet client errors.

    It reads two of aiohttp's attributes (`_request_count`, `_waiter`) to tell a request
    head from body bytes; the guard's tests fail if a later aiohttp changes them.
    """

    def __init__(self, manager: web.Server, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._address = ""
        self._counted = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # A stream transport, though uvloop's do not derive from asyncio.Transport.
        stream = cast(asyncio.Transport, transport)
        self._lingering = LingeringTransport(stream, self._loop)
        self.transport = self._lingering
        peer = stream.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        refusal = self._guard.admit(self, self._address)
        if refusal is not None:
            stream.write(refusal)
            self.force_close()  # closes the transport once the refusal is flushed
            return
        self._counted = True
        self._await_head()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_head_timer()
        if self._counted:
            self._counted = False
            self._guard.release(self, self._address)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            # A whole head arrived: the request is busy until its response is logged.
            self._stop_head_timer()
            self._guard.waiting.pop(self, None)
        elif self._head_timer is not None:
            self._head_bytes = True
        elif self._waiter is not None and not self._waiter.done():
            self._await_head()  # idle keep-alive connection, a new head has begun
            self._head_bytes = True

    def log_access(self, request: Any, response: Any, time: float | None) -> None:
        super().log_access(request, response, time)
        if not response.keep_alive and not request.content.is_eof():
            # An answer that said `Connection: close` before the body came (a client waiting
            # for its `100 Continue`, refused): aiohttp would wait 10 s for that body. What
            # may still come drains while the close lingers.
            self._lingering.linger()
            self.force_close()
        # The response is written: the connection waits for its next head, or goes.
        if self._counted and not self._force_close:
            self._guard.waiting[self] = None

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, ConnectionResetError):
            # The client left before the `100 Continue` its `Expect` asked for (written by
            # `request_body.read_body`, or by aiohttp before the admin API's middleware):
            # nobody to answer, and no defect to log.
            gone = web.Response(status=400)
            gone.force_close()
            return gone
        if status >= 500 or not isinstance(exc, BadHttpMessage):
            return super().handle_error(request, status, exc, message)
        if isinstance(exc, LineTooLong) or any(w in (message or "").lower() for w in _TOO_BIG):
            status, text = 431, "Request Header Fields Too Large: a header over the limit"
            self._lingering.linger()  # the client may still be sending the rest of it
        else:
            text = "Bad Request: not a valid HTTP/1.1 request"
        log.info("bad HTTP request from %s: %s", self._address, _reason(message or ""))
        response = web.Response(status=status, text=text + "\n")
        response.force_close()
        return response

    def evict(self) -> None:
        """Close this connection (it only waits for a request head) to make room."""
        log.info("closing an idle connection from %s: at the connection limit", self._address)
        self._stop_head_timer()
        self.force_close()

    def _await_head(self) -> None:
        self._guard.waiting[self] = None
        self._guard.waiting.move_to_end(self)
        self._head_bytes = False
        self._head_timer = self._loop.call_later(
            self._guard.http.header_timeout_seconds, self._head_too_slow
        )

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport is None:
            return
        if self._head_bytes:  # a head had begun: say why; a silent connection just goes
            log.info("request head from %s too slow: closing the connection", self._address)
            self.transport.write(_SLOW)
        self.force_close()


def _reason(message: str) -> str:
    """aiohttp's complaint without the bytes it quotes: they may be a header's value (an
    `Authorization` over the limit, a cookie) or a URL's query, which logs must not hold."""
    return printable(_QUOTED.split(message, maxsplit=1)[0].strip(), 120)


class _GuardedServer(web.Server):
    def __init__(self, guard: ConnectionGuard, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard

    def __call__(self) -> web_protocol.RequestHandler:
        return GuardedHandler(self, self._guard, loop=self._loop, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """An AppRunner whose connections are `GuardedHandler`s."""

    def __init__(self, app: web.Application, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._guard = guard

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # starts the app; its settings are reused below
        # self._kwargs holds what this runner was given (handler_cancellation included).
        return _GuardedServer(
            self._guard,
            plain.request_handler,
            request_factory=plain.request_factory,
            loop=asyncio.get_running_loop(),
            **self._kwargs,
        )
