"""`Losses`: the runner's writes for a task whose run is lost, or was lost elsewhere.

A run ends without its outcome three ways, and each task still ends exactly once. At shutdown
(`interrupt_all`) every run here is cancelled and its task failed while clients can still
hear it, except the tasks of tools safe to repeat, left live for the next process. With
replicas, a run whose task another replica ended or took over is stopped
(`changed_elsewhere`): its outcome could no longer be written. And what a lost process left
live (`recover`, at start-up and in each lease round) gets the one decision of
`recovery.after_loss`: failed here (`fail_lost`), or its next attempt begun in the store and
handed back to be run again. `gateway/recovery/` tells the whole story.

The runner owns the runs in flight (`runs.Runs`); this acts on them, and tells each status
change the runner's way (audit, wake-ups, the task's session).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from gateway.tasks.host import TaskHost
from gateway.tasks.models import Task
from gateway.tasks.recovery import INTERRUPTED_MESSAGE, Bounds, Fail, Rerun, after_loss
from gateway.tasks.runs import Runs
from gateway.tasks.store import TaskStore
from gateway.tasks.telemetry import TaskTelemetry

log = logging.getLogger(__name__)


class Losses:
    """The runner's part after a loss: the tasks it fails or begins again, the runs it stops."""

    def __init__(
        self,
        store: TaskStore,
        clock: Callable[[], datetime],
        telemetry: TaskTelemetry,
        runs: Runs,
        changed: Callable[[Task, TaskHost | None], None],
    ) -> None:
        self._store = store
        self._clock = clock
        self._telemetry = telemetry
        #: The runner's runs in flight (the runner's own, not a copy).
        self._runs = runs
        self._changed = changed

    async def interrupt_all(self, message: str) -> None:
        """Shutdown: fail every running task now (its call cannot outlive the process),
        except those of tools safe to repeat, which stay live for the next process to run
        again (`recover`); their calls are only stopped.

        The terminal write is the same one a restart would make, but made while clients can
        still hear it: a waiting tasks/result gets this outcome as its answer. One transaction
        for them all (one fsync, not one per task); a run's own terminal write after it is
        refused by the store, so each task still ends exactly once.
        """
        running = self._runs.all()
        if not running:
            return
        failing = [r.task_id for r in running if not r.repeatable]
        failed = await self._store.fail_running(failing, message, self._clock())
        hosts = {r.task_id: r.host for r in running}
        for r in running:
            r.run.cancel()
        for task in failed:
            self._changed(task, hosts[task.task_id])

    def runs_here(self, task_id: str) -> bool:
        """Whether `task_id`'s call runs here: news of it from elsewhere concerns a run here."""
        return self._runs.get(task_id) is not None

    async def changed_elsewhere(self, task_id: str | None) -> None:
        """Another replica wrote to a task (None: to any, the news may have been lost). A run
        here whose task it ended (a client's cancel landed there) or took over (this replica
        was taken for dead) is stopped: its call's outcome could no longer be written."""
        ids = [r.task_id for r in self._runs.all()] if task_id is None else [task_id]
        for one in ids:
            running = self._runs.get(one)
            if running is None:
                continue
            task = await self._store.get_task(one)
            if task is not None and not task.status.terminal and task.attempt == running.attempt:
                continue
            if self._runs.get(one) is running:
                self._runs.take(one)
                reason = "the task was cancelled" if task and task.status.terminal else "taken over"
                await running.stop(reason)

    async def recover(
        self, bounds_of: Callable[[str], Bounds | None], lost: str = INTERRUPTED_MESSAGE
    ) -> list[tuple[Task, Rerun]]:
        """At start-up (and, with replicas, in each lease round): what to do with each task a
        lost process left running (`TaskStore.claim_orphans`), `lost` saying how it was lost.

        `bounds_of` gives a route's bounds (None: the route is gone). Each task gets the one
        decision (`recovery.after_loss`): the failed ones are written now, in a transaction
        per message; the others have their next attempt begun in the store (which withdraws
        the earlier attempt's questions) and are returned, for the caller to run again once
        the gateway can reach their upstreams.
        """
        now = self._clock()
        failing: dict[str, list[str]] = {}
        reruns: list[tuple[Task, Rerun]] = []
        for task in await self._store.claim_orphans():
            bounds = bounds_of(task.route)
            decision = after_loss(task, now, bounds, lost) if bounds else Fail(lost)
            if isinstance(decision, Rerun):
                begun = await self._store.begin_attempt(
                    task.task_id, decision.attempt, decision.message, now
                )
                if begun is not None:
                    reruns.append((begun, decision))
                    self._telemetry.rerun(begun, "rerun")
                    continue
                decision = Fail(lost)
            failing.setdefault(decision.message, []).append(task.task_id)
            if task.repeatable:
                self._telemetry.rerun(task, "failed")
        failed = 0
        for message, ids in failing.items():
            failed += len(await self.fail_lost(ids, message))
        if failed:
            log.warning("%d task(s) of a lost gateway process marked failed", failed)
        if reruns:
            log.warning("%d task(s) of tools safe to repeat run again", len(reruns))
        return reruns

    async def fail_lost(self, task_ids: list[str], message: str) -> list[Task]:
        """The terminal write for tasks no run of this process holds (a lost process's), in
        one transaction; each is audited and told as any terminal write is."""
        ended = await self._store.fail_running(task_ids, message, self._clock())
        for task in ended:
            self._changed(task, None)
        return ended
