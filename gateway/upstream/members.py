"""A route of several members (`routes[].upstreams`): what its sessions share upstream.

`MemberRoutes` is to such a route what `UpstreamRoute` is to a route of one upstream (the
same methods), holding an `UpstreamRoute` per member; each client session gets a
`fanout.MemberSessions`. `MemberHealth` is which members are up, as the route's sessions find
them: a member that fails is logged once (a WARNING), its `upstream_up` gauge drops to 0,
its tools leave the lists and every session is told its lists changed; it is tried again
by the next list after `RETRY_SECONDS`, and once it answers, it comes back the same way.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gateway.config import RouteConfig
from gateway.observability.logs import printable
from gateway.protocol import jsonrpc
from gateway.protocol.errors import UpstreamError, UpstreamRefused, UpstreamUnavailable
from gateway.protocol.members import Naming, read_sessions
from gateway.upstream.base import Listener
from gateway.upstream.client import UpstreamClient
from gateway.upstream.fanout import MemberSessions
from gateway.upstream.generation import Bridged, ModernWire

if TYPE_CHECKING:
    from gateway.observability.traces import Tracing
    from gateway.upstream.member_calls import MemberCalls
    from gateway.upstream.shared import UpstreamRoute

log = logging.getLogger("gateway.upstream")

#: How long lists leave out a member that failed before asking it again.
RETRY_SECONDS = 5.0


class MemberHealth:
    def __init__(
        self,
        route: str,
        on_change: Callable[[str, bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        own_children: frozenset[str] = frozenset(),
    ) -> None:
        self._route = route
        #: stdio members: each session runs a child of its own, so one that fails says
        #: nothing of the others' (the session's call fails, and its child starts again).
        self._own_children = own_children
        self._on_change = on_change
        self._clock = clock
        #: Members that failed -> when they last did.
        self._down: dict[str, float] = {}
        self._sessions: weakref.WeakSet[MemberCalls] = weakref.WeakSet()

    def watch(self, sessions: MemberCalls) -> None:
        self._sessions.add(sessions)

    def unwatch(self, sessions: MemberCalls) -> None:
        self._sessions.discard(sessions)

    def is_down(self, member: str) -> bool:
        return member in self._down

    def listed(self, member: str) -> bool:
        failed = self._down.get(member)
        return failed is None or self._clock() - failed >= RETRY_SECONDS

    def failed(self, member: str, reason: str) -> None:
        if member in self._own_children:
            return
        was_down = member in self._down
        self._down[member] = self._clock()
        if was_down:
            return
        log.warning(
            "route %s: member %s failed (%s); its tools are left out of the lists until it "
            "answers again",
            self._route,
            member,
            printable(reason, 300),
        )
        self._changed(member, up=False)

    def failed_by(self, member: str, failure: UpstreamError | jsonrpc.ErrorResponse) -> None:
        """`member` failed a call: counted down if the failure says it is not there (a
        refused handshake, no connection), not for a refusal, a timeout or a large answer."""
        if isinstance(failure, jsonrpc.ErrorResponse):
            self.failed(member, failure.error.message)
        elif isinstance(failure, UpstreamUnavailable) and not isinstance(failure, UpstreamRefused):
            self.failed(member, failure.message)

    def answered(self, member: str) -> None:
        if self._down.pop(member, None) is None:
            return
        log.info("route %s: member %s answers again", self._route, member)
        self._changed(member, up=True)

    def _changed(self, member: str, up: bool) -> None:
        if self._on_change is not None:
            self._on_change(member, up)
        for sessions in list(self._sessions):
            sessions.changed()


class _Identities:
    """The members' upstream identities, each told of a caller's latest token."""

    def __init__(self, members: Mapping[str, UpstreamRoute]) -> None:
        self._members = members

    def observe(self, principal: str, token: str) -> None:
        for member in self._members.values():
            member.identity.observe(principal, token)


class MemberRoutes:
    def __init__(
        self,
        route: RouteConfig,
        place: str,
        make: Callable[..., UpstreamRoute],
        on_change: Callable[[str, bool], None] | None = None,
    ) -> None:
        assert route.upstreams is not None
        self.name = route.name
        self.members = {m.name: make(route, place, m) for m in route.upstreams}
        stdio = frozenset(m.name for m in route.upstreams if m.transport == "stdio")
        self.health = MemberHealth(route.name, on_change, own_children=stdio)
        self.identity = _Identities(self.members)
        #: The client headers any member copies (read on every request: made once).
        self.copied_headers = tuple(
            dict.fromkeys(h for m in self.members.values() for h in m.copied_headers)
        )
        #: A route of one member is what a route of one upstream is to 2026-07-28 callers: its
        #: member's wire (`modern`, so natively when `auto` finds it speaks 2026-07-28). A route
        #: of several serves them over sessions held with each member.
        self._only = next(iter(self.members.values())) if len(self.members) == 1 else None
        self.wire: ModernWire | Bridged = Bridged() if self._only is None else self._only.wire

    def place(self, route: str) -> None:
        for member in self.members.values():
            member.place(route)

    def client(
        self, listener: Listener, forwarded: Callable[[], Mapping[str, str]], principal: str | None
    ) -> MemberSessions:
        makers: dict[str, Callable[[Listener], UpstreamClient]] = {
            name: _maker(member, forwarded, principal) for name, member in self.members.items()
        }
        return MemberSessions(self.name, makers, listener, self.health)

    def trace(self, tracing: Tracing) -> None:
        """Each member's calls traced under its name (`mcp.upstream`)."""
        naming = Naming(list(self.members))
        for name, member in self.members.items():
            member.spans = tracing.upstream(self.name, name, naming.prefix(name))

    @property
    def request_timeout_seconds(self) -> float | None:
        limits = [m.request_timeout_seconds for m in self.members.values()]
        return None if None in limits else max(t for t in limits if t is not None)

    @property
    def shares_sessions(self) -> bool:
        return all(m.shares_sessions for m in self.members.values())

    @property
    def children_running(self) -> int:
        return sum(m.children_running for m in self.members.values())

    @property
    def children_max(self) -> float:
        return sum(m.children_max for m in self.members.values())

    def on_child_exit(self, callback: Callable[[], None]) -> None:
        for member in self.members.values():
            member.on_child_exit(callback)

    def single(self) -> UpstreamRoute:
        """The one member of a route of one (on the 2026-07-28 wire, as a route's one upstream)."""
        if self._only is None:
            raise RuntimeError(f"route {self.name} has several members")  # (its wire is Bridged)
        return self._only

    async def tell_session(
        self, session_id: str, note: jsonrpc.Notification, principal: str | None
    ) -> None:
        """`note` to each member's upstream session a lost process held (best effort)."""
        ids = read_sessions(session_id)
        for name, member in self.members.items():
            if name in ids:
                await member.tell_session(ids[name][0], note, principal)

    async def close(self) -> None:
        for member in self.members.values():
            await member.close()


def _maker(
    member: UpstreamRoute, forwarded: Callable[[], Mapping[str, str]], principal: str | None
) -> Callable[[Listener], UpstreamClient]:
    # The session keeps every header any member copies: each member gets its own only, so
    # a credential one member is given never reaches another.
    own = frozenset(name.lower() for name in member.copied_headers)

    def its_own() -> dict[str, str]:
        return {k: v for k, v in forwarded().items() if k.lower() in own}

    def make(listener: Listener) -> UpstreamClient:
        return member.client(listener, its_own, principal)

    return make
