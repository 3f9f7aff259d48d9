"""TaskRunner: when a gateway task runs, and the one place its outcome is written.

RunAsTask arrives here from the endpoint: `submit()` records the task durably (no
CreateTaskResult is ever sent for a task the store does not hold), then starts the plain
upstream `tools/call` in the background on the session's upstream connection. The run
outlives the client's HTTP request and even its session, which keeps its upstream
connection until its last task is terminal.

Every run ends in exactly one terminal write, from the single try/except/finally in `_run`:
the upstream's result or JSON-RPC error, or the gateway's own failure (upstream dead, past
the route's time limit, answering garbage) as a -32603 error. `cancel()`, expiry
(`sweep()`) and shutdown (`interrupt_all()`) write or delete first and only then stop the
run; the store refuses any later terminal write, so a task ends once whatever the upstream
does afterwards. Before a shutdown, a drain waits on `idle()` for the runs to end by
themselves. Runs are held in a TaskSet (no fire-and-forget); what a previous process left
running fails at start-up, or runs again (`recover()`, then `rerun()`).

Beside it: `runs` holds the runs in flight, `losses` acts after a loss (`gateway/recovery/`
tells that story), `stops` on a cancel and on expiry, `landing` makes the terminal write,
`host` is the seam to the session, `progress` keeps the statusMessage, `telemetry` the
metrics and audit events, `sweeper` the timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from gateway.aio import TaskSet, timers
from gateway.config import Limits, TaskPolicy
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, GatewayError, TaskLimitReached
from gateway.protocol.outcome import Outcome
from gateway.tasks.creation import new_task, new_task_id, policy_ttl
from gateway.tasks.host import TaskHost
from gateway.tasks.landing import Landings
from gateway.tasks.losses import Losses
from gateway.tasks.models import INPUT_MESSAGE, Task, TaskStatus, status_for
from gateway.tasks.notifier import Notifier
from gateway.tasks.progress import ProgressNotes
from gateway.tasks.runs import CallHooks, Running, Runs
from gateway.tasks.stops import Stops
from gateway.tasks.store import TaskStore
from gateway.tasks.sweeper import sweep_forever
from gateway.tasks.telemetry import TaskTelemetry

if TYPE_CHECKING:
    from gateway.observability.traces import Tracing

log = logging.getLogger(__name__)


class TaskRunner:
    def __init__(
        self,
        store: TaskStore,
        notifier: Notifier,
        metrics: Metrics,
        clock: Callable[[], datetime],
        new_id: Callable[[], str] = new_task_id,
        audit_arguments: bool = False,
        progress_interval: float = 1.0,
        tracing: Tracing | None = None,
    ) -> None:
        self._store = store
        #: With tracing on: a span per task, from its creation to its terminal write.
        self._tracing = tracing
        self._notifier = notifier
        self._telemetry = TaskTelemetry(metrics, audit_arguments)
        self._clock = clock
        self._new_id = new_id
        self._tasks = TaskSet("task runner")
        #: At most one statusMessage write per task per `progress_interval` seconds.
        self._progress = ProgressNotes(store, notifier, clock, self._tasks, progress_interval)
        #: Bound once, for the `CallHooks` of every run to share.
        self._heard, self._asked = self._progress.heard, self._on_input
        self._runs = Runs()
        #: Tasks whose call waits on a question to the client (see `_on_input`).
        self._asking: set[str] = set()
        self.idle = self._runs.idle  # (the drain before a stop waits here)
        self._landings = Landings(store, clock)
        #: A read of a task as its owner's poll answers it, and its parts (see `Landings`).
        self.latest, self.early_end = self._landings.latest, self._landings.early_end
        self.landing, self.current = self._landings.landing, self._landings.current
        losses = Losses(store, clock, self._telemetry, self._runs, self._changed)
        #: After a loss (see `losses`): at shutdown, from another replica, of a lost process.
        self.interrupt_all = losses.interrupt_all
        self.changed_elsewhere, self.runs_here = losses.changed_elsewhere, losses.runs_here
        self.recover = losses.recover
        self.fail_lost = losses.fail_lost
        stops = Stops(store, notifier, clock, self._telemetry, self._runs, self._changed)
        #: Ends decided outside a run (see `stops`): a cancel, expiry.
        self.cancel, self.sweep = stops.cancel, stops.sweep

    async def submit(
        self,
        host: TaskHost,
        route: str,
        request: jsonrpc.Request,
        policy: TaskPolicy,
        limits: Limits,
        generation: str = "2025-11-25",
        rerun_with: jsonrpc.JsonObject | None = None,
    ) -> Task:
        """Record a task durably and start its upstream call (`generation` is the protocol
        generation of the request that makes it). With `rerun_with`, the tool is one the
        route marks safe to repeat: that (the call and the question capabilities it runs
        with) is kept with the task until its terminal write, to run it again after a loss.

        Raises:
            TaskError: params.task.ttl is not a non-negative number, or the caller already
                has limits.active_tasks_per_principal tasks running.
        """
        ttl = policy_ttl(request, policy, limits)
        task = new_task(
            request,
            task_id=self._new_id(),
            now=self._clock(),
            owner=host.owner,
            route=route,
            ttl=ttl,
            poll_interval_ms=policy.poll_interval_ms,
            generation=generation,
            repeatable=rerun_with is not None,
        )
        quota = limits.stored_bytes_per_principal
        if quota is not None and (kept := await self._store.stored_bytes(host.owner)) >= quota:
            self._telemetry.refused(route, host.principal, None, "stored_bytes")
            raise TaskLimitReached(
                f"Too much kept: this caller's tasks keep {kept} bytes "
                f"(limits.stored_bytes_per_principal: {quota}); new tasks are refused until "
                "finished ones expire"
            )
        cap = limits.active_tasks_per_principal
        if not await self._store.create_task(task, max_active=cap, request=rerun_with):
            self._telemetry.refused(route, host.principal, cap)
            raise TaskLimitReached(
                f"Too many active tasks: {cap} are working or waiting for input "
                "(limits.active_tasks_per_principal); wait for one to end or cancel one"
            )
        self._telemetry.created(task, host.principal, request)
        limit = policy.time_limit_seconds
        self._start(task, host, jsonrpc.without_param(request, "task"), limit, limit)
        self._landings.begun(task.task_id, task.owner, policy.poll_window_ms / 1000)
        return task

    def rerun(
        self,
        task: Task,
        host: TaskHost,
        request: jsonrpc.Request,
        time_left: float | None,
        limit: float | None,
    ) -> None:
        """Run a task again (its attempt already begun in the store) with `time_left` of its
        time limit `limit`, which counts from its creation."""
        self._start(task, host, request, time_left, limit)

    def _start(
        self,
        task: Task,
        host: TaskHost,
        request: jsonrpc.Request,
        time_left: float | None,
        limit: float | None,
    ) -> None:
        """Hand the host the call (it returns it under the upstream's id), then run it."""
        if self._tracing is not None:
            self._tracing.task_begun(task.task_id, task.route, task.tool)
        hooks = CallHooks(task.task_id, host, self._heard, self._asked)
        outgoing = host.start_task_call(task, request, hooks.heard, hooks.asked)
        run = self._tasks.spawn(self._run(task, host, outgoing, time_left, limit), name="task run")
        self._runs.add(Running(task.task_id, run, host, outgoing.id, task.repeatable, task.attempt))

    @property
    def running(self) -> int:
        """Runs in flight, terminal writes not yet made included."""
        return self._runs.count

    async def _run(
        self,
        task: Task,
        host: TaskHost,
        outgoing: jsonrpc.Request,
        time_left: float | None,
        limit: float | None,
    ) -> None:
        outcome: Outcome | None = None
        started = time.perf_counter()
        upstream_id = outgoing.id
        if self._tracing is not None:
            self._tracing.task_running(task.task_id)
        try:
            try:
                if task.repeatable:
                    await self._store.note_upstream_call(
                        task.task_id, host.upstream_session_id, upstream_id
                    )
                async with timers.deadline(time_left):
                    call = host.run_task_call(outgoing)
                    del outgoing  # the call drops it once sent: a run lasts as long as it
                    answer = await call
            except (TimeoutError, GatewayError) as exc:
                self._telemetry.upstream_call(task, None, exc, started)
                raise
            self._telemetry.upstream_call(task, answer, None, started)
            if isinstance(answer, jsonrpc.Response):
                outcome = Outcome(kind="result", body=answer.result)
            else:
                outcome = Outcome(kind="error", body=answer.error.model_dump(exclude_unset=True))
        except TimeoutError:
            outcome = Outcome.error(
                INTERNAL_ERROR,
                f"the upstream did not finish the task within {limit or 0:g} s "
                "(tasks.time_limit_seconds)",
            )
        except GatewayError as exc:  # the upstream died or answered garbage
            outcome = Outcome.error(INTERNAL_ERROR, exc.message)
        except Exception:
            log.exception("task run failed inside the gateway")
            outcome = Outcome.error(INTERNAL_ERROR, "internal gateway error")
        finally:
            # Cancellation (tasks/cancel, expiry, shutdown) leaves `outcome` None: the
            # canceller wrote the terminal status, or recovery will at the next start.
            self._runs.take(task.task_id)
            try:
                if outcome is not None:
                    # The terminal write comes first: what the host does with the end of
                    # the call (its session may be gone) cannot keep the task from ending.
                    status, message = status_for(outcome)
                    done = await self._landings.land(task, status, message, outcome)
                    if done is not None:
                        # With a question open, a waiting tasks/result hears of the end once
                        # `end_task_call` has withdrawn it on its stream, not from the write.
                        asked = task.task_id in self._asking
                        self._changed(done, host, None if asked else outcome)
            finally:
                if self._tracing is not None:  # no terminal write here: it was stopped
                    self._tracing.task_ended(task.task_id, "stopped")
                try:
                    await host.end_task_call(upstream_id)
                finally:
                    self._asking.discard(task.task_id)
                    self._landings.settled(task.task_id)
                    self._runs.ended(asyncio.current_task())

    def _on_input(self, task_id: str, waiting: bool, host: TaskHost) -> asyncio.Task[None]:
        (self._asking.add if waiting else self._asking.discard)(task_id)
        return self._tasks.spawn(self._record_input(task_id, waiting, host), name="task input")

    async def _record_input(self, task_id: str, waiting: bool, host: TaskHost) -> None:
        if waiting:
            status, message = TaskStatus.INPUT_REQUIRED, INPUT_MESSAGE
        else:
            status, message = TaskStatus.WORKING, None
        updated = await self._store.update_task(task_id, status, message, self._clock())
        if updated is not None:
            self._changed(updated, host)

    def _changed(self, task: Task, host: TaskHost | None, outcome: Outcome | None = None) -> None:
        """After a write of `task` (terminal with `outcome`, when one is given)."""
        self._landings.settled(task.task_id)
        self._telemetry.changed(task, host.principal if host else None)
        if self._tracing is not None and task.status.terminal:
            self._tracing.task_ended(task.task_id, task.status.value)
        if outcome is None:
            self._notifier.task_changed(task.task_id)
        else:
            self._notifier.task_ended(task, outcome)
        if host is not None:
            host.task_status(task)

    def start_sweeper(self, interval: float, *chores: Callable[[], Awaitable[None]]) -> None:
        """Every `interval` seconds: `sweep()`, then each of `chores` (the store's other
        housekeeping, such as pruning session records)."""
        self._tasks.spawn(sweep_forever(interval, (self.sweep, *chores)), name="task sweeper")

    async def close(self) -> None:
        await self._tasks.close()
