from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import SessionRecord, Task, TaskStatus, epoch_us, owner_of
from gateway.tasks.store import StoreInUse, TaskStore, open_store
from gateway.tasks.store.postgres import PostgresTaskStore, open_postgres_store
from gateway.tasks.store.sqlite.schema import MIGRATIONS, SQL
from gateway.tasks.store.sqlite.store import SqliteTaskStore

T0 = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
WORKING, INPUT = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED
COMPLETED, FAILED, CANCELLED = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED
RESULT = Outcome(kind="result", body={"content": [{"type": "text", "text": "done"}]})


def make_task(
    task_id: str,
    *,
    owner: str = "alice",
    at: datetime = T0,
    ttl_ms: int | None = 60_000,
    status: TaskStatus = WORKING,
    message: str | None = None,
    token: RequestId | None = None,
) -> Task:
    return Task(
        task_id=task_id,
        owner=owner,
        route="files",
        tool="slow_tool",
        status=status,
        status_message=message,
        created_at=at,
        updated_at=at,
        ttl_ms=ttl_ms,
        poll_interval_ms=500,
        progress_token=token,
    )


#: Every backend the shared store tests run on, and the replica a PostgreSQL store is.
BACKENDS = ["sqlite", "postgres"]
REPLICA = "replica-a"

StoreUnderTest = SqliteTaskStore | PostgresTaskStore


