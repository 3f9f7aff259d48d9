"""The store's record of attempts: repeatable tasks, their stored requests, the upstream call
of the latest attempt, and the live tasks a restart finds; on every backend (a real SQLite
file, a real PostgreSQL database)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import AttemptCall, InputRequest, Task, TaskStatus, epoch_us
from gateway.tasks.store import TaskStore, open_store
from gateway.tasks.store.sqlite.schema import MIGRATIONS

from .test_store import BACKENDS, Backend, Commits, StoreUnderTest

T0 = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
SECOND = timedelta(seconds=1)
WORKING, INPUT = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED
RESULT = Outcome(kind="result", body={"content": []})
REQUEST: JsonObject = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "search", "arguments": {"q": "héllo \ud800", "n": 1.0, "all": True}},
}
RESTARTED = "restarted after the gateway stopped: attempt 2 of 3"


def make_task(
    task_id: str,
    *,
    owner: str = "alice",
    at: datetime = T0,
    status: TaskStatus = WORKING,
    repeatable: bool = True,
    ttl_ms: int | None = 60_000,
) -> Task:
    return Task(
        task_id=task_id,
        owner=owner,
        route="files",
        tool="search",
        status=status,
        created_at=at,
        updated_at=at,
        ttl_ms=ttl_ms,
        poll_interval_ms=500,
        repeatable=repeatable,
    )


def ask(key: str, task_id: str = "t") -> InputRequest:
    return InputRequest(
        task_id=task_id,
        key=key,
        method="elicitation/create",
        params={"message": "which file?"},
        upstream_id=1,
        created_at=T0,
    )


async def stored_calls(backend: Backend) -> list[tuple[Any, ...]]:
    """(task_id, request) of every task_calls row: what is at rest."""
    return await backend.rows("SELECT task_id, request FROM task_calls ORDER BY task_id")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend.of(request, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[StoreUnderTest]:
    opened = await backend.open()
    yield opened
    await opened.close()


async def test_a_repeatable_tasks_request_and_attempt_read_back_exactly(
    store: TaskStore,
) -> None:
    repeatable = make_task("t")
    await store.create_task(repeatable, request=REQUEST)
    await store.create_task(make_task("plain", repeatable=False))

    stored = await store.get_task("t")
    request = await store.get_request("t")

    assert stored == repeatable and stored.repeatable and stored.attempt == 1
    # Compared as JSON too: == alone would let True pass for 1 and 1.0 for 1.
    assert request == REQUEST and json.dumps(request) == json.dumps(REQUEST)
    plain = await store.get_task("plain")
    assert plain is not None and not plain.repeatable and plain.attempt == 1
    assert await store.get_request("plain") is None
    assert await store.get_request("unknown") is None


async def test_no_request_is_kept_for_a_task_that_is_not_repeatable(backend: Backend) -> None:
    store = await backend.open()

    with pytest.raises(ValueError):
        await store.create_task(make_task("plain", repeatable=False), request=REQUEST)

    assert await store.get_task("plain") is None
    await store.close()
    assert await stored_calls(backend) == []


async def test_a_task_refused_by_the_active_cap_keeps_no_request(backend: Backend) -> None:
    store = await backend.open()
    await store.create_task(make_task("first"), max_active=1, request=REQUEST)

    refused = await store.create_task(make_task("second"), max_active=1, request=REQUEST)

    assert refused is False and await store.get_task("second") is None
    await store.close()
    assert [task_id for task_id, _ in await stored_calls(backend)] == ["first"]


async def test_begin_attempt_makes_the_task_work_again_and_withdraws_earlier_questions(
    backend: Backend,
) -> None:
    commits = Commits()
    store = await backend.open(on_timing=commits)
    await store.create_task(make_task("t"), request=REQUEST)
    await store.add_input(ask("k1"))
    await store.update_task("t", INPUT, "which file?", T0 + SECOND)
    restart = T0 + timedelta(minutes=5)
    before = commits.count

    begun = await store.begin_attempt("t", 2, RESTARTED, restart)

    assert commits.count == before + 1  # the move and the withdrawal: one transaction
    assert begun is not None and begun.status == WORKING and begun.attempt == 2
    assert begun.status_message == RESTARTED and begun.updated_at == restart
    assert begun.created_at == T0  # the time limit and ttl still count from here
    assert await store.pending_inputs("t") == []
    # An answer to the earlier attempt's question is never delivered into this one.
    assert await store.answer_input("t", "k1", {"action": "accept"}, restart) is None
    assert await store.add_input(ask("k2")) is True  # the new attempt asks afresh
    assert await store.get_request("t") == REQUEST
    await store.close()
    reopened = await backend.open()
    assert await reopened.get_task("t") == begun
    await reopened.close()


async def test_begin_attempt_moves_only_a_live_task_to_a_later_attempt(
    store: TaskStore,
) -> None:
    await store.create_task(make_task("t"), request=REQUEST)
    await store.create_task(make_task("done"), request=REQUEST)
    await store.finish_task("done", TaskStatus.COMPLETED, None, RESULT, T0)
    second = await store.begin_attempt("t", 2, RESTARTED, T0 + SECOND)

    # Already begun (by this process or another), an earlier attempt, terminal, unknown.
    assert await store.begin_attempt("t", 2, "again", T0 + 2 * SECOND) is None
    assert await store.begin_attempt("t", 1, "back", T0 + 2 * SECOND) is None
    assert await store.begin_attempt("done", 2, RESTARTED, T0 + SECOND) is None
    assert await store.begin_attempt("unknown", 2, RESTARTED, T0 + SECOND) is None

    assert await store.get_task("t") == second
    done = await store.get_task("done")
    assert done is not None and done.status == TaskStatus.COMPLETED and done.attempt == 1


async def test_the_latest_upstream_call_is_kept_across_attempts_until_the_task_ends(
    store: TaskStore,
) -> None:
    await store.create_task(make_task("t"), request=REQUEST)
    await store.create_task(make_task("plain", repeatable=False))
    assert await store.get_upstream_call("t") is None

    await store.note_upstream_call("t", "upstream-session", 41)
    await store.note_upstream_call("t", "upstream-session", 42)
    await store.begin_attempt("t", 2, RESTARTED, T0 + SECOND)
    await store.note_upstream_call("plain", None, "r-1")

    # Still the first attempt's call: the next process may have to cancel it.
    assert await store.get_upstream_call("t") == AttemptCall(
        task_id="t", session_id="upstream-session", request_id=42
    )
    plain = await store.get_upstream_call("plain")
    assert plain == AttemptCall(task_id="plain", session_id=None, request_id="r-1")
    assert plain is not None and isinstance(plain.request_id, str)
    assert await store.get_request("plain") is None  # noting a call keeps no request

    await store.finish_task("t", TaskStatus.COMPLETED, None, RESULT, T0 + 2 * SECOND)
    await store.note_upstream_call("t", "upstream-session", 43)
    await store.note_upstream_call("unknown", None, 1)
    assert await store.get_upstream_call("t") is None
    assert await store.get_upstream_call("unknown") is None


async def test_every_terminal_write_deletes_the_stored_request_in_its_transaction(
    backend: Backend,
) -> None:
    store = await backend.open()
    ended = ["completed", "cancelled", "shut-down", "interrupted"]
    for task_id in ended:
        await store.create_task(make_task(task_id), request=REQUEST)
        await store.note_upstream_call(task_id, "s", 1)
    end = T0 + SECOND

    await store.finish_task("completed", TaskStatus.COMPLETED, None, RESULT, end)
    await store.finish_task("cancelled", TaskStatus.CANCELLED, "cancelled", None, end)
    await store.fail_running(["shut-down"], "interrupted: gateway shut down", end)
    assert await stored_calls(backend) == [("interrupted", json.dumps(REQUEST))]
    await store.fail_running(["interrupted"], "interrupted: gateway restarted", end)

    for task_id in ended:
        assert await store.get_request(task_id) is None
        assert await store.get_upstream_call(task_id) is None
    await store.close()
    assert await stored_calls(backend) == []


async def test_a_live_task_deleted_at_its_expiry_takes_its_stored_request_along(
    backend: Backend,
) -> None:
    store = await backend.open()
    await store.create_task(make_task("due", ttl_ms=1000), request=REQUEST)
    await store.create_task(make_task("kept", ttl_ms=None), request=REQUEST)

    assert await store.delete_expired(T0 + SECOND) == ["due"]

    assert await store.get_request("due") is None
    await store.close()
    assert await stored_calls(backend) == [("kept", json.dumps(REQUEST))]


async def test_a_restart_claims_every_owners_working_and_input_required_tasks_oldest_first(
    backend: Backend,
) -> None:
    store = await backend.open()
    tasks = [
        make_task("late", at=T0 + SECOND),
        make_task("bobs", owner="bob", repeatable=False),
        make_task("asking", status=INPUT),
        make_task("done"),
    ]
    for task in tasks:
        await store.create_task(task)
    await store.finish_task("done", TaskStatus.FAILED, "boom", RESULT, T0)
    await store.close()
    # The next process: a replica of another name, for PostgreSQL.
    restarted = await backend.open("replica-restarted")

    live = await restarted.claim_orphans()

    assert [task.task_id for task in live] == ["asking", "bobs", "late"]
    assert live == [tasks[2], tasks[1], tasks[0]]
    # Claimed, they are the restarted process's to settle.
    claimed = [task.task_id for task in live]
    failed = await restarted.fail_running(claimed, "interrupted: gateway restarted", T0 + SECOND)
    assert sorted(task.task_id for task in failed) == ["asking", "bobs", "late"]
    await restarted.close()


async def test_a_database_of_the_previous_schema_gains_attempts_and_keeps_its_tasks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    with sqlite3.connect(path) as db:  # what a gateway of the third schema left
        db.executescript(f"{'; '.join(MIGRATIONS[:3])}; PRAGMA user_version = 3;")
        row = ("old", "alice", "files", "search", "working", None, epoch_us(T0), epoch_us(T0))
        db.execute(
            "INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,NULL,NULL,500,NULL,'2025-11-25')", row
        )
    db.close()

    store = await open_store(path)

    assert await store.get_task("old") == make_task("old", repeatable=False, ttl_ms=None)
    assert await store.claim_orphans() == [make_task("old", repeatable=False, ttl_ms=None)]
    assert await store.get_request("old") is None
    await store.create_task(make_task("new"), request=REQUEST)
    assert await store.get_request("new") == REQUEST
    failed = await store.fail_running(["new", "old"], "interrupted: gateway restarted", T0 + SECOND)
    assert sorted(task.task_id for task in failed) == ["new", "old"]
    await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
    db.close()
    assert await stored_calls(Backend(path, None)) == []
