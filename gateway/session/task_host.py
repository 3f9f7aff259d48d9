"""`SessionTaskHost`: the runner's seam (`tasks.host.TaskHost`) for the tasks a 2025-11-25
session starts, and their side of the session toward its client.

A task's call goes upstream on the session's own connection, registered with its `Calls`
like a relayed request, so that what the upstream sends about it finds the task
(`Session.on_server_message`): its progress and questions go to the stream of an open
tasks/result for the task, else to the GET stream. Status changes go to the GET stream.
tasks/result (`task_api.py`) opens and closes those streams here, and relays on them the
questions a re-run task keeps in the store. (The host of a call made for a caller with no
session is `calls.task_host.CallTaskHost`.)

A session ended while its tasks run keeps its upstream connection until the runner reports
the last one finished; what the upstream sends meanwhile has no client to go to and is
dropped (the task's own status still follows its progress), and whatever it asks gets the
default answer at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from gateway.aio import TaskSet
from gateway.protocol import jsonrpc
from gateway.protocol.errors import GatewayError
from gateway.session.calls import Calls
from gateway.session.questions import Questions
from gateway.session.stored_questions import Settle
from gateway.session.streams import EventStream, Streams
from gateway.tasks.models import InputRequest, Task
from gateway.upstream import Answer, UpstreamSession

log = logging.getLogger(__name__)


class SessionTaskHost:
    """A session's tasks: their upstream calls, their status notifications, their streams."""

    def __init__(
        self,
        upstream: UpstreamSession,
        names: tuple[str, str | None, str],
        calls: Calls,
        questions: Questions,
        streams: Streams,
        tasks: TaskSet,
    ) -> None:
        # The session's parts, not the session: the session holds this host, and a host that
        # held it back made a cycle, left to the collector with all it refers to at the end of
        # every session.
        self._upstream = upstream
        #: The session's owner, principal and tag.
        self._owner, self._principal, self._tag = names
        self._calls = calls
        self._questions = questions
        self._streams = streams
        #: The session's task set, which the end of its last task call closes.
        self._tasks = tasks
        self._task_calls = 0
        self._ended = False

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def principal(self) -> str | None:
        return self._principal

    @property
    def upstream_session_id(self) -> str | None:
        return self._upstream.session_id

    @property
    def running(self) -> bool:
        """A task call started and has not ended: it holds the session's upstream."""
        return self._task_calls > 0

    def session_ended(self) -> None:
        """The session ended: the last task call to end releases its upstream."""
        self._ended = True

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: Callable[[bool], asyncio.Task[None]],
    ) -> jsonrpc.Request:
        """Register a task's upstream call; returns it under its upstream id and token."""
        outgoing = self._calls.start_task(task, request, on_progress, on_input)
        self._task_calls += 1
        return outgoing

    def run_task_call(self, request: jsonrpc.Request) -> Coroutine[Any, Any, Answer]:
        return self._upstream.call(request, bounded=False)

    async def stop_task_call(self, request_id: jsonrpc.RequestId, reason: str) -> None:
        try:
            await self._upstream.notify(jsonrpc.cancelled(request_id, reason))
        except GatewayError as exc:
            log.info("session %s: could not tell the upstream a task ended: %s", self._tag, exc)

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        """Forget a finished task call; an ended session releases its upstream with the last."""
        call = self._calls.end(upstream_id)
        if call is not None and call.task_id is not None:
            self._questions.withdraw(call.task_id, "the task's call ended")
        self._task_calls -= 1
        if self._ended and self._task_calls == 0:
            await self._tasks.close()  # default answers still on their way: nobody waits now
            await self._upstream.close()

    def withdraw_questions(self, task_id: str, reason: str) -> None:
        """The task no longer waits (its call ended or it was cancelled): tell the client."""
        self._questions.withdraw(task_id, reason)

    def task_status(self, task: Task) -> None:
        """`notifications/tasks/status` with the full task (no related-task meta, per spec),
        on the GET stream, once the client has opened it. The notification is optional and
        polling is what the spec asks of a client: one that never opens the stream (many
        only poll) would only fill its buffer, event after dropped event."""
        if not self._streams.standalone.ever_read:
            return
        note = jsonrpc.Notification(
            jsonrpc="2.0", method="notifications/tasks/status", params=task.wire()
        )
        self._streams.push(self._streams.standalone, note)

    # -- tasks/result

    def open_result_stream(self, task_id: str) -> EventStream:
        """The stream of a tasks/result call: the task's progress and questions go there.

        A question is delivered again on it unless the client can still be reading it where
        it went: on a tasks/result stream that a connection still reads, or on the GET stream
        once it was written there.
        """
        stream = self._streams.open_result(task_id)
        self._questions.redeliver(task_id, stream)
        return stream

    def close_result_stream(self, task_id: str, stream: EventStream) -> None:
        self._streams.close_result(task_id, stream)

    def ask_stored(self, rows: Iterable[InputRequest], stream: EventStream, settle: Settle) -> None:
        """A re-run task's questions, kept in the store, relayed on its tasks/result stream."""
        self._questions.ask_stored(rows, stream, settle)

    def forget_stored(self, task_id: str) -> None:
        self._questions.forget_stored(task_id)