class Commits:
    """An `on_timing` that counts a store's commits, as the metrics do in production."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, operation: str, seconds: float) -> None:
        if operation == "commit":
            self.count += 1


class Backend:
    """One backend under test: stores opened on one database (a SQLite file, or a PostgreSQL
    database of the test's own), and that database's rows read directly."""

    def __init__(self, path: Path, url: str | None) -> None:
        self.path = path
        self.url = url

    @classmethod
    def of(cls, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
        """The backend a fixture's `request.param` names: only PostgreSQL's asks for a server."""
        url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
        return cls(tmp_path / "state" / "tasks.db", url)

    async def open(
        self, replica: str = REPLICA, on_timing: Callable[[str, float], None] | None = None
    ) -> StoreUnderTest:
        """A store on the database: a (re)started process's for SQLite, the replica
        `replica`'s for PostgreSQL."""
        if self.url is None:
            return await open_store(self.path, on_timing)
        return await open_postgres_store(self.url, replica, on_timing=on_timing)

    async def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """What `sql` selects, read past the store: what is at rest."""
        if self.url is None:
            with sqlite3.connect(self.path) as db:
                rows: list[tuple[Any, ...]] = db.execute(sql).fetchall()
            db.close()
            return rows
        conn = await asyncpg.connect(self.url)
        try:
            return [tuple(row) for row in await conn.fetch(sql)]
        finally:
            await conn.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend.of(request, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[TaskStore]:
    opened: TaskStore = await backend.open()
    yield opened
    await opened.close()


async def test_created_task_reads_back_with_every_field(store: TaskStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    tasks = [
        make_task("no-ttl-int-token", ttl_ms=None, token=7),
        make_task("str-token", token="7", message="queued"),
        make_task("other-zone", at=T0.astimezone(plus_two), token=None),
    ]
    for task in tasks:
        await store.create_task(task)

    for task in tasks:
        stored = await store.get_task(task.task_id)
        assert stored == task
        assert stored.created_at.utcoffset() == timedelta(0)
    tokens = [(await store.get_task(t.task_id)) for t in tasks[:2]]
    assert [type(t.progress_token) for t in tokens if t] == [int, str]
    assert await store.get_task("unknown") is None


async def test_a_heeded_task_reads_back_as_it_is_whatever_its_status(store: TaskStore) -> None:
    await store.create_task(make_task("live"))
    await store.create_task(make_task("done"))
    done = await store.finish_task("done", COMPLETED, None, None, T0)

    assert await store.heed_task("live") == make_task("live")
    assert await store.heed_task("live") == make_task("live")  # twice: the same
    assert await store.heed_task("done") == done
    assert await store.heed_task("unknown") is None


async def test_list_pages_by_keyset_over_one_owners_live_tasks(store: TaskStore) -> None:
    second = T0 + timedelta(microseconds=1)
    mine = [make_task("a", at=T0), make_task("b", at=T0), make_task("c", at=second)]
    mine.append(make_task("d", at=second, ttl_ms=None))
    others = [make_task("e", owner="bob"), make_task("f", at=T0 - timedelta(hours=1), ttl_ms=1)]
    for task in [*reversed(mine), *others]:
        await store.create_task(task)
    now = T0 + timedelta(seconds=1)

    first = await store.list_tasks("alice", None, 2, now)
    rest = await store.list_tasks("alice", (first[-1].created_at, first[-1].task_id), 2, now)
    last = await store.list_tasks("alice", (rest[-1].created_at, rest[-1].task_id), 2, now)

    assert [t.task_id for t in first + rest] == ["a", "b", "c", "d"]
    assert last == []
    assert await store.list_tasks("alice", None, 10, T0 + timedelta(minutes=2)) == [mine[3]]


async def test_update_task_follows_the_lifecycle_and_allows_message_only_updates(
    store: TaskStore,
) -> None:
    await store.create_task(make_task("t"))
    later = T0 + timedelta(seconds=3)

    asking = await store.update_task("t", INPUT, "need a file name", later)
    back = await store.update_task("t", WORKING, None, later)
    progress = await store.update_task("t", WORKING, "50%", later + timedelta(seconds=1))

    assert asking is not None and asking.status == INPUT
    assert asking.status_message == "need a file name" and asking.updated_at == later
    assert back is not None and back.status == WORKING and back.status_message is None
    assert progress == await store.get_task("t")
    assert progress is not None and progress.status_message == "50%"


async def test_update_task_refuses_unknown_and_terminal_tasks(store: TaskStore) -> None:
    await store.create_task(make_task("t"))
    await store.finish_task("t", COMPLETED, None, RESULT, T0)

    assert await store.update_task("t", WORKING, "again", T0) is None
    assert await store.update_task("unknown", WORKING, None, T0) is None
    with pytest.raises(ValueError):
        await store.update_task("t", FAILED, None, T0)
    with pytest.raises(ValueError):
        await store.finish_task("t", WORKING, None, None, T0)
    stored = await store.get_task("t")
    assert stored is not None and stored.status == COMPLETED


async def test_finish_task_writes_only_the_first_terminal_status(store: TaskStore) -> None:
    await store.create_task(make_task("t", status=INPUT))
    error = Outcome.error(-32000, "boom")

    first = await store.finish_task("t", COMPLETED, None, RESULT, T0 + timedelta(seconds=1))
    second = await store.finish_task("t", FAILED, "boom", error, T0 + timedelta(seconds=2))

    assert first is not None and first.status == COMPLETED
    assert second is None
    assert await store.get_task("t") == first
    assert await store.get_outcome("t") == RESULT
    assert await store.finish_task("unknown", COMPLETED, None, RESULT, T0) is None


async def test_cancelled_task_stays_cancelled_when_the_call_completes(store: TaskStore) -> None:
    await store.create_task(make_task("t"))

    cancelled = await store.finish_task("t", CANCELLED, "cancelled by client", None, T0)
    late = await store.finish_task("t", COMPLETED, None, RESULT, T0 + timedelta(seconds=1))

    assert late is None
    assert await store.get_task("t") == cancelled
    assert await store.get_outcome("t") is None


async def test_outcome_body_round_trips_exactly(store: TaskStore) -> None:
    body: dict[str, Any] = {
        "content": [{"type": "text", "text": "héllo ✓ 🚀 \u0000 \ud800"}],
        "big": 2**100,
        "floats": [0.1, 1e308, -0.0, 5e-324, 1.0],
        "flags": [True, False, None, 1, 0],
        "nested": {"a": {"b": [[], {}, [{"c": "d"}]]}},
        "isError": False,
    }
    await store.create_task(make_task("t"))
    await store.finish_task("t", COMPLETED, None, Outcome(kind="result", body=body), T0)

    outcome = await store.get_outcome("t")

    assert outcome is not None and outcome.kind == "result"
    # Compared as JSON too: == alone would let True pass for 1 and 1.0 for 1.
    assert outcome.body == body and json.dumps(outcome.body) == json.dumps(body)


async def test_delete_expired_removes_tasks_at_expiry_with_their_outcomes(
    store: TaskStore,
) -> None:
    for task in [make_task("due", ttl_ms=1000), make_task("later", ttl_ms=1001)]:
        await store.create_task(task)
    await store.create_task(make_task("forever", ttl_ms=None))
    await store.finish_task("due", COMPLETED, None, RESULT, T0)

    deleted = await store.delete_expired(T0 + timedelta(seconds=1))

    assert deleted == ["due"]
    assert await store.get_task("due") is None and await store.get_outcome("due") is None
    assert await store.get_task("later") is not None
    assert await store.delete_expired(T0 + timedelta(days=365)) == ["later"]


async def test_a_restart_fails_the_live_tasks_it_claims_with_an_internal_error(
    backend: Backend,
) -> None:
    store = await backend.open()
    for task in [make_task("w"), make_task("i", status=INPUT), make_task("done")]:
        await store.create_task(task)
    done = await store.finish_task("done", COMPLETED, None, RESULT, T0)
    await store.close()
    restarted = await backend.open("replica-restarted")
    restart = T0 + timedelta(minutes=5)

    claimed = [task.task_id for task in await restarted.claim_orphans()]
    failed = await restarted.fail_running(claimed, "gateway restarted", restart)

    assert sorted(t.task_id for t in failed) == ["i", "w"]
    for task in failed:
        assert task.status == FAILED and task.status_message == "gateway restarted"
        assert task.updated_at == restart and await restarted.get_task(task.task_id) == task
        outcome = await restarted.get_outcome(task.task_id)
        assert outcome == Outcome.error(-32603, "gateway restarted")
    assert await restarted.get_task("done") == done
    assert await restarted.get_outcome("done") == RESULT
    assert await restarted.fail_running(claimed, "gateway restarted", restart) == []
    await restarted.close()


async def test_fail_running_fails_the_listed_live_tasks_in_one_commit_and_only_once(
    backend: Backend,
) -> None:
    commits = Commits()
    store = await backend.open(on_timing=commits)
    ids = [f"t{n:04}" for n in range(1000)]
    await asyncio.gather(*(store.create_task(make_task(i)) for i in [*ids, "other", "done"]))
    done = await store.finish_task("done", COMPLETED, None, RESULT, T0)
    before = commits.count
    shutdown = T0 + timedelta(minutes=1)

    failed = await store.fail_running([*ids, "done", "unknown"], "gateway shut down", shutdown)

    assert commits.count == before + 1  # one fsync for them all, not one per task
    assert sorted(t.task_id for t in failed) == ids
    assert all(t.status == FAILED and t.status_message == "gateway shut down" for t in failed)
    assert await store.get_outcome("t0999") == Outcome.error(-32603, "gateway shut down")
    # The run's own terminal write that follows is refused: the task ends exactly once.
    assert await store.finish_task("t0000", COMPLETED, None, RESULT, shutdown) is None
    assert await store.get_task("done") == done and await store.get_outcome("done") == RESULT
    other = await store.get_task("other")
    assert other is not None and other.status == WORKING  # not listed: another process's
    await store.close()


async def test_a_second_store_on_the_same_file_is_refused_before_it_reads_or_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    first = await open_store(path)
    await first.create_task(make_task("running"))

    with pytest.raises(StoreInUse) as refused:
        await open_store(path)

    message = str(refused.value)
    assert str(path) in message and f"{path}.lock" in message and "store.path" in message
    assert "\n" not in message
    running = await first.get_task("running")
    assert running is not None and running.status == WORKING
    await first.close()
    # Closing lets the next process have it; a failed attempt left nothing held.
    second = await open_store(path)
    assert await second.fail_running(["running"], "gateway restarted", T0) != []
    await second.close()


async def test_the_active_task_count_reads_the_live_index_not_the_finished_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    store = await open_store(path)
    finished = [make_task(f"old{n}", status=COMPLETED) for n in range(2000)]
    await asyncio.gather(*(store.create_task(t) for t in finished))
    await store.create_task(make_task("live"))
    await store.create_task(make_task("asking", status=INPUT))

    assert await store.create_task(make_task("third"), max_active=3) is True
    assert await store.create_task(make_task("fourth"), max_active=3) is False
    await store.close()
    with sqlite3.connect(path) as db:
        plan = " ".join(
            str(row) for row in db.execute(f"EXPLAIN QUERY PLAN {SQL.count_live}", ("a", 3))
        )
    # The partial index holds live rows only: the count never walks the finished ones.
    assert "tasks_live" in plan


async def test_the_active_task_count_stops_at_the_cap(tmp_path: Path) -> None:
    """A caller far past a lowered cap (tasks made before it was lowered) is still refused,
    and the count read is the cap, not every live task: it walks no further."""
    path = tmp_path / "tasks.db"
    store = await open_store(path)
    await asyncio.gather(*(store.create_task(make_task(f"live{n}")) for n in range(50)))

    assert await store.create_task(make_task("over"), max_active=5) is False
    await store.close()
    with sqlite3.connect(path) as db:
        (counted,) = db.execute(SQL.count_live, ("alice", 5)).fetchone()
    assert counted == 5


async def test_session_records_unseen_for_the_idle_time_are_pruned_and_live_ones_kept(
    store: TaskStore,
) -> None:
    def record(session_id: str, at: datetime) -> SessionRecord:
        return SessionRecord(
            session_id=session_id,
            route="r",
            protocol_version="2025-11-25",
            initialize={},
            created_at=at,
        )

    for session_id in ["gone", "live", "recent"]:
        await store.save_session(record(session_id, T0))
    await store.save_session(record("recent", T0).model_copy(update={"initialized": {"m": 1}}))
    hour = timedelta(hours=1)
    await store.prune_sessions(["recent"], T0 + hour / 2, T0 - hour)  # "recent" is seen

    pruned = await store.prune_sessions(["live"], T0 + hour + timedelta(seconds=1), T0 + hour / 4)

    assert pruned == ["gone"]
    assert await store.get_session("gone") is None
    assert await store.get_session("live") is not None
    # Saving a record again (its `initialized` arrives) does not set it back to unseen.
    await store.save_session(record("recent", T0))
    assert await store.prune_sessions([], T0 + hour, T0 + hour / 4) == []
    assert await store.prune_sessions([], T0 + hour, T0 + hour) == ["recent"]


async def test_a_first_schema_file_gains_last_seen_times_from_creation(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    with sqlite3.connect(path) as db:  # what a gateway of the first schema left
        db.executescript(MIGRATIONS[0] + "; PRAGMA user_version = 1;")
        for session_id, at in [("older", T0), ("newer", T0 + timedelta(minutes=10))]:
            row = (session_id, "r", None, "2025-11-25", "{}", None, epoch_us(at))
            db.execute("INSERT INTO sessions VALUES (?,?,?,?,?,?,?)", row)
    db.close()

    store = await open_store(path)
    pruned = await store.prune_sessions([], T0 + timedelta(hours=2), T0 + timedelta(minutes=5))

    assert pruned == ["older"] and await store.get_session("newer") is not None
    await store.close()


async def test_sessions_round_trip_are_replaced_and_deleted(store: TaskStore) -> None:
    record = SessionRecord(
        session_id="s1",
        route="files",
        protocol_version="2025-11-25",
        initialize={"method": "initialize", "params": {"clientInfo": {"name": "ü"}}},
        created_at=T0,
    )
    await store.save_session(record)
    assert await store.get_session("s1") == record

    updated = record.model_copy(update={"principal": "alice", "initialized": {"method": "x"}})
    await store.save_session(updated)
    assert await store.get_session("s1") == updated

    await store.delete_session("s1")
    assert await store.get_session("s1") is None


async def test_a_sessions_upstream_session_and_version_are_kept_and_replaced(
    backend: Backend,
) -> None:
    store = await backend.open()
    record = SessionRecord(
        session_id="s",
        route="files",
        protocol_version="2025-11-25",
        initialize={},
        created_at=T0,
        upstream_session_id="upstream-1",
        upstream_protocol_version="2025-06-18",
    )
    await store.save_session(record)
    await store.save_session(record.model_copy(update={"session_id": "stdio"}))
    replaced = {"upstream_session_id": "upstream-2", "upstream_protocol_version": "2025-11-25"}
    await store.save_session(record.model_copy(update=replaced))
    none = {"session_id": "stdio", "upstream_session_id": None, "upstream_protocol_version": None}
    await store.save_session(record.model_copy(update=none))
    await store.close()
    # Read back by another process (SQLite) or another replica (PostgreSQL).
    other = await backend.open("replica-b")

    kept = await other.get_session("s")
    assert kept is not None and kept.upstream_session_id == "upstream-2"
    assert kept.upstream_protocol_version == "2025-11-25"
    stdio = await other.get_session("stdio")
    assert stdio is not None and stdio.upstream_session_id is None
    assert stdio.upstream_protocol_version is None
    await other.close()


async def test_updating_a_session_record_never_brings_back_one_deleted_meanwhile(
    backend: Backend,
) -> None:
    store = await backend.open()
    record = SessionRecord(
        session_id="s", route="files", protocol_version="2025-11-25", initialize={}, created_at=T0
    )
    await store.save_session(record)
    later = record.model_copy(update={"upstream_session_id": "upstream-2"})
    assert await store.update_session(later) is True
    assert await store.get_session("s") == later
    await store.delete_session("s")
    # Another replica ended the session while this one replayed its handshake.
    assert await store.update_session(later) is False
    assert await store.get_session("s") is None
    await store.close()


async def test_secret_is_random_per_file_and_kept_across_reopen(tmp_path: Path) -> None:
    first = await open_store(tmp_path / "a.db")
    other = await open_store(tmp_path / "b.db")
    secret = await first.secret()
    await first.close()
    reopened = await open_store(tmp_path / "a.db")

    assert len(secret) == 32
    assert await reopened.secret() == secret != await other.secret()
    await reopened.close()
    await other.close()


async def test_everything_survives_reopening_the_store(backend: Backend) -> None:
    store = await backend.open()
    await store.create_task(make_task("live", token="p"))
    await store.create_task(make_task("done", ttl_ms=None))
    live = await store.update_task("live", INPUT, "waiting", T0 + timedelta(seconds=1))
    done = await store.finish_task("done", COMPLETED, None, RESULT, T0)
    session = SessionRecord(
        session_id="s", route="files", protocol_version="2025-06-18", initialize={}, created_at=T0
    )
    await store.save_session(session)
    await store.close()

    reopened = await backend.open()

    assert await reopened.get_task("live") == live
    assert await reopened.get_task("done") == done
    assert await reopened.get_outcome("done") == RESULT
    assert await reopened.get_session("s") == session
    assert await reopened.list_tasks("alice", None, 10, T0) == [done, live]
    await reopened.close()


async def test_concurrent_creates_share_commits(tmp_path: Path) -> None:
    commits = Commits()
    store = await open_store(tmp_path / "tasks.db", commits)
    tasks = [make_task(f"t{n:03}") for n in range(200)]

    await asyncio.gather(*(store.create_task(task) for task in tasks))

    assert await store.list_tasks("alice", None, 500, T0) == tasks
    assert commits.count < 10
    await store.close()


async def test_failing_write_fails_only_its_caller_and_the_batch_commits(tmp_path: Path) -> None:
    commits = Commits()
    store = await open_store(tmp_path / "tasks.db", commits)
    await store.create_task(make_task("taken"))
    before = commits.count
    batch = [make_task("a"), make_task("taken", owner="bob"), make_task("b")]

    results = await asyncio.gather(*(store.create_task(t) for t in batch), return_exceptions=True)

    assert results[0] is True and results[2] is True
    assert isinstance(results[1], sqlite3.IntegrityError)
    assert commits.count == before + 1
    assert [t.task_id for t in await store.list_tasks("alice", None, 10, T0)] == ["a", "b", "taken"]
    await store.close()


async def test_close_commits_queued_writes_and_refuses_later_ones(backend: Backend) -> None:
    store = await backend.open()

    await asyncio.gather(store.create_task(make_task("queued")), store.close())

    with pytest.raises(RuntimeError):
        await store.create_task(make_task("late"))
    reopened = await backend.open()
    assert await reopened.get_task("queued") == make_task("queued")
    await reopened.close()


async def test_a_schema_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await (await open_store(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")

    with pytest.raises(RuntimeError):
        await open_store(path)


async def test_create_task_refuses_beyond_the_owners_active_limit_atomically(
    backend: Backend,
) -> None:
    store = await backend.open()
    tasks = [make_task(f"t{i}") for i in range(5)]
    # All in one batch: the cap must hold even when the writes commit together.
    created = await asyncio.gather(*(store.create_task(t, max_active=3) for t in tasks))
    await store.finish_task("t0", TaskStatus.COMPLETED, None, None, T0)
    after_one_ended = await store.create_task(make_task("late"), max_active=3)
    await store.close()
    assert created.count(True) == 3 and after_one_ended is True


async def test_sqlite_polls_read_what_was_committed_whether_kept_in_memory_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Live tasks are kept in memory up to a bound (2 here); past it they are read from the file.
    monkeypatch.setattr("gateway.tasks.store.sqlite.cache._LIVE_KEPT", 2)
    store = await open_store(tmp_path / "tasks.db")
    for name in ("a", "b", "c"):
        assert await store.create_task(make_task(name))
    later = T0 + timedelta(seconds=1)
    await store.update_task("a", TaskStatus.INPUT_REQUIRED, "waiting", later)  # "a" was evicted
    await store.note_task("c", "3/10", later)
    a, c = await store.find_task("a", "alice"), await store.get_task("c")
    assert a is not None and a.status is TaskStatus.INPUT_REQUIRED and a.updated_at == later
    assert c is not None and c.status_message == "3/10"
    assert await store.find_task("c", "mallory") is None  # another owner's: as if unknown
    await store.finish_task("c", TaskStatus.COMPLETED, None, Outcome(kind="result", body={}), later)
    done = await store.find_task("c", "alice")
    assert done is not None and done.status is TaskStatus.COMPLETED
    await store.close()


async def test_sqlite_a_terminal_write_made_from_the_kept_copy_returns_what_the_file_holds(
    tmp_path: Path,
) -> None:
    # The terminal write of a task kept in memory makes the moved task from that copy rather
    # than reading the row back: whatever happened to the row before, in earlier commits or
    # earlier in the same batch, the task returned is the one a fresh store reads.
    path = tmp_path / "tasks.db"
    store = await open_store(path)
    for name in ("plain", "noted", "asked", "rerun", "cancelled"):
        assert await store.create_task(make_task(name))
    later = T0 + timedelta(seconds=1)
    await store.note_task("noted", "3/10", later)
    await store.update_task("asked", INPUT, "a question", later)
    # Not UTC: the copy must hold the time as the file does.
    end = datetime(2025, 3, 4, 7, 6, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    returned = {
        name: await store.finish_task(name, COMPLETED, "done", RESULT, end)
        for name in ("plain", "noted", "asked")
    }
    # Its run begun again in the same batch as the terminal write of the kept attempt 1.
    begun, returned["rerun"] = await asyncio.gather(
        store.begin_attempt("rerun", 2, "running again", later),
        store.finish_task("rerun", COMPLETED, "done", RESULT, end),
    )
    assert begun is not None and begun.attempt == 2
    # Cancelled earlier in the same batch as the completion, both made from the kept copy.
    returned["cancelled"], late = await asyncio.gather(
        store.finish_task("cancelled", CANCELLED, "by the client", None, later),
        store.finish_task("cancelled", COMPLETED, "done", RESULT, end),
    )
    assert late is None
    await store.close()

    reopened = await open_store(path)
    for name, task in returned.items():
        assert task is not None and task == await reopened.get_task(name), name
        assert task.updated_at.tzinfo is UTC  # as read back, so printed the same
    statuses = [task.status if task else None for task in returned.values()]
    assert statuses == [COMPLETED] * 4 + [CANCELLED]
    assert returned["rerun"] is not None and returned["rerun"].attempt == 2
    await reopened.close()


async def finished(tmp_path: Path, bodies: dict[str, Any]) -> tuple[TaskStore, list[str]]:
    """A SQLite store with a task completed with each of `bodies`, in order, and the reads it
    makes from then on."""
    reads: list[str] = []
    store = await open_store(tmp_path / "tasks.db", lambda what, _: reads.append(what))
    for name, body in bodies.items():
        await store.create_task(make_task(name))
        await store.finish_task(name, COMPLETED, "ok", Outcome(kind="result", body=body), T0)
    reads.clear()
    return store, reads


async def test_sqlite_a_task_just_finished_and_its_outcome_are_read_without_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The poll that sees the terminal status and the tasks/result after it come right after
    # the terminal write: both are answered from what that write committed, up to a bound
    # (one task here), and past it from the file, with the same answer.
    monkeypatch.setattr("gateway.tasks.store.sqlite.cache._ENDED_KEPT", 1)
    body = {"content": [{"type": "text", "text": "done"}], "n": 2**70}
    store, reads = await finished(tmp_path, {"old": body, "new": body})

    new, outcome = await store.find_task("new", "alice"), await store.get_outcome("new")
    assert reads == []
    assert new is not None and new.status is COMPLETED and new.status_message == "ok"
    assert outcome == Outcome(kind="result", body=body)

    assert await store.find_task("new", "mallory") is None  # another owner's: read as unknown
    old, old_outcome = await store.find_task("old", "alice"), await store.get_outcome("old")
    assert reads == ["read"] * 3
    assert old is not None and old.status is COMPLETED and old_outcome == outcome
    await store.close()


async def test_sqlite_a_large_outcome_is_read_from_the_file_and_keeps_the_small_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gateway.tasks.store.sqlite.cache._ENDED_BYTES", 16_000)
    small, large = {"text": "s"}, {"text": "x" * 1_001}  # over a sixteenth of the bytes
    store, reads = await finished(tmp_path, {"small": small, "large": large})

    assert (await store.get_outcome("small")) == Outcome(kind="result", body=small)
    assert reads == []
    assert (await store.get_outcome("large")) == Outcome(kind="result", body=large)
    assert reads == ["read"]
    await store.close()


async def test_what_an_owners_tasks_keep_is_counted_in_bytes(store: TaskStore) -> None:
    assert await store.stored_bytes("alice") == 0
    await store.create_task(make_task("plain"))
    repeatable = replace(make_task("again"), repeatable=True)
    await store.create_task(repeatable, request={"method": "tools/call", "params": {"é": 1}})
    await store.create_task(make_task("bobs", owner="bob"))
    body = {"content": [{"type": "text", "text": "héllo"}]}
    later = T0 + timedelta(seconds=1)
    await store.finish_task(
        "plain", TaskStatus.COMPLETED, None, Outcome(kind="result", body=body), later
    )
    await store.finish_task(
        "bobs", TaskStatus.COMPLETED, None, Outcome(kind="result", body=body), later
    )
    kept_request = len(json.dumps({"method": "tools/call", "params": {"é": 1}}).encode())
    # Stored as JSON text; counted in bytes (é is two), whatever the backend.
    assert await store.stored_bytes("alice") == len(json.dumps(body).encode()) + kept_request
    assert await store.stored_bytes("nobody") == 0


def record_of(session_id: str, principal: str | None) -> SessionRecord:
    return SessionRecord(
        session_id=session_id,
        route="files",
        principal=principal,
        protocol_version="2025-11-25",
        initialize={},
        created_at=T0,
    )


async def fill(store: TaskStore) -> None:
    """alice on two routes, bob, and a principal whose name ends in alice's."""
    for task_id, route, principal in [
        ("a1", "files", "alice"),
        ("a2", "mail", "alice"),
        ("b1", "files", "bob"),
        ("x1", "files", "x:alice"),
    ]:
        owner = owner_of(route, principal)
        assert owner is not None
        task = replace(make_task(task_id, owner=owner), route=route)
        await store.create_task(task)
    body = Outcome(kind="result", body={"content": []})
    await store.finish_task("a1", TaskStatus.COMPLETED, None, body, T0)
    for session_id, holder in [("sa", "alice"), ("sb", "bob"), ("sn", None)]:
        await store.save_session(record_of(session_id, holder))


async def test_a_principal_is_erased_from_every_route_and_nobody_else_is(
    store: TaskStore,
) -> None:
    await fill(store)
    assert await store.erase_principal("alice") == (2, 1)
    assert await store.get_task("a1") is None and await store.get_task("a2") is None
    assert await store.get_outcome("a1") is None
    assert await store.get_task("b1") is not None and await store.get_task("x1") is not None
    assert await store.get_session("sa") is None
    assert await store.get_session("sb") is not None and await store.get_session("sn") is not None
    assert await store.erase_principal("alice") == (0, 0)
