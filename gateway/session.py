"""Downstream sessions: the gateway's own `MCP-Session-Id`, its streams and its id maps.

Each session holds one upstream client. Client requests get upstream ids (and upstream
progress tokens) of the gateway's choosing, so the answer, the progress and any server
request the call provokes can be matched back to the client's stream under the client's own
ids. Server requests get ids from the session's downstream id space; the client's answer is
routed back to the upstream under the upstream's id.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import secrets
import time
from dataclasses import dataclass

from . import jsonrpc
from .aio import TaskSet
from .config import HttpConfig, SessionsConfig
from .errors import INTERNAL_ERROR, CapacityExceeded, GatewayError, SessionNotFound
from .sse import EventStream
from .upstream import Answer, UpstreamClient, UpstreamRoute

log = logging.getLogger(__name__)

_KEPT_STREAMS = 64  # finished POST streams kept for Last-Event-ID resumption


@dataclass(slots=True)
class InFlight:
    client_id: jsonrpc.RequestId
    client_token: jsonrpc.RequestId | None
    stream: EventStream
    relay: asyncio.Task[None] | None = None


class Session:
    def __init__(self, session_id: str, route: UpstreamRoute, http: HttpConfig) -> None:
        self.id = session_id
        # The session id is a bearer secret; logs name the session by this unrelated tag.
        self.tag = secrets.token_hex(4)
        self.route = route
        self.protocol_version = "2025-03-26"
        self.last_seen = time.monotonic()
        self._http = http
        self._stream_keys = itertools.count(1)
        self.standalone = EventStream("0", http.replay_buffer_events)
        self._streams: collections.OrderedDict[str, EventStream] = collections.OrderedDict()
        self._inflight: dict[jsonrpc.RequestId, InFlight] = {}
        self._by_client_id: dict[jsonrpc.RequestId, jsonrpc.RequestId] = {}
        self._down_ids = itertools.count(1)
        self._server_requests: dict[jsonrpc.RequestId, tuple[jsonrpc.RequestId, EventStream]] = {}
        self._tasks = TaskSet(f"session {self.tag}")
        self.upstream = UpstreamClient(route.transport, route.config, self)

    @property
    def busy(self) -> bool:
        return bool(self._inflight)

    # -- streams

    def new_stream(self) -> EventStream:
        stream = EventStream(str(next(self._stream_keys)), self._http.replay_buffer_events)
        self._streams[stream.key] = stream
        while len(self._streams) > _KEPT_STREAMS:
            oldest = next(iter(self._streams.values()))
            if not oldest.closed:
                break
            self._streams.popitem(last=False)
        return stream

    def stream(self, key: str) -> EventStream | None:
        return self.standalone if key == "0" else self._streams.get(key)

    # -- client -> upstream

    def forward(self, request: jsonrpc.Request) -> EventStream:
        """Start relaying a client request; its answer and related messages go to the stream."""
        stream = self.new_stream()
        upstream_id = self.upstream.next_id()
        client_token = jsonrpc.progress_token(request)
        outgoing = jsonrpc.with_id(request, upstream_id)
        if client_token is not None:
            # The upstream request id doubles as our progress token: unique per upstream session.
            outgoing = jsonrpc.with_progress_token(outgoing, upstream_id)
        call = InFlight(request.id, client_token, stream)
        self._inflight[upstream_id] = call
        self._by_client_id[request.id] = upstream_id
        call.relay = self._tasks.spawn(
            self._relay(outgoing, request.id, stream), name=f"call {request.method}"
        )
        return stream

    async def _relay(
        self, outgoing: jsonrpc.Request, client_id: jsonrpc.RequestId, stream: EventStream
    ) -> None:
        # Every relayed request ends in exactly one answer on its stream (or, when the client
        # cancelled it, in none), whatever fails on the way.
        answer: Answer
        try:
            answer = await self.upstream.call(outgoing)
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
        if call is None:
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
            self._push(call.stream, jsonrpc.with_param(message, "progressToken", call.client_token))
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
        if call is not None and not call.stream.closed:
            return call.stream
        return self.standalone

    def _push(self, stream: EventStream, message: jsonrpc.Message) -> None:
        if stream.closed:
            stream = self.standalone
        stream.push(jsonrpc.dump(message))

    async def close(self) -> None:
        await self._tasks.close()
        await self.upstream.close()
        self.standalone.close()
        for stream in self._streams.values():
            stream.close()


class SessionRegistry:
    """All live sessions; ids are 256-bit random tokens."""

    def __init__(self, config: SessionsConfig, http: HttpConfig) -> None:
        self._config = config
        self._http = http
        self._sessions: dict[str, Session] = {}
        self._tasks = TaskSet("sessions")

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, route: UpstreamRoute) -> Session:
        if len(self._sessions) >= self._config.max_sessions:
            raise CapacityExceeded(
                f"the gateway already holds its maximum of {self._config.max_sessions} sessions "
                "(sessions.max_sessions)"
            )
        session = Session(secrets.token_urlsafe(32), route, self._http)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str, route: UpstreamRoute) -> Session:
        """Raises SessionNotFound for unknown ids and for another route's sessions."""
        session = self._sessions.get(session_id)
        if session is None or session.route is not route:
            raise SessionNotFound(
                "Session not found: it ended, expired or never existed; "
                "send a new initialize without MCP-Session-Id"
            )
        session.last_seen = time.monotonic()
        return session

    async def end(self, session: Session) -> None:
        if self._sessions.pop(session.id, None) is not None:
            await session.close()

    def start_reaper(self) -> None:
        self._tasks.spawn(self._reap(), name="session-reaper")

    async def _reap(self) -> None:
        idle = self._config.idle_timeout_seconds
        while True:
            await asyncio.sleep(min(idle / 4, 60))
            cutoff = time.monotonic() - idle
            for session in [s for s in self._sessions.values() if s.last_seen < cutoff]:
                if session.busy:
                    continue
                log.info("session %s idle for %.0f s: ended", session.tag, idle)
                await self.end(session)

    async def close(self) -> None:
        await self._tasks.close()
        for session in list(self._sessions.values()):
            await self.end(session)
