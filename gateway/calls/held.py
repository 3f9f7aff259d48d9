"""Upstream sessions the gateway holds for 2026-07-28 callers, who bring no session of their own.

A legacy upstream needs a session: the gateway opens one on the caller's behalf, initialized
with the question capabilities (elicitation, sampling, roots) the caller declared on its
request, and lends it out per call (`HeldSessions.lease`).

A legacy session cannot always say which call a question belongs to (stdio and HTTP+SSE
upstreams have no per-request stream), so a session that may be asked questions serves one
call at a time: such a lease is exclusive, and its session goes back to an idle list keyed by
route, principal and capabilities when the call ends. A caller that declared no question
capability invites none: its calls share one session per route and principal, and a question
the upstream asks anyway gets -32601 at once. Anonymous callers cannot be told apart, so they
never share: each call gets a session of its own, closed when the call ends. Sessions idle for
`sessions.idle_timeout_seconds` are closed.

Progress notifications carry the token the gateway put on the call, so they reach their call
whichever kind of session it runs on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Protocol

from gateway.aio import TaskSet
from gateway.config import SessionsConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import METHOD_NOT_FOUND, UpstreamError, UpstreamUnavailable
from gateway.protocol.versions import LATEST_PROTOCOL_VERSION
from gateway.route import Route
from gateway.upstream import Answer, UpstreamClient, UpstreamRoute

log = logging.getLogger(__name__)

#: How long opening a session that may be asked questions waits for the upstream's GET stream.
_LISTEN_WAIT_SECONDS = 5.0

#: Who the gateway says it is when it initializes an upstream for a 2026-07-28 caller.
CLIENT_INFO = {"name": "mcp-task-gateway", "version": "2026-07-28 front end"}
#: The client capabilities that invite the upstream's questions, and the methods they allow.
QUESTION_CAPABILITIES = {
    "elicitation": "elicitation/create",
    "sampling": "sampling/createMessage",
    "roots": "roots/list",
}


def question_capabilities(declared: jsonrpc.JsonObject) -> jsonrpc.JsonObject:
    """The part of a caller's declared capabilities the upstream is initialized with."""
    return {
        name: value
        for name in QUESTION_CAPABILITIES
        if isinstance(value := declared.get(name), dict)
    }


#: Where an exclusive session waits for its next call: upstream, principal, capabilities (JSON).
IdleKey = tuple[UpstreamRoute, str, str]


class Asker(Protocol):
    """The call a held session's questions and progress belong to (`call.ModernCall`)."""

    def asked(self, request: jsonrpc.Request) -> None: ...

    def withdrawn(self, upstream_id: jsonrpc.RequestId) -> None: ...

    def progress(self, params: jsonrpc.JsonObject) -> None: ...

    def logged(self, params: jsonrpc.JsonObject) -> None: ...


