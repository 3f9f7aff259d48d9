"""The session registry (`gateway.session.registry`) on a real store with scripted upstreams:
the gateway's and the route's caps, the caller's least recently used idle session making room
at sessions_per_principal, lookups that cannot be probed, sessions rebuilt from their records
after a restart, and the reaper of idle sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    CapacityExceeded,
    LimitExceeded,
    SessionNotFound,
)
from gateway.route import Route
from gateway.session.registry import SessionRegistry
from gateway.session.session import Session
from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.store import TaskStore, open_store

from .fakes import ScriptedRoute, ScriptedUpstream
from .helpers import last_messages

INITIALIZE = jsonrpc.Request(
    jsonrpc="2.0",
    id=1,
    method="initialize",
    params={"protocolVersion": "2025-11-25", "clientInfo": {"name": "c", "version": "1"}},
)
INITIALIZED = jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized")
T0 = datetime(2025, 11, 25, 12, 0, tzinfo=UTC)


class Gateway:
    """What the registry works with in one gateway process: routes, a store, the registry."""

    def __init__(self, settings: Settings, store: TaskStore) -> None:
        self.store = store
        metrics = Metrics([r.name for r in settings.routes])
        self.routes: dict[str, Route] = {}
        self.upstreams: dict[str, ScriptedRoute] = {}
        for config in settings.routes:
            route = self.routes[config.name] = Route(settings, config, metrics)
            route.upstream = self.upstreams[config.name] = ScriptedRoute(config)
        self.registry = SessionRegistry(settings.sessions, settings.http, store)

    @property
    def route(self) -> Route:
        return self.routes["r"]

    def upstream_of(self, session: Session) -> ScriptedUpstream:
        (found,) = [
            t for t in self.upstreams[session.route.name].made if t.client is session.upstream
        ]
        return found

    async def open(self, limit_key: str = "127.0.0.1", principal: str | None = None) -> Session:
        """A session as the endpoint opens one: created, its upstream initialized, recorded."""
        session = self.registry.create(self.route, principal, limit_key)
        await session.upstream.initialize(INITIALIZE)
        session.protocol_version = "2025-11-25"
        await self.registry.records.opened(session, INITIALIZE)
        return session

    async def close(self) -> None:
        await self.registry.close()
        for route in self.routes.values():
            await route.close()
        await self.store.close()


Start = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start(make_settings: Callable[..., Settings], tmp_path: Path) -> AsyncIterator[Start]:
    """Starts a gateway's registry on routes `r` (and `s`), on the same store file each time."""
    started: list[Gateway] = []

    async def start(**sections: Any) -> Gateway:
        for earlier in started:
            await earlier.close()  # one process at a time holds the store
        started.clear()
        upstream = {"transport": "stdio", "command": ["true"]}
        routes = [{"name": name, "upstream": upstream} for name in ("r", "s")]
        settings = make_settings(routes, **sections)
        gateway = Gateway(settings, await open_store(tmp_path / "gateway.db"))
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        await gateway.close()


async def ended(session: Session) -> None:
    """Return once the session was closed (its GET stream ends with it)."""
    async with asyncio.timeout(5):
        while not session.standalone.closed:
            await session.standalone.wait_changed()


def keep_busy(session: Session) -> None:
    """A task's call in flight on the session, as the runner registers one."""
    task = Task(
        task_id="t",
        owner=session.owner,
        route="r",
        tool="slow",
        status=TaskStatus.WORKING,
        created_at=T0,
        updated_at=T0,
        ttl_ms=None,
        poll_interval_ms=1000,
    )
    call = jsonrpc.Request(jsonrpc="2.0", id=1, method="tools/call", params={"name": "slow"})
    session.task_host.start_task_call(
        task, call, lambda _: None, lambda _: asyncio.ensure_future(nop())
    )


async def nop() -> None:
    pass


# -- caps


async def test_the_gateway_holds_at_most_max_sessions_and_refuses_the_next_with_503(
    start: Start,
) -> None:
    gateway = await start(sessions={"max_sessions": 2})
    await gateway.open("a")
    await gateway.open("b")
    with pytest.raises(CapacityExceeded) as refused:
        gateway.registry.create(gateway.route, None, "c")
    assert refused.value.code == INTERNAL_ERROR and refused.value.http_status == 503


async def test_at_the_per_caller_cap_the_least_recently_used_idle_session_makes_room(
    start: Start,
) -> None:
    gateway = await start(limits={"sessions_per_principal": 2})
    older = await gateway.open()
    replaced = await gateway.open()
    await gateway.registry.get(older.id, gateway.route, None, "127.0.0.1")  # used again
    newest = await gateway.open()
    await ended(replaced)
    assert gateway.upstream_of(replaced).closes == 1
    assert await gateway.store.get_session(replaced.id) is None
    with pytest.raises(SessionNotFound):
        await gateway.registry.get(replaced.id, gateway.route, None, "127.0.0.1")
    for kept in (older, newest):
        assert await gateway.registry.get(kept.id, gateway.route, None, "127.0.0.1") is kept
    await gateway.open("another caller")  # counted per caller


async def test_a_session_made_room_for_is_not_brought_back_by_its_record_meanwhile(
    start: Start,
) -> None:
    # Its record is deleted in the background: a request with its id in between must still
    # find it ended, not restore it from the record.
    gateway = await start(limits={"sessions_per_principal": 1})
    replaced = await gateway.open()
    gateway.registry.create(gateway.route, None, "127.0.0.1")  # makes room; nothing awaited
    with pytest.raises(SessionNotFound):
        await gateway.registry.get(replaced.id, gateway.route, None, "127.0.0.1")
    await ended(replaced)
    with pytest.raises(SessionNotFound):
        await gateway.registry.get(replaced.id, gateway.route, None, "127.0.0.1")


