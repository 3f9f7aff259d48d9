"""The pool of upstream sessions the gateway holds for 2026-07-28 callers (`calls.held`)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.calls.held import HeldSessions
from gateway.calls.held_session import HeldSession
from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.protocol.errors import UpstreamError
from gateway.route import Route

from .conftest import DEMO, StartGateway
from .fakes import RECEIVED, STREAMS
from .helpers import modern_rpc


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


async def test_a_call_that_gives_up_while_the_shared_session_opens_leaves_it_to_the_others(
    make_settings: Callable[..., Settings],
) -> None:
    """Two calls of one caller wait for its shared session, whose upstream is slow to start;
    one gives up (its client went away) and gives its lease back: the session must stay open
    for the other, which once got "the session ended"."""
    command = ["sh", "-c", f"sleep 1; exec {sys.executable} -m gateway.demo"]
    slow = {"transport": "stdio", "command": command}
    settings = make_settings([{"name": "r", "upstream": slow}])
    route = Route(settings, settings.routes[0], Metrics(["r"]), None, None)
    pool = HeldSessions(settings.sessions)
    try:
        patient = await pool.lease(route, "alice", {}, {})
        impatient = await pool.lease(route, "alice", {}, {})
        opening = asyncio.ensure_future(patient.held.open())
        gave_up = asyncio.ensure_future(impatient.held.open())
        await asyncio.sleep(0.2)
        gave_up.cancel()
        await impatient.release(reusable=False)
        opened = await asyncio.wait_for(opening, 20)
        assert opened["serverInfo"]
        await patient.release()
    finally:
        await pool.close()
        await route.close()


async def test_members_closed_under_their_handshake_are_not_counted_down(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    """The gateway closing a route of members' session while it opens (at shutdown) fails
    that handshake by its own doing: no member is logged failed, and none leaves the lists."""

    async def hangs_up(request: web.Request) -> web.Response:
        await asyncio.sleep(1)  # after the gateway closed the session, the line drops
        assert request.transport is not None
        request.transport.close()
        return web.Response(status=500)

    app = web.Application()
    app.router.add_post("/mcp", hangs_up)
    slow = TestServer(app, host="127.0.0.1")
    await slow.start_server()
    url = str(slow.make_url("/mcp"))
    members = [{"name": n, "transport": "streamable_http", "url": url} for n in "ab"]
    settings = make_settings([{"name": "r", "upstreams": members}])
    route = Route(settings, settings.routes[0], Metrics(["r"]), None, None)
    pool = HeldSessions(settings.sessions)
    try:
        lease = await pool.lease(route, "alice", {}, {})
        opening = asyncio.ensure_future(lease.held.open())
        await asyncio.sleep(0.3)
        await pool.close()
        with pytest.raises(UpstreamError):
            await opening
    finally:
        await route.close()
        await slow.close()
    assert "failed" not in caplog.text


async def test_only_a_caller_that_may_be_asked_has_the_upstreams_get_stream_opened(
    start_gateway: StartGateway, recorder: TestServer
) -> None:
    """Transports (2025-11-25): "The client MAY issue an HTTP GET to the MCP endpoint", to hear
    what the server sends unasked. A held session opens it only when its caller declared a
    capability the upstream may ask with: for any other, questions are refused and the
    call's own messages come on its POST's stream, and the GET was an exchange and a stream
    held open for nothing, for every anonymous call."""
    upstream = {"transport": "streamable_http", "url": str(recorder.make_url("/mcp"))}
    url = f"{await start_gateway([{'name': 't', 'upstream': upstream}])}/t/mcp"
    echo = {"name": "echo", "arguments": {"text": "-"}}
    async with aiohttp.ClientSession() as http:
        for _ in range(2):
            assert (await modern_rpc(http, url, "tools/call", echo))[0] == 200
        initialized = [m for m in recorder.app[RECEIVED] if m["method"] == "initialize"]
        assert len(initialized) == 2  # an anonymous caller's calls: a session each
        assert recorder.app[STREAMS] == []
        elicits = await modern_rpc(http, url, "tools/call", echo, {"elicitation": {}})
        assert elicits[0] == 200
        assert len(recorder.app[STREAMS]) == 1
