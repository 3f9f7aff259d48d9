"""The in-process wake-ups: a watch taken before a read hears every change after it."""

from __future__ import annotations

import asyncio

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
