"""LiveSessions: the sessions this process holds, by id and counted per caller.

The registry decides which sessions there are (its caps, their records, their end); this is
the table it keeps them in: how many each caller holds on a route, which
limits.sessions_per_principal caps, the idle one among them that makes room for a new one,
and their closing at shutdown.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Collection, Iterator

from gateway.session.session import Session

# The registry's logger: operators filter their logs on the name its lines always had.
log = logging.getLogger("gateway.session.registry")

#: Sessions closed at once on shutdown.
_CLOSING_AT_ONCE = 100


class LiveSessions:
    """The sessions held here, by id, and how many of them each `Session.limit_key` holds."""

    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}
        #: Sessions held per `Session.limit_key`: what limits.sessions_per_principal caps.
        self._per_limit_key: collections.Counter[str] = collections.Counter()

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Session]:
        return iter(self._by_id.values())

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._by_id

    def get(self, session_id: str) -> Session | None:
        return self._by_id.get(session_id)

    def ids(self) -> list[str]:
        return list(self._by_id)

    def held(self, limit_key: str) -> int:
        """How many sessions are counted against `limit_key`."""
        return self._per_limit_key[limit_key]

    def of(self, limit_key: str) -> Iterator[Session]:
        return (s for s in self._by_id.values() if s.limit_key == limit_key)

    def add(self, session: Session) -> None:
        self._by_id[session.id] = session
        self._per_limit_key[session.limit_key] += 1

    def forget(self, session: Session) -> bool:
        """Stop holding `session`; False if it was not held (ended meanwhile)."""
        if self._by_id.pop(session.id, None) is None:
            return False
        self._per_limit_key[session.limit_key] -= 1
        if not self._per_limit_key[session.limit_key]:
            del self._per_limit_key[session.limit_key]
        return True

    def idle_of(self, limit_key: str, among: Collection[str] | None = None) -> Session | None:
        """The least recently used open session counted against `limit_key` (and with an id
        `among` those, if given) with nothing in flight and no client reading its GET
        stream, if any."""
        mine = self.of(limit_key)
        idle = [s for s in mine if s.record is not None and not s.busy and not s.listening]
        idle = [s for s in idle if among is None or s.id in among]
        return min(idle, key=lambda s: s.last_seen, default=None)

    async def close(self, keep_upstream: bool) -> None:
        """Forget every session and close them; with `keep_upstream`, their upstream sessions
        stay open (another replica may carry them on).

        Closed side by side, a bounded number at a time: one close may take seconds (a stdio
        child slow to exit, an upstream slow to answer DELETE), and one after another a
        thousand of them would overrun any shutdown grace.
        """
        sessions = list(self._by_id.values())
        for session in sessions:
            self.forget(session)
            if keep_upstream:
                session.upstream.keep_upstream_session()
        bound = asyncio.Semaphore(_CLOSING_AT_ONCE)

        async def close(session: Session) -> None:
            async with bound:
                await session.close()

        results = await asyncio.gather(*map(close, sessions), return_exceptions=True)
        for session, result in zip(sessions, results, strict=True):
            if isinstance(result, Exception):
                log.warning("session %s: closing it failed: %r", session.tag, result)
