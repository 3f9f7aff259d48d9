"""The seam between the gateway and an upstream MCP server.

A `Transport` moves JSON-RPC messages; it knows nothing of ids or sessions. Whatever the
upstream sends is handed to a `Sink` together with the id of the request whose stream it
arrived on, when the transport can tell (Streamable HTTP can; stdio and HTTP+SSE cannot).
What cannot be read goes to the sink as `Unreadable`, and the transport reads on. The sink is
an `UpstreamClient` (client), which keeps the answers to its own requests and hands the rest
to its `Listener`: the session downstream that the upstream talks to.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gateway.protocol.jsonrpc import Answer, Message, Notification, Request, RequestId
from gateway.upstream import unreadable
from gateway.upstream.unreadable import Unreadable

if TYPE_CHECKING:
    from gateway.upstream.answers import CallLimit

log = logging.getLogger(__name__)

#: The headers every upstream HTTP request of a session carries, asked for each request
#: (forwarded client headers, static ones, and the identity, which may need fetching).
Headers = Callable[[], Awaitable[Mapping[str, str]]]


class Sink(Protocol):
    def on_message(self, message: Message, related: RequestId | None) -> None: ...

    def on_lost(self, reason: str) -> None: ...

    def on_unreadable(self, message: Unreadable) -> None:
        """A message that could not be read; the call it answered must not wait for it."""

    def on_stream(self, related: RequestId, interrupted: bool) -> None:
        """The upstream answers `related` on an SSE stream, or closed that stream early.

        An early close is SSE polling (the upstream ends the connection, not the stream, and
        expects a reconnect); the gateway mirrors both so clients see the upstream's framing.
        """


class Listener(Protocol):
    """Whoever the upstream talks to: the downstream session."""

    def on_server_message(self, message: Message, related: RequestId | None) -> None: ...

    def on_stream(self, related: RequestId, interrupted: bool) -> None: ...

    @property
    def busy(self) -> bool:
        """True while a relayed call or a task's call is registered, sent or not yet."""
        ...

    @property
    def listening(self) -> bool:
        """True while the client reads what the upstream sends on its own (the GET stream)."""
        ...


class UpstreamSession(Protocol):
    """One downstream session's way upstream: an `UpstreamClient` (client), or for a route
    of several members a `MemberSessions` (fanout) that is one to the session above."""

    protocol_version: str | None
    on_reestablished: Callable[[], None] | None
    may_reestablish: Callable[[], Awaitable[bool]] | None

    def next_id(self) -> str: ...

    @property
    def busy(self) -> bool: ...

    @property
    def session_id(self) -> str | None: ...

    async def initialize(self, request: Request) -> Answer: ...

    async def initialized(self, notification: Notification) -> None: ...

    def restore(self, initialize: Request, initialized: Notification | None) -> None: ...

    def adopt(
        self,
        initialize: Request,
        initialized: Notification | None,
        session_id: str,
        protocol_version: str,
    ) -> None: ...

    def keep_upstream_session(self) -> None: ...

    def quiet(self) -> None:
        """Open no stream for what the upstream sends unasked: no question can be put to the
        caller, and its call's own messages come on the call's stream."""

    async def stream_open(self) -> None: ...

    def call(
        self,
        request: Request,
        *,
        ready: bool = True,
        bounded: bool = True,
        limit: CallLimit | None = None,
    ) -> Coroutine[Any, Any, Answer]: ...

    async def notify(self, message: Notification | Answer) -> None: ...

    async def close(self) -> None: ...


_TRACE_FIELDS = ("traceparent", "tracestate")


def trace_context(message: Message) -> dict[str, str]:
    """The W3C trace context headers a request carries in `_meta` (none for other messages)."""
    if not isinstance(message, Request):
        return {}
    meta = message.meta
    return {k: meta[k] for k in _TRACE_FIELDS if isinstance(meta.get(k), str)}


class Transport(ABC):
    #: True when `send(request)` returns only after the answer has been handed to the sink
    #: (the answer travels on the request's own HTTP exchange).
    answers_inline = False
    #: The largest message taken from the upstream (the route's max_result_bytes).
    max_message_bytes = unreadable.MAX_LINE_BYTES
    #: With tracing on, HTTP transports send a request's `_meta` trace context (put there by
    #: the call's span) as the W3C headers too.
    trace_headers = False
    #: Once initialized, open the upstream's stream of what it sends unasked, where there is
    #: one to open (Streamable HTTP's GET stream); see `UpstreamSession.quiet`.
    listens = True

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    @abstractmethod
    async def start(self) -> None:
        """Connect or spawn. Raises UpstreamUnavailable."""

    @abstractmethod
    async def send(self, message: Message) -> None:
        """Deliver one message. Raises UpstreamError subclasses."""

    def _deliver(self, raw: bytes | str, source: str, broken: str | None = None) -> None:
        """Hand the sink one message that is not tied to a request's stream."""
        message = unreadable.read(raw, broken)
        if isinstance(message, Unreadable):
            log.warning("%s sent a message the gateway cannot read: %s", source, message)
            self.sink.on_unreadable(message)
        else:
            self.sink.on_message(message, None)

    def initialized(self, protocol_version: str) -> None:  # noqa: B027 - optional hook
        """The MCP handshake finished; HTTP transports start sending the version header."""

    def adopt(self, session_id: str, protocol_version: str) -> bool:
        """Carry on an upstream session that another process opened, without a handshake;
        False where the transport has no such thing (stdio, HTTP+SSE)."""
        return False

    def keep_session(self) -> None:  # noqa: B027 - optional hook
        """Closing from now on leaves the upstream's session open: another process may be
        carrying it on."""

    async def stream_open(self) -> None:  # noqa: B027 - optional hook
        """Returns once what the upstream sends unasked can reach the gateway (the GET
        stream of Streamable HTTP is open, or the upstream offers none)."""

    @abstractmethod
    async def close(self) -> None:
        """Release everything; must not raise."""

    def detach(self) -> None:
        """Closed for good: what a reader still hands on is dropped, and the sink (which holds
        this transport) is let go, so that the two are no cycle for the collector to find."""
        self.sink = DETACHED


class _Detached:
    """The sink, owner and listener of what has ended: every message dropped, never busy."""

    busy = False
    listening = False

    def on_message(self, message: Message, related: RequestId | None) -> None:
        pass

    def on_server_message(self, message: Message, related: RequestId | None) -> None:
        pass

    def on_stream(self, related: RequestId, interrupted: bool) -> None:
        pass

    def on_unreadable(self, message: Unreadable) -> None:
        pass

    def on_lost(self, reason: str) -> None:
        pass

    def on_stopped(self, reason: str) -> None:
        pass


DETACHED = _Detached()
