"""What both task APIs share: finding a caller's task, and the audit of its misses and reads.
A real SQLite store; the audit trail as caplog sees it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from gateway.protocol.errors import INVALID_PARAMS, TaskError
from gateway.protocol.outcome import Outcome
from gateway.tasks.api_common import EXPIRED, NOT_FOUND, find, read_outcome
from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.store import TaskStore, open_store

from .helpers import FakeClock, audit_events

ALICE, BOB = "principal:r:alice", "principal:r:bob"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[TaskStore]:
    store = await open_store(tmp_path / "gateway.db")
    yield store
    await store.close()


async def stored(store: TaskStore, clock: FakeClock, ttl_ms: int | None = None) -> Task:
    now = clock.now()
    task = Task(
        task_id="t1",
        owner=ALICE,
        route="r",
        tool="x",
        status=TaskStatus.WORKING,
        created_at=now,
        updated_at=now,
        ttl_ms=ttl_ms,
        poll_interval_ms=1000,
    )
    assert await store.create_task(task)
    return task


async def refusal(lookup: Coroutine[Any, Any, Task]) -> TaskError:
    with pytest.raises(TaskError) as caught:
        await lookup
    assert caught.value.code == INVALID_PARAMS
    return caught.value


async def test_the_owner_finds_its_task(store: TaskStore) -> None:
    clock = FakeClock()
    task = await stored(store, clock)
    assert await find(store, "t1", ALICE, "alice", clock.now) == task


async def test_an_id_that_is_no_string_or_holds_a_nul_names_nothing(store: TaskStore) -> None:
    clock = FakeClock()
    await stored(store, clock)
    assert (await refusal(find(store, 7, ALICE, "alice", clock.now))).message != NOT_FOUND
    assert (await refusal(find(store, "t1\x00", ALICE, "alice", clock.now))).message == NOT_FOUND


async def test_another_owners_task_answers_as_an_unknown_one_and_is_audited(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    clock = FakeClock()
    await stored(store, clock)
    foreign = await refusal(find(store, "t1", BOB, "bob", clock.now))
    unknown = await refusal(find(store, "t2", BOB, "bob", clock.now))
    assert foreign.message == unknown.message == NOT_FOUND
    denied = audit_events(caplog, "task_access_denied")
    assert [(e["principal"], e["task_id"], e["route"]) for e in denied] == [("bob", "t1", "r")]


async def test_a_miss_is_audited_after_the_answer_when_told_to(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    clock = FakeClock()
    await stored(store, clock)
    deferred: list[Coroutine[Any, Any, None]] = []
    await refusal(find(store, "t1", BOB, "bob", clock.now, deferred.append))
    assert audit_events(caplog, "task_access_denied") == []
    async with asyncio.timeout(5):
        await deferred.pop()
    assert len(audit_events(caplog, "task_access_denied")) == 1


async def test_an_expired_task_is_refused_as_expired(store: TaskStore) -> None:
    clock = FakeClock()
    await stored(store, clock, ttl_ms=1000)
    clock.advance(1.0)
    assert (await refusal(find(store, "t1", ALICE, "alice", clock.now))).message == EXPIRED


async def test_every_read_of_an_outcome_is_audited_with_its_kind(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    clock = FakeClock()
    await stored(store, clock)
    assert await read_outcome(store, "t1") is None
    outcome = Outcome.error(-32603, "boom")
    await store.finish_task("t1", TaskStatus.FAILED, "boom", outcome, clock.now())
    assert await read_outcome(store, "t1") == outcome
    read = audit_events(caplog, "task_result_retrieved")
    assert [(e["task_id"], e.get("kind")) for e in read] == [("t1", None), ("t1", "error")]
