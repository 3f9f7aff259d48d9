"""One upstream session the gateway holds for 2026-07-28 callers, and how it reaches their calls.

`HeldSession` initializes the upstream session on the caller's behalf, with the gateway's
`clientInfo` and the question capabilities the caller declared (`question_capabilities`), and
is the `Listener` of its client. A question the upstream asks goes to the one call of an
exclusive lease (its `Asker`) when the capabilities allow it; any other gets -32601 at once.
Progress notifications carry the token the gateway put on the call, so they reach their call
whichever kind of session it runs on; a log message goes to the call whose stream it came on,
or, with no stream to tell, to the session's only call. Lending sessions out, sharing them and
keeping them idle is the pool's (`held`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from gateway.aio import TaskSet
from gateway.protocol import jsonrpc
from gateway.protocol.errors import METHOD_NOT_FOUND, UpstreamError, UpstreamUnavailable
from gateway.protocol.versions import LATEST_PROTOCOL_VERSION
from gateway.route import Route
from gateway.upstream import Answer

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


class Asker(Protocol):
    """The call a held session's questions and progress belong to (`call.HeldCall`)."""

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
        forwarded: dict[str, str] = {}
        #: The latest values of the client headers this route forwards upstream.
        self.forwarded = forwarded
        self.last_used = time.monotonic()
        self.initialized: jsonrpc.JsonObject | None = None
        #: The one call of an exclusive lease: the upstream's questions are its.
        self.asker: Asker | None = None
        self._by_token: dict[str, Asker] = {}
        self._by_id: dict[jsonrpc.RequestId, Asker] = {}
        self._allowed = frozenset(QUESTION_CAPABILITIES[name] for name in capabilities)
        self._calls = 0
        #: Leases handed out and not given back (`HeldSessions`): a call waiting for the
        #: session to open holds one before it counts in `_calls`.
        self.leases = 0
        self._open_lock = asyncio.Lock()
        self._tasks = TaskSet(f"held session on {route.name}")
        # (The dict, not `self`: a closure over the session, kept by its upstream, was a cycle.)
        self.upstream = route.upstream.client(self, lambda: forwarded, principal)
        if not capabilities:
            # Nothing may be asked of such a caller, and its calls' progress and logs come on
            # their own streams: the upstream's GET stream would be one more exchange, and a
            # stream held open, for nothing (for an anonymous caller, whose every call has a
            # session of its own, a fifth of the call's CPU in front of FastMCP).
            self.upstream.quiet()

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
        return self._calls > 0 or self.leases > 0 or self.asker is not None

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
