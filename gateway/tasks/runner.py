"""TaskRunner: when a gateway task runs, and the one place its outcome is written.

`submit()` records the task durably (a CreateTaskResult is never sent for a task the store
does not hold), then starts the plain upstream `tools/call` in the background, on the
session's upstream connection. The run outlives the client's HTTP request and even its
session: a deleted session keeps its upstream connection until its last task is terminal.

Every run ends in exactly one terminal write, from the single try/except/finally in `_run`:
the upstream's result or JSON-RPC error, or the gateway's own failure (upstream dead,
hanging past the route's time limit, answering garbage) as a -32603 error. `cancel()` writes
`cancelled` first and only then stops the run; the store refuses any later terminal write,
so a cancelled task stays cancelled whatever the upstream returns afterwards.

Runs are held in a TaskSet (no fire-and-forget), cancelled on shutdown; tasks they leave
unfinished are failed as "interrupted" when the next process starts (`recover()`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from gateway.aio import TaskSet
from gateway.config import Limits, TaskPolicy
from gateway.observability.audit import audit
from gateway.observability.metrics import Metrics, call_outcome
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, GatewayError, TaskError, TaskLimitReached
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task, TaskStatus, status_for
from gateway.tasks.notifier import Notifier
from gateway.tasks.store import TaskStore
from gateway.upstream import UpstreamClient

log = logging.getLogger(__name__)

CANCELLED_MESSAGE = "The task was cancelled by request."
INTERRUPTED_MESSAGE = "interrupted: gateway restarted"
SHUTDOWN_MESSAGE = "interrupted: gateway shut down"
INPUT_MESSAGE = "waiting for the client's answer: call tasks/result to receive the request"


class TaskHost(Protocol):
    """What a run needs of the session that started it (session.Session)."""

    @property
    def owner(self) -> str: ...

    @property
    def principal(self) -> str | None: ...

    @property
    def upstream(self) -> UpstreamClient: ...

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: Callable[[bool], asyncio.Task[None]],
    ) -> jsonrpc.Request: ...

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        """The call ended (after its terminal write); the host may release its upstream."""

    def withdraw_questions(self, task_id: str, reason: str) -> None: ...

    def task_status(self, task: Task) -> None: ...


@dataclass(slots=True)
class _Running:
    task_id: str
    run: asyncio.Task[None]
    host: TaskHost
    upstream_id: jsonrpc.RequestId


def new_task_id() -> str:
    # 192 bits from the CSPRNG: unguessable even where tasks are not bound to a caller.
    return secrets.token_urlsafe(24)


def progress_message(params: dict[str, Any]) -> str | None:
    """A progress notification as a statusMessage, e.g. "3/10: parsing"."""
    progress = params.get("progress")
    if not isinstance(progress, int | float) or isinstance(progress, bool):
        return None
    total = params.get("total")
    text = f"{progress:g}/{total:g}" if isinstance(total, int | float) else f"{progress:g}"
    message = params.get("message")
    return f"{text}: {message}" if isinstance(message, str) and message else text


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
    ) -> None:
        self._audit_arguments = audit_arguments
        #: At most one statusMessage write per task this often, however fast progress comes.
        self._progress_interval = progress_interval
        #: Tasks with a progress writer at work, and the latest message it has yet to write.
        self._progress: dict[str, str | None] = {}
        self._store = store
        self._notifier = notifier
        self._metrics = metrics
        #: Status and since-when (monotonic) of every live task this process runs: what the
        #: tasks_active gauge and the input_required wait histogram are computed from.
        self._live: dict[str, tuple[str, TaskStatus, float]] = {}
        self._clock = clock
        self._new_id = new_id
        self._tasks = TaskSet("task runner")
        self._running: dict[str, _Running] = {}

    @property
    def running(self) -> int:
        return len(self._running)

    async def submit(
        self,
        host: TaskHost,
        route: str,
        request: jsonrpc.Request,
        policy: TaskPolicy,
        limits: Limits,
    ) -> Task:
        """Record a task durably and start its upstream call.

        Raises:
            TaskError: params.task.ttl is not a non-negative number, or the caller already
                has limits.active_tasks_per_principal tasks running.
        """
        params = jsonrpc.param(request, "task") or {}
        requested = params.get("ttl")
        if requested is not None:
            # The schema types ttl as a number; milliseconds below one mean nothing.
            if (
                not isinstance(requested, int | float)
                or isinstance(requested, bool)
                or requested < 0
            ):
                raise TaskError("params.task.ttl must be a non-negative number of milliseconds")
            requested = int(requested)
        now = self._clock()
        name = jsonrpc.param(request, "name")
        task = Task(
            task_id=self._new_id(),
            owner=host.owner,
            route=route,
            tool=name if isinstance(name, str) else "",
            status=TaskStatus.WORKING,
            created_at=now,
            updated_at=now,
            ttl_ms=min(policy.ttl(requested), limits.max_ttl_ms or policy.max_ttl_ms),
            poll_interval_ms=policy.poll_interval_ms,
            progress_token=jsonrpc.progress_token(request),
        )
        cap = limits.active_tasks_per_principal
        if not await self._store.create_task(task, max_active=cap):
            self._metrics.limited.labels(route, "active_tasks").inc()
            audit("task_limit", route=route, principal=host.principal, limit=cap)
            raise TaskLimitReached(
                f"Too many active tasks: {cap} are working or waiting for input "
                "(limits.active_tasks_per_principal); wait for one to end or cancel one"
            )
        outgoing = host.start_task_call(
            task,
            jsonrpc.without_param(request, "task"),
            lambda params: self._on_progress(task.task_id, params),
            lambda waiting: self._on_input(task.task_id, waiting, host),
        )
        self._metrics.tasks_created.labels(route).inc()
        self._account(task)
        arguments = jsonrpc.param(request, "arguments") if self._audit_arguments else None
        audit(
            "task_created",
            route=route,
            principal=host.principal,
            task_id=task.task_id,
            tool=task.tool,
            ttl_ms=task.ttl_ms,
            arguments=arguments,
        )
        run = self._tasks.spawn(self._run(task, host, outgoing, policy), name="task run")
        self._running[task.task_id] = _Running(task.task_id, run, host, outgoing.id)
        return task

    async def _run(
        self, task: Task, host: TaskHost, outgoing: jsonrpc.Request, policy: TaskPolicy
    ) -> None:
        outcome: Outcome | None = None
        started = time.perf_counter()
        try:
            try:
                async with asyncio.timeout(policy.time_limit_seconds):
                    answer = await host.upstream.call(outgoing, bounded=False)
            except (TimeoutError, GatewayError) as exc:
                self._upstream_metrics(task, None, exc, started)
                raise
            self._upstream_metrics(task, answer, None, started)
            if isinstance(answer, jsonrpc.Response):
                outcome = Outcome(kind="result", body=answer.result)
            else:
                outcome = Outcome(kind="error", body=answer.error.model_dump(exclude_unset=True))
        except TimeoutError:
            outcome = Outcome.error(
                INTERNAL_ERROR,
                f"the upstream did not finish the task within {policy.time_limit_seconds:g} s "
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
            self._running.pop(task.task_id, None)
            try:
                if outcome is not None:
                    # The terminal write comes first: what the host does with the end of
                    # the call (its session may be gone) cannot keep the task from ending.
                    status, message = status_for(outcome)
                    done = await self._store.finish_task(
                        task.task_id, status, message, outcome, self._clock()
                    )
                    if done is not None:
                        self._changed(done, host)
            finally:
                await host.end_task_call(outgoing.id)

    def _upstream_metrics(
        self,
        task: Task,
        answer: jsonrpc.Message | None,
        error: BaseException | None,
        started: float,
    ) -> None:
        outcome = call_outcome(answer, error)
        seconds = time.perf_counter() - started
        self._metrics.upstream_call(task.route, task.tool, outcome, seconds)

    def _account(self, task: Task) -> None:
        """Keep the active-task gauge and the input_required wait times true to `task`."""
        metrics, now = self._metrics, time.monotonic()
        previous = self._live.pop(task.task_id, None)
        if previous is not None:
            route, status, since = previous
            metrics.tasks_active.labels(route, status.value).dec()
            if status is TaskStatus.INPUT_REQUIRED:
                metrics.input_wait_seconds.labels(route).observe(now - since)
        if task.status.terminal:
            if previous is not None:  # a task of this process: it ends here
                metrics.tasks_finished.labels(task.route, task.status.value).inc()
                lifetime = (task.updated_at - task.created_at).total_seconds()
                metrics.task_seconds.labels(task.route, task.status.value).observe(lifetime)
            return
        metrics.tasks_active.labels(task.route, task.status.value).inc()
        if task.status is TaskStatus.INPUT_REQUIRED:
            metrics.input_waits.labels(task.route).inc()
        self._live[task.task_id] = (task.route, task.status, now)

    def _on_progress(self, task_id: str, params: jsonrpc.JsonObject) -> None:
        message = progress_message(params)
        if message is None:
            return
        writing = task_id in self._progress
        self._progress[task_id] = message  # the latest wins; the writer picks it up
        if not writing:
            self._tasks.spawn(self._record_progress(task_id), name="task progress")

    def _on_input(self, task_id: str, waiting: bool, host: TaskHost) -> asyncio.Task[None]:
        return self._tasks.spawn(self._record_input(task_id, waiting, host), name="task input")

    async def _record_input(self, task_id: str, waiting: bool, host: TaskHost) -> None:
        if waiting:
            status, message = TaskStatus.INPUT_REQUIRED, INPUT_MESSAGE
        else:
            status, message = TaskStatus.WORKING, None
        updated = await self._store.update_task(task_id, status, message, self._clock())
        if updated is not None:
            self._changed(updated, host)

    async def _record_progress(self, task_id: str) -> None:
        """Write the task's latest progress now, then at most once per interval while more
        comes: an upstream may send hundreds a second, and each write is an fsync."""
        try:
            while (message := self._progress[task_id]) is not None:
                self._progress[task_id] = None
                if await self._store.note_task(task_id, message, self._clock()) is None:
                    return  # terminal: later progress has nothing to show
                self._notifier.task_changed(task_id)
                await asyncio.sleep(self._progress_interval)
        finally:
            del self._progress[task_id]

    def _changed(self, task: Task, host: TaskHost | None) -> None:
        self._account(task)
        audit(
            "task_status_changed",
            route=task.route,
            task_id=task.task_id,
            status=task.status.value,
            principal=host.principal if host else None,
            # For a terminal status: how long the task lived, creation to this write.
            duration_seconds=(task.updated_at - task.created_at).total_seconds()
            if task.status.terminal
            else None,
        )
        self._notifier.task_changed(task.task_id)
        if host is not None:
            host.task_status(task)

    async def cancel(self, task: Task) -> Task:
        """Mark a task cancelled (before answering), then stop its upstream call.

        Raises:
            TaskError: the task is already terminal.
        """
        if task.status.terminal:
            raise TaskError(f"Cannot cancel task: already in terminal status '{task.status}'")
        outcome = Outcome.error(INTERNAL_ERROR, CANCELLED_MESSAGE)
        done = await self._store.finish_task(
            task.task_id, TaskStatus.CANCELLED, CANCELLED_MESSAGE, outcome, self._clock()
        )
        if done is None:  # it became terminal meanwhile
            latest = await self._store.get_task(task.task_id)
            status = latest.status if latest is not None else task.status
            raise TaskError(f"Cannot cancel task: already in terminal status '{status}'")
        running = self._running.get(task.task_id)
        audit(
            "task_cancelled",
            route=task.route,
            task_id=task.task_id,
            principal=running.host.principal if running else None,
        )
        self._changed(done, running.host if running else None)
        if running is not None:
            await self._stop(running, "the task was cancelled")
        return done

    async def _stop(self, running: _Running, reason: str) -> None:
        running.host.withdraw_questions(running.task_id, reason)
        running.run.cancel()
        cancelled = jsonrpc.Notification(
            jsonrpc="2.0",
            method="notifications/cancelled",
            params={"requestId": running.upstream_id, "reason": reason},
        )
        try:
            await running.host.upstream.notify(cancelled)
        except GatewayError as exc:
            log.info("could not tell the upstream a task ended: %s", exc.message)

    async def interrupt_all(self, message: str) -> None:
        """Shutdown: fail every running task now (its call cannot outlive the process).

        The terminal write is the same one a restart would make, but made while clients can
        still hear it: a waiting tasks/result gets this outcome as its answer. One transaction
        for them all (one fsync, not one per task); a run's own terminal write after it is
        refused by the store, so each task still ends exactly once.
        """
        running = list(self._running.values())
        if not running:
            return
        failed = await self._store.fail_running(
            [r.task_id for r in running], message, self._clock()
        )
        hosts = {r.task_id: r.host for r in running}
        for r in running:
            r.run.cancel()
        for task in failed:
            self._changed(task, hosts[task.task_id])

    async def recover(self) -> None:
        """At start-up: tasks a previous process left running can never finish now."""
        interrupted = await self._store.fail_interrupted(INTERRUPTED_MESSAGE, self._clock())
        if interrupted:
            log.warning(
                "%d task(s) interrupted by the previous shutdown marked failed", len(interrupted)
            )

    async def sweep(self) -> None:
        """Delete expired tasks; a running one is stopped first (the spec allows both)."""
        for task_id in await self._store.delete_expired(self._clock()):
            running = self._running.pop(task_id, None)
            if running is not None:
                await self._stop(running, "the task expired")
            live = self._live.pop(task_id, None)
            if live is not None:
                self._metrics.tasks_active.labels(live[0], live[1].value).dec()
            self._metrics.tasks_expired.inc()
            audit("task_expired", task_id=task_id)
            self._notifier.task_changed(task_id)

    def start_sweeper(self, interval: float, *chores: Callable[[], Awaitable[None]]) -> None:
        """Every `interval` seconds: `sweep()`, then each of `chores` (the store's other
        housekeeping, such as pruning session records)."""
        self._tasks.spawn(self._sweep_forever(interval, chores), name="task sweeper")

    async def _sweep_forever(
        self, interval: float, chores: tuple[Callable[[], Awaitable[None]], ...]
    ) -> None:
        while True:
            await asyncio.sleep(interval)
            for chore in (self.sweep, *chores):
                try:
                    await chore()
                except Exception:
                    log.exception("store housekeeping (%s) failed; will try again", chore.__name__)

    async def close(self) -> None:
        await self._tasks.close()
