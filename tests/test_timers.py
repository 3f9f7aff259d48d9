"""`gateway.aio.timers`: alarms queued by delay, and `deadline`, which must behave as
asyncio.timeout does (the relay's time limits and JSON window run on them)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from gateway.aio import timers


async def test_alarms_go_off_in_time_and_cancelled_ones_never() -> None:
    loop = asyncio.get_running_loop()
    rang: list[tuple[str, float]] = []
    started = loop.time()
    for name, delay in [("a", 0.05), ("b", 0.05), ("c", 0.02)]:
        timers.after(delay, lambda n=name: rang.append((n, loop.time() - started)))
    timers.after(0.05, rang.append, ("never", 0.0)).cancel()
    await asyncio.sleep(0.12)
    assert [name for name, _ in rang] == ["c", "a", "b"]  # each delay's queue in its order
    assert all(at >= delay - 0.002 for (_, at), delay in zip(rang, [0.02, 0.05, 0.05], strict=True))
    assert loop not in timers._queues or not timers._queues[loop]  # empty queues are not kept


async def test_many_cancelled_alarms_do_not_pile_up() -> None:
    live = timers.after(3600, lambda: None)
    for _ in range(10_000):  # a relayed call's time limit, set and cancelled per call
        timers.after(3600, lambda: None).cancel()
    queue = timers._queues[asyncio.get_running_loop()][3600]
    assert len(queue._alarms) <= 2 * timers._COMPACT_AT + 2
    live.cancel()


async def test_a_deadline_cancels_the_block_and_raises_timeout_error() -> None:
    with pytest.raises(TimeoutError):
        async with timers.deadline(0.02):
            await asyncio.sleep(5)
    async with timers.deadline(5):  # not reached: nothing happens
        await asyncio.sleep(0)
    async with timers.deadline(None):
        await asyncio.sleep(0)
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0  # nothing left cancelled


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def guarded() -> None:
        async with timers.deadline(5):
            await asyncio.sleep(5)

    task = asyncio.create_task(guarded())  # noqa: TID251 - awaited below
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_outer_deadline_expiring_inside_an_inner_one_is_the_outer_ones() -> None:
    with pytest.raises(TimeoutError):
        async with timers.deadline(0.02):
            try:
                async with timers.deadline(5):
                    await asyncio.sleep(5)
            except TimeoutError:
                pytest.fail("the inner deadline did not expire: its block must not say so")


async def test_an_alarm_set_by_another_of_its_delay_goes_off_once_and_in_its_turn() -> None:
    # A callback may set an alarm of its own delay while its queue is ringing: the queue must
    # still run one loop timer, for its head, or the alarms left behind fire late and an
    # orphaned timer rings an empty, already dropped queue.
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    rang: list[str] = []

    def first() -> None:
        rang.append("first")
        timers.after(0.03, rang.append, "set")

    try:
        timers.after(0.03, first)
        await asyncio.sleep(0.01)
        timers.after(0.03, rang.append, "second")  # due between the first and the one it sets
        await asyncio.sleep(0.12)
    finally:
        loop.set_exception_handler(None)
    assert rang == ["first", "second", "set"]
    assert errors == []
    assert loop not in timers._queues or not timers._queues[loop]


async def test_a_cancelled_alarm_lets_go_of_what_its_callback_would_have_used() -> None:
    # It waits in its queue until due, which for a call's time limit may be hours away.
    class Held:
        pass

    held = Held()
    alarm = timers.after(3600, lambda _: None, held)
    alarm.cancel()
    gone = weakref.ref(held)
    del held
    assert gone() is None


async def test_a_finished_deadline_leaves_no_cycle_for_the_garbage_collector() -> None:
    # One per relayed call: a cycle kept the call's task, coroutine and context alive until
    # a collection, and made the collector's work.
    async def call() -> None:
        async with timers.deadline(3600):
            await asyncio.sleep(0)

    gc.collect()
    gc.disable()
    try:
        task = asyncio.create_task(call())  # noqa: TID251 - awaited at once
        await task
        gone = weakref.ref(task)
        del task
        await asyncio.sleep(0)  # the loop lets go of the callback that woke this test
        assert gone() is None, "freed by its reference count, without a collection"
    finally:
        gc.enable()
