"""What the runner's tasks look like from outside: their metrics and their audit events.

The runner tells `TaskTelemetry` of each move it makes (created, refused, changed,
cancelled, expired, an upstream call ended); this keeps the per-route gauges and histograms
true (DESIGN.md, decision 8) and writes the lifecycle to the audit trail. It decides nothing
and writes nothing to the store. Only tasks this process runs are counted as active.
"""

from __future__ import annotations

import time

from gateway.observability.audit import audit
from gateway.observability.metrics import Metrics
from gateway.observability.outcomes import call_outcome
from gateway.protocol import jsonrpc
from gateway.tasks.models import Task, TaskStatus, principal_of


class TaskTelemetry:
    """Metrics and audit events for one runner's tasks; arguments are audited only if asked."""

    def __init__(self, metrics: Metrics, audit_arguments: bool = False) -> None:
        self._metrics = metrics
        self._audit_arguments = audit_arguments
        #: Route, status and since-when (monotonic) of every live task this process runs, and
        #: its creation time (Unix): what the tasks_active gauge, the input_required wait
        #: histogram and the oldest-task gauge are computed from. (One entry per task: a
        #: hundred thousand in flight keep one table, not two.)
        self._live: dict[str, tuple[str, TaskStatus, float, float]] = {}
        metrics.oldest_running = self.oldest

    def oldest(self, route: str) -> float:
        """Seconds since the oldest live task of `route` this process runs was created."""
        births = [born for name, _, _, born in self._live.values() if name == route]
        return max(0.0, time.time() - min(births)) if births else 0.0

    def refused(
        self, route: str, principal: str | None, cap: int | None, limit: str = "active_tasks"
    ) -> None:
        """A new task refused: the caller has `cap` tasks running, or keeps too much."""
        self._metrics.limited.labels(route, limit).inc()
        audit("task_limit", route=route, principal=principal, limit=cap, which=limit)

    def created(self, task: Task, principal: str | None, request: jsonrpc.Request) -> None:
        self._metrics.tasks_created.inc(task.route)
        self._account(task)
        arguments = jsonrpc.param(request, "arguments") if self._audit_arguments else None
        audit(
            "task_created",
            route=task.route,
            principal=principal,
            task_id=task.task_id,
            tool=task.tool,
            ttl_ms=task.ttl_ms,
            generation=task.generation,
            arguments=arguments,
        )

    def upstream_call(
        self,
        task: Task,
        answer: jsonrpc.Message | None,
        error: BaseException | None,
        started: float,
    ) -> None:
        """The task's upstream call ended; `started` is its `time.perf_counter()`."""
        outcome = call_outcome(answer, error)
        seconds = time.perf_counter() - started
        self._metrics.upstream_call(task.route, task.tool, outcome, seconds)

    def changed(self, task: Task, principal: str | None) -> None:
        """The store now holds `task` in a new status (or with a new message)."""
        self._account(task)
        audit(
            "task_status_changed",
            route=task.route,
            task_id=task.task_id,
            status=task.status.value,
            principal=principal,
            # For a terminal status: how long the task lived, creation to this write.
            duration_seconds=(task.updated_at - task.created_at).total_seconds()
            if task.status.terminal
            else None,
        )

    def cancelled(self, task: Task, principal: str | None, actor: str | None = None) -> None:
        # A task running on another replica (or on none) has no host here to name its
        # principal: its owner does.
        audit(
            "task_cancelled",
            route=task.route,
            task_id=task.task_id,
            principal=principal or principal_of(task),
            actor=actor,
        )

    def rerun(self, task: Task, outcome: str) -> None:
        """After a restart: a repeatable task runs again (`rerun`) or could not (`failed`)."""
        self._metrics.task_reruns.labels(task.route, outcome).inc()
        audit(
            "task_rerun" if outcome == "rerun" else "task_rerun_refused",
            route=task.route,
            task_id=task.task_id,
            attempt=task.attempt,
        )

    def expired(self, task_id: str) -> None:
        """The sweeper deleted the task."""
        live = self._live.pop(task_id, None)
        if live is not None:
            self._metrics.tasks_active.dec(live[0], live[1].value)
        self._metrics.tasks_expired.inc()
        audit("task_expired", task_id=task_id)

    def _account(self, task: Task) -> None:
        """Keep the active-task gauge and the input_required wait times true to `task`."""
        metrics, now = self._metrics, time.monotonic()
        previous = self._live.pop(task.task_id, None)
        if previous is not None:
            route, status, since, _ = previous
            metrics.tasks_active.dec(route, status.value)
            if status is TaskStatus.INPUT_REQUIRED:
                metrics.input_wait_seconds.labels(route).observe(now - since)
        if task.status.terminal:
            if previous is not None:  # a task of this process: it ends here
                metrics.tasks_finished.inc(task.route, task.status.value)
                lifetime = (task.updated_at - task.created_at).total_seconds()
                metrics.task_seconds.observe(lifetime, task.route, task.status.value)
            return
        metrics.tasks_active.inc(task.route, task.status.value)
        if task.status is TaskStatus.INPUT_REQUIRED:
            metrics.input_waits.labels(task.route).inc()
        self._live[task.task_id] = (task.route, task.status, now, task.created_at.timestamp())
