"""The upstream side: where a call leaves the gateway for a server that knows nothing of tasks.

`UpstreamClient` (client) is one upstream session: it replays the client's handshake when the
connection is lost, maps ids (`answers` keeps them and the calls awaiting answers), and turns
every failure into `UpstreamUnavailable`, `UpstreamTimeout` or `UpstreamProtocolError`. Below
it one `Transport` (base) per kind: `streamable_http` (POST, JSON or SSE answers, a GET
stream), `legacy_sse` (the 2024-11-05 HTTP+SSE transport) and `stdio` (a child process per
session, under the route's cap, idle children stopped). `http1` is the lean client of the POSTs
to a Streamable HTTP upstream, `sse_reader` parses upstream event streams, `unreadable` is what
a message that cannot be parsed becomes. `UpstreamRoute` (shared) is what a route's sessions
share: HTTP connection pools or the stdio child cap, and the `identity` that tells an HTTP
upstream who calls. `probe` opens one short session to ask whether an upstream answers
(`config check`, and the gateway once it listens). This package knows nothing of sessions,
tasks or the client side.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import RouteConfig
from gateway.protocol.jsonrpc import Answer
from gateway.upstream.answers import CallLimit
from gateway.upstream.base import UpstreamSession
from gateway.upstream.client import UpstreamClient
from gateway.upstream.members import MemberRoutes
from gateway.upstream.shared import UpstreamRoute

__all__ = [
    "Answer",
    "CallLimit",
    "MemberRoutes",
    "UpstreamClient",
    "UpstreamRoute",
    "UpstreamSession",
    "upstreams_of",
]


def upstreams_of(
    route: RouteConfig, place: str, on_change: Callable[[str, bool], None] | None = None
) -> UpstreamRoute | MemberRoutes:
    """What `route`'s sessions share upstream: its one upstream's, or its members'
    (`on_change` is told of each member that goes down or comes back). The file writes the
    route at `place` (`routes[2]`)."""
    if route.upstreams is None:
        return UpstreamRoute(route, place)
    return MemberRoutes(route, place, UpstreamRoute, on_change)
