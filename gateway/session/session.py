"""Downstream sessions: the gateway's own `MCP-Session-Id`, its streams and its id maps.

Each session holds one upstream client. Client requests get upstream ids (and upstream
progress tokens) of the gateway's choosing, so the answer, the progress and any server
request the call provokes can be matched back to the client's stream under the client's own
ids. Server requests get ids from the session's downstream id space; the client's answer is
routed back to the upstream under the upstream's id.

Task calls (started by the runner) share the same maps but have no client request waiting:
their progress goes, with the client's token and the related-task meta, to the stream of
an open `tasks/result` for the task, else to the GET stream. A session ended while its tasks
run keeps its upstream connection until the runner reports the last one finished; what the
upstream sends meanwhile has no client to go to and is dropped (the task's own status still
follows its progress), and whatever it asks gets the default answer at once.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.aio import TaskSet
from gateway.config.settings import HttpConfig
from gateway.observability.logs import printable
from gateway.observability.metrics import call_outcome
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, GatewayError, UpstreamError, UpstreamTimeout
from gateway.protocol.rewrite import RELATED_TASK
from gateway.route import Route
from gateway.session.streams import EventStream
from gateway.tasks.models import SessionRecord, Task
from gateway.upstream import Answer, UpstreamClient

log = logging.getLogger(__name__)

_KEPT_STREAMS = 64  # finished POST streams kept for Last-Event-ID resumption
#: Why questions of an ended session get the default answer.
_ENDED = "the client's session ended"


Rewriter = Callable[[Answer], Answer]


@dataclass(slots=True)
class InFlight:
    """One upstream request the session awaits: a relayed client request or a task's call."""

    client_token: jsonrpc.RequestId | None
    #: The relayed request's stream; None for a task call (no client request waits on it).
    stream: EventStream | None
    relay: asyncio.Task[None] | None = None
    task_id: str | None = None
    on_progress: Callable[[jsonrpc.JsonObject], None] | None = None
    #: Told True when the task starts waiting for the client's input, False when it no longer
    #: is; returns the status write, which a question's delivery waits for.
    on_input: Callable[[bool], asyncio.Task[None]] | None = None


@dataclass(slots=True)
class Question:
    """A server request a task waits on (elicitation, sampling, roots): input_required."""

    down_id: int
    up_id: jsonrpc.RequestId
    task_id: str
    method: str
    event: str
    on_input: Callable[[bool], asyncio.Task[None]] | None
    #: Where and as which event it was last delivered; None until it was.
    stream: EventStream | None = None
    seq: int = 0
    timer: asyncio.Task[None] | None = None
    #: When (event loop time) it gets the default answer; None without an input timeout.
    deadline: float | None = None


