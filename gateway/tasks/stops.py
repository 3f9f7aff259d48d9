"""`Stops`: the runner's ends of a task decided outside its run, by a cancel or by expiry.

A client's (or an operator's) `cancel` writes the task `cancelled` before the answer goes,
and `sweep` deletes the tasks whose ttl has passed; only then is a run still in flight
stopped. The store refuses the run's own terminal write after either, so a task ends once
whatever its upstream does afterwards.

The runner owns the runs in flight (`runs.Runs`); this takes a run from them to stop it, and
tells each status change the runner's way (audit, wake-ups, the task's session).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gateway.protocol.errors import INTERNAL_ERROR, TaskError
from gateway.protocol.outcome import Outcome
from gateway.tasks.host import TaskHost
from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.notifier import Notifier
from gateway.tasks.runs import Runs
from gateway.tasks.store import TaskStore
from gateway.tasks.telemetry import TaskTelemetry

CANCELLED_MESSAGE = "The task was cancelled by request."


@dataclass(slots=True)
class Stops:
    """The runner's part in a cancel and in expiry: the write first, then the run stopped."""

    store: TaskStore
    notifier: Notifier
    clock: Callable[[], datetime]
    telemetry: TaskTelemetry
    #: The runner's runs in flight (the runner's own, not a copy).
    runs: Runs
    changed: Callable[[Task, TaskHost | None], None]

    async def cancel(self, task: Task, actor: str | None = None) -> Task:
        """Mark a task cancelled (before answering), then stop its upstream call. `actor`
        names who asked when it is not the task's owner (the audit says "operator").

        Raises:
            TaskError: the task is already terminal.
        """
        if task.status.terminal:
            raise TaskError(f"Cannot cancel task: already in terminal status '{task.status}'")
        outcome = Outcome.error(INTERNAL_ERROR, CANCELLED_MESSAGE)
        done = await self.store.finish_task(
            task.task_id, TaskStatus.CANCELLED, CANCELLED_MESSAGE, outcome, self.clock()
        )
        if done is None:  # it became terminal meanwhile
            latest = await self.store.get_task(task.task_id)
            status = latest.status if latest is not None else task.status
            raise TaskError(f"Cannot cancel task: already in terminal status '{status}'")
        running = self.runs.get(task.task_id)
        self.telemetry.cancelled(task, running.host.principal if running else None, actor)
        # Without the outcome: a waiting tasks/result answers after `stop` has withdrawn the
        # task's open questions on its stream, not before.
        self.changed(done, running.host if running else None)
        if running is not None:
            await running.stop("the task was cancelled")
        return done

    async def sweep(self) -> None:
        """Delete expired tasks; a running one is stopped first (the spec allows both)."""
        for task_id in await self.store.delete_expired(self.clock()):
            running = self.runs.take(task_id)
            if running is not None:
                await running.stop("the task expired")
            self.telemetry.expired(task_id)
            self.notifier.task_changed(task_id)
