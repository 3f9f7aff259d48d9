"""A task's status history and latest progress, as an operator reads them (`get_history`), on
every backend (a real SQLite file, a real PostgreSQL database).

DESIGN.md, "The operators' console": a task's page shows "its status history with times,
latest progress, pending questions, attempts". Each change is appended by the statement that
makes it (no write of its own), and only the latest `HISTORY_KEPT` are kept.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.protocol.outcome import Outcome
from gateway.tasks.history import HISTORY_KEPT, StatusChange, TaskHistory
from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.store import TaskStore

from .test_store import BACKENDS, Backend, Commits

T0 = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
SECOND = timedelta(seconds=1)
WORKING, INPUT = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED
COMPLETED, FAILED = TaskStatus.COMPLETED, TaskStatus.FAILED
RESULT = Outcome(kind="result", body={"content": []})


def make_task(task_id: str = "t", *, repeatable: bool = False, message: str | None = None) -> Task:
    return Task(
        task_id=task_id,
        owner="alice",
        route="files",
        tool="search",
        status=WORKING,
        status_message=message,
        created_at=T0,
        updated_at=T0,
        ttl_ms=60_000,
        poll_interval_ms=500,
        repeatable=repeatable,
    )


def at(seconds: int) -> datetime:
    return T0 + seconds * SECOND


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend.of(request, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[TaskStore]:
    opened: TaskStore = await backend.open()
    yield opened
    await opened.close()


async def test_a_new_task_has_its_creation_in_its_history_and_no_progress(
    store: TaskStore,
) -> None:
    await store.create_task(make_task(message="queued"))

    history = await store.get_history("t")

    assert history == TaskHistory(changes=(StatusChange(status=WORKING, at=T0, message="queued"),))
    assert await store.get_history("unknown") is None


async def test_questions_and_back_to_work_are_changes_and_a_message_alone_is_not(
    store: TaskStore,
) -> None:
    await store.create_task(make_task())
    await store.update_task("t", INPUT, "waiting for the client", at(1))
    # A second question while waiting: the same status, a message-only update.
    await store.update_task("t", INPUT, "waiting for the client again", at(2))
    await store.update_task("t", WORKING, None, at(3))

    history = await store.get_history("t")

    assert history is not None and history.dropped == 0
    assert history.changes == (
        StatusChange(status=WORKING, at=T0),
        StatusChange(status=INPUT, at=at(1), message="waiting for the client"),
        StatusChange(status=WORKING, at=at(3)),
    )


async def test_progress_is_kept_apart_from_the_status_message_a_move_replaces(
    store: TaskStore,
) -> None:
    await store.create_task(make_task())
    await store.note_task("t", "3/10: parsing", at(1))
    await store.update_task("t", INPUT, "waiting for the client", at(2))

    history = await store.get_history("t")

    assert history is not None
    assert (history.progress, history.progress_at) == ("3/10: parsing", at(1))
    # Progress is no status change: the history has the creation and the question only.
    assert [change.status for change in history.changes] == [WORKING, INPUT]


async def test_the_terminal_write_is_the_last_change_and_a_refused_one_adds_none(
    store: TaskStore,
) -> None:
    await store.create_task(make_task("done"))
    await store.create_task(make_task("lost"))
    await store.finish_task("done", COMPLETED, None, RESULT, at(1))
    await store.finish_task("done", FAILED, "too late", RESULT, at(2))
    await store.update_task("done", WORKING, "too late", at(2))
    await store.fail_running(["lost", "done"], "interrupted: gateway restarted", at(3))

    done = await store.get_history("done")
    lost = await store.get_history("lost")

    assert done is not None and done.changes[1:] == (StatusChange(status=COMPLETED, at=at(1)),)
    assert lost is not None and lost.changes[1:] == (
        StatusChange(status=FAILED, at=at(3), message="interrupted: gateway restarted"),
    )


async def test_a_run_begun_again_after_a_lost_process_shows_its_attempt(
    backend: Backend,
) -> None:
    first = await backend.open()
    await first.create_task(make_task(repeatable=True), request={"method": "tools/call"})
    await first.update_task("t", INPUT, "waiting for the client", at(1))
    await first.close()
    # The next process (a replica of another name, for PostgreSQL) claims it and runs it again.
    survivor = await backend.open("replica-survivor")
    assert [task.task_id for task in await survivor.claim_orphans()] == ["t"]

    await survivor.begin_attempt("t", 2, "restarted: attempt 2 of 3", at(2))
    # The same attempt begun twice (by a second claim) is no second change.
    await survivor.begin_attempt("t", 2, "restarted: attempt 2 of 3", at(3))

    history = await survivor.get_history("t")
    assert history is not None
    assert history.changes[-1] == StatusChange(
        status=WORKING, at=at(2), message="restarted: attempt 2 of 3", attempt=2
    )
    assert len(history.changes) == 3
    await survivor.close()


async def test_only_the_latest_changes_are_kept_and_the_dropped_ones_counted(
    store: TaskStore,
) -> None:
    await store.create_task(make_task())
    moves = 2 * HISTORY_KEPT  # creation + moves changes in all
    for n in range(1, moves + 1):
        await store.update_task("t", INPUT if n % 2 else WORKING, f"move {n}", at(n))

    history = await store.get_history("t")

    assert history is not None and len(history.changes) == HISTORY_KEPT
    assert history.dropped == moves + 1 - HISTORY_KEPT
    assert history.changes[-1] == StatusChange(
        status=WORKING, at=at(moves), message=f"move {moves}"
    )
    assert history.changes[0].message == f"move {moves + 1 - HISTORY_KEPT}"


async def test_a_long_message_is_kept_whole_on_the_task_and_cut_in_its_history(
    store: TaskStore,
) -> None:
    await store.create_task(make_task())
    message = "é" * 10_000
    failed = await store.finish_task("t", FAILED, message, RESULT, at(1))

    history = await store.get_history("t")

    assert failed is not None and failed.status_message == message
    assert history is not None and history.changes[-1].message == "é" * 500


async def test_each_change_is_written_in_the_commit_of_its_move(backend: Backend) -> None:
    commits = Commits()
    store = await backend.open(on_timing=commits)
    await store.create_task(make_task())
    before = commits.count

    await store.update_task("t", INPUT, "waiting", at(1))
    await store.update_task("t", WORKING, None, at(2))
    await store.finish_task("t", COMPLETED, None, RESULT, at(3))

    assert commits.count - before == 3
    await store.close()
