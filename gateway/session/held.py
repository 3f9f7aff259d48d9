"""Upstream sessions the gateway holds for 2026-07-28 callers, who bring no session of their own.

A legacy upstream needs a session: the gateway opens one on the caller's behalf, and keeps
it for the next request of the same caller. A pool entry is keyed by route and principal;
anonymous callers cannot be told apart, so each of their requests gets a session of its own,
closed after the answer. The upstream is initialized with no client capabilities: until the
gateway bridges questions into 2026-07-28 `input_required` results, nothing could answer an
elicitation, sampling or roots request, so none is invited, and several calls may share a
session. A question asked anyway gets -32601 at once; notifications are dropped (the modern
path answers as JSON, with no stream to put them on). Entries idle for
`sessions.idle_timeout_seconds` are closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.aio import TaskSet
from gateway.config import SessionsConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import METHOD_NOT_FOUND, UpstreamError, UpstreamUnavailable
from gateway.protocol.versions import LATEST_PROTOCOL_VERSION
from gateway.route import Route
from gateway.upstream import Answer, UpstreamClient

log = logging.getLogger(__name__)

#: Who the gateway says it is when it initializes an upstream for a 2026-07-28 caller.
CLIENT_INFO = {"name": "mcp-task-gateway", "version": "2026-07-28 front end"}


class HeldSession:
    """One upstream session opened for 2026-07-28 callers (the `Listener` of its client)."""

    def __init__(self, route: Route, principal: str | None) -> None:
        self.route = route
        #: The latest values of the client headers this route forwards upstream.
        self.forwarded: dict[str, str] = {}
        self.last_used = time.monotonic()
        self.initialized: jsonrpc.JsonObject | None = None
        self._calls = 0
        self._open_lock = asyncio.Lock()
        self._tasks = TaskSet(f"held session on {route.name}")
        self.upstream = UpstreamClient(
            lambda sink: route.upstream.transport(sink, lambda: self.forwarded, principal),
            route.upstream.config,
            self,
        )

    # Listener: what the upstream sends on its own.
    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        if isinstance(message, jsonrpc.Request):
            refusal = jsonrpc.error_response(
                message.id,
                METHOD_NOT_FOUND,
                f"{message.method} is not supported: the client declared no such capability",
            )
            self._tasks.spawn(self._answer(refusal), name="refuse upstream request")

    async def _answer(self, refusal: jsonrpc.ErrorResponse) -> None:
        try:
            await self.upstream.notify(refusal)
        except UpstreamError as exc:
            log.warning("route %s: could not refuse an upstream request: %s", self.route.name, exc)

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        pass

    @property
    def busy(self) -> bool:
        return self._calls > 0

    @property
    def listening(self) -> bool:
        return False

    async def open(self) -> jsonrpc.JsonObject:
        """The upstream's initialize result, initializing it first if need be.

        Raises:
            UpstreamError: the upstream could not be reached or refused the handshake.
        """
        async with self._open_lock:
            if self.initialized is None:
                init = jsonrpc.Request(
                    id=0,
                    method="initialize",
                    params={
                        "protocolVersion": LATEST_PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": CLIENT_INFO,
                    },
                )
                answer = await self.upstream.initialize(init)
                if isinstance(answer, jsonrpc.ErrorResponse):
                    raise UpstreamUnavailable(
                        f"the upstream refused to initialize: {answer.error.message}"
                    )
                await self.upstream.initialized(
                    jsonrpc.Notification(method="notifications/initialized")
                )
                self.initialized = answer.result
            return self.initialized

    async def call(self, request: jsonrpc.Request) -> Answer:
        """Send one request upstream under an id of ours; the answer has the caller's id.

        Raises:
            UpstreamError: no answer could be had.
        """
        self._calls += 1
        try:
            await self.open()
            answer = await self.upstream.call(jsonrpc.with_id(request, self.upstream.next_id()))
        finally:
            self._calls -= 1
            self.last_used = time.monotonic()
        return jsonrpc.with_id(answer, request.id)

    async def close(self) -> None:
        await self._tasks.close()
        await self.upstream.close()


class HeldSessions:
    """The pool: one held session per route and principal, none shared by anonymous callers."""

    def __init__(self, config: SessionsConfig) -> None:
        self._idle_seconds = config.idle_timeout_seconds
        self._pool: dict[tuple[str, str], HeldSession] = {}

    @asynccontextmanager
    async def session(
        self, route: Route, principal: str | None, forwarded: dict[str, str]
    ) -> AsyncIterator[HeldSession]:
        """The caller's held session for the length of one request."""
        await self._close_idle()
        if principal is None:
            held = HeldSession(route, None)
            held.forwarded.update(forwarded)
            try:
                yield held
            finally:
                await held.close()
            return
        key = (route.name, principal)
        held = self._pool.get(key) or self._pool.setdefault(key, HeldSession(route, principal))
        held.forwarded.update(forwarded)
        try:
            yield held
        except BaseException:
            if held.initialized is None and self._pool.get(key) is held:
                del self._pool[key]  # never opened: the next request starts afresh
                await held.close()
            raise

    async def _close_idle(self) -> None:
        now = time.monotonic()
        idle = [
            key
            for key, held in self._pool.items()
            if not held.busy and now - held.last_used > self._idle_seconds
        ]
        for key in idle:
            await self._pool.pop(key).close()

    async def close(self) -> None:
        held, self._pool = list(self._pool.values()), {}
        for entry in held:
            await entry.close()
