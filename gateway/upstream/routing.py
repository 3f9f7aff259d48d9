"""Where each request of a client of a route of several members goes (`fanout`).

A tool's or prompt's call goes to the member its name names (`protocol.members.Naming`), a
list to every member (`lists.ListMerge`), a resource's request to the member that listed its
URI (of two, the first in the route's order; one no list showed, to each member that offers
resources in turn), `logging/setLevel` to every member that is up; the gateway answers `ping`.
What no member serves is -32601.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

from gateway.protocol import jsonrpc
from gateway.protocol import members as names
from gateway.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND
from gateway.protocol.jsonrpc import Answer
from gateway.protocol.modern_results import LEGACY_RESOURCE_NOT_FOUND
from gateway.upstream.lists import ListMerge

if TYPE_CHECKING:
    from gateway.upstream.base import Listener
    from gateway.upstream.member_calls import MemberCalls, Send

#: Resource URIs remembered with the member that listed them, per session.
_MAX_URIS = 10_000
#: Methods answered by the member a `name` parameter names, and what an unknown one is.
_BY_NAME = {"tools/call": "tool", "prompts/get": "prompt"}
_BY_URI = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})


class Routing:
    def __init__(self, sessions: MemberCalls) -> None:
        # Weakly: the sessions hold this for as long as they live, and a strong reference
        # back made the three (with `lists`) a cycle left to the collector at their end.
        self._sessions: MemberCalls = weakref.proxy(sessions)
        self._uris: OrderedDict[str, str] = OrderedDict()
        self.lists = ListMerge(self._sessions, weakref.proxy(self))

    async def call(self, request: jsonrpc.Request, send: Send) -> Answer:
        """A request to the member it belongs to (a list: to every member, merged)."""
        sessions = self._sessions
        method = request.method
        if method in names.LISTS:
            return await self.lists.page(request, names.LISTS[method], send)
        if method in _BY_NAME:
            name = jsonrpc.param(request, "name")
            where = sessions.naming.member_of(name) if isinstance(name, str) else None
            if where is None:
                what = _BY_NAME[method]
                return jsonrpc.error_response(
                    request.id, INVALID_PARAMS, f"Unknown {what}: {str(name)[:200]}"
                )
            outgoing = jsonrpc.with_param(request, "name", where[1])
            return await sessions.forward(where[0], outgoing, send)
        if method in _BY_URI:
            uri = jsonrpc.param(request, "uri")
            return await self._by_uri(request, uri if isinstance(uri, str) else None, send)
        if method == "completion/complete":
            return await self._complete(request, send)
        if method == "logging/setLevel":
            return await self._everywhere(request, send)
        if method == "ping":
            return jsonrpc.Response(jsonrpc="2.0", id=request.id, result={})
        return jsonrpc.error_response(request.id, METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _by_uri(self, request: jsonrpc.Request, uri: str | None, send: Send) -> Answer:
        """A resource's request, to the member that listed the URI; one not listed (read
        from a template, say) to each member that offers resources in turn, until one
        knows it."""
        sessions = self._sessions
        member = self._uris.get(uri) if uri is not None else None
        if member is not None:
            return await sessions.forward(member, request, send)
        refusal: Answer | None = None
        for name in sessions.offering("resources"):
            answer = await sessions.forward(name, request, send)
            if isinstance(answer, jsonrpc.Response):
                return answer
            refusal = refusal or answer  # the first member's, as the route's order has it
        return refusal or jsonrpc.error_response(
            request.id, LEGACY_RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri}
        )

    async def _complete(self, request: jsonrpc.Request, send: Send) -> Answer:
        sessions = self._sessions
        ref = jsonrpc.param(request, "ref")
        ref = ref if isinstance(ref, dict) else {}
        if ref.get("type") == "ref/prompt":
            name = ref.get("name")
            where = sessions.naming.member_of(name) if isinstance(name, str) else None
            if where is None:
                return jsonrpc.error_response(
                    request.id, INVALID_PARAMS, f"Unknown prompt: {str(name)[:200]}"
                )
            outgoing = jsonrpc.with_param(request, "ref", {**ref, "name": where[1]})
            return await sessions.forward(where[0], outgoing, send)
        uri = ref.get("uri")
        return await self._by_uri(request, uri if isinstance(uri, str) else None, send)

    async def _everywhere(self, request: jsonrpc.Request, send: Send) -> Answer:
        """A setting every member takes (`logging/setLevel`): sent to each that is up and
        offers logging (with none, to those that might, for their own answer)."""
        sessions = self._sessions
        offering = sessions.offering("logging")
        targets = [name for name in sessions.up_members() if name in offering] or offering
        answers = await asyncio.gather(
            *(sessions.forward(n, request, send) for n in targets), return_exceptions=True
        )
        for answer in answers:
            if isinstance(answer, jsonrpc.Response):
                return jsonrpc.Response(jsonrpc="2.0", id=request.id, result={})
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        first = answers[0] if answers else None
        if isinstance(first, jsonrpc.ErrorResponse):
            return first
        return jsonrpc.error_response(request.id, METHOD_NOT_FOUND, "no member is up")

    def learn_uri(self, uri: str, member: str) -> None:
        """`member` listed `uri`; of two members that list one, the first in the route's
        order serves it."""
        known = self._uris.get(uri)
        order = self._sessions.member_order()
        if known is not None and order.index(known) <= order.index(member):
            return
        self._uris[uri] = member
        self._uris.move_to_end(uri)
        if len(self._uris) > _MAX_URIS:
            self._uris.popitem(last=False)

    def serves(self, uri: str, member: str) -> bool:
        return self._uris.get(uri) == member


class MemberListener:
    """The `Listener` of one member's client: what the member sends on its own goes through
    the sessions (`MemberCalls.from_member`); the rest is the session's above."""

    def __init__(self, sessions: MemberCalls, listener: Listener, name: str) -> None:
        self._sessions, self._listener, self._name = sessions, listener, name

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        self._sessions.from_member(self._name, message, related)

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        self._listener.on_stream(self._sessions.related(related), interrupted)

    @property
    def busy(self) -> bool:
        return self._listener.busy

    @property
    def listening(self) -> bool:
        return self._listener.listening
