"""Downstream sessions: the gateway's own `MCP-Session-Id`, its streams and its id maps.

Each session holds one upstream client. Client requests get upstream ids (and upstream
progress tokens) of the gateway's choosing, so the answer, the progress and any server
request the call provokes can be matched back to the client's stream under the client's own
ids. Server requests get ids from the session's downstream id space; the client's answer is
routed back to the upstream under the upstream's id.

Task calls (started by the runner) share the same maps but have no client request waiting:
their progress goes, with the client's token and the related-task meta, to the stream of
an open `tasks/result` for the task, else to the GET stream. A session ended while its tasks
run keeps its upstream connection until the runner reports the last one finished.
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
from typing import Any

from . import jsonrpc
from .aio import TaskSet
from .config import HttpConfig
from .errors import INTERNAL_ERROR, GatewayError
from .models import SessionRecord, Task
from .rewrite import RELATED_TASK
from .sse import EventStream
from .upstream import Answer, UpstreamClient, UpstreamRoute

log = logging.getLogger(__name__)

_KEPT_STREAMS = 64  # finished POST streams kept for Last-Event-ID resumption


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


class Session:
    def __init__(self, session_id: str, route: UpstreamRoute, http: HttpConfig) -> None:
        self.id = session_id
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
        self._task_calls = 0
        self._ended = False
        self._tasks = TaskSet(f"session {self.tag}")
        self.upstream = UpstreamClient(route.transport, route.config, self)

    @property
    def owner(self) -> str:
        """Whom this session's tasks belong to (the session itself until identities exist)."""
        return self.id

    @property
    def busy(self) -> bool:
        return bool(self._inflight)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run work that belongs to this session and ends with it (e.g. a tasks/result wait)."""
        self._tasks.spawn(coro, name=name)

    # -- streams

    def new_stream(self) -> EventStream:
        key = f"{self._stream_prefix}{next(self._stream_keys)}"
        stream = EventStream(key, self._http.replay_buffer_events)
        self._streams[stream.key] = stream
        while len(self._streams) > _KEPT_STREAMS:
            oldest = next(iter(self._streams.values()))
            if not oldest.closed:
                break
            self._streams.popitem(last=False)
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
        try:
            answer = await self.upstream.call(outgoing)
            if rewrite is not None:
                answer = rewrite(answer)
        except GatewayError as exc:  # the upstream failed, or a cap refused to replace it
            answer = jsonrpc.error_response(outgoing.id, INTERNAL_ERROR, exc.message)
        except Exception:
            log.exception("session %s: relaying %s failed", self.tag, outgoing.method)
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

    # -- task calls (driven by the runner)

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
    ) -> jsonrpc.Request:
        """Register a task's upstream call; returns it under its upstream id and token."""
        outgoing = self._outgoing(request, task.progress_token)
        self._inflight[outgoing.id] = InFlight(
            task.progress_token, None, task_id=task.task_id, on_progress=on_progress
        )
        self._task_calls += 1
        return outgoing

    def end_task_call(self, upstream_id: jsonrpc.RequestId) -> bool:
        """Forget a finished task call; True when an ended session now needs its upstream closed."""
        self._inflight.pop(upstream_id, None)
        self._task_calls -= 1
        return self._ended and self._task_calls == 0

    def task_status(self, task: Task) -> None:
        """`notifications/tasks/status` with the full task (no related-task meta, per spec)."""
        if not self._ended:
            note = jsonrpc.Notification(
                jsonrpc="2.0", method="notifications/tasks/status", params=task.wire()
            )
            self.standalone.push(jsonrpc.dump(note))

    def open_result_stream(self, task_id: str) -> EventStream:
        """The stream of a tasks/result call: the task's progress goes there while it is open."""
        stream = self.new_stream()
        self._result_streams[task_id] = stream
        return stream

    def close_result_stream(self, task_id: str, stream: EventStream) -> None:
        stream.close()
        if self._result_streams.get(task_id) is stream:
            del self._result_streams[task_id]

    async def deliver(self, message: jsonrpc.Notification | Answer) -> None:
        """A client notification, or the client's answer to a server request."""
        if isinstance(message, jsonrpc.Notification):
            if message.method == "notifications/cancelled":
                upstream_id = self._by_client_id.get(jsonrpc.param(message, "requestId"))
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
        pending = self._server_requests.pop(message.id, None) if message.id is not None else None
        if pending is None:
            log.info("session %s: dropped an answer to unknown server request", self.tag)
            return
        await self.upstream.notify(jsonrpc.with_id(message, pending[0]))

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
        if isinstance(message, jsonrpc.Request):
            stream = self._stream_for(related)
            down_id = next(self._down_ids)
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
                meta = {
                    **(jsonrpc.param(note, "_meta") or {}),
                    RELATED_TASK: {"taskId": call.task_id},
                }
                note = jsonrpc.with_param(note, "_meta", meta)
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
            return
        self._push(self._stream_for(related), message)

    def _stream_for(self, related: jsonrpc.RequestId | None) -> EventStream:
        call = self._inflight.get(related) if related is not None else None
        if call is None and related is None and len(self._inflight) == 1:
            # stdio and HTTP+SSE do not say which request a message belongs to; with a single
            # call in flight it can only be that one, and its stream is where clients look.
            call = next(iter(self._inflight.values()))
        return self._call_stream(call) if call is not None else self.standalone

    def _call_stream(self, call: InFlight) -> EventStream:
        if call.stream is not None and not call.stream.closed:
            return call.stream
        if call.task_id is not None:
            stream = self._result_streams.get(call.task_id)
            if stream is not None and not stream.closed:
                return stream
        return self.standalone

    def _push(self, stream: EventStream, message: jsonrpc.Message) -> None:
        if stream.closed:
            stream = self.standalone
        stream.push(jsonrpc.dump(message))

    async def close(self) -> None:
        """End the session; a running task keeps the upstream until it finishes."""
        self._ended = True
        await self._tasks.close()
        self.standalone.close()
        for stream in self._streams.values():
            stream.close()
        if self._task_calls == 0:
            await self.upstream.close()