class HeldSession:
    """One upstream session opened for 2026-07-28 callers (the `Listener` of its client)."""

    def __init__(
        self, route: Route, principal: str | None, capabilities: jsonrpc.JsonObject
    ) -> None:
        self.route = route
        self.capabilities = capabilities
        #: The latest values of the client headers this route forwards upstream.
        self.forwarded: dict[str, str] = {}
        self.last_used = time.monotonic()
        self.initialized: jsonrpc.JsonObject | None = None
        #: The one call of an exclusive lease: the upstream's questions are its.
        self.asker: Asker | None = None
        self._by_token: dict[str, Asker] = {}
        self._by_id: dict[jsonrpc.RequestId, Asker] = {}
        self._allowed = frozenset(QUESTION_CAPABILITIES[name] for name in capabilities)
        self._calls = 0
        self._open_lock = asyncio.Lock()
        self._tasks = TaskSet(f"held session on {route.name}")
        self.upstream = UpstreamClient(
            lambda sink: route.upstream.transport(sink, lambda: self.forwarded, principal),
            route.upstream.config,
            self,
            route.upstream.spans,
        )

    # Listener: what the upstream sends on its own.
    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        if isinstance(message, jsonrpc.Request):
            if self.asker is not None and message.method in self._allowed:
                self.asker.asked(message)
                return
            refusal = jsonrpc.error_response(
                message.id,
                METHOD_NOT_FOUND,
                f"{message.method} is not supported: the client declared no such capability",
            )
            self._tasks.spawn(self._answer(refusal), name="refuse upstream request")
        elif isinstance(message, jsonrpc.Notification):
            if message.method == "notifications/progress":
                token = jsonrpc.param(message, "progressToken")
                asker = self._by_token.get(token) if isinstance(token, str) else None
                if asker is not None:
                    asker.progress(message.params or {})
            elif message.method == "notifications/message":
                asker = self._log_owner(related)
                if asker is not None:
                    asker.logged(message.params or {})
            elif message.method == "notifications/cancelled" and self.asker is not None:
                withdrawn = jsonrpc.param(message, "requestId")
                if jsonrpc.is_request_id(withdrawn):
                    self.asker.withdrawn(withdrawn)

    async def _answer(self, refusal: jsonrpc.ErrorResponse) -> None:
        try:
            await self.upstream.notify(refusal)
        except UpstreamError as exc:
            log.warning("route %s: could not refuse an upstream request: %s", self.route.name, exc)

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        pass

    @property
    def busy(self) -> bool:
        return self._calls > 0 or self.asker is not None

    @property
    def listening(self) -> bool:
        return False

    def follow(self, token: str, request_id: jsonrpc.RequestId, asker: Asker) -> None:
        """Progress under `token`, and what comes on the stream of `request_id`, is
        `asker`'s until `unfollow`."""
        self._by_token[token] = asker
        self._by_id[request_id] = asker

    def unfollow(self, token: str, request_id: jsonrpc.RequestId) -> None:
        self._by_token.pop(token, None)
        self._by_id.pop(request_id, None)

    def _log_owner(self, related: jsonrpc.RequestId | None) -> Asker | None:
        """Whose a log message is: the call whose stream it came on, or with no stream to
        tell (stdio, HTTP+SSE), the session's only call, if it has just one."""
        if related is not None:
            return self._by_id.get(related)
        callers = set(self._by_id.values())
        return callers.pop() if len(callers) == 1 else None

    async def open(self) -> jsonrpc.JsonObject:
        """The upstream's initialize result, initializing it first if need be.

        Raises:
            UpstreamError: the upstream could not be reached or refused the handshake.
        """
        async with self._open_lock:
            if self.initialized is None:
                init = jsonrpc.Request(
                    jsonrpc="2.0",
                    id=0,
                    method="initialize",
                    params={
                        "protocolVersion": LATEST_PROTOCOL_VERSION,
                        "capabilities": self.capabilities,
                        "clientInfo": CLIENT_INFO,
                    },
                )
                answer = await self.upstream.initialize(init)
                if isinstance(answer, jsonrpc.ErrorResponse):
                    raise UpstreamUnavailable(
                        f"the upstream refused to initialize: {answer.error.message}"
                    )
                await self.upstream.initialized(
                    jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized")
                )
                if self.capabilities:
                    # A question asked without naming its call travels on the upstream's GET
                    # stream, which is opened in the background: a call sent before it is
                    # open could ask into the void and wait for ever.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(_LISTEN_WAIT_SECONDS):
                            await self.upstream.stream_open()
                self.initialized = answer.result
            return self.initialized

    async def call(self, request: jsonrpc.Request, *, bounded: bool = True) -> Answer:
        """Send one request upstream under an id of ours; the answer has the caller's id.

        Raises:
            UpstreamError: no answer could be had.
        """
        self._calls += 1
        try:
            await self.open()
            upstream_id = self.upstream.next_id()
            answer = await self.upstream.call(
                jsonrpc.with_id(request, upstream_id), bounded=bounded
            )
        finally:
            self._calls -= 1
            self.last_used = time.monotonic()
        return jsonrpc.with_id(answer, request.id)

    async def close(self) -> None:
        await self._tasks.close()
        await self.upstream.close()


