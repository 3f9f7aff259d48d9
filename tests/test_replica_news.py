"""What a replica does with the news of another's write (`recovery.replicas`): every replica
hears every task's change, and only one whose call runs here may do more than wake its
waiters. The news itself and its effects over real replicas are in
tests/test_replicas_inprocess.py; here, which news leads to work at all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from aiohttp import web

from gateway.aio import TaskSet
from gateway.http.keys import RUNNER, SETTINGS, SHARE, STORE, TASK_INPUTS
from gateway.recovery import replicas
from gateway.security.limits import Share
from gateway.tasks.notifier import Notifier


class Runner:
    def __init__(self, running: set[str]) -> None:
        self.running, self.heard = running, list[str | None]()

    def runs_here(self, task_id: str) -> bool:
        return task_id in self.running

    async def changed_elsewhere(self, task_id: str | None) -> None:
        self.heard.append(task_id)


class Inputs:
    def __init__(self, hosted: set[str]) -> None:
        self.hosts, self.heard = hosted, list[str | None]()

    def hosted(self, task_id: str) -> bool:
        return task_id in self.hosts

    async def answered_elsewhere(self, task_id: str | None) -> None:
        self.heard.append(task_id)


class Store:
    changed: Callable[[str | None], None]

    def __init__(self) -> None:
        self.renewals = 0

    async def watch(self, changed: Callable[[str | None], None]) -> None:
        self.changed = changed

    async def renew_lease(self) -> int:
        self.renewals += 1
        return 2


async def test_only_news_of_a_call_running_here_leads_to_work_here() -> None:
    app = web.Application()
    runner, inputs, store = Runner({"runs-here"}), Inputs({"runs-here", "asks-here"}), Store()
    settings = SimpleNamespace(store=SimpleNamespace(shared=True, lease_seconds=3600.0))
    app[SETTINGS] = cast(Any, settings)
    app[RUNNER], app[TASK_INPUTS] = cast(Any, runner), cast(Any, inputs)
    app[STORE] = cast(Any, store)
    app[SHARE] = Share()
    notifier, tasks = Notifier(), TaskSet("test")
    watch = notifier.watch("waited-on")
    try:
        await replicas.start(app, notifier, tasks)
        for task_id in ("elsewhere", "waited-on", "runs-here", "asks-here", None):
            store.changed(task_id)
        await asyncio.sleep(0)
        assert runner.heard == ["runs-here", None]
        assert inputs.heard == ["runs-here", "asks-here", None]
        assert await watch.wait(0)  # a waiter here is woken whoever runs its task
    finally:
        watch.close()
        await tasks.close()


class SlowRunner(Runner):
    """A re-check of every run here that takes longer than the lease (hundreds of runs' reads
    behind a loaded pool)."""

    async def changed_elsewhere(self, task_id: str | None) -> None:
        self.heard.append(task_id)
        if task_id is None:
            await asyncio.Event().wait()


async def test_a_slow_round_does_not_hold_up_the_lease() -> None:
    """The lease is renewed every third of it whatever the round does: when one loop did both,
    a round that waited for reads let the lease lapse under load, and the other replicas
    failed this replica's running tasks as those of a lost one."""
    app = web.Application()
    runner, store = SlowRunner(set()), Store()
    settings = SimpleNamespace(store=SimpleNamespace(shared=True, lease_seconds=0.3))
    app[SETTINGS] = cast(Any, settings)
    app[RUNNER], app[TASK_INPUTS] = cast(Any, runner), cast(Any, Inputs(set()))
    app[STORE] = cast(Any, store)
    app[SHARE] = Share()
    tasks = TaskSet("test")
    try:
        await replicas.start(app, Notifier(), tasks)
        await asyncio.sleep(1.05)
        assert runner.heard == [None]  # the first round's re-check never ends
        assert store.renewals >= 1 + 3 * 2  # at start, then every 0.1 s (a busy loop: some late)
    finally:
        await tasks.close()
