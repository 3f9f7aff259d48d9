"""The per-route cap on running stdio children (`upstream.max_children`): `ChildSlots`.

Each stdio transport holds a slot while its child runs. The cap knows a transport only as a
`Holder`, what it asks of one to choose an idle child to stop for a newcomer, so that this
module needs nothing of `stdio`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from gateway.protocol.errors import CapacityExceeded


class Holder(Protocol):
    """A stdio transport that holds a slot while its child runs (`stdio.StdioTransport`)."""

    last_used: float

    @property
    def idle(self) -> bool: ...

    @property
    def listening(self) -> bool: ...

    @property
    def stopping(self) -> bool: ...

    async def give_way(self) -> None: ...


class ChildSlots:
    """The per-route cap on running stdio children; an idle child gives way to a new one.

    Only busy children hold the cap: at the cap, the least recently used idle child is
    stopped for the newcomer (one whose client still listens on its GET stream only when no
    other is idle), so sessions that are never ended cannot lock a route out.
    Every slot maps to at most one live process: a newcomer spawns only once the child it
    replaces has exited.
    """

    def __init__(self, route: str, limit: int) -> None:
        self.route = route
        self.limit = limit
        #: Told of each child that exited by itself (the route's metrics count them).
        self.on_exit: Callable[[], None] | None = None
        self._holders: set[Holder] = set()
        self._freed: list[asyncio.Future[None]] = []

    @property
    def running(self) -> int:
        return len(self._holders)

    async def acquire(self, holder: Holder) -> None:
        """A slot for `holder`'s next child.

        Raises:
            CapacityExceeded: every child of the route is busy.
        """
        while len(self._holders) >= self.limit:
            idle = [h for h in self._holders if h.idle]
            if idle:
                victim = min(idle, key=lambda h: (h.listening, h.last_used))
                self._holders.remove(victim)
                self._holders.add(holder)
                try:
                    await victim.give_way()
                except BaseException:
                    self.release(holder)
                    raise
                return
            if not any(h.stopping for h in self._holders):
                raise CapacityExceeded(
                    f"route {self.route!r} already runs its maximum of {self.limit} stdio "
                    "children (upstream.max_children), each busy with a call, a task or a "
                    "question; retry when one finishes, or raise the cap"
                )
            # A child stopped for idleness is on its way out: its slot comes free shortly.
            freed = asyncio.get_running_loop().create_future()
            self._freed.append(freed)
            try:
                await freed
            finally:
                self._freed.remove(freed)
        self._holders.add(holder)

    def release(self, holder: Holder) -> None:
        if holder in self._holders:
            self._holders.remove(holder)
            for freed in self._freed:
                if not freed.done():
                    freed.set_result(None)
