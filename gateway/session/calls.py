"""The upstream calls a session awaits, by upstream id: relayed client requests, task calls.

A client request goes upstream under an id of the gateway's choosing (and, when the client
asked for progress, that id as its progress token: unique per upstream session), so the
answer, the progress and any server request the call provokes can be matched back to the
client's stream under the client's own ids. Every relayed request ends in exactly one answer
on its stream, or in none when the client cancelled it. A task's call, which the runner sends
itself, is registered here too, so that what the upstream says about it finds the task; no
client request waits on its answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gateway.aio import TaskSet
from gateway.observability.logs import printable
from gateway.observability.outcomes import call_outcome
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, GatewayError
from gateway.route import Route
from gateway.session.question import OnInput
from gateway.session.streams import EventStream
from gateway.tasks.models import Task
from gateway.upstream import Answer, CallLimit, UpstreamSession

log = logging.getLogger(__name__)

#: Changes an answer before the client sees it (e.g. `tools/list` gains `taskSupport`).
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
    on_input: OnInput | None = None


class Calls:
    """The calls in flight toward one session's upstream."""

    def __init__(self, route: Route, upstream: UpstreamSession, tasks: TaskSet, tag: str) -> None:
        self._route = route
        self._upstream = upstream
        self._tasks = tasks
        self._tag = tag
        self._inflight: dict[jsonrpc.RequestId, InFlight] = {}
        self._by_client_id: dict[jsonrpc.RequestId, jsonrpc.RequestId] = {}

    @property
    def busy(self) -> bool:
        return bool(self._inflight)

    def get(self, upstream_id: jsonrpc.RequestId) -> InFlight | None:
        """The call under this upstream id, which is also its upstream progress token."""
        return self._inflight.get(upstream_id)

    def for_message(self, related: jsonrpc.RequestId | None) -> InFlight | None:
        """The call an upstream message belongs to, when that can be told."""
        if related is not None:
            return self._inflight.get(related)
        if len(self._inflight) == 1:
            # stdio and HTTP+SSE do not say which request a message belongs to; with a single
            # call in flight it can only be that one, and its stream is where clients look.
            return next(iter(self._inflight.values()))
        return None

    def calling(self, task_id: str) -> bool:
        """The task's call is still in flight."""
        return any(c.task_id == task_id for c in self._inflight.values())

    def forward(
        self, request: jsonrpc.Request, stream: EventStream, rewrite: Rewriter | None
    ) -> None:
        """Start relaying a client request; its answer and related messages go to `stream`."""
        client_token = jsonrpc.progress_token(request)
        outgoing = self._outgoing(request, client_token)
        call = InFlight(client_token, stream)
        self._inflight[outgoing.id] = call
        self._by_client_id[request.id] = outgoing.id
        call.relay = self._tasks.spawn_quiet(
            self._relay(outgoing, request.id, stream, rewrite), name="relayed call"
        )

    def start_task(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: OnInput,
    ) -> jsonrpc.Request:
        """Register a task's upstream call; returns it under its upstream id and token.

        A task's call always carries a token of ours, whether the client sent one or not, so
        that the task's statusMessage follows the upstream's progress for every poller."""
        outgoing = self._outgoing(request, task.progress_token, ask_progress=True)
        self._inflight[outgoing.id] = InFlight(
            task.progress_token,
            None,
            task_id=task.task_id,
            on_progress=on_progress,
            on_input=on_input,
        )
        return outgoing

    def end(self, upstream_id: jsonrpc.RequestId) -> InFlight | None:
        """Forget a task's finished call."""
        return self._inflight.pop(upstream_id, None)

    async def cancel(self, message: jsonrpc.Notification) -> None:
        """The client's `notifications/cancelled`: stop relaying, and tell the upstream."""
        # The spec says to ignore invalid cancellations; an object or array id is one, and
        # cannot be looked up anyway.
        client_id = jsonrpc.param(message, "requestId")
        upstream_id = (
            self._by_client_id.get(client_id) if jsonrpc.is_request_id(client_id) else None
        )
        call = self._inflight.get(upstream_id) if upstream_id is not None else None
        if call is None:
            return  # already answered: cancellation races are expected
        if call.relay is not None:
            call.relay.cancel()  # first: the client is done even if the upstream is gone
        await self._upstream.notify(jsonrpc.with_param(message, "requestId", upstream_id))

    def drain(self, reason: str) -> None:
        """Shutdown: answer every relayed request with an error now."""
        for client_id, upstream_id in list(self._by_client_id.items()):
            call = self._inflight.get(upstream_id)
            if call is None or call.stream is None or call.stream.closed:
                continue
            answer = jsonrpc.error_response(client_id, INTERNAL_ERROR, reason)
            call.stream.push(jsonrpc.dump(answer))
            call.stream.close()
            if call.relay is not None:
                call.relay.cancel()

    def _outgoing(
        self,
        request: jsonrpc.Request,
        client_token: jsonrpc.RequestId | None,
        ask_progress: bool = False,
    ) -> jsonrpc.Request:
        upstream_id = self._upstream.next_id()
        outgoing = jsonrpc.with_id(request, upstream_id)
        if client_token is not None or ask_progress:
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
                if tool_call:
                    answer = await self._call_tool(outgoing)
                else:
                    answer = await self._upstream.call(outgoing)
            except GatewayError as exc:
                if tool_call:
                    self._observe(outgoing, None, exc, started)
                raise
            if tool_call:
                self._observe(outgoing, answer, None, started)
            if rewrite is not None:
                answer = rewrite(answer)
        except GatewayError as exc:  # the upstream failed, or a cap refused to replace it
            answer = jsonrpc.error_response(outgoing.id, INTERNAL_ERROR, exc.message)
        except Exception:
            log.exception("session %s: relaying %s failed", self._tag, printable(outgoing.method))
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

    def _call_tool(self, outgoing: jsonrpc.Request) -> Coroutine[Any, Any, Answer]:
        """A plain tools/call gets the time a task of the tool gets (tasks.time_limit_seconds):
        a client that never makes tasks (most do not) must not have its long calls cut
        sooner than one that does. Other requests keep upstream.request_timeout_seconds.

        Raises:
            UpstreamError: no answer could be had, or not within the limit.
        """
        limit = CallLimit(
            self._route.policy.time_limit_seconds,
            "finish the tool call",
            "tasks.time_limit_seconds",
        )
        return self._upstream.call(outgoing, limit=limit)

    def _observe(
        self,
        request: jsonrpc.Request,
        answer: Answer | None,
        error: BaseException | None,
        started: float,
    ) -> None:
        seconds = time.perf_counter() - started
        tool = jsonrpc.param(request, "name")
        self._route.metrics.upstream_call(
            self._route.name, tool, call_outcome(answer, error), seconds
        )
