"""What the operator's admin API reads and deletes, on every backend (a real SQLite file, a
real PostgreSQL database): tasks of every owner chosen by route, principal, status and age;
purges of finished tasks only; session records by route and principal."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from gateway.protocol.outcome import Outcome
from gateway.tasks.models import SessionRecord, TaskFilter, TaskStatus, owner_of, principal_of
from gateway.tasks.store import TaskStore

from . import test_store
from .test_store import T0, make_task, record_of

# The store suite's own fixtures: every test here runs on each backend, as its tests do.
backend, store = test_store.backend, test_store.store

HOUR = timedelta(hours=1)
RESULT = Outcome(kind="result", body={"content": []})


async def filled(store: TaskStore) -> None:
    """Tasks an hour apart: alice's on two routes, bob's, one of a principal whose name ends in
    alice's, one of a session without a principal; some finished."""
    for hours, (task_id, route, principal) in enumerate(
        [
            ("a1", "files", "alice"),
            ("a2", "mail", "alice"),
            ("b1", "files", "bob"),
            ("x1", "files", "x:alice"),
            ("s1", "files", None),
        ]
    ):
        owner = owner_of(route, principal) or "session:abc"
        task = make_task(task_id, owner=owner, at=T0 + hours * HOUR, ttl_ms=1)
        await store.create_task(replace(task, route=route))
    await store.finish_task("a1", TaskStatus.COMPLETED, None, RESULT, T0)
    await store.finish_task("b1", TaskStatus.FAILED, "boom", RESULT, T0)
    await store.finish_task("s1", TaskStatus.CANCELLED, "stop", None, T0)


async def ids(store: TaskStore, **choice: object) -> list[str]:
    return [task.task_id for task in await store.query_tasks(TaskFilter.model_validate(choice))]


async def test_an_operator_sees_every_owners_tasks_oldest_first_expired_ones_too(
    store: TaskStore,
) -> None:
    await filled(store)

    everything = await store.query_tasks(TaskFilter())

    assert [t.task_id for t in everything] == ["a1", "a2", "b1", "x1", "s1"]
    assert [principal_of(t) for t in everything] == ["alice", "alice", "bob", "x:alice", None]
    assert everything[2].status == TaskStatus.FAILED and everything[2].status_message == "boom"
    assert await ids(store, limit=2) == ["a1", "a2"]


async def test_each_filter_narrows_the_choice_and_they_combine(store: TaskStore) -> None:
    await filled(store)

    assert await ids(store, route="files") == ["a1", "b1", "x1", "s1"]
    # Whole names: "x:alice" on route files is not alice's.
    assert await ids(store, principal="alice") == ["a1", "a2"]
    assert await ids(store, principal="alice", route="mail") == ["a2"]
    assert await ids(store, status="working") == ["a2", "x1"]
    assert await ids(store, status="cancelled", route="files") == ["s1"]
    assert await ids(store, created_before=T0 + 2 * HOUR) == ["a1", "a2"]
    assert await ids(store, created_before=T0) == []
    assert await ids(store, route="nowhere") == []
    assert await ids(store, principal="nobody") == []


async def test_a_purge_deletes_finished_tasks_only_whatever_the_filter_says(
    store: TaskStore,
) -> None:
    await filled(store)

    working = await store.purge_tasks(TaskFilter(status=TaskStatus.WORKING))
    old = await store.purge_tasks(TaskFilter(created_before=T0 + 2 * HOUR))
    rest = await store.purge_tasks(TaskFilter(route="files"))

    assert working == []
    assert old == ["a1"]  # a2 is as old, but still working
    assert sorted(rest) == ["b1", "s1"]
    assert await ids(store) == ["a2", "x1"]
    assert await store.get_outcome("a1") is None and await store.get_outcome("b1") is None


async def test_a_purge_takes_at_most_its_limit_oldest_first(store: TaskStore) -> None:
    for n in range(5):
        await store.create_task(make_task(f"t{n}", at=T0 + n * HOUR))
        await store.finish_task(f"t{n}", TaskStatus.COMPLETED, None, RESULT, T0)

    first = await store.purge_tasks(TaskFilter(limit=2))
    second = await store.purge_tasks(TaskFilter(limit=2))
    third = await store.purge_tasks(TaskFilter(limit=2))

    assert (sorted(first), sorted(second), third) == (["t0", "t1"], ["t2", "t3"], ["t4"])
    assert await store.purge_tasks(TaskFilter()) == []


async def test_session_records_are_chosen_by_route_and_principal(store: TaskStore) -> None:
    records: list[SessionRecord] = []
    for n, (route, principal) in enumerate(
        [("files", "alice"), ("mail", "alice"), ("files", None)]
    ):
        record = record_of(f"s{n}", principal)
        record = record.model_copy(update={"route": route, "created_at": T0 + n * HOUR})
        records.append(record)
        await store.save_session(record)

    async def sessions(route: str | None, principal: str | None, limit: int = 10) -> list[str]:
        return [r.session_id for r in await store.query_sessions(route, principal, limit)]

    assert await store.query_sessions(None, None, 10) == records
    assert await sessions("files", None) == ["s0", "s2"]
    assert await sessions(None, "alice") == ["s0", "s1"]
    assert await sessions("mail", "alice") == ["s1"]
    assert await sessions(None, None, limit=1) == ["s0"]
    assert await sessions("nowhere", None) == []
