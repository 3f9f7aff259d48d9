"""The pool of upstream sessions the gateway holds for 2026-07-28 callers, who bring no session.

A legacy upstream needs a session: the gateway opens one on the caller's behalf, initialized
with the question capabilities (elicitation, sampling, roots) the caller declared on its
request (`held_session.HeldSession`), and lends it out per call (`HeldSessions.lease`).

A legacy session cannot always say which call a question belongs to (stdio and HTTP+SSE
upstreams have no per-request stream), so a session that may be asked questions serves one
call at a time: such a lease is exclusive, and its session goes back to an idle list keyed by
route, principal and capabilities when the call ends. A caller that declared no question
capability invites none: its calls share one session per route and principal, and a question
the upstream asks anyway gets -32601 at once. Anonymous callers cannot be told apart, so they
never share: each call gets a session of its own, closed when the call ends. Sessions idle for
`sessions.idle_timeout_seconds` are closed.
"""

from __future__ import annotations

import json
import time

from gateway.calls.held_session import HeldSession
from gateway.calls.holdings import Holdings
from gateway.config import SessionsConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import LimitExceeded
from gateway.route import Route
from gateway.upstream import MemberRoutes, UpstreamRoute

#: Where an exclusive session waits for its next call: upstream, principal, capabilities (JSON).
IdleKey = tuple[UpstreamRoute | MemberRoutes, str, str]


class Lease:
    """One call's use of a held session; `release()` hands it back (exactly once)."""

    def __init__(
        self, pool: HeldSessions, held: HeldSession, key: IdleKey | None, holder: str | None
    ) -> None:
        self.held = held
        self._pool = pool
        #: The idle list an exclusive session goes back to; None: shared, or never pooled.
        self._key = key
        #: Whom an exclusive session counts against while leased (`HeldSessions.lease`).
        self._holder = holder
        self._released = False

    async def release(self, reusable: bool = True) -> None:
        """Hand the session back; `reusable=False` closes an exclusive one instead (its
        call was abandoned, so the upstream may still hold questions of it)."""
        if self._released:
            return
        self._released = True
        self.held.asker = None
        self.held.last_used = time.monotonic()
        self._pool.uncount(self._holder)
        await self._pool.give_back(self.held, self._key, reusable)


class HeldSessions:
    """The pool: shared sessions per route and principal, exclusive ones kept idle for reuse.

    Keyed by the route's upstream (`Route.upstream`), not its name: once a reload changes a
    route's upstream (its URL, a rotated header), new calls get sessions of the new one, and
    those of the old one are closed once idle, as any.
    """

    def __init__(self, config: SessionsConfig) -> None:
        self._idle_seconds = config.idle_timeout_seconds
        self._shared: dict[tuple[UpstreamRoute | MemberRoutes, str], HeldSession] = {}
        self._idle: dict[IdleKey, list[HeldSession]] = {}
        self._anonymous: set[HeldSession] = set()
        self._in_use: set[HeldSession] = set()
        #: Exclusive sessions leased now, by whom they count against.
        self._held_by = Holdings()

    async def lease(
        self,
        route: Route,
        principal: str | None,
        capabilities: jsonrpc.JsonObject,
        forwarded: dict[str, str],
        holder: str | None = None,
    ) -> Lease:
        """A session for one call of the caller; exclusive when it may be asked questions
        (`capabilities` non-empty) or the caller is anonymous. `holder` (the caller on the
        route) may hold `limits.sessions_per_principal` exclusive ones at once; None: no cap
        (a restart's rerun of a task that held one already).

        Raises:
            LimitExceeded: `holder` holds its share: each exclusive session is a stdio child
                perhaps, and one caller's calls or tasks took every child of a route.
        """
        exclusive = principal is None or bool(capabilities)
        counted = holder if exclusive else None
        cap = route.limits.sessions_per_principal
        if counted is not None and cap is not None and self._held_by.of(counted) >= cap:
            route.metrics.limited.labels(route.name, "sessions").inc()
            raise LimitExceeded(
                f"Too many upstream sessions held for this caller on this route: {cap} "
                "(limits.sessions_per_principal); let a call or task of yours end first"
            )
        await self._close_idle()
        if principal is None:
            held = HeldSession(route, None, capabilities)
            self._anonymous.add(held)
            lease = Lease(self, held, None, counted)
        elif capabilities:
            key = (route.upstream, principal, json.dumps(capabilities, sort_keys=True))
            idle = self._idle.get(key)
            held = idle.pop() if idle else HeldSession(route, principal, capabilities)
            self._in_use.add(held)
            lease = Lease(self, held, key, counted)
        else:
            shared = (route.upstream, principal)
            held = self._shared.get(shared) or self._shared.setdefault(
                shared, HeldSession(route, principal, {})
            )
            lease = Lease(self, held, None, None)
        if counted is not None:
            self._held_by.take(counted)
        held.forwarded.update(forwarded)
        held.leases += 1
        return lease

    def uncount(self, holder: str | None) -> None:
        if holder is not None:
            self._held_by.give_back(holder)

    async def give_back(self, held: HeldSession, key: IdleKey | None, reusable: bool) -> None:
        # A session leaves its set only once closed or pooled, so that a release cut short
        # (a cancelled run at shutdown) still leaves it to `close()`.
        held.leases -= 1
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
            # A shared session that never opened, and that no other call waits for (one
            # that gave up while it opened must not close it under the others): the next
            # request starts afresh.
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