class Lease:
    """One call's use of a held session; `release()` hands it back (exactly once)."""

    def __init__(self, pool: HeldSessions, held: HeldSession, key: IdleKey | None) -> None:
        self.held = held
        self._pool = pool
        #: The idle list an exclusive session goes back to; None: shared, or never pooled.
        self._key = key
        self._released = False

    async def release(self, reusable: bool = True) -> None:
        """Hand the session back; `reusable=False` closes an exclusive one instead (its
        call was abandoned, so the upstream may still hold questions of it)."""
        if self._released:
            return
        self._released = True
        self.held.asker = None
        self.held.last_used = time.monotonic()
        await self._pool.give_back(self.held, self._key, reusable)


class HeldSessions:
    """The pool: shared sessions per route and principal, exclusive ones kept idle for reuse.

    Keyed by the route's upstream (`Route.upstream`), not its name: once a reload changes a
    route's upstream (its URL, a rotated header), new calls get sessions of the new one, and
    those of the old one are closed once idle, as any.
    """

    def __init__(self, config: SessionsConfig) -> None:
        self._idle_seconds = config.idle_timeout_seconds
        self._shared: dict[tuple[UpstreamRoute, str], HeldSession] = {}
        self._idle: dict[IdleKey, list[HeldSession]] = {}
        self._anonymous: set[HeldSession] = set()
        self._in_use: set[HeldSession] = set()

    async def lease(
        self,
        route: Route,
        principal: str | None,
        capabilities: jsonrpc.JsonObject,
        forwarded: dict[str, str],
    ) -> Lease:
        """A session for one call of the caller; exclusive when it may be asked questions
        (`capabilities` non-empty) or the caller is anonymous."""
        await self._close_idle()
        if principal is None:
            held = HeldSession(route, None, capabilities)
            self._anonymous.add(held)
            lease = Lease(self, held, None)
        elif capabilities:
            key = (route.upstream, principal, json.dumps(capabilities, sort_keys=True))
            idle = self._idle.get(key)
            held = idle.pop() if idle else HeldSession(route, principal, capabilities)
            self._in_use.add(held)
            lease = Lease(self, held, key)
        else:
            shared = (route.upstream, principal)
            held = self._shared.get(shared) or self._shared.setdefault(
                shared, HeldSession(route, principal, {})
            )
            lease = Lease(self, held, None)
        held.forwarded.update(forwarded)
        return lease

    async def give_back(self, held: HeldSession, key: IdleKey | None, reusable: bool) -> None:
        # A session leaves its set only once closed or pooled, so that a release cut short
        # (a cancelled run at shutdown) still leaves it to `close()`.
        if held in self._anonymous:
            await held.close()
            self._anonymous.discard(held)
        elif key is not None:
            if reusable and held.initialized is not None:
                self._idle.setdefault(key, []).append(held)
            else:
                await held.close()
            self._in_use.discard(held)
        elif held.initialized is None and not held.busy:
            # A shared session that never opened: the next request starts afresh.
            for shared, entry in list(self._shared.items()):
                if entry is held:
                    await held.close()
                    # Two releases of it may meet here (each awaited the close): one takes it out.
                    if self._shared.get(shared) is held:
                        del self._shared[shared]

    async def _close_idle(self) -> None:
        deadline = time.monotonic() - self._idle_seconds
        for shared, held in list(self._shared.items()):
            if not held.busy and held.last_used < deadline:
                del self._shared[shared]
                await held.close()
        for key, idle in list(self._idle.items()):
            stale = [held for held in idle if held.last_used < deadline]
            for held in stale:
                idle.remove(held)
                await held.close()
            if not idle:
                del self._idle[key]

    async def close(self) -> None:
        every = [*self._shared.values(), *self._anonymous, *self._in_use]
        every += [held for idle in self._idle.values() for held in idle]
        self._shared, self._idle, self._anonymous, self._in_use = {}, {}, set(), set()
        for held in every:
            await held.close()
