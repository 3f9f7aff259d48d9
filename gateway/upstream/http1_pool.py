"""The kept-alive connections of `http1` to the origin of one upstream URL, and the POST."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping

from yarl import URL

from gateway.upstream.http1 import Connection
from gateway.upstream.http1_response import Http1Error, Http1Response

#: An idle connection is closed after this long: less than the 5 s after which uvicorn (the
#: Python SDK's server) and Node's http server (the TypeScript SDK's) close theirs. Longer,
#: and a POST sent as the upstream closes the connection fails its call, since a POST is
#: never sent twice; seen under load with the Python SDK's server as a member.
KEEPALIVE_SECONDS = 4.0
_KEPT_IDLE = 64


class Http1Pool:
    """Kept-alive connections to the origin of one URL, for POSTs to that URL."""

    def __init__(self, url: str, connect_timeout: float | None) -> None:
        parsed = URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"not an http(s) URL: {url}")
        self._host = parsed.host
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if parsed.scheme == "https" else None
        )
        host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
        default = parsed.port is None or parsed.is_default_port()
        self._host_header = host if default else f"{host}:{parsed.port}"
        self._target = parsed.raw_path_qs or "/"
        self._starts = {
            method: f"{method} {self._target} HTTP/1.1\r\nHost: {self._host_header}\r\n"
            "Accept-Encoding: identity\r\nContent-Length: "
            for method in ("POST", "DELETE")
        }
        #: Header lines already checked, by name and value: a session sends the same few on
        #: every POST.
        self._lines: dict[tuple[str, str], str] = {}
        self._connect_timeout = connect_timeout
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()
        self._sweeper: asyncio.TimerHandle | None = None

    def head(self, headers: Mapping[str, str], length: int, method: str = "POST") -> bytes:
        """The request head of a POST (or a DELETE) of `length` bytes with `headers`.

        Raises:
            Http1Error: a header name or value could end the head early (CR, LF or NUL).
        """
        lines = [self._starts[method], str(length), "\r\n"]
        checked = self._lines
        for item in headers.items():
            line = checked.get(item)
            if line is None:
                name, value = item
                if _unsafe(name) or _unsafe(value):
                    raise Http1Error(f"header {name[:40]!r} holds a line break, which HTTP forbids")
                if len(checked) >= _LINES_KEPT:
                    checked.clear()  # (values that change, such as tokens, must not pile up)
                line = checked[item] = f"{name}: {value}\r\n"
            lines.append(line)
        lines.append("\r\n")
        return "".join(lines).encode("latin-1", "strict")

    async def post(
        self, headers: Mapping[str, str], body: bytes, method: str = "POST"
    ) -> Http1Response:
        """Send a POST (or, with no body, a DELETE) and return its response once its head
        arrived; `async with` it, or close() it, so that its connection is given back or closed.

        Raises:
            Http1Error: no connection could be made, or it failed before the response head.
            TimeoutError: the connection was not made within the connect timeout.
        """
        try:
            data = self.head(headers, len(body), method) + body
        except UnicodeEncodeError as exc:
            raise Http1Error("a header holds a character HTTP/1.1 cannot carry") from exc
        connection = self._reuse() or await self._connect()
        head = connection.send(data)
        try:
            return await head
        except BaseException:
            if head.done() and not head.cancelled() and head.exception() is None:
                # Cancelled once the head was in: a response that has also ended gave its
                # connection back, which another request may be using already; one that has
                # not takes it with it, as any unfinished response does.
                head.result().close()
            elif connection.carries(head):
                # Cancelled or failed midway: nothing else may follow on it. (Cancelled before
                # its head, with the whole answer read before this resumed, it is no longer
                # this request's: another may be using it already.)
                connection.abandon()
            raise

    def _reuse(self) -> Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.open and connection.transport and not connection.transport.is_closing():
                return connection
        return None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: Connection(self),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                )
        except OSError as exc:
            raise Http1Error(f"cannot connect to {self._host_header}: {exc}") from exc
        self._all.add(connection)
        return connection

    def release(self, connection: Connection) -> None:
        """A connection whose response was read whole: kept for the next request."""
        if len(self._idle) >= _KEPT_IDLE:
            connection.abandon()
            return
        loop = asyncio.get_running_loop()
        connection.idle_since = loop.time()
        self._idle.append(connection)
        if self._sweeper is None:
            self._sweeper = loop.call_later(KEEPALIVE_SECONDS, self._sweep)

    def forget(self, connection: Connection) -> None:
        self._all.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)

    def _sweep(self) -> None:
        """Close connections idle for the keep-alive time; one timer for all of them."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - KEEPALIVE_SECONDS
        for connection in [c for c in self._idle if c.idle_since <= cutoff]:
            self._idle.remove(connection)
            connection.abandon()
        if self._idle:
            oldest = min(c.idle_since for c in self._idle)
            self._sweeper = loop.call_later(oldest + KEEPALIVE_SECONDS - loop.time(), self._sweep)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for connection in list(self._all):
            connection.abandon()
        self._idle.clear()
        self._all.clear()


_LINES_KEPT = 256


def _unsafe(text: str) -> bool:
    return "\r" in text or "\n" in text or "\0" in text
