"""`Runs`: the task runs in flight in this process, which a stop or a loss acts on.

A run is found by its task id from its start until its call ends, or until something outside
it ends it (a cancel, expiry, a shutdown, another replica's write): whoever takes it from the
table is the one that stops it. It stays in flight until its terminal write is made too,
which is what a drain before a stop waits for (`idle`). `Running` is what stopping one needs:
its host and the upstream request id its call went out under.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from gateway.protocol import jsonrpc
from gateway.tasks.host import TaskHost


@dataclass(slots=True)
class Running:
    """A run in flight: its task, its call on the host, and what a loss asks of it."""

    task_id: str
    run: asyncio.Task[None]
    host: TaskHost
    upstream_id: jsonrpc.RequestId
    #: Left live at shutdown, for the next process to run again.
    repeatable: bool = False
    #: Which run of the task this is: a later one begun elsewhere means this one lost it.
    attempt: int = 1

    async def stop(self, reason: str) -> None:
        """Withdraw the task's questions, cancel the run, and tell the upstream why."""
        self.host.withdraw_questions(self.task_id, reason)
        self.run.cancel()
        await self.host.stop_task_call(self.upstream_id, reason)


@dataclass(slots=True)
class CallHooks:
    """What the host of a run's call reports back, its progress (`heard`) and whether the
    call waits on the client's answer (`asked`), handed on with the run's task id and host:
    one small object per run where two closures took 500 bytes."""

    task_id: str
    host: TaskHost
    on_progress: Callable[[str, jsonrpc.JsonObject], None]
    on_input: Callable[[str, bool, TaskHost], asyncio.Task[None]]

    def heard(self, params: jsonrpc.JsonObject) -> None:
        self.on_progress(self.task_id, params)

    def asked(self, waiting: bool) -> asyncio.Task[None]:
        return self.on_input(self.task_id, waiting, self.host)


class Runs:
    """The runs in flight, by task id while their call runs, and until their terminal write."""

    def __init__(self) -> None:
        self._by_task: dict[str, Running] = {}
        #: Every run until it has ended, its terminal write included: what a drain waits for.
        self._live: set[asyncio.Task[None]] = set()

    def add(self, running: Running) -> None:
        self._by_task[running.task_id] = running
        self._live.add(running.run)  # (the run takes itself out as it ends: no done callback)

    def get(self, task_id: str) -> Running | None:
        return self._by_task.get(task_id)

    def take(self, task_id: str) -> Running | None:
        """The task's run, no longer found: the caller ends it (or it is ending by itself)."""
        return self._by_task.pop(task_id, None)

    def all(self) -> list[Running]:
        return list(self._by_task.values())

    def ended(self, run: asyncio.Task[None] | None) -> None:
        """`run` has made its terminal write, or will make none."""
        self._live.discard(run)

    @property
    def count(self) -> int:
        """Runs in flight, terminal writes not yet made included."""
        return self._forget_ended()

    async def idle(self) -> None:
        """Returns once no run is in flight, each task's terminal write made (the drain
        before a stop waits here; runs started meanwhile are waited for too)."""
        while self._forget_ended():
            await asyncio.wait(set(self._live))

    def _forget_ended(self) -> int:
        # A run takes itself out as it ends, unless it was cancelled before its first step.
        self._live = {run for run in self._live if not run.done()}
        return len(self._live)
