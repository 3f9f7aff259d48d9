"""`MemberSessions`: one client session of a route of several members, as one upstream.

It holds an `UpstreamClient` per member and answers to the session above as if it were one
(the same methods), so sessions, held sessions, tasks and questions work for every member
unchanged. A request goes where it belongs (`routing`). Ids need no mapping on the way up
(`next_id`'s are unique across the members); the members' questions get ids unique across
them on the way down (`member_calls.Asks`). A member that fails is reported to the route's
`MemberHealth`, which leaves it out of the lists until it answers again. What the route's
parts use of these sessions is their base, `member_calls.MemberCalls`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from gateway import __version__
from gateway.protocol import jsonrpc
from gateway.protocol import members as names
from gateway.protocol.errors import UpstreamError
from gateway.protocol.jsonrpc import Answer
from gateway.upstream.answers import CallLimit
from gateway.upstream.base import DETACHED, Listener
from gateway.upstream.client import UpstreamClient
from gateway.upstream.member_calls import Health, MemberCalls, Send
from gateway.upstream.routing import MemberListener, Routing


class MemberSessions(MemberCalls):
    def __init__(
        self,
        route: str,
        clients: Mapping[str, Callable[[Listener], UpstreamClient]],
        listener: Listener,
        health: Health,
    ) -> None:
        self._route = route
        made = {name: make(MemberListener(self, listener, name)) for name, make in clients.items()}
        super().__init__(made, listener, health)
        self._handshake: tuple[jsonrpc.Request, jsonrpc.Notification | None] | None = None
        self._on_reestablished: Callable[[], None] | None = None
        self._may_reestablish: Callable[[], Awaitable[bool]] | None = None
        self.protocol_version: str | None = None
        self.routing = Routing(self)
        health.watch(self)

    # -- what the session above uses of an upstream client

    @property
    def busy(self) -> bool:
        return any(client.busy for client in self._clients.values())

    @property
    def on_reestablished(self) -> Callable[[], None] | None:
        return self._on_reestablished

    @on_reestablished.setter
    def on_reestablished(self, callback: Callable[[], None] | None) -> None:
        self._on_reestablished = callback
        for client in self._clients.values():
            client.on_reestablished = callback

    @property
    def may_reestablish(self) -> Callable[[], Awaitable[bool]] | None:
        return self._may_reestablish

    @may_reestablish.setter
    def may_reestablish(self, check: Callable[[], Awaitable[bool]] | None) -> None:
        self._may_reestablish = check
        for client in self._clients.values():
            client.may_reestablish = check

    @property
    def session_id(self) -> str | None:
        """Each member's upstream session and protocol, as one string a record keeps."""
        clients = self._clients.items()
        ids = {n: (i, c.protocol_version) for n, c in clients if (i := c.session_id) is not None}
        return names.sessions_text(ids)

    async def initialize(self, request: jsonrpc.Request) -> Answer:
        """Every member's handshake at once. The members that answer make the server a client
        sees; one that does not is left out (and tried again on its next use), unless none
        answers."""
        self._handshake = (request, None)
        handshakes = (self._initialize(name, request) for name in self._order)
        answers = await asyncio.gather(*handshakes, return_exceptions=True)
        results: dict[str, jsonrpc.JsonObject] = {}
        failures: list[str] = []
        refusal: jsonrpc.ErrorResponse | None = None
        for name, answer in zip(self._order, answers, strict=True):
            if isinstance(answer, jsonrpc.Response):
                results[name] = answer.result
                continue
            if isinstance(answer, BaseException) and not isinstance(answer, UpstreamError):
                raise answer
            reason = answer.message if isinstance(answer, UpstreamError) else answer.error.message
            if isinstance(answer, jsonrpc.ErrorResponse):
                refusal = refusal or jsonrpc.with_id(answer, request.id)
            failures.append(f"member {name}: {reason}")
            self._clients[name].restore(request, None)  # tried again on its next use
            self._failed(name, answer)
        if not results:
            if refusal is not None:
                return refusal
            raise UpstreamError("no member answered initialize (" + "; ".join(failures) + ")")
        self.capabilities = {
            name: c if isinstance(c := r.get("capabilities"), dict) else {}
            for name, r in results.items()
        }
        self._up = set(results)
        versions = [v for r in results.values() if isinstance(v := r.get("protocolVersion"), str)]
        # The oldest: what every member that answered speaks (revisions are dates).
        self.protocol_version = min(versions) if versions else None
        version = self.protocol_version or ""
        merged = names.merged_initialize(self._route, version, results, __version__)
        return jsonrpc.Response(jsonrpc="2.0", id=request.id, result=merged)

    async def _initialize(self, name: str, request: jsonrpc.Request) -> Answer:
        answer = await self._clients[name].initialize(request)
        if isinstance(answer, jsonrpc.Response):
            self._health.answered(name)
        return answer

    async def initialized(self, notification: jsonrpc.Notification) -> None:
        if self._handshake is not None:
            self._handshake = (self._handshake[0], notification)
        for name, client in self._clients.items():
            if name not in self._up and self._handshake is not None:
                client.restore(self._handshake[0], notification)  # (it did not answer)
                continue
            try:
                await client.initialized(notification)
            except UpstreamError as exc:
                self._failed(name, exc)

    def restore(
        self, initialize: jsonrpc.Request, initialized: jsonrpc.Notification | None
    ) -> None:
        self._handshake = (initialize, initialized)
        self._up = set(self._clients)
        for client in self._clients.values():
            client.restore(initialize, initialized)

    def adopt(
        self,
        initialize: jsonrpc.Request,
        initialized: jsonrpc.Notification | None,
        session_id: str,
        protocol_version: str,
    ) -> None:
        """Each member's upstream session another replica opened (`session_id`), carried on."""
        self._handshake = (initialize, initialized)
        self._up = set(self._clients)
        self.protocol_version = protocol_version
        ids = names.read_sessions(session_id)
        for name, client in self._clients.items():
            if name in ids:
                client.adopt(initialize, initialized, *ids[name])
            else:
                client.restore(initialize, initialized)

    def keep_upstream_session(self) -> None:
        for client in self._clients.values():
            client.keep_upstream_session()

    def quiet(self) -> None:
        for client in self._clients.values():
            client.quiet()

    async def stream_open(self) -> None:
        opened = (c.stream_open() for n, c in self._clients.items() if n in self._up)
        await asyncio.gather(*opened, return_exceptions=True)

    async def close(self) -> None:
        self._closed = True  # what fails from now on failed by our doing, not the member's
        self._health.unwatch(self)
        await asyncio.gather(*(client.close() for client in self._clients.values()))
        # (see `UpstreamClient.close`)
        self._listener, self._on_reestablished, self._may_reestablish = DETACHED, None, None

    # -- requests

    def call(
        self,
        request: jsonrpc.Request,
        *,
        ready: bool = True,
        bounded: bool = True,
        limit: CallLimit | None = None,
    ) -> Coroutine[Any, Any, Answer]:
        """A request to the member it belongs to (`routing`)."""
        return self.routing.call(request, Send(ready, bounded, limit))

    # -- notifications and answers from the client

    async def notify(self, message: jsonrpc.Notification | Answer) -> None:
        if isinstance(message, jsonrpc.Notification):
            if message.method == "notifications/cancelled":
                target = jsonrpc.param(message, "requestId")
                member = self._calls.get(target) if jsonrpc.is_request_id(target) else None
                if member is not None:
                    await self._clients[member].notify(message)
                return
            for name, client in self._clients.items():
                if name in self._up:
                    try:
                        await client.notify(message)
                    except UpstreamError as exc:
                        self._failed(name, exc)
            return
        answered = self._asks.answered(message)
        if answered is not None:  # (else it answers no question of a member's)
            await self._clients[answered[0]].notify(answered[1])
