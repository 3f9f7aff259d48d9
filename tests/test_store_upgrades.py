"""Stores written by earlier gateways, opened by this one: everything they hold reads back.

Each fixture in tests/fixtures/stores was written by the code of the commit its maker names
(`make_schemaN.py`), not by this code: the first SQLite store (schema 1), and the schemas
before the two newest migrations (schemas 5 and 6). Every schema change ships a migration and
a fixture of the schema before it, so that an upgrade with tasks running, sessions open and
questions pending is tested, not hoped for.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.protocol.outcome import Outcome
from gateway.tasks.history import StatusChange, TaskHistory
from gateway.tasks.models import SessionRecord, Task, TaskStatus
from gateway.tasks.store import TaskStore, open_store
from gateway.tasks.store.sqlite.schema import MIGRATIONS

FIXTURES = Path(__file__).parent / "fixtures" / "stores"
STATUSES = {
    "working": TaskStatus.WORKING,
    "input-required": TaskStatus.INPUT_REQUIRED,
    "completed": TaskStatus.COMPLETED,
    "failed": TaskStatus.FAILED,
    "cancelled": TaskStatus.CANCELLED,
}


async def opened(tmp_path: Path, schema: int) -> TaskStore:
    """A copy of the fixture, opened (and so migrated) by this code."""
    path = tmp_path / "gateway.db"
    shutil.copyfile(FIXTURES / f"schema{schema}.db", path)
    return await open_store(path)


def test_every_schema_change_has_a_fixture_of_the_schema_before_it() -> None:
    # The newest migration is tested from the schema before it; a new migration needs a new
    # fixture (a make_schemaN.py run at the commit before it) and a test below.
    fixtures = sorted(int(p.stem.removeprefix("schema")) for p in FIXTURES.glob("schema*.db"))
    assert fixtures[0] == 1
    assert fixtures[-1] == len(MIGRATIONS) - 1


async def test_the_first_store_reads_back_whole_with_the_current_code(tmp_path: Path) -> None:
    store = await opened(tmp_path, 1)
    for task_id, status in STATUSES.items():
        task = await store.get_task(task_id)
        assert task is not None and task.status is status, task_id
        # Columns added since take the values the old tasks had implicitly.
        assert (task.generation, task.repeatable, task.attempt) == ("2025-11-25", False, 1)
    working = await store.find_task("working", "alice")
    assert working is not None and working.progress_token == 7
    waiting = await store.get_task("input-required")
    assert waiting is not None and waiting.progress_token == "p-1"
    assert waiting.status_message == "waiting for input"
    done = await store.get_outcome("completed")
    assert done == Outcome(kind="result", body={"content": [{"type": "text", "text": "done"}]})
    failed = await store.get_outcome("failed")
    assert failed is not None and failed.body["message"] == "the upstream failed"
    assert await store.find_task("failed", "alice") is None  # still bound to its owner
    session = await store.get_session("session-1")
    assert session is not None and session.principal == "alice"
    assert session.initialized == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert session.upstream_session_id is None and session.upstream_protocol_version is None
    assert {t.task_id for t in await store.claim_orphans()} == {"working", "input-required"}
    await writes_and_reopens(store, tmp_path)


async def test_the_schema_5_store_reads_back_whole_with_the_current_code(tmp_path: Path) -> None:
    store = await opened(tmp_path, 5)
    for task_id in ("working", "input-required", "completed", "failed", "cancelled"):
        task = await store.get_task(task_id)
        assert task is not None and task.status is STATUSES[task_id], task_id
    working = await store.find_task("working", "demo:alice")
    assert working is not None and working.status_message == "3/10: parsing"
    modern = await store.get_task("input-required")
    assert modern is not None and modern.generation == "2026-07-28"
    # The pending question is still asked; the answered and the withdrawn one are not.
    (pending,) = await store.pending_inputs("input-required")
    assert (pending.key, pending.upstream_id) == ("elicitation-1", "up-elicitation-1")
    assert await store.answered_inputs("input-required") == {"elicitation-2": {"action": "accept"}}
    again = await store.get_task("repeatable")
    assert again is not None and again.repeatable and again.attempt == 2
    kept = await store.get_request("repeatable")
    assert kept is not None and kept["params"]["name"] == "slow"
    call = await store.get_upstream_call("repeatable")
    assert call is not None and (call.session_id, call.request_id) == ("upstream-session", 11)
    session = await store.get_session("session-1")
    assert session is not None and session.upstream_session_id == "upstream-session"
    assert session.upstream_protocol_version is None  # schema 6's column, unknown before it
    await writes_and_reopens(store, tmp_path)


async def test_the_schema_6_store_reads_back_whole_and_its_tasks_gain_histories(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path, 6)
    for task_id in ("working", "input-required", "completed", "failed", "cancelled"):
        task = await store.get_task(task_id)
        assert task is not None and task.status is STATUSES[task_id], task_id
    session = await store.get_session("session-1")
    assert session is not None and session.upstream_protocol_version == "2025-06-18"
    # A task made before histories were kept has none, and says its earlier changes are
    # unknown rather than that there were none; its progress was not kept apart either.
    assert await store.get_history("working") == TaskHistory(dropped=None)
    later = datetime(2026, 11, 23, 12, 30, tzinfo=UTC)
    moved = await store.update_task("working", TaskStatus.INPUT_REQUIRED, "asked", later)
    assert moved is not None
    history = await store.get_history("working")
    assert history is not None and history.dropped is None
    assert history.changes == (
        StatusChange(status=TaskStatus.INPUT_REQUIRED, at=later, message="asked"),
    )
    await writes_and_reopens(store, tmp_path)


async def writes_and_reopens(store: TaskStore, tmp_path: Path) -> None:
    """The upgraded store takes new tasks and sessions, and opens again unchanged."""
    now = datetime(2026, 11, 23, 13, 0, tzinfo=UTC)
    new = Task(
        task_id="after-upgrade",
        owner="demo:alice",
        route="demo",
        tool="echo",
        status=TaskStatus.WORKING,
        created_at=now,
        updated_at=now,
        ttl_ms=60_000,
        poll_interval_ms=1000,
    )
    assert await store.create_task(new)
    record = SessionRecord(
        session_id="after-upgrade",
        route="demo",
        protocol_version="2025-11-25",
        initialize={},
        created_at=now,
        upstream_session_id="u",
        upstream_protocol_version="2025-11-25",
    )
    await store.save_session(record)
    later = now + timedelta(seconds=1)
    finished = await store.finish_task(
        "after-upgrade", TaskStatus.COMPLETED, None, Outcome(kind="result", body={}), later
    )
    assert finished is not None
    history = await store.get_history("after-upgrade")
    assert history is not None and history.dropped == 0
    assert [change.status for change in history.changes] == [
        TaskStatus.WORKING,
        TaskStatus.COMPLETED,
    ]
    await store.close()
    again = await open_store(tmp_path / "gateway.db")
    done = await again.get_task("after-upgrade")
    assert done is not None and done.status is TaskStatus.COMPLETED
    assert await again.get_session("after-upgrade") == record
    await again.close()


@pytest.mark.parametrize("schema", [1, 5, 6])
def test_a_fixture_is_never_changed_by_a_test(schema: int) -> None:
    # Each test migrates a copy: the fixture keeps the old schema for the next run.
    # immutable: reading it leaves no -wal or -shm file beside it.
    fixture = f"file:{FIXTURES / f'schema{schema}.db'}?immutable=1"
    with contextlib.closing(sqlite3.connect(fixture, uri=True)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (schema,)