class Session:
    def __init__(
        self, session_id: str, route: Route, http: HttpConfig, principal: str | None = None
    ) -> None:
        self.id = session_id
        #: Who opened it (None without authentication); only they can use it.
        self.principal = principal
        #: The latest values of the client headers this route forwards upstream.
        self.forwarded: dict[str, str] = {}
        #: Whom the per-principal limits count this session against.
        self.caller = principal or ""
        #: What survives a restart; set once the upstream accepted the handshake.
        self.record: SessionRecord | None = None
        #: Writes `record` to the store (set by the registry).
        self.persist: Callable[[SessionRecord], Coroutine[Any, Any, None]] | None = None
        # The session id is a bearer secret; logs name the session by this unrelated tag.
        self.tag = secrets.token_hex(4)
        self.route = route
        self.protocol_version = "2025-03-26"
        self.last_seen = time.monotonic()
        self._http = http
        # Event ids must never repeat within a session, and a session outlives a restart of
        # the gateway: a random prefix per incarnation keeps old Last-Event-IDs from naming
        # new streams.
        self._stream_prefix = secrets.token_hex(3)
        self._stream_keys = itertools.count(1)
        self.standalone = EventStream(f"{self._stream_prefix}0", http.replay_buffer_events)
        self._streams: collections.OrderedDict[str, EventStream] = collections.OrderedDict()
        self._inflight: dict[jsonrpc.RequestId, InFlight] = {}
        self._by_client_id: dict[jsonrpc.RequestId, jsonrpc.RequestId] = {}
        self._down_ids = itertools.count(1)
        self._server_requests: dict[jsonrpc.RequestId, tuple[jsonrpc.RequestId, EventStream]] = {}
        self._result_streams: dict[str, EventStream] = {}
        self._questions: dict[int, Question] = {}
        self._status_writes: dict[str, asyncio.Task[None]] = {}
        self._task_calls = 0
        self._ended = False
        self._tasks = TaskSet(f"session {self.tag}")
        self.upstream = UpstreamClient(
            lambda sink: route.upstream.transport(sink, lambda: self.forwarded),
            route.upstream.config,
            self,
        )

    @property
    def owner(self) -> str:
        """Whom this session's tasks belong to: its principal, or without one the session."""
        # The route is part of it: a principal is a name one route's authenticator vouches
        # for, and an API key's "alice" on one route is not a token's "alice" on another.
        if self.principal:
            return f"principal:{self.route.name}:{self.principal}"
        return f"session:{self.id}"

    @property
    def busy(self) -> bool:
        return bool(self._inflight)

    @property
    def listening(self) -> bool:
        """A connection reads the GET stream: the upstream's own messages still reach it."""
        return self.standalone.attached

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run work that belongs to this session and ends with it (e.g. a tasks/result wait)."""
        self._tasks.spawn(coro, name=name)

    # -- streams

    def new_stream(self) -> EventStream:
        key = f"{self._stream_prefix}{next(self._stream_keys)}"
        stream = EventStream(key, self._http.replay_buffer_events)
        self._streams[stream.key] = stream
        excess = len(self._streams) - _KEPT_STREAMS
        if excess > 0:
            # The oldest closed ones go, also past streams still open: one stream open for
            # long (a tasks/result waiting on a long task) must not keep every later one.
            closed = (key for key, kept in self._streams.items() if kept.closed)
            for key in list(itertools.islice(closed, excess)):
                del self._streams[key]
        return stream

    def stream(self, key: str) -> EventStream | None:
        return self.standalone if key == self.standalone.key else self._streams.get(key)

    # -- client -> upstream

    def forward(self, request: jsonrpc.Request, rewrite: Rewriter | None = None) -> EventStream:
        """Start relaying a client request; its answer and related messages go to the stream."""
        stream = self.new_stream()
        client_token = jsonrpc.progress_token(request)
        outgoing = self._outgoing(request, client_token)
        call = InFlight(client_token, stream)
        self._inflight[outgoing.id] = call
        self._by_client_id[request.id] = outgoing.id
        call.relay = self._tasks.spawn(
            self._relay(outgoing, request.id, stream, rewrite), name=f"call {request.method}"
        )
        return stream

    def _outgoing(
        self, request: jsonrpc.Request, client_token: jsonrpc.RequestId | None
    ) -> jsonrpc.Request:
        upstream_id = self.upstream.next_id()
        outgoing = jsonrpc.with_id(request, upstream_id)
        if client_token is not None:
            # The upstream request id doubles as our progress token: unique per upstream session.
            outgoing = jsonrpc.with_progress_token(outgoing, upstream_id)
        return outgoing

    async def _relay(
        self,
        outgoing: jsonrpc.Request,
        client_id: jsonrpc.RequestId,
        stream: EventStream,
        rewrite: Rewriter | None,
    ) -> None:
        # Every relayed request ends in exactly one answer on its stream (or, when the client
        # cancelled it, in none), whatever fails on the way.
        answer: Answer
        tool_call = outgoing.method == "tools/call"
        started = time.perf_counter()
        try:
            try:
                answer = await self.upstream.call(outgoing)
            except GatewayError as exc:
                if tool_call:
                    self._observe_call(outgoing, None, exc, started)
                raise
            if tool_call:
                self._observe_call(outgoing, answer, None, started)
            if rewrite is not None:
                answer = rewrite(answer)
        except GatewayError as exc:  # the upstream failed, or a cap refused to replace it
            answer = jsonrpc.error_response(outgoing.id, INTERNAL_ERROR, exc.message)
        except Exception:
            log.exception("session %s: relaying %s failed", self.tag, printable(outgoing.method))
            answer = jsonrpc.error_response(outgoing.id, INTERNAL_ERROR, "internal gateway error")
        except asyncio.CancelledError:
            stream.close()  # a cancelled request gets no answer (cancellation spec)
            raise
        finally:
            self._inflight.pop(outgoing.id, None)
            if self._by_client_id.get(client_id) == outgoing.id:
                del self._by_client_id[client_id]
        stream.push(jsonrpc.dump(jsonrpc.with_id(answer, client_id)))
        stream.close()

    def _observe_call(
        self,
        request: jsonrpc.Request,
        answer: Answer | None,
        error: BaseException | None,
        started: float,
    ) -> None:
        seconds = time.perf_counter() - started
        tool = jsonrpc.param(request, "name")
        self.route.metrics.upstream_call(
            self.route.name, tool, call_outcome(answer, error), seconds
        )

    # -- task calls (driven by the runner)

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: Callable[[bool], asyncio.Task[None]],
    ) -> jsonrpc.Request:
        """Register a task's upstream call; returns it under its upstream id and token."""
        outgoing = self._outgoing(request, task.progress_token)
        self._inflight[outgoing.id] = InFlight(
            task.progress_token,
            None,
            task_id=task.task_id,
            on_progress=on_progress,
            on_input=on_input,
        )
        self._task_calls += 1
        return outgoing

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        """Forget a finished task call; an ended session releases its upstream with the last."""
        call = self._inflight.pop(upstream_id, None)
        if call is not None and call.task_id is not None:
            self.withdraw_questions(call.task_id, "the task's call ended")
        self._task_calls -= 1
        if self._ended and self._task_calls == 0:
            await self._tasks.close()  # default answers still on their way: nobody waits now
            await self.upstream.close()

    def task_status(self, task: Task) -> None:
        """`notifications/tasks/status` with the full task (no related-task meta, per spec)."""
        note = jsonrpc.Notification(
            jsonrpc="2.0", method="notifications/tasks/status", params=task.wire()
        )
        self._push(self.standalone, note)

    def open_result_stream(self, task_id: str) -> EventStream:
        """The stream of a tasks/result call: the task's progress and questions go there.

        A question is delivered again on it unless the client can still be reading it where
        it went: on a tasks/result stream that a connection still reads, or on the GET stream
        once it was written there.
        """
        stream = self.new_stream()
        self._result_streams[task_id] = stream
        for question in self._questions.values():
            if question.task_id != task_id or question.stream is None:
                continue  # not delivered yet: its delivery will pick this stream
            if question.stream is self.standalone:
                # Only if the GET stream has not handed it out: it moves, it is not copied.
                lost = self.standalone.retract(question.seq)
            else:
                lost = not question.stream.attached
            if lost:
                stream.push(question.event)
                question.stream, question.seq = stream, stream.pushed
                self._server_requests[question.down_id] = (question.up_id, stream)
        return stream

    def close_result_stream(self, task_id: str, stream: EventStream) -> None:
        stream.close()
        if self._result_streams.get(task_id) is stream:
            del self._result_streams[task_id]

    async def deliver(self, message: jsonrpc.Notification | Answer) -> None:
        """A client notification, or the client's answer to a server request.

        Raises:
            UpstreamError: the upstream did not take it. An answer's request then stays
                open, so the client may send the answer again.
        """
        if isinstance(message, jsonrpc.Notification):
            if message.method == "notifications/cancelled":
                # The spec says to ignore invalid cancellations; an object or array id is
                # one, and cannot be looked up anyway.
                client_id = jsonrpc.param(message, "requestId")
                upstream_id = (
                    self._by_client_id.get(client_id) if jsonrpc.is_request_id(client_id) else None
                )
                call = self._inflight.get(upstream_id) if upstream_id is not None else None
                if call is None:
                    return  # already answered: cancellation races are expected
                if call.relay is not None:
                    call.relay.cancel()  # first: the client is done even if the upstream is gone
                await self.upstream.notify(jsonrpc.with_param(message, "requestId", upstream_id))
                return
            if message.method == "notifications/initialized":
                await self.upstream.initialized(message)
                if self.record is not None and self.persist is not None:
                    self.record = self.record.model_copy(
                        update={"initialized": message.model_dump(exclude_unset=True)}
                    )
                    await self.persist(self.record)
            else:
                await self.upstream.notify(message)
            return
        down_id = message.id
        pending = self._server_requests.pop(down_id, None) if down_id is not None else None
        if pending is None:
            log.info("session %s: dropped an answer to unknown server request", self.tag)
            return
        question = self._questions.pop(down_id, None) if isinstance(down_id, int) else None
        if question is not None:
            # Queue the move back to `working` before the upstream has the answer: the store
            # writes in order, so the task cannot show its final status before `working`.
            self._settled(question)
        try:
            await self._answer_upstream(jsonrpc.with_id(message, pending[0]))
        except UpstreamError:
            # Not relayed, so still unanswered upstream: open it again for the client's retry
            # (unless its call or the session ended meanwhile, which withdrew it).
            if down_id is None or self._ended:
                raise
            if question is None:
                self._server_requests[down_id] = pending
            elif any(c.task_id == question.task_id for c in self._inflight.values()):
                self._server_requests[down_id] = pending
                self._hold(question)
                write = self._status_writes.get(question.task_id)
                if write is not None:
                    # Once told, the client finds the task waiting for input again.
                    await asyncio.shield(write)
            raise

    async def _answer_upstream(self, answer: Answer) -> None:
        """Send our answer to a request the upstream made, within the route's request timeout.

        Raises:
            UpstreamError: it could not be sent, or not within the timeout.
        """
        limit = self.route.upstream.config.request_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                await self.upstream.notify(answer)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"the upstream did not take the answer within {limit:g} s "
                "(upstream.request_timeout_seconds)"
            ) from exc

    # -- upstream -> client

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        call = self._inflight.get(related)
        if call is None or call.stream is None:
            return
        if interrupted:
            call.stream.interrupt()
        else:
            call.stream.want_sse()

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        call = self._related_call(related)
        if isinstance(message, jsonrpc.Request):
            if self._ended:
                # Nobody is left to ask: the upstream gets the default answer at once.
                answer = _default_answer(message.id, message.method, _ENDED)
                self._tasks.spawn(self._give_default(answer), "default answer")
                return
            down_id = next(self._down_ids)
            if call is not None and call.task_id is not None:
                self._ask(call, call.task_id, message, down_id)
                return
            stream = self._call_stream(call) if call is not None else self.standalone
            self._server_requests[down_id] = (message.id, stream)
            self._push(stream, jsonrpc.with_id(message, down_id))
            return
        if not isinstance(message, jsonrpc.Notification):
            return
        if message.method == "notifications/progress":
            token = jsonrpc.param(message, "progressToken")
            call = self._inflight.get(token)
            if call is None or call.client_token is None:
                return  # progress after the answer, or for a token we never issued
            note = jsonrpc.with_param(message, "progressToken", call.client_token)
            if call.task_id is not None:
                note = _related(note, call.task_id)
                if call.on_progress is not None:
                    call.on_progress(message.params or {})
            self._push(self._call_stream(call), note)
            return
        if message.method == "notifications/cancelled":
            # The upstream withdrew one of its own requests: name it by our downstream id.
            for asked_id, (up_id, stream) in list(self._server_requests.items()):
                if up_id == jsonrpc.param(message, "requestId"):
                    del self._server_requests[asked_id]
                    self._push(stream, jsonrpc.with_param(message, "requestId", asked_id))
                    question = (
                        self._questions.pop(asked_id, None) if isinstance(asked_id, int) else None
                    )
                    if question is not None:
                        self._settled(question)
            return
        if call is None:
            self._push(self.standalone, message)
        elif call.task_id is not None:
            self._push(self._call_stream(call), _related(message, call.task_id))
        else:
            self._push(self._call_stream(call), message)

    def _related_call(self, related: jsonrpc.RequestId | None) -> InFlight | None:
        if related is not None:
            return self._inflight.get(related)
        if len(self._inflight) == 1:
            # stdio and HTTP+SSE do not say which request a message belongs to; with a single
            # call in flight it can only be that one, and its stream is where clients look.
            return next(iter(self._inflight.values()))
        return None

    # -- input_required: server requests a task waits on

    def _ask(self, call: InFlight, task_id: str, request: jsonrpc.Request, down_id: int) -> None:
        event = jsonrpc.dump(_related(jsonrpc.with_id(request, down_id), task_id))
        question = Question(down_id, request.id, task_id, request.method, event, call.on_input)
        self._server_requests[down_id] = (request.id, self.standalone)
        limit = self.route.policy.input_timeout_seconds
        if limit is not None:
            question.deadline = asyncio.get_running_loop().time() + limit
        self._hold(question)
        self._tasks.spawn(self._post(call, question), "question delivery")

    def _hold(self, question: Question) -> None:
        """The task waits on `question`: just asked, or its answer could not be relayed."""
        first = not any(q.task_id == question.task_id for q in self._questions.values())
        self._questions[question.down_id] = question
        if first and question.on_input is not None:
            self._status_writes[question.task_id] = question.on_input(True)
        limit = self.route.policy.input_timeout_seconds
        if limit is not None and question.deadline is not None:
            question.timer = self._tasks.spawn(
                self._unanswered(question, limit, question.deadline), "question timer"
            )

    async def _post(self, call: InFlight, question: Question) -> None:
        # A client must never hold a question while tasks/get still says `working`: deliver
        # only once the input_required status is committed.
        write = self._status_writes.get(question.task_id)
        if write is not None:
            await asyncio.shield(write)
        if question.down_id not in self._questions:
            return  # answered by a timeout or withdrawn meanwhile
        stream = self._open(self._call_stream(call))
        if stream is None:
            return  # the session is ending: its close gives the default answer
        stream.push(question.event)
        question.stream, question.seq = stream, stream.pushed
        self._server_requests[question.down_id] = (question.up_id, stream)

    async def _unanswered(self, question: Question, limit: float, deadline: float) -> None:
        await asyncio.sleep(deadline - asyncio.get_running_loop().time())
        reason = (
            f"the client did not answer {question.method} within {limit:g} s "
            "(tasks.input_timeout_seconds)"
        )
        await self._expire(question, reason)

    async def _expire(self, question: Question, reason: str) -> None:
        """Nobody will answer `question`: the upstream gets the default answer."""
        if self._questions.pop(question.down_id, None) is None:
            return
        self._server_requests.pop(question.down_id, None)
        self._withdraw(question, reason)
        self._settled(question)  # before the upstream has the answer, as in deliver()
        await self._give_default(_default_answer(question.up_id, question.method, reason))

    async def _give_default(self, answer: Answer) -> None:
        try:
            await self._answer_upstream(answer)
        except GatewayError as exc:
            log.info("session %s: could not give a default answer: %s", self.tag, exc.message)

    def withdraw_questions(self, task_id: str, reason: str) -> None:
        """The task no longer waits (its call ended or it was cancelled): tell the client."""
        for question in [q for q in self._questions.values() if q.task_id == task_id]:
            del self._questions[question.down_id]
            self._server_requests.pop(question.down_id, None)
            if question.timer is not None:
                question.timer.cancel()
            self._withdraw(question, reason)
        self._status_writes.pop(task_id, None)

    def _withdraw(self, question: Question, reason: str) -> None:
        if question.stream is None:
            return  # never delivered: nothing to withdraw
        params = {"requestId": question.down_id, "reason": reason}
        note = jsonrpc.Notification(jsonrpc="2.0", method="notifications/cancelled", params=params)
        self._push(question.stream, _related(note, question.task_id))

    def _settled(self, question: Question) -> None:
        if question.timer is not None and question.timer is not asyncio.current_task():
            question.timer.cancel()
        waiting = any(q.task_id == question.task_id for q in self._questions.values())
        if not waiting:
            self._status_writes.pop(question.task_id, None)
            if question.on_input is not None:
                question.on_input(False)

    def _call_stream(self, call: InFlight) -> EventStream:
        if call.stream is not None and not call.stream.closed:
            return call.stream
        if call.task_id is not None:
            stream = self._result_streams.get(call.task_id)
            if stream is not None and not stream.closed:
                return stream
        return self.standalone

    def _open(self, stream: EventStream) -> EventStream | None:
        """`stream`, else the GET stream, while open; None once the session is ending."""
        if not stream.closed:
            return stream
        return None if self.standalone.closed else self.standalone

    def _push(self, stream: EventStream, message: jsonrpc.Message) -> None:
        target = self._open(stream)
        if target is None:
            # Ended or shutting down: no client can read it any more. Upstream messages keep
            # coming for tasks that outlive their session (progress, logs, list_changed).
            log.debug("session %s: dropped %s", self.tag, type(message).__name__)
            return
        target.push(jsonrpc.dump(message))

    def drain(self, reason: str) -> None:
        """Shutdown: answer every relayed request with an error and end the GET stream.

        Streams of tasks/result calls end by themselves: their tasks are terminal by now.
        """
        for client_id, upstream_id in list(self._by_client_id.items()):
            call = self._inflight.get(upstream_id)
            if call is None or call.stream is None or call.stream.closed:
                continue
            answer = jsonrpc.error_response(client_id, INTERNAL_ERROR, reason)
            call.stream.push(jsonrpc.dump(answer))
            call.stream.close()
            if call.relay is not None:
                call.relay.cancel()
        self.standalone.close()

    async def close(self) -> None:
        """End the session; a running task keeps the upstream until it finishes.

        Open questions get their default answer now: nobody is left to answer them. Those
        answers run on the session's task set, which the end of its last task call closes.
        """
        self._ended = True
        await self._tasks.close()
        self.standalone.close()
        for stream in self._streams.values():
            stream.close()
        if self._task_calls == 0:
            await self.upstream.close()
            return
        # The upstream stays for the tasks: it must not wait on requests nobody will answer.
        for question in list(self._questions.values()):
            self._tasks.spawn(self._expire(question, _ENDED), "default answer")
        for down_id, (up_id, _) in list(self._server_requests.items()):
            if down_id not in self._questions:
                del self._server_requests[down_id]
                answer = jsonrpc.error_response(up_id, INTERNAL_ERROR, _ENDED)
                self._tasks.spawn(self._give_default(answer), "default answer")


def _default_answer(up_id: jsonrpc.RequestId, method: str, reason: str) -> Answer:
    """What the upstream is told when nobody answers its request."""
    if method == "elicitation/create":
        # Elicitation has a way to say "nobody answered": the user dismissed the dialog.
        return jsonrpc.Response(jsonrpc="2.0", id=up_id, result={"action": "cancel"})
    return jsonrpc.error_response(up_id, INTERNAL_ERROR, reason)


_Related = TypeVar("_Related", jsonrpc.Request, jsonrpc.Notification)


def _related(message: _Related, task_id: str) -> _Related:
    """The message with `_meta["io.modelcontextprotocol/related-task"]` (spec: MUST)."""
    return jsonrpc.with_meta(message, RELATED_TASK, {"taskId": task_id})
