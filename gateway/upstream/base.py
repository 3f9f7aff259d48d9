"""The seam between the gateway and an upstream MCP server.

A `Transport` moves JSON-RPC messages; it knows nothing of ids or sessions. Whatever the
upstream sends is handed to a `Sink` together with the id of the request whose stream it
arrived on, when the transport can tell (Streamable HTTP can; stdio and HTTP+SSE cannot).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

from ..jsonrpc import Message, RequestId


class Sink(Protocol):
    def on_message(self, message: Message, related: RequestId | None) -> None: ...

    def on_lost(self, reason: str) -> None: ...

    def on_stream(self, related: RequestId, interrupted: bool) -> None:
        """The upstream answers `related` on an SSE stream, or closed that stream early.

        An early close is SSE polling (the upstream ends the connection, not the stream, and
        expects a reconnect); the gateway mirrors both so clients see the upstream's framing.
        """


class Transport(ABC):
    #: True when `send(request)` returns only after the answer has been handed to the sink
    #: (the answer travels on the request's own HTTP exchange).
    answers_inline = False

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    @abstractmethod
    async def start(self) -> None:
        """Connect or spawn. Raises UpstreamUnavailable."""

    @abstractmethod
    async def send(self, message: Message) -> None:
        """Deliver one message. Raises UpstreamError subclasses."""

    def initialized(self, protocol_version: str) -> None:  # noqa: B027 - optional hook
        """The MCP handshake finished; HTTP transports start sending the version header."""

    @abstractmethod
    async def close(self) -> None:
        """Release everything; must not raise."""