@pytest.mark.parametrize("how", ["a call in flight", "a client reading its GET stream"])
async def test_a_caller_whose_sessions_are_all_in_use_is_refused_with_429(
    start: Start, how: str
) -> None:
    gateway = await start(limits={"sessions_per_principal": 1})
    session = await gateway.open()
    reader = session.standalone.follow(0, 0.01)
    if how == "a call in flight":
        keep_busy(session)
    else:
        assert await anext(reader) is None  # attached, and told the stream is quiet
    with pytest.raises(LimitExceeded) as refused:
        gateway.registry.create(gateway.route, None, "127.0.0.1")
    await reader.aclose()
    assert refused.value.code == INVALID_REQUEST and refused.value.http_status == 429
    assert await gateway.registry.get(session.id, gateway.route, None, "127.0.0.1") is session


async def test_a_session_still_initializing_does_not_make_room(start: Start) -> None:
    gateway = await start(limits={"sessions_per_principal": 1})
    gateway.registry.create(gateway.route, None, "127.0.0.1")  # its initialize under way
    with pytest.raises(LimitExceeded):
        gateway.registry.create(gateway.route, None, "127.0.0.1")


async def test_the_per_caller_cap_counts_each_route_apart(start: Start) -> None:
    gateway = await start(limits={"sessions_per_principal": 1})
    session = await gateway.open()
    keep_busy(session)
    other = gateway.registry.create(gateway.routes["s"], None, "127.0.0.1")
    assert other.route.name == "s" and gateway.registry.count("s") == 1


# -- lookups


async def test_a_session_is_found_only_on_its_route_by_its_principal_and_all_else_alike(
    start: Start,
) -> None:
    gateway = await start()
    session = await gateway.open("r:alice", principal="alice")
    assert await gateway.registry.get(session.id, gateway.route, "alice", "r:alice") is session
    refusals = []
    for session_id, route, principal in [
        (session.id, gateway.route, "bob"),
        (session.id, gateway.routes["s"], "alice"),
        (session.id, gateway.route, None),
        ("no-such-session", gateway.route, "alice"),
    ]:
        with pytest.raises(SessionNotFound) as refused:
            await gateway.registry.get(session_id, route, principal, "k")
        refusals.append((refused.value.code, refused.value.http_status, refused.value.message))
    assert refusals == [(INVALID_REQUEST, 404, SessionRegistry.NOT_FOUND)] * 4


async def test_an_ended_session_loses_its_record_and_upstream_and_is_then_unknown(
    start: Start,
) -> None:
    gateway = await start()
    session = await gateway.open()
    await gateway.registry.end(session)
    assert gateway.upstream_of(session).closes == 1
    assert await gateway.store.get_session(session.id) is None
    with pytest.raises(SessionNotFound):
        await gateway.registry.get(session.id, gateway.route, None, "127.0.0.1")


# -- restarts


async def test_after_a_restart_a_recorded_session_is_rebuilt_and_replays_its_handshake(
    start: Start,
) -> None:
    before = await start()
    session = await before.open("r:alice", principal="alice")
    await session.deliver(INITIALIZED)
    await before.registry.close()  # records stay: clients carry on after the restart

    after = await start()  # a second process on the same store file
    restored = await after.registry.get(session.id, after.route, "alice", "r:alice")
    assert restored is not session and restored.protocol_version == "2025-11-25"
    stream = restored.forward(
        jsonrpc.Request(jsonrpc="2.0", id=2, method="tools/call", params={"name": "echo"})
    )
    upstream = after.upstream_of(restored)
    async with asyncio.timeout(5):
        call = await upstream.request("tools/call")
    assert upstream.methods() == ["initialize", "notifications/initialized", "tools/call"]
    (replayed,) = await upstream.received("initialize")
    assert replayed.params == INITIALIZE.params  # the client's own handshake
    upstream.answer(call, {"content": []})
    assert await last_messages(stream) == [{"jsonrpc": "2.0", "id": 2, "result": {"content": []}}]


async def test_after_a_restart_a_record_is_still_only_its_principals(start: Start) -> None:
    before = await start()
    session = await before.open("r:alice", principal="alice")
    after = await start()
    with pytest.raises(SessionNotFound):
        await after.registry.get(session.id, after.route, "bob", "r:bob")
    with pytest.raises(SessionNotFound):
        await after.registry.get(session.id, after.routes["s"], "alice", "s:alice")
    assert await after.registry.get(session.id, after.route, "alice", "r:alice") is not None


# -- the reaper


async def test_the_reaper_ends_idle_sessions_and_keeps_busy_and_initializing_ones(
    start: Start,
) -> None:
    gateway = await start(sessions={"idle_timeout_seconds": 0.2})
    idle = await gateway.open("a")
    busy = await gateway.open("b")
    keep_busy(busy)
    initializing = gateway.registry.create(gateway.route, None, "c")
    gateway.registry.start_reaper()
    await ended(idle)
    assert await gateway.store.get_session(idle.id) is None
    assert gateway.registry.count("r") == 2
    assert await gateway.registry.get(busy.id, gateway.route, None, "b") is busy
    assert not initializing.standalone.closed


async def test_draining_ends_every_sessions_get_stream(start: Start) -> None:
    gateway = await start()
    sessions = [await gateway.open(key) for key in ("a", "b")]
    gateway.registry.drain("the gateway is shutting down")
    assert all(s.standalone.closed for s in sessions)
    for session in sessions:  # still recorded: clients come back after the restart
        assert await gateway.store.get_session(session.id) is not None
