"""The merged lists of a route of several members (`fanout.MemberSessions`).

A page asks each member for its next page at once and puts them together in the route's
order of members, names qualified (`protocol.members`); the cursor carries on the members
with more to come. A member that fails is left out of the page (its health says so, and
lists skip it until it is due to be tried again); a member's error answer (no such list) or
malformed page counts as an empty one. Of two members listing one resource URI, the first
in the route's order keeps it: the other's entry is left out.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from gateway.protocol import jsonrpc
from gateway.protocol import members as names
from gateway.protocol.errors import INVALID_PARAMS, UpstreamError
from gateway.protocol.jsonrpc import Answer

if TYPE_CHECKING:
    from gateway.upstream.member_calls import MemberCalls, Send


class Uris(Protocol):
    """Which member serves a resource URI (`routing.Routing`, which builds the merge and so
    is known here by what the pages tell it)."""

    def learn_uri(self, uri: str, member: str) -> None: ...

    def serves(self, uri: str, member: str) -> bool: ...


class ListMerge:
    def __init__(self, sessions: MemberCalls, routing: Uris) -> None:
        self._sessions = sessions
        self._routing = routing

    async def page(self, request: jsonrpc.Request, key: str, send: Send) -> Answer:
        sessions = self._sessions
        order = sessions.member_order()
        try:
            pending = names.read_cursor(jsonrpc.param(request, "cursor"), len(order))
        except ValueError:
            return jsonrpc.error_response(request.id, INVALID_PARAMS, "Invalid cursor")
        capability = names.CAPABILITY_OF[key]
        asked: list[tuple[int, str | None]]
        if pending is None:
            offering = set(sessions.offering(capability))
            asked = [(i, None) for i, n in enumerate(order) if n in offering and sessions.listed(n)]
        else:
            asked = list(pending)
        pages = await asyncio.gather(
            *(self._member_page(request, order[i], c, send) for i, c in asked)
        )
        items: list[object] = []
        more: list[tuple[int, str]] = []
        seen: set[str] = set()
        for (index, _), result in zip(asked, pages, strict=True):
            if result is None:
                continue
            member = order[index]
            for item in names.qualified_page(result, key, member, sessions.naming):
                if key == "resources" and not self._first(item, member, seen):
                    continue
                items.append(item)
            following = result.get("nextCursor")
            if isinstance(following, str) and following:
                more.append((index, following))
        result_page: dict[str, object] = {key: items}
        if more:
            result_page["nextCursor"] = names.cursor(more)
        return jsonrpc.Response(jsonrpc="2.0", id=request.id, result=result_page)

    def _first(self, item: object, member: str, seen: set[str]) -> bool:
        """Whether a resource entry stays on the page (the first of its URI)."""
        uri = item.get("uri") if isinstance(item, dict) else None
        if not isinstance(uri, str):
            return False
        if uri in seen:
            return False
        seen.add(uri)
        self._routing.learn_uri(uri, member)
        return self._routing.serves(uri, member)

    async def _member_page(
        self, request: jsonrpc.Request, member: str, member_cursor: str | None, send: Send
    ) -> jsonrpc.JsonObject | None:
        outgoing = jsonrpc.without_param(request, "cursor")
        if member_cursor is not None:
            outgoing = jsonrpc.with_param(outgoing, "cursor", member_cursor)
        outgoing = jsonrpc.with_id(outgoing, self._sessions.next_id())
        try:
            answer = await self._sessions.forward(member, outgoing, send, part_of=request.id)
        except UpstreamError:
            return None  # left out; its health logged why
        return answer.result if isinstance(answer, jsonrpc.Response) else None
