"""The 2025-11-25 task API: tasks/get, tasks/result, tasks/list, tasks/cancel, from the store.

Nothing here reads the runner's memory: a task is whatever the store says, so the answers
are the same after a restart, and (later) on another replica. A task the caller does not own
answers exactly like one that does not exist. `tasks/result` for an unfinished task returns
a stream that the answer is pushed to once the store shows the task terminal; the wait
re-reads the store on every wake-up and at least every few seconds, so a lost wake-up only
delays the answer. A task whose call has no session of its own (run again after a restart, or
made on the 2026-07-28 path) keeps its questions in the store: while it waits for input, the
wait relays them on the stream, and `settle` takes the answers. (The 2026-07-28 tasks
extension, wire-incompatible, is `calls.task_api`; what the two share is `tasks.api_common`.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from datetime import datetime

from gateway.config import TaskPolicy
from gateway.protocol import jsonrpc, rewrite
from gateway.protocol.errors import INTERNAL_ERROR, TaskError
from gateway.protocol.jsonrpc import Answer
from gateway.protocol.outcome import Outcome
from gateway.session.session import Session
from gateway.session.streams import EventStream
from gateway.tasks.api_common import NOT_FOUND, audit_miss, find, ok, read_outcome, retrieved
from gateway.tasks.inputs import TaskInputs, parse_stored_id
from gateway.tasks.models import Task, TaskStatus, epoch_us, from_epoch_us
from gateway.tasks.notifier import Notifier, Watch
from gateway.tasks.runner import TaskRunner
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)

_BACKSTOP_SECONDS = 5.0


class TaskApi:
    def __init__(
        self,
        store: TaskStore,
        runner: TaskRunner,
        notifier: Notifier,
        secret: bytes,
        clock: Callable[[], datetime],
        inputs: TaskInputs,
    ) -> None:
        self._store = store
        self._runner = runner
        self._notifier = notifier
        self._secret = secret
        self._clock = clock
        self._inputs = inputs

    async def answer(
        self, session: Session, request: jsonrpc.Request, policy: TaskPolicy
    ) -> Answer | EventStream:
        try:
            if request.method == "tasks/list":
                return await self._list(session, request, policy)
            task_id = jsonrpc.param(request, "taskId")
            if request.method == "tasks/result":
                return await self._result(session, request, task_id)
            if request.method == "tasks/get":
                task = await self._runner.latest(
                    task_id, session.owner, self._clock(), lambda: self._find(session, task_id)
                )
                return ok(request, task.wire())
            task = await self._find(session, task_id)
            return ok(request, (await self._runner.cancel(task)).wire())
        except TaskError as exc:
            return jsonrpc.error_response(request.id, exc.code, exc.message)

    async def _find(self, session: Session, task_id: object) -> Task:
        # A miss is audited after the answer has gone, on the session.
        return await find(
            self._store,
            task_id,
            session.owner,
            session.principal,
            self._clock,
            lambda miss: session.spawn(miss, "audit task miss"),
        )

    async def settle_anywhere(self, session: Session, answer: Answer) -> None:
        """The client's answer to a question of one of its tasks that no session here asked:
        one asked on another replica, or relayed by another session (its id names the task
        and the question). It goes where the task's call runs."""
        found = parse_stored_id(answer.id)
        if found is None:
            log.info("session %s: dropped an answer to unknown server request", session.tag)
            return
        task_id, key = found
        if await self._store.find_task(task_id, session.owner) is None:
            miss = audit_miss(self._store, task_id, session.owner, session.principal)
            session.spawn(miss, "audit task miss")
            return
        if not await self._inputs.settle(task_id, key, answer):
            log.info("session %s: an answer came for a question no longer open", session.tag)

    async def _result(
        self, session: Session, request: jsonrpc.Request, task_id: object
    ) -> Answer | EventStream:
        if not isinstance(task_id, str):
            raise TaskError("params.taskId must be a string")
        # Watched before the read: a terminal write landing between the two has set the
        # watch, and the wait returns at once instead of at the backstop.
        watch = self._notifier.watch(task_id)
        waiting = False
        try:
            # The owner's wait for a young call (see `Landings`): no read, no stream, and
            # the outcome the run hands its watches, as a stream's wait would get it.
            outcomes: list[Outcome] = []
            watch.on_end = lambda _task, outcome: outcomes.append(outcome)
            ended = await self._runner.early_end(task_id, session.owner, self._clock())
            watch.on_end = None
            if ended is not None and outcomes:
                return _final_answer(request.id, task_id, retrieved(task_id, outcomes[0]))
            task = await self._find(session, task_id)
            if not task.status.terminal and not self._runner.runs_here(task_id):
                # Its call runs on another replica, whose own writes reach this one only for
                # a task marked as waited for (the mark's return includes any write before).
                task = await self._store.heed_task(task_id) or task
            if task.status.terminal:
                return await self._final(request.id, task_id)
            stream = session.task_host.open_result_stream(task_id)
            # The usual end: the run here writes the outcome, and this answers with it in
            # the same turn of the loop. `_wait` serves every other end (a cancel from
            # another replica, expiry, a lost process) and the questions meanwhile.
            watch.on_end = lambda ended, outcome: self._deliver(
                session, request.id, task_id, stream, retrieved(task_id, outcome)
            )
            session.spawn(self._wait(session, request.id, task, stream, watch), "tasks/result wait")
            waiting = True
            return stream
        finally:
            if not waiting:
                watch.close()

    def _deliver(
        self,
        session: Session,
        request_id: jsonrpc.RequestId,
        task_id: str,
        stream: EventStream,
        outcome: Outcome | None,
    ) -> None:
        """The answer to a waiting tasks/result, which ends its stream (unless the session
        ended it first)."""
        if stream.closed:
            return
        session.task_host.forget_stored(task_id)
        stream.push(jsonrpc.dump(_final_answer(request_id, task_id, outcome)))
        session.task_host.close_result_stream(task_id, stream)

    async def _wait(
        self,
        session: Session,
        request_id: jsonrpc.RequestId,
        task: Task,
        stream: EventStream,
        watch: Watch,
    ) -> None:
        metrics, route = session.route.metrics, session.route.name
        waiters = metrics.result_waiters.labels(route)
        waiters.inc()
        task_id = task.task_id
        try:
            while True:
                if task.status is TaskStatus.INPUT_REQUIRED:
                    rows = await self._inputs.pending(task_id)
                    if stream.closed:  # answered by `watch.on_end` meanwhile
                        return
                    session.task_host.ask_stored(rows, stream, self._inputs.settle)
                woken = await watch.wait(_BACKSTOP_SECONDS)
                if stream.closed:
                    return
                found = await self._store.get_task(task_id)
                if stream.closed:
                    return
                if not woken and (found is None or found.status is not task.status):
                    metrics.wakeups_lost.labels(route).inc()  # a wake-up was lost
                if found is None:
                    stream.push(jsonrpc.dump(jsonrpc.error_response(request_id, -32602, NOT_FOUND)))
                    return
                if found.status.terminal:
                    watch.on_end = None  # this wait answers: the outcome is read once
                    outcome = await read_outcome(self._store, task_id)
                    self._deliver(session, request_id, task_id, stream, outcome)
                    return
                task = found
        finally:
            watch.close()
            waiters.dec()
            session.task_host.close_result_stream(task_id, stream)

    async def _final(self, request_id: jsonrpc.RequestId, task_id: str) -> Answer:
        return _final_answer(request_id, task_id, await read_outcome(self._store, task_id))

    async def _list(self, session: Session, request: jsonrpc.Request, policy: TaskPolicy) -> Answer:
        cursor = jsonrpc.param(request, "cursor")
        after = None if cursor is None else self._read_cursor(cursor, session.owner, policy)
        limit = policy.list_page_size
        tasks = await self._store.list_tasks(session.owner, after, limit + 1, self._clock())
        page = tasks[:limit]
        result: jsonrpc.JsonObject = {"tasks": [task.wire() for task in page]}
        if len(tasks) > limit:
            result["nextCursor"] = self._make_cursor(page[-1], session.owner)
        return ok(request, result)

    # A cursor is the keyset position plus when it was issued, signed together with its
    # owner: opaque to clients, unforgeable, useless to anyone else, and stale after
    # tasks.cursor_max_age_seconds.

    def _sign(self, payload: bytes, owner: str) -> str:
        mac = hmac.new(self._secret, owner.encode() + b"\0" + payload, hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()[:18]).decode()

    def _make_cursor(self, last: Task, owner: str) -> str:
        position = [epoch_us(last.created_at), last.task_id, int(self._clock().timestamp() * 1000)]
        payload = base64.urlsafe_b64encode(json.dumps(position).encode())
        return f"{payload.decode()}.{self._sign(payload, owner)}"

    def _read_cursor(self, cursor: object, owner: str, policy: TaskPolicy) -> tuple[datetime, str]:
        if not isinstance(cursor, str) or not cursor.isascii() or cursor.count(".") != 1:
            raise TaskError("Invalid cursor")
        payload, signature = cursor.split(".")
        if not hmac.compare_digest(signature, self._sign(payload.encode(), owner)):
            raise TaskError("Invalid cursor")
        micros, task_id, issued_ms = json.loads(base64.urlsafe_b64decode(payload))
        age = self._clock().timestamp() - issued_ms / 1000
        if age > policy.cursor_max_age_seconds:
            raise TaskError("Invalid cursor: it has expired; list again from the start")
        return from_epoch_us(micros), task_id


def _final_answer(request_id: jsonrpc.RequestId, task_id: str, outcome: Outcome | None) -> Answer:
    if outcome is None:
        return jsonrpc.error_response(
            request_id, INTERNAL_ERROR, "the task ended without a stored result"
        )
    return rewrite.task_result(request_id, task_id, outcome)
