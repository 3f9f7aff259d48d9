"""One question a task's call asks the client; where it is delivered (`Delivery`); and the
answers the gateway gives the upstream itself when the client cannot (nobody is left to ask,
nobody answered in time, or the gateway refuses the request): the `Replies`, each bounded by
the route's request timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gateway.aio import TaskSet
from gateway.protocol import jsonrpc
from gateway.protocol.errors import GatewayError, UpstreamTimeout
from gateway.protocol.questions import related_to_task
from gateway.route import Route
from gateway.session.streams import EventStream, Streams
from gateway.upstream import Answer, UpstreamSession

log = logging.getLogger(__name__)

#: Told True when a task starts waiting for the client's input, False when it no longer is;
#: returns the status write, which a question's delivery waits for.
OnInput = Callable[[bool], asyncio.Task[None]]


@dataclass(slots=True)
class Question:
    """A server request a task waits on (elicitation, sampling, roots): input_required."""

    down_id: jsonrpc.RequestId
    up_id: jsonrpc.RequestId
    task_id: str
    method: str
    event: str
    on_input: OnInput | None
    #: Where and as which event it was last delivered; None until it was.
    stream: EventStream | None = None
    seq: int = 0
    timer: asyncio.Task[None] | None = None
    #: When (event loop time) it gets the default answer; None without an input timeout.
    deadline: float | None = None
    #: Its input row's key, when it is kept in a store that replicas share.
    key: str | None = None

    def stop_timer(self) -> None:
        # A cancelled task keeps its CancelledError, whose traceback holds the timer's frame
        # and so this question: a cycle only a collection frees, unless the question lets go.
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Delivery:
    """Where a task's question goes on the session's streams, and its withdrawal there."""

    def __init__(self, streams: Streams) -> None:
        self._streams = streams

    def post(self, question: Question) -> EventStream | None:
        """Deliver on the task's tasks/result stream, else the GET stream; None if the
        session is ending (its close gives the default answer)."""
        stream = self._streams.writable(self._streams.of_task(question.task_id))
        if stream is not None:
            self._push(question, stream)
        return stream

    def move(self, question: Question, stream: EventStream) -> bool:
        """Deliver again on `stream` (a tasks/result just opened) if the client may not be
        reading it where it went: a tasks/result stream nobody reads, or still unread on
        the GET stream (from which it is then taken back: it moves, it is not copied)."""
        if question.stream is self._streams.standalone:
            lost = self._streams.standalone.retract(question.seq)
        else:
            lost = question.stream is not None and not question.stream.attached
        if lost:
            self._push(question, stream)
        return lost

    def withdraw(self, question: Question, reason: str) -> None:
        """Tell the client the question no longer waits for its answer."""
        if question.stream is None:
            return  # never delivered: nothing to withdraw
        note = jsonrpc.cancelled(question.down_id, reason)
        self._streams.push(question.stream, related_to_task(note, question.task_id))

    def _push(self, question: Question, stream: EventStream) -> None:
        stream.push(question.event)
        question.stream, question.seq = stream, stream.pushed


class Replies:
    """Answers to the upstream's requests, sent on the session's upstream connection."""

    def __init__(self, route: Route, upstream: UpstreamSession, tasks: TaskSet, tag: str) -> None:
        self._route = route
        self._upstream = upstream
        self._tasks = tasks
        self._tag = tag

    async def send(self, answer: Answer) -> None:
        """Send an answer to a request the upstream made, within the request timeout.

        Raises:
            UpstreamError: it could not be sent, or not within the timeout.
        """
        limit = self._route.upstream.request_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                await self._upstream.notify(answer)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"the upstream did not take the answer within {limit:g} s "
                "(upstream.request_timeout_seconds)"
            ) from exc

    async def give(self, answer: Answer) -> None:
        """Send the gateway's own answer (a default or a refusal): a failure is only logged,
        as no client waits on it."""
        try:
            await self.send(answer)
        except GatewayError as exc:
            log.info("session %s: could not give a default answer: %s", self._tag, exc.message)

    def give_soon(self, answer: Answer, name: str) -> None:
        """`give`, on the session's task set."""
        self._tasks.spawn(self.give(answer), name)
