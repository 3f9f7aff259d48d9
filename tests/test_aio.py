"""`TaskSet`: owned background tasks. Its quiet spawn (no done callback, used once per
relayed call) must neither lose a running task nor keep finished ones without bound."""

from __future__ import annotations

import asyncio

from gateway.aio import TaskSet


async def test_quietly_spawned_tasks_are_swept_once_done_and_cancelled_on_close() -> None:
    tasks = TaskSet("test")
    for _ in range(1_000):
        tasks.spawn_quiet(asyncio.sleep(0), name="quick")
        await asyncio.sleep(0)
    assert len(tasks._tasks) <= 128  # swept as the set doubles: finished ones go

    stop = asyncio.Event()
    running = tasks.spawn_quiet(stop.wait(), name="long")
    for _ in range(1_000):  # sweeps come and go; the running task stays owned
        tasks.spawn_quiet(asyncio.sleep(0), name="quick")
        await asyncio.sleep(0)
    assert running in tasks._tasks and not running.done()

    await tasks.close()
    assert running.cancelled()
