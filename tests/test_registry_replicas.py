"""The session registry of one replica among several (a store the replicas share): a caller's
sessions are counted over the deployment from its records, whichever replica made them, and
at the cap room is made here first, then from a record held elsewhere where the route's
sessions go on at any replica. Records other replicas wrote are written here straight into
the store, as theirs would be."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings
from gateway.protocol.errors import LimitExceeded
from gateway.session.registry import SessionRegistry
from gateway.tasks.inputs import TaskInputs
from gateway.tasks.models import SessionRecord
from gateway.tasks.store import open_store

from .test_registry import INITIALIZE, T0, Gateway, keep_busy

Start = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start(make_settings: Callable[..., Settings], tmp_path: Path) -> AsyncIterator[Start]:
    """A replica's registry on a stdio route `r` and an HTTP route `h`."""
    started: list[Gateway] = []

    async def start(**sections: Any) -> Gateway:
        routes = [
            {"name": "r", "upstream": {"transport": "stdio", "command": ["true"]}},
            {"name": "h", "upstream": {"transport": "streamable_http", "url": "http://x/mcp"}},
        ]
        settings = make_settings(routes, **sections)
        store = await open_store(tmp_path / "gateway.db")
        gateway = Gateway(settings, store)
        board = TaskInputs(store, lambda: T0)
        gateway.registry = SessionRegistry(settings.sessions, settings.http, store, board)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        await gateway.close()


async def elsewhere(gateway: Gateway, route: str, principal: str, *ids: str) -> None:
    """Sessions another replica opened for `principal` (one second apart, the first oldest)."""
    for n, session_id in enumerate(ids):
        record = SessionRecord(
            session_id=session_id,
            route=route,
            principal=principal,
            protocol_version="2025-11-25",
            initialize=INITIALIZE.model_dump(exclude_unset=True),
            created_at=T0.replace(second=n),
        )
        await gateway.store.save_session(record)


async def test_another_replicas_sessions_count_and_on_a_stdio_route_only_this_ones_make_room(
    start: Start,
) -> None:
    gateway = await start(limits={"sessions_per_principal": 3})
    route = gateway.routes["r"]
    await elsewhere(gateway, "r", "alice", "b1", "b2")
    await gateway.registry.open(route, "alice", "principal:alice")  # the third
    with pytest.raises(LimitExceeded) as refused:
        await gateway.registry.open(route, "alice", "principal:alice")
    assert refused.value.http_status == 429
    assert "already has 3 (limits.sessions_per_principal), none idle on this replica" in str(
        refused.value
    )
    await gateway.registry.open(route, "bob", "principal:bob")  # counted per caller
    assert await gateway.store.get_session("b1") is not None  # a child elsewhere: not ours


async def test_an_idle_session_here_makes_room_before_one_held_elsewhere(start: Start) -> None:
    gateway = await start(limits={"sessions_per_principal": 2})
    route = gateway.routes["h"]
    await elsewhere(gateway, "h", "alice", "b1")
    here = await gateway.registry.open(route, "alice", "principal:alice")
    await gateway.registry.records.opened(here, INITIALIZE)

    await gateway.registry.open(route, "alice", "principal:alice")

    assert await gateway.store.get_session("b1") is not None
    assert here.id not in gateway.registry._sessions


async def test_on_an_http_route_the_least_recently_seen_session_elsewhere_makes_room(
    start: Start,
) -> None:
    gateway = await start(limits={"sessions_per_principal": 3})
    route = gateway.routes["h"]
    await elsewhere(gateway, "h", "alice", "b1", "b2", "b3")
    busy = await gateway.registry.open(route, "alice", "principal:alice")  # b1 made room
    await gateway.registry.records.opened(busy, INITIALIZE)
    keep_busy(busy)
    assert await gateway.store.get_session("b1") is None

    await gateway.registry.open(route, "alice", "principal:alice")  # b2 makes room

    assert await gateway.registry.records.of_caller("h", "alice", 10) == ["b3", busy.id]
    assert busy.id in gateway.registry._sessions  # busy here: kept


async def test_a_recorded_session_carried_on_here_is_not_counted_again(start: Start) -> None:
    gateway = await start(limits={"sessions_per_principal": 1})
    route = gateway.routes["h"]
    await elsewhere(gateway, "h", "alice", "b1")
    carried = await gateway.registry.get("b1", route, "alice", "principal:alice")
    assert carried.id == "b1" and await gateway.store.get_session("b1") is not None
