"""`TaskSet`: owned background tasks. Its quiet spawn (no done callback, used once per
relayed call) must neither lose a running task nor keep finished ones without bound. `Turns`:
one holder at a time per key."""

from __future__ import annotations

import asyncio

from gateway.aio import TaskSet, Turns


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


async def test_turns_take_one_holder_at_a_time_per_key_and_forget_idle_keys() -> None:
    turns = Turns()
    order: list[str] = []

    async def hold(key: str, name: str) -> None:
        async with turns.turn(key):
            order.append(f"{name} in")
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    await asyncio.gather(hold("alice", "1"), hold("alice", "2"), hold("bob", "3"))
    assert order.index("1 out") < order.index("2 in")  # alice's turns, one after another
    assert order.index("3 in") < order.index("1 out")  # bob's meanwhile
    assert len(turns) == 0
