"""Session: one downstream session, the gateway's own `MCP-Session-Id`, with one upstream.

A session joins three parts and routes between them: its `Streams` (toward the client), its
`Calls` (the upstream requests it awaits: relayed client requests and task calls) and its
`Questions` (what the upstream asks the client). A message from the upstream names the call
it belongs to (or, on stdio and HTTP+SSE, the only call in flight is taken); it goes to that
call's stream, and when that has closed to the GET stream. Progress and messages of a task's
call carry the client's token and the related-task meta, and go to the stream of an open
`tasks/result` for the task, else to the GET stream.

The session's tasks are its `task_host`'s (`task_host.py`): the runner starts their calls
there, and tasks/result opens their streams there.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.aio import TaskSet
from gateway.config import HttpConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import METHOD_NOT_FOUND
from gateway.protocol.questions import related_to_task
from gateway.route import Route
from gateway.session.calls import Calls, InFlight, Rewriter
from gateway.session.questions import Questions
from gateway.session.streams import EventStream, Streams
from gateway.session.task_host import SessionTaskHost
from gateway.tasks.inputs import TaskInputs
from gateway.tasks.models import SessionRecord, owner_of
from gateway.upstream import Answer

#: The client capability each question of the upstream needs (spec: a server sends such a
#: request only to a client that declared it).
_CAPABILITY_OF = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}

__all__ = ["Rewriter", "Session"]


class Session:
    """The 2025-11-25 session: its streams, the calls it relays, its questions and tasks.

    Three names say who is behind it. `principal` is who authenticated (None without
    authentication). `owner` is the key its tasks are bound to: the route and the principal,
    or without a principal the session itself. `limit_key` is whom the per-principal limits
    count it against: the route and the principal, or without one the client's address.
    """

    def __init__(
        self,
        session_id: str,
        route: Route,
        http: HttpConfig,
        principal: str | None,
        limit_key: str,
    ) -> None:
        self.id = session_id
        #: Who opened it (None without authentication); only they can use it.
        self.principal = principal
        self.limit_key = limit_key
        forwarded: dict[str, str] = {}
        #: The latest values of the client headers this route forwards upstream.
        self.forwarded = forwarded
        #: What survives a restart; set once the upstream accepted the handshake.
        self.record: SessionRecord | None = None
        #: Writes `record` to the store (set by the registry).
        self.persist: Callable[[SessionRecord], Coroutine[Any, Any, bool]] | None = None
        # The session id is a bearer secret; logs name the session by this unrelated tag.
        self.tag = secrets.token_hex(4)
        self.route = route
        self.protocol_version = "2025-03-26"
        self.last_seen = time.monotonic()
        self._streams = Streams(http.replay_buffer_events, self.tag)
        self._tasks = TaskSet(f"session {self.tag}")
        # (The dict, not `self`: a closure over the session, kept by its upstream, was a cycle.)
        self.upstream = route.upstream.client(self, lambda: forwarded, principal)
        self.upstream.on_reestablished = self._upstream_reestablished
        self._calls = Calls(route, self.upstream, self._tasks, self.tag)
        self._questions = Questions(
            route, self.upstream, self._streams, self._tasks, self._calls.calling, self.tag
        )
        #: The runner's `TaskHost` for the tasks this session starts.
        self.task_host = SessionTaskHost(
            self.upstream,
            (self.owner, principal, self.tag),
            self._calls,
            self._questions,
            self._streams,
            self._tasks,
        )

    @functools.cached_property
    def owner(self) -> str:
        """Whom this session's tasks belong to: its principal, or without one the session.
        (Made once: every task the session starts keeps it, and need not keep a copy.)"""
        return owner_of(self.route.name, self.principal) or f"session:{self.id}"

    @property
    def client_capabilities(self) -> jsonrpc.JsonObject:
        """What the client declared in its initialize request."""
        params = self.record.initialize.get("params") if self.record is not None else None
        declared = params.get("capabilities") if isinstance(params, dict) else None
        return declared if isinstance(declared, dict) else {}

    @property
    def busy(self) -> bool:
        return self._calls.busy

    @property
    def listening(self) -> bool:
        """A connection reads the GET stream: the upstream's own messages still reach it."""
        return self._streams.standalone.attached

    @property
    def standalone(self) -> EventStream:
        """The GET stream."""
        return self._streams.standalone

    def stream(self, key: str) -> EventStream | None:
        return self._streams.get(key)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run work that belongs to this session and ends with it (e.g. a tasks/result wait)."""
        self._tasks.spawn(coro, name=name)

    def _upstream_reestablished(self) -> None:
        """The handshake was replayed: the record names the new upstream session, so that
        another replica carries that one on."""
        if self.record is None or self.persist is None:
            return
        self.record = self.record.model_copy(
            update={
                "upstream_session_id": self.upstream.session_id,
                "upstream_protocol_version": self.upstream.protocol_version,
            }
        )
        self._tasks.spawn(self.persist(self.record), name="session record")

    # -- client -> upstream

    def forward(self, request: jsonrpc.Request, rewrite: Rewriter | None = None) -> EventStream:
        """Start relaying a client request; its answer and related messages go to the stream."""
        stream = self._streams.new()
        self._calls.forward(request, stream, rewrite)
        return stream

    async def deliver(self, message: jsonrpc.Notification | Answer) -> bool:
        """A client notification, or the client's answer to a server request; False for an
        answer to no request of this session's (one asked on another replica, say).

        Raises:
            UpstreamError: the upstream did not take it. An answer's request then stays
                open, so the client may send the answer again.
        """
        if not isinstance(message, jsonrpc.Notification):
            return await self._questions.answer(message)
        if message.method == "notifications/cancelled":
            await self._calls.cancel(message)
        elif message.method == "notifications/initialized":
            await self.upstream.initialized(message)
            if self.record is not None and self.persist is not None:
                self.record = self.record.model_copy(
                    update={"initialized": message.model_dump(exclude_unset=True)}
                )
                await self.persist(self.record)
        else:
            await self.upstream.notify(message)
        return True

    def share_questions(self, board: TaskInputs) -> None:
        """Replicas share the store: the questions of this session's tasks are kept there."""
        self._questions.share(board)

    # -- upstream -> client (the upstream client's Listener)

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        call = self._calls.get(related)
        if call is None or call.stream is None:
            return
        if interrupted:
            call.stream.interrupt()
        else:
            call.stream.want_sse()

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        call = self._calls.for_message(related)
        if isinstance(message, jsonrpc.Request):
            refusal = self._undeclared(message)
            if refusal is not None:
                self._questions.refuse(refusal)
            elif call is not None and call.task_id is not None:
                self._questions.ask_for_task(message, call.task_id, call.on_input)
            else:
                self._questions.ask(message, self._stream_of(call))
            return
        if not isinstance(message, jsonrpc.Notification):
            return
        if message.method == "notifications/progress":
            token = jsonrpc.param(message, "progressToken")
            # An object or array token names no call we made (and cannot be looked up).
            call = self._calls.get(token) if jsonrpc.is_request_id(token) else None
            if call is None:
                return  # progress after the answer, or for a token we never issued
            if call.task_id is not None and call.on_progress is not None:
                call.on_progress(message.params or {})  # the task's statusMessage, for pollers
            if call.client_token is None:
                return  # the client asked for no progress: it reaches no stream
            note = jsonrpc.with_param(message, "progressToken", call.client_token)
            if call.task_id is not None:
                note = related_to_task(note, call.task_id)
            self._streams.push(self._stream_of(call), note)
        elif message.method == "notifications/cancelled":
            self._questions.cancelled_upstream(message)
        elif call is not None and call.task_id is not None:
            self._streams.push(self._stream_of(call), related_to_task(message, call.task_id))
        else:
            self._streams.push(self._stream_of(call), message)

    def _undeclared(self, request: jsonrpc.Request) -> jsonrpc.ErrorResponse | None:
        """The upstream's refusal for a question of a kind the client never declared it can
        answer (elicitation, sampling, roots): relayed, it would wait on a client that cannot
        answer, and with it the upstream's call."""
        capability = _CAPABILITY_OF.get(request.method)
        if capability is None or isinstance(self.client_capabilities.get(capability), dict):
            return None
        return jsonrpc.error_response(
            request.id,
            METHOD_NOT_FOUND,
            f"{request.method} is not supported: the client declared no {capability} capability",
        )

    def _stream_of(self, call: InFlight | None) -> EventStream:
        """Where the upstream's messages about `call` go now."""
        if call is None:
            return self._streams.standalone
        if call.stream is not None and not call.stream.closed:
            return call.stream
        if call.task_id is not None:
            return self._streams.of_task(call.task_id)
        return self._streams.standalone

    # -- the end

    def drain(self, reason: str) -> None:
        """Shutdown: answer every relayed request with an error and end the GET stream.

        Streams of tasks/result calls end by themselves: their tasks are terminal by now.
        """
        self._calls.drain(reason)
        self._streams.standalone.close()

    async def close(self) -> None:
        """End the session; a running task keeps the upstream until it finishes.

        Open questions get their default answer now: nobody is left to answer them. Those
        answers run on the session's task set, which the end of its last task call closes.
        """
        self.task_host.session_ended()
        self._questions.end()
        await self._tasks.close()
        self._streams.close()
        if not self.task_host.running:
            await self.upstream.close()
            return
        self._questions.answer_open_by_default()
