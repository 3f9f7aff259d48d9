"""The in-process wake-ups: a watch taken before a read hears every change after it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.notifier import Notifier


async def test_a_change_before_the_wait_began_is_not_missed() -> None:
    notifier = Notifier()
    with notifier.watch("t") as watch:
        notifier.task_changed("t")  # between the waiter's read and its wait
        async with asyncio.timeout(0.1):
            assert await watch.wait(5) is True
        # Heard once: the next wait waits for the next change, or for the backstop.
        assert await watch.wait(0.01) is False


async def test_a_watch_hears_every_change_until_closed_and_only_its_own_task() -> None:
    notifier = Notifier()
    watch = notifier.watch("t")
    notifier.task_changed("other")
    assert await watch.wait(0.01) is False
    for _ in range(3):  # one watch across the waiter's re-reads
        notifier.task_changed("t")
        assert await watch.wait(5) is True
    watch.close()
    notifier.task_changed("t")  # nothing left registered, nothing raised
    assert notifier._waiting == {}


async def test_all_changed_wakes_every_watch_and_keeps_them_watching() -> None:
    """After a listener's reconnection (news from other replicas may have been lost)."""
    notifier = Notifier()
    watches = [notifier.watch(task_id) for task_id in ("a", "a", "b")]
    notifier.all_changed()
    assert [await w.wait(5) for w in watches] == [True, True, True]
    notifier.task_changed("b")
    assert await watches[2].wait(5) is True
    for w in watches:
        w.close()
    assert notifier._waiting == {}


def _ended(task_id: str) -> Task:
    now = datetime(2026, 7, 28, tzinfo=UTC)
    return Task(
        task_id=task_id,
        owner="o",
        route="r",
        tool="x",
        status=TaskStatus.COMPLETED,
        created_at=now,
        updated_at=now,
        ttl_ms=None,
        poll_interval_ms=1000,
    )


async def test_an_end_written_here_reaches_on_end_at_once_and_once_and_wakes_the_watch() -> None:
    """A waiter answers from the run's terminal write, in the run's own turn of the loop."""
    notifier = Notifier()
    heard: list[tuple[str, Outcome]] = []
    outcome = Outcome(kind="result", body={"content": []})
    with notifier.watch("t") as watch, notifier.watch("t") as plain:
        watch.on_end = lambda task, out: heard.append((task.task_id, out))
        notifier.task_ended(_ended("t"), outcome)
        assert heard == [("t", outcome)]  # no turn of the loop in between
        assert await watch.wait(5) is True and await plain.wait(5) is True
        notifier.task_ended(_ended("t"), outcome)  # (a second end cannot be: heard once)
        assert heard == [("t", outcome)]
    assert notifier._waiting == {}


async def test_a_closed_watch_hears_no_end_and_a_failing_on_end_spares_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = Notifier()
    heard: list[str] = []
    outcome = Outcome.error(-32603, "boom")
    gone = notifier.watch("t")
    gone.on_end = lambda task, out: heard.append("gone")
    gone.close()

    def fail(task: Task, out: Outcome) -> None:
        raise RuntimeError("a bug in one waiter")

    with notifier.watch("t") as failing, notifier.watch("t") as other:
        failing.on_end = fail
        other.on_end = lambda task, out: heard.append("other")
        notifier.task_ended(_ended("t"), outcome)  # raises nothing into the run
        assert heard == ["other"]
        assert await failing.wait(5) is True
    assert "a waiter failed" in caplog.text
