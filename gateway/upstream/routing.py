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
from gateway.upstream.answers import CallLimit
from gateway.upstream.lists import ListMerge

if TYPE_CHECKING:
    from gateway.upstream.base import Listener
    from gateway.upstream.fanout import MemberSessions

#: Resource URIs remembered with the member that listed them, per session.
_MAX_URIS = 10_000
#: Methods answered by the member a `name` parameter names, and what an unknown one is.
_BY_NAME = {"tools/call": "tool", "prompts/get": "prompt"}
_BY_URI = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})


class Send:
    """How a request is sent (`UpstreamClient.call`'s options), passed along unchanged."""

    __slots__ = ("bounded", "limit", "ready")

    def __init__(self, ready: bool, bounded: bool, limit: CallLimit | None) -> None:
        self.ready, self.bounded, self.limit = ready, bounded, limit


class Routing:
    def __init__(self, sessions: MemberSessions) -> None:
        # Weakly: the sessions hold this for as long as they live, and a strong reference
        # back made the three (with `lists`) a cycle left to the collector at their end.
        self._sessions: MemberSessions = weakref.proxy(sessions)
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


class Asks:
    """The members' own requests (their questions) under ids unique across the members: the
    session above knows them by these, and each answer goes back under the member's own."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[str, jsonrpc.RequestId]] = {}
        self._ids: dict[tuple[str, jsonrpc.RequestId], str] = {}

    def asked(self, member: str, request: jsonrpc.Request, asked_as: str) -> jsonrpc.Request:
        self._by_id[asked_as] = (member, request.id)
        self._ids[(member, request.id)] = asked_as
        return jsonrpc.with_id(request, asked_as)

    def withdrawn(self, member: str, note: jsonrpc.Notification) -> jsonrpc.Notification | None:
        """A member's cancellation of its question, under the session's id for it."""
        target = jsonrpc.param(note, "requestId")
        found = self._ids.pop((member, target), None) if jsonrpc.is_request_id(target) else None
        if found is None:
            return None
        del self._by_id[found]
        return jsonrpc.with_param(note, "requestId", found)

    def answered(self, answer: Answer) -> tuple[str, Answer] | None:
        """(member, the answer under its id) for the answer to a member's question."""
        entry = self._by_id.pop(answer.id, None) if isinstance(answer.id, str) else None
        if entry is None:
            return None
        del self._ids[entry]
        return entry[0], jsonrpc.with_id(answer, entry[1])


class MemberListener:
    """The `Listener` of one member's client: what the member sends on its own goes through
    the sessions (`MemberSessions.from_member`); the rest is the session's above."""

    def __init__(self, sessions: MemberSessions, listener: Listener, name: str) -> None:
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
