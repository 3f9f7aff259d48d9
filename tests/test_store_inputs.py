"""The store's input-request rows and task generations, on every backend (a real SQLite file,
a real PostgreSQL database)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import InputRequest, Task, TaskStatus, epoch_us
from gateway.tasks.store import TaskStore, open_store
from gateway.tasks.store.sqlite.schema import MIGRATIONS

from .test_store import BACKENDS, Backend

T0 = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
SECOND = timedelta(seconds=1)
RESULT = Outcome(kind="result", body={"content": []})
ANSWER = {"action": "accept", "content": {"name": "ü"}}


def make_task(
    task_id: str,
    *,
    status: TaskStatus = TaskStatus.WORKING,
    ttl_ms: int | None = 60_000,
    generation: str | None = None,
) -> Task:
    task = Task(
        task_id=task_id,
        owner="alice",
        route="files",
        tool="slow_tool",
        status=status,
        created_at=T0,
        updated_at=T0,
        ttl_ms=ttl_ms,
        poll_interval_ms=500,
    )
    return task if generation is None else replace(task, generation=generation)


def ask(
    key: str, *, task_id: str = "t", at: datetime = T0, upstream_id: RequestId = 1
) -> InputRequest:
    return InputRequest(
        task_id=task_id,
        key=key,
        method="elicitation/create",
        params={"message": f"question {key}?", "requestedSchema": {"type": "object"}},
        upstream_id=upstream_id,
        created_at=at,
    )


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend.of(request, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[TaskStore]:
    opened: TaskStore = await backend.open()
    await opened.create_task(make_task("t"))
    yield opened
    await opened.close()


async def input_rows(backend: Backend) -> list[tuple[Any, ...]]:
    """(key, state, response, settled_at) of every input row at rest, by task and key."""
    sql = "SELECT key, state, response, settled_at FROM task_inputs ORDER BY task_id, key"
    return await backend.rows(sql)


async def test_a_tasks_generation_round_trips_and_defaults_to_2025_11_25(backend: Backend) -> None:
    store = await backend.open()
    await store.create_task(make_task("old"))
    await store.create_task(make_task("new", generation="2026-07-28"))

    finished = await store.finish_task("new", TaskStatus.COMPLETED, None, RESULT, T0)
    await store.close()
    reopened = await backend.open()

    old, new = await reopened.get_task("old"), await reopened.get_task("new")
    assert old is not None and old.generation == "2025-11-25"
    assert new is not None and new.generation == "2026-07-28" and new == finished
    await reopened.close()


async def test_pending_inputs_are_a_live_tasks_unanswered_requests_oldest_first(
    store: TaskStore,
) -> None:
    asked = [ask("b", at=T0), ask("a", at=T0 + SECOND), ask("c", at=T0)]
    assert [await store.add_input(request) for request in asked] == [True, True, True]
    await store.create_task(make_task("asking", status=TaskStatus.INPUT_REQUIRED))
    other = ask("a", task_id="asking")
    assert await store.add_input(other) is True

    # By creation time, then key.
    assert await store.pending_inputs("t") == [asked[0], asked[2], asked[1]]
    assert await store.pending_inputs("asking") == [other]
    assert await store.pending_inputs("unknown") == []


async def test_add_input_refuses_unknown_and_terminal_tasks_and_taken_keys(
    store: TaskStore,
) -> None:
    await store.create_task(make_task("done", status=TaskStatus.COMPLETED))
    first = ask("k")
    assert await store.add_input(first) is True

    assert await store.add_input(ask("k", task_id="unknown")) is False
    assert await store.add_input(ask("k", task_id="done")) is False
    assert await store.add_input(ask("k", upstream_id=2, at=T0 + SECOND)) is False
    assert await store.pending_inputs("t") == [first]
    # A settled key stays taken: keys are never reused within a task.
    await store.answer_input("t", "k", ANSWER, T0)
    assert await store.add_input(first) is False
    assert await store.pending_inputs("t") == []


async def test_an_answer_settles_only_its_key_and_only_once(backend: Backend) -> None:
    store = await backend.open()
    await store.create_task(make_task("t"))
    one, two = ask("one"), ask("two", upstream_id=2)
    await store.add_input(one)
    await store.add_input(two)
    answered_at = T0 + SECOND

    assert await store.answer_input("t", "one", ANSWER, answered_at) == one
    assert await store.pending_inputs("t") == [two]
    assert await store.answer_input("t", "one", {"action": "decline"}, answered_at) is None
    assert await store.answer_input("t", "unknown", ANSWER, answered_at) is None
    assert await store.answer_input("other", "two", ANSWER, answered_at) is None
    assert await store.pending_inputs("t") == [two]
    # Where the call runs (another replica, perhaps) the first answer is what it reads.
    assert await store.answered_inputs("t") == {"one": ANSWER}
    assert await store.answered_inputs("other") == {}
    await store.close()

    assert await input_rows(backend) == [
        ("one", "answered", json.dumps(ANSWER), epoch_us(answered_at)),
        ("two", "pending", None, None),
    ]


async def test_withdraw_inputs_moves_the_named_pending_keys_or_all_of_them(
    backend: Backend,
) -> None:
    store = await backend.open()
    await store.create_task(make_task("t"))
    await store.create_task(make_task("u"))
    asked = [ask(key, at=T0 + n * SECOND) for n, key in enumerate("edcba")]
    for request in [*asked, ask("a", task_id="u")]:
        await store.add_input(request)
    await store.answer_input("t", "e", ANSWER, T0)
    later = T0 + timedelta(minutes=1)

    # Answered and unknown keys are left out; what moved comes back oldest first.
    named = await store.withdraw_inputs("t", later, ["a", "e", "c", "zz"])
    assert named == [asked[2], asked[4]]
    assert await store.withdraw_inputs("t", later, ["a"]) == []
    assert await store.answer_input("t", "a", ANSWER, later) is None
    assert await store.withdraw_inputs("t", later, []) == []
    assert await store.withdraw_inputs("t", later) == [asked[1], asked[3]]
    assert await store.pending_inputs("t") == []
    assert await store.withdraw_inputs("t", later) == []
    assert await store.pending_inputs("u") == [ask("a", task_id="u")]
    await store.close()

    states = [(key, state, settled) for key, state, _, settled in await input_rows(backend)]
    withdrawn = [(key, "withdrawn", epoch_us(later)) for key in "abcd"]
    assert states == [*withdrawn, ("e", "answered", epoch_us(T0)), ("a", "pending", None)]


async def test_the_terminal_write_withdraws_the_tasks_pending_inputs(backend: Backend) -> None:
    store = await backend.open()
    for task_id in ["finished", "shut-down", "interrupted", "bystander"]:
        await store.create_task(make_task(task_id))
        await store.add_input(ask("k", task_id=task_id))
    await store.add_input(ask("answered", task_id="finished"))
    await store.answer_input("finished", "answered", ANSWER, T0)
    end = T0 + SECOND

    await store.finish_task("finished", TaskStatus.CANCELLED, None, None, end)
    await store.fail_running(["shut-down"], "gateway shut down", end)
    assert await store.pending_inputs("bystander") == [ask("k", task_id="bystander")]
    await store.fail_running(["interrupted", "bystander"], "gateway restarted", end)

    for task_id in ["finished", "shut-down", "interrupted", "bystander"]:
        assert await store.pending_inputs(task_id) == []
        assert await store.answer_input(task_id, "k", ANSWER, end) is None
        assert await store.add_input(ask("new", task_id=task_id)) is False
    await store.close()
    states = {(key, state) for key, state, _, _ in await input_rows(backend)}
    assert states == {("answered", "answered"), ("k", "withdrawn")}


async def test_deleting_an_expired_task_deletes_its_input_rows(backend: Backend) -> None:
    store = await backend.open()
    await store.create_task(make_task("due", ttl_ms=1000))
    await store.create_task(make_task("kept", ttl_ms=None))
    for key in ["pending", "answered"]:
        await store.add_input(ask(key, task_id="due"))
    await store.add_input(ask("k", task_id="kept"))
    await store.answer_input("due", "answered", ANSWER, T0)

    assert await store.delete_expired(T0 + SECOND) == ["due"]

    assert await store.pending_inputs("due") == []
    await store.close()
    assert await input_rows(backend) == [("k", "pending", None, None)]


async def test_upstream_ids_and_params_read_back_exactly(store: TaskStore) -> None:
    by_int, by_str = ask("int", upstream_id=1), ask("str", upstream_id="1")
    odd = ask("odd").model_copy(update={"params": {"n": 1.0, "flag": True, "s": "\ud800"}})
    for request in [by_int, by_str, odd]:
        await store.add_input(request)

    pending = await store.pending_inputs("t")

    assert pending == [by_int, odd, by_str]
    assert [type(request.upstream_id) for request in pending] == [int, int, str]
    # Compared as JSON too: == alone would let True pass for 1 and 1.0 for 1.
    assert json.dumps(pending[1].params) == json.dumps(odd.params)
    answered = await store.answer_input("t", "str", ANSWER, T0)
    assert answered is not None and answered.upstream_id == "1"


async def test_a_database_of_the_previous_schema_migrates_its_tasks_to_2025_11_25(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    with sqlite3.connect(path) as db:  # what a gateway of the second schema left
        db.executescript(f"{MIGRATIONS[0]}; {MIGRATIONS[1]}; PRAGMA user_version = 2;")
        row = ("old", "alice", "files", "slow_tool", "working", None, epoch_us(T0), epoch_us(T0))
        db.execute("INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,NULL,NULL,500,NULL)", row)
    db.close()

    store = await open_store(path)

    assert await store.get_task("old") == make_task("old", ttl_ms=None)
    assert await store.add_input(ask("k", task_id="old")) is True
    assert await store.pending_inputs("old") == [ask("k", task_id="old")]
    await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
    db.close()
