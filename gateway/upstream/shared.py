"""`UpstreamRoute`: what a route's client sessions share upstream, for one upstream (a route's
own, or one member's of a route of several): the HTTP connection pools or the stdio children's
cap, and the `identity` that tells an HTTP upstream who calls. It makes each session's
transport. `members.MemberRoutes` holds one per member and answers as one does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import aiohttp

from gateway.config import MemberConfig, RouteConfig, UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import GatewayError
from gateway.protocol.versions import LATEST_PROTOCOL_VERSION
from gateway.upstream.base import Listener, Transport
from gateway.upstream.child_slots import ChildSlots
from gateway.upstream.client import UpstreamClient
from gateway.upstream.generation import ModernWire
from gateway.upstream.http1_pool import KEEPALIVE_SECONDS, Http1Pool
from gateway.upstream.identity import identity_for
from gateway.upstream.legacy_sse import SseTransport
from gateway.upstream.native import POST_HEADERS
from gateway.upstream.stdio import ChildOwner, StdioTransport
from gateway.upstream.streamable_http import StreamableHttpTransport

if TYPE_CHECKING:
    from gateway.observability.traces import Tracing, UpstreamSpans


class UpstreamRoute:
    """What a route's sessions share upstream: an HTTP connection pool or the child cap."""

    def __init__(
        self, route: RouteConfig, place: str, config: UpstreamConfig | None = None
    ) -> None:
        """The upstream `config` of `route` (a member's), by default its one upstream; the
        file writes the route at `place` (`routes[2]`)."""
        config = config or route.single
        self.config = config
        self.name = route.name
        where = f"{route.name}/{config.name}" if isinstance(config, MemberConfig) else route.name
        self._below = (
            "upstream" if route.upstreams is None else f"upstreams[{route.upstreams.index(config)}]"
        )
        #: Where the file writes this upstream (`routes[2].upstream`), as messages name it.
        self.key = f"{place}.{self._below}"
        self.max_result_bytes = route.max_result_bytes
        self.slots = ChildSlots(where, config.max_children)
        self._http: aiohttp.ClientSession | None = None
        self._pool: Http1Pool | None = None
        #: Built now, so an unusable signing key stops start-up.
        self.identity = identity_for(where, config, self._client, lambda: f"{self.key}.identity")
        #: With tracing on: the span each call gets (its context goes in `_meta` and headers).
        self.spans: UpstreamSpans | None = None
        #: The wire 2026-07-28 callers reach the upstream on (`upstream.modern`).
        self.wire = ModernWire(where, config, self._client, self._anonymous_headers)

    def place(self, route: str) -> None:
        """The file writes the route at `route` (`routes[2]`) now: a reload that moves a route
        keeps its upstream."""
        self.key = f"{route}.{self._below}"

    def client(
        self, listener: Listener, forwarded: Callable[[], Mapping[str, str]], principal: str | None
    ) -> UpstreamClient:
        """A client session toward the upstream for one session downstream (`listener`)."""
        return UpstreamClient(
            lambda sink: self.transport(sink, forwarded, principal),
            self.config,
            listener,
            self.spans,
        )

    def single(self) -> UpstreamRoute:
        return self

    def trace(self, tracing: Tracing) -> None:
        self.spans = tracing.upstream(self.name)

    @property
    def copied_headers(self) -> tuple[str, ...]:
        return self.config.copied_headers

    @property
    def request_timeout_seconds(self) -> float | None:
        return self.config.request_timeout_seconds

    @property
    def shares_sessions(self) -> bool:
        """Whether another replica can carry on its sessions (a stdio child is this process's)."""
        return self.config.transport != "stdio"

    @property
    def children_running(self) -> int:
        return self.slots.running

    @property
    def children_max(self) -> float:
        return self.config.max_children

    def on_child_exit(self, callback: Callable[[], None]) -> None:
        self.slots.on_exit = callback

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            timeout = aiohttp.ClientTimeout(total=None, connect=self.config.connect_timeout_seconds)
            # No cookie jar: cookies from one client's upstream session must not reach another.
            self._http = aiohttp.ClientSession(
                timeout=timeout,
                cookie_jar=aiohttp.DummyCookieJar(),
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS),
            )
        return self._http

    def transport(
        self,
        sink: ChildOwner,
        forwarded: Callable[[], Mapping[str, str]],
        principal: str | None = None,
    ) -> Transport:
        """A transport for one session; `forwarded` gives the client headers the route copies,
        `principal` is who the session belongs to (what a signed assertion names)."""
        cfg = self.config
        transport: Transport
        if cfg.transport == "stdio":
            transport = StdioTransport(sink, cfg, self.slots)
        else:

            async def headers() -> dict[str, str]:
                return await self.request_headers(forwarded(), principal)

            if cfg.transport == "sse":
                transport = SseTransport(sink, cfg, self._client(), headers)
            else:
                if self._pool is None:
                    assert cfg.url is not None
                    self._pool = Http1Pool(cfg.url, cfg.connect_timeout_seconds)
                transport = StreamableHttpTransport(sink, cfg, self._client(), headers, self._pool)
        transport.max_message_bytes = self.max_result_bytes
        transport.trace_headers = self.spans is not None
        return transport

    async def request_headers(
        self, forwarded: Mapping[str, str], principal: str | None
    ) -> dict[str, str]:
        """The headers every request upstream carries: the client's that the route copies,
        the route's static ones (which win over the client's), and the identity (the
        gateway's own say)."""
        identity = await self.identity.headers(principal)
        return {**forwarded, **self.config.headers, **identity}

    async def _anonymous_headers(self) -> dict[str, str]:
        return await self.request_headers({}, None)

    def http(self) -> aiohttp.ClientSession:
        return self._client()

    async def tell_session(
        self, session_id: str, note: jsonrpc.Notification, principal: str | None
    ) -> None:
        """Best effort: `note` to an upstream session a lost process opened on the Streamable
        HTTP wire (no session of this process holds it), as `principal`. Nothing is read
        back and nothing is raised: the session may be gone, or the upstream down."""
        if self.config.url is None:
            return
        try:
            headers = await self.request_headers({}, principal)
        except GatewayError:
            return
        headers.update(POST_HEADERS)
        headers.update(
            {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION}
        )
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._client().post(
                self.config.url, data=jsonrpc.dump(note).encode(), headers=headers
            ):
                pass

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._http is not None:
            await self._http.close()
