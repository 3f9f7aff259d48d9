"""The pool of upstream sessions the gateway holds for 2026-07-28 callers (`calls.held`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gateway.calls.held import HeldSessions
from gateway.calls.held_session import HeldSession
from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.route import Route

from .conftest import DEMO


async def test_two_releases_of_a_shared_session_that_never_opened_leave_it_once(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls of one caller lease its shared session, and both end before it opened (an
    upstream that failed them, say): each release closes it and takes it out of the pool,
    and the second once raised KeyError there, an HTTP 500 under load."""
    close = HeldSession.close

    async def closing(self: HeldSession) -> None:
        await asyncio.sleep(0)  # closing a transport awaits: the two releases meet here
        await close(self)

    monkeypatch.setattr(HeldSession, "close", closing)
    settings = make_settings([{"name": "r", "upstream": DEMO}])
    route = Route(settings, settings.routes[0], Metrics(["r"]), None, None)
    pool = HeldSessions(settings.sessions)
    try:
        first = await pool.lease(route, "alice", {}, {})
        second = await pool.lease(route, "alice", {}, {})
        assert first.held is second.held
        releases = await asyncio.gather(first.release(), second.release(), return_exceptions=True)
        assert list(releases) == [None, None]
        again = await pool.lease(route, "alice", {}, {})
        assert again.held is not first.held  # the next call starts afresh
        await again.release()
    finally:
        await pool.close()
        await route.close()
