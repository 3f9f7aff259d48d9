"""`UpstreamClient`: one MCP client session toward the upstream, over any transport.

It re-establishes a lost upstream (a stdio child that died or was stopped while idle, an
HTTP upstream that forgot our session) by replaying the handshake before the next request,
so one crash or idle stop does not end the client's session. Its id space, the matching of
answers to requests and how long a call waits are `answers`'. Messages the upstream
originates go to its `Listener` (base).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from gateway.aio import timers
from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import UpstreamUnavailable
from gateway.protocol.jsonrpc import Answer
from gateway.upstream.answers import Answers, CallLimit, timed_out
from gateway.upstream.base import DETACHED, Listener, Transport
from gateway.upstream.streamable_http import UpstreamSessionExpired
from gateway.upstream.unreadable import Unreadable

if TYPE_CHECKING:
    from gateway.observability.traces import UpstreamSpans

log = logging.getLogger(__name__)

#: How long closing a session waits for a message still on its way upstream.
_SEND_GRACE_SECONDS = 2.0


class UpstreamClient:
    def __init__(
        self,
        make_transport: Callable[[UpstreamClient], Transport],
        config: UpstreamConfig,
        listener: Listener,
        spans: UpstreamSpans | None = None,
    ) -> None:
        self._transport = make_transport(self)
        #: With tracing on: each call's span (None: no tracing, and no cost).
        self.spans = spans
        #: What a bounded call is given (made once: `call` runs per request).
        self._bounded = CallLimit(
            config.request_timeout_seconds, "answer", "upstream.request_timeout_seconds"
        )
        self._listener = listener
        self._answers = Answers()
        self._handshake: tuple[jsonrpc.Request, jsonrpc.Notification | None] | None = None
        # Alive from a successful initialize until the transport is lost; clients may send
        # requests concurrently with `notifications/initialized`, so that is not awaited.
        self._alive = False
        self._lost_reason: str | None = None
        self._reconnect_lock = asyncio.Lock()
        self._closed = False
        #: Notifications and answers on their way: closing waits for them (briefly), as an
        #: upstream that sees its session deleted under a message may drop the connection.
        self._sending = 0
        self._sent = asyncio.Event()
        self.protocol_version: str | None = None
        #: Told when a replayed handshake gave the session a new upstream session.
        self.on_reestablished: Callable[[], None] | None = None
        #: Asked before the handshake is replayed: False when the session has ended meanwhile.
        self.may_reestablish: Callable[[], Awaitable[bool]] | None = None

    def next_id(self) -> str:
        """An id no other client of this upstream session sends (`Answers.next_id`)."""
        return self._answers.next_id()

    @property
    def busy(self) -> bool:
        """True while stopping the upstream would lose something: a call (relayed or a
        task's) in flight, a question of the upstream unanswered, a handshake under way."""
        return self._answers.outstanding or self._reconnect_lock.locked() or self._listener.busy

    @property
    def listening(self) -> bool:
        return self._listener.listening

    # Sink: called by the transport.
    def on_message(self, message: jsonrpc.Message, related: jsonrpc.RequestId | None) -> None:
        if not self._answers.take(message):
            self._listener.on_server_message(message, related)

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        self._listener.on_stream(related, interrupted)

    def on_unreadable(self, message: Unreadable) -> None:
        self._answers.unreadable(message)

    def on_lost(self, reason: str) -> None:
        log.warning("upstream lost: %s", reason)
        self.on_stopped(reason)
        self._answers.fail_all(reason)

    def on_stopped(self, reason: str) -> None:
        """The upstream is gone (stopped while idle, or lost); the next use replays the
        handshake. Its unanswered questions went with it."""
        self._alive = False
        self._lost_reason = reason
        self._answers.questions_gone()

    async def initialize(self, request: jsonrpc.Request) -> Answer:
        """Open the transport and send the client's `initialize` (under our own id)."""
        await self._transport.start()
        answer = await self.call(jsonrpc.with_id(request, self.next_id()), ready=False)
        if isinstance(answer, jsonrpc.Response):
            version = answer.result.get("protocolVersion")
            self.protocol_version = version if isinstance(version, str) else None
            if self._handshake is None:
                self._handshake = (request, None)
            self._alive = True
        return answer

    def restore(
        self, initialize: jsonrpc.Request, initialized: jsonrpc.Notification | None
    ) -> None:
        """A session rebuilt after a restart: the handshake is replayed on first use."""
        self._handshake = (initialize, initialized)
        self._lost_reason = "the gateway restarted"

    def adopt(
        self,
        initialize: jsonrpc.Request,
        initialized: jsonrpc.Notification | None,
        session_id: str,
        protocol_version: str,
    ) -> None:
        """A session another replica opened: its upstream session is carried on as it is.
        Should the upstream no longer know it, the handshake is replayed as after `restore`."""
        self.restore(initialize, initialized)
        if not self._transport.adopt(session_id, protocol_version):
            return
        self.protocol_version = protocol_version
        self._alive = True
        if initialized is not None:
            self._transport.initialized(protocol_version)

    def keep_upstream_session(self) -> None:
        """Closing leaves the upstream's session open, for another replica to carry on."""
        self._transport.keep_session()

    async def initialized(self, notification: jsonrpc.Notification) -> None:
        if self._handshake is not None:
            self._handshake = (self._handshake[0], notification)
            if not self._alive:
                # Stopped since initialize: the replay sends this notification, once.
                await self._reconnect()
                return
        await self._transport.send(notification)
        self._transport.initialized(self.protocol_version or "2025-03-26")

    @property
    def session_id(self) -> str | None:
        """The upstream's own session id (Streamable HTTP), for a message sent to it later
        from elsewhere (the next process cancelling an earlier attempt's call)."""
        session_id = getattr(self._transport, "session_id", None)
        return session_id if isinstance(session_id, str) else None

    def quiet(self) -> None:
        self._transport.listens = False

    async def stream_open(self) -> None:
        """Returns once the upstream's unasked messages can reach us (`Transport.stream_open`)."""
        await self._transport.stream_open()

    async def _reconnect(self) -> None:
        async with self._reconnect_lock:
            if self._alive:
                return
            if self._closed:
                raise UpstreamUnavailable("the session ended")
            if self._handshake is None:
                raise UpstreamUnavailable(self._lost_reason or "the upstream is not initialized")
            if self.may_reestablish is not None and not await self.may_reestablish():
                # Ended on another replica, whose news has not reached this one yet: a new
                # upstream session would outlive it, which no replica would ever end.
                raise UpstreamUnavailable("the session ended")
            request, notification = self._handshake
            log.info("re-establishing the upstream after: %s", self._lost_reason)
            await self._transport.close()
            answer = await self.initialize(request)
            if isinstance(answer, jsonrpc.ErrorResponse):
                raise UpstreamUnavailable(
                    f"the upstream refused to re-initialize: {answer.error.message}"
                )
            if notification is not None:
                await self.initialized(notification)
            if self.on_reestablished is not None:
                self.on_reestablished()

    def call(
        self,
        request: jsonrpc.Request,
        *,
        ready: bool = True,
        bounded: bool = True,
        limit: CallLimit | None = None,
    ) -> Coroutine[Any, Any, Answer]:
        """Send a request that already carries an id from `next_id()` and await the answer.

        A bounded call fails after the route's request_timeout_seconds; one given a `limit`
        after that instead (one timer per call, not one per layer); task runs pass
        bounded=False and apply their own, longer limit.

        Raises:
            UpstreamError: no answer could be had (not a JSON-RPC error: that is returned).
        """
        if limit is None and bounded:
            limit = self._bounded
        # Not a coroutine itself: an untraced call costs this one check, no extra frame.
        if self.spans is not None:
            return self.spans.call(partial(self._call, ready=ready, limit=limit), request)
        return self._call(request, ready=ready, limit=limit)

    async def _call(
        self, request: jsonrpc.Request, *, ready: bool, limit: CallLimit | None
    ) -> Answer:
        if ready and not self._alive:
            await self._reconnect()
        request_id = request.id
        future = self._answers.expect(request_id)
        try:
            async with timers.deadline(None if limit is None else limit.seconds):
                try:
                    await self._transport.send(request)
                except UpstreamSessionExpired:
                    if not ready:
                        raise
                    # The upstream never saw this request, so sending it again is safe.
                    self._alive = False
                    await self._reconnect()
                    await self._transport.send(request)
                # A task's call may wait hours for its answer, and a hundred thousand of them
                # at once: what it sent is not kept meanwhile (a kilobyte and more each).
                del request
                if self._transport.answers_inline and not future.done():
                    raise UpstreamUnavailable(
                        "the upstream closed the response stream before answering"
                    )
                return await future
        except TimeoutError as exc:
            raise timed_out(limit) from exc
        finally:
            self._answers.forget(request_id)

    async def notify(self, message: jsonrpc.Notification | Answer) -> None:
        """Send a notification, or our answer to a request the upstream made.

        Raises:
            UpstreamUnavailable: the session was closed (a stdio transport would start a
                new child for the message, which nothing would ever stop).
        """
        if self._closed:
            raise UpstreamUnavailable("the session ended")
        self._answers.replied(message)
        if (
            not self._alive
            and self._handshake is not None
            and isinstance(message, jsonrpc.Notification)
        ):
            await self._reconnect()
        self._sending += 1
        self._sent.clear()
        try:
            await self._transport.send(message)
        finally:
            self._sending -= 1
            if self._sending == 0:
                self._sent.set()

    async def close(self) -> None:
        self._alive = False
        self._closed = True
        if self._sending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_SEND_GRACE_SECONDS):
                    await self._sent.wait()
        self._answers.fail_all("the session ended")
        await self._transport.close()
        # The session above has ended: it, and the transport, are let go (each holds this
        # client, and at the end of every session the collector found the three a cycle).
        self._listener = DETACHED
        self.on_reestablished = self.may_reestablish = None
        self._transport.detach()
