"""The listening socket: aiohttp's server with the connection rules of a public-facing gateway.

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

`serve()` runs the app on this server until SIGTERM or SIGINT, and turns a port in use into
`ListenError` (a one-line message for the command to print).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web, web_protocol
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from gateway.config.settings import HttpConfig, ListenConfig
from gateway.observability.logs import printable

log = logging.getLogger(__name__)

_LINGER_SECONDS = 2.0
#: Connections asyncio accepts in one go, before any of them is counted here.
_BACKLOG = 128
#: Descriptors kept for the store, logs, upstream connections and stdio children's pipes.
_FD_RESERVE = 64
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


class ListenError(Exception):
    """The gateway cannot listen where it was told to; the message says what to change."""


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one (as servers do); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # a container may forbid it: the soft limit is what we have
    return int(soft)


class ConnectionGuard:
    """What all connections of one listener share: counts per address, and who may be evicted."""

    def __init__(self, http: HttpConfig, max_connections: int) -> None:
        self.http = http
        self.max_connections = max_connections
        self.per_address: dict[str, int] = {}
        #: Connections waiting for a request head, oldest first: the ones a newcomer may evict.
        self.waiting: OrderedDict[GuardedHandler, None] = OrderedDict()
        self.open = 0

    def admit(self, handler: GuardedHandler, address: str) -> bytes | None:
        """Count a new connection in; return the refusal to send instead, if it may not stay."""
        cap = self.http.max_connections_per_address
        if cap is not None and self.per_address.get(address, 0) >= cap:
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


class _LingeringTransport:
    """The connection's transport, whose close() may first linger (see `linger()`).

    Closing a socket with unread bytes makes the kernel send RST, and a client still sending
    a huge header would lose the 431 written just before; so after such an answer the
    gateway half-closes, reads and drops what still comes for `_LINGER_SECONDS`, then closes.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._linger = False
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    # Spelled out: these run for every response, and __getattr__ is the slow path.
    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        self._transport.writelines(chunks)

    def linger(self) -> None:
        self._linger = True

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._linger or not self._transport.can_write_eof():
            self._transport.close()
            return
        self._transport.write_eof()
        self._loop.call_later(_LINGER_SECONDS, self._transport.close)


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
        assert isinstance(transport, asyncio.Transport)
        self._lingering = _LingeringTransport(transport, self._loop)
        self.transport = cast(asyncio.Transport, self._lingering)
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        refusal = self._guard.admit(self, self._address)
        if refusal is not None:
            transport.write(refusal)
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
        if status >= 500 or not isinstance(exc, BadHttpMessage):
            return super().handle_error(request, status, exc, message)
        if isinstance(exc, LineTooLong) or "header" in (message or "").lower():
            status, text = 431, "Request Header Fields Too Large: a header over the limit"
            self._lingering.linger()  # the client may still be sending the rest of it
        else:
            text = "Bad Request: not a valid HTTP/1.1 request"
        log.info("bad HTTP request from %s: %s", self._address, printable(message or "", 120))
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


def guard_for(http: HttpConfig) -> ConnectionGuard:
    limit = raise_fd_limit()
    # Half the descriptors for clients, and never so many that one burst of accepts (which
    # asyncio takes before our count sees them) on top of them runs out: EMFILE would stop
    # the listener, /healthz included, for a second at a time.
    default = max(16, min(limit // 2, limit - _BACKLOG - _FD_RESERVE))
    return ConnectionGuard(http, http.max_connections or default)


async def start(
    app: web.Application, listen: ListenConfig, http: HttpConfig, handle_signals: bool = False
) -> web.AppRunner:
    """Bind, then start `app` on the guarded server; the caller cleans the runner up.

    Raises:
        ListenError: the address is in use or cannot be bound.
    """
    # Bound before the app starts: a second gateway on a taken port must stop before it
    # opens the store and recovers (fails) the first one's running tasks.
    sockets = _bind(listen)
    runner = GuardedRunner(
        app,
        guard_for(http),
        handle_signals=handle_signals,
        # A client that goes away cancels its handler at once (a dropped tasks/result stream
        # hands its question back for the next call), rather than at the next keep-alive write.
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=http.shutdown_grace_seconds,
        keepalive_timeout=75.0,
    )
    try:
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock, backlog=_BACKLOG).start()
    except BaseException:
        await runner.cleanup()
        for sock in sockets:
            sock.close()
        raise
    return runner


async def serve(
    app: web.Application,
    listen: ListenConfig,
    http: HttpConfig,
    on_started: Callable[[], None] = lambda: None,
) -> None:
    """Serve `app` until SIGTERM or SIGINT; then stop as aiohttp's run_app does.

    Raises:
        ListenError: the address is in use or cannot be bound.
    """
    runner = await start(app, listen, http, handle_signals=True)
    try:
        on_started()
        await asyncio.Event().wait()  # the signal handlers raise GracefulExit out of here
    finally:
        await runner.cleanup()


def _bind(listen: ListenConfig) -> list[socket.socket]:
    """Listening sockets for every address `listen.host` names (as asyncio would bind).

    Raises:
        ListenError: an address is in use or cannot be bound.
    """
    try:
        infos = socket.getaddrinfo(
            listen.host or None,
            listen.port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {listen.host}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ListenError(_bind_error(listen, exc)) from None
    return sockets


def _bind_error(listen: ListenConfig, exc: OSError) -> str:
    where = f"{listen.host}:{listen.port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is in use (another gateway?); "
            "choose another with --port or listen.port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {where}: no such local address (listen.host or --host)"
    if exc.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need privileges)"
    return f"cannot listen on {where}: {exc.strerror or exc}"


def run(app: web.Application, listen: ListenConfig, http: HttpConfig) -> None:
    """Run `serve()` on a new event loop until a signal stops it.

    Raises:
        ListenError: as `serve()`.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main = loop.create_task(serve(app, listen, http, on_started=lambda: _started(listen)))
    try:
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        if not main.done():
            main.cancel()
            try:
                loop.run_until_complete(main)
            except asyncio.CancelledError:
                pass
        _cancel_rest(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _started(listen: ListenConfig) -> None:
    log.info("listening on http://%s:%d", listen.host, listen.port)


def _cancel_rest(loop: asyncio.AbstractEventLoop) -> None:
    rest = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in rest:
        task.cancel()
    if rest:
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
