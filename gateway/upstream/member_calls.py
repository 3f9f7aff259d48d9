"""The members of one client session of a route of several members, and the calls to them.

`MemberCalls` is what the route's parts use of that session (`fanout.MemberSessions`, which
is one): `routing` and `lists` send requests to its members (`forward`, with a `Send`), a
member's listener hands up what the member sends on its own (`from_member`, its questions
under ids unique across the members: `Asks`), and the route's health (`members.MemberHealth`,
known here as `Health`) is told of each member that fails or answers, and tells it when the
lists changed. None of them imports `fanout`, which builds on this.
"""

from __future__ import annotations

import itertools
import secrets
from typing import Protocol

from gateway.protocol import jsonrpc
from gateway.protocol import members as names
from gateway.protocol.errors import UpstreamError
from gateway.protocol.jsonrpc import Answer
from gateway.upstream.answers import CallLimit
from gateway.upstream.base import Listener
from gateway.upstream.client import UpstreamClient


class Health(Protocol):
    """What the members' calls tell the route's health and ask of it (`members.MemberHealth`)."""

    def watch(self, sessions: MemberCalls) -> None: ...

    def unwatch(self, sessions: MemberCalls) -> None: ...

    def listed(self, member: str) -> bool: ...

    def answered(self, member: str) -> None: ...

    def failed_by(self, member: str, failure: UpstreamError | jsonrpc.ErrorResponse) -> None: ...


class Send:
    """How a request is sent (`UpstreamClient.call`'s options), passed along unchanged."""

    __slots__ = ("bounded", "limit", "ready")

    def __init__(self, ready: bool, bounded: bool, limit: CallLimit | None) -> None:
        self.ready, self.bounded, self.limit = ready, bounded, limit


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


class MemberCalls:
    """The members' clients of one client session and the requests to them, in the route's
    order of members; `fanout.MemberSessions` adds what the session above uses."""

    def __init__(
        self, clients: dict[str, UpstreamClient], listener: Listener, health: Health
    ) -> None:
        self._listener = listener
        self._health = health
        self._clients = clients
        self._order = list(self._clients)
        self.naming = names.Naming(self._order)
        self._id_prefix = f"{secrets.token_hex(8)}-"
        self._ids = itertools.count(1)
        #: Our requests in flight -> the member they went to (for a cancellation).
        self._calls: dict[jsonrpc.RequestId, str] = {}
        #: A list page's request to one member (an id of its own) -> the request of the
        #: session's it is part of: what the member's stream and notifications relate to.
        self._part_of: dict[jsonrpc.RequestId, jsonrpc.RequestId] = {}
        self._asks = Asks()
        #: What each member offered at initialize (none known after a restart).
        self.capabilities: dict[str, jsonrpc.JsonObject] = {}
        #: The members whose session is open (all, after a restart: each replays on use).
        self._up: set[str] = set()
        self._closed = False

    def next_id(self) -> str:
        return f"{self._id_prefix}{next(self._ids)}"

    # -- requests to the members

    async def forward(
        self,
        member: str,
        request: jsonrpc.Request,
        send: Send,
        part_of: jsonrpc.RequestId | None = None,
    ) -> Answer:
        """`request` to `member` (under an id of its own when it is `part_of` a request of the
        session's, a list's page). Raises UpstreamError naming the member."""
        client = self._clients[member]
        self._calls[request.id] = member
        if part_of is not None:
            self._part_of[request.id] = part_of
        try:
            answer = await client.call(
                request, ready=send.ready, bounded=send.bounded, limit=send.limit
            )
        except UpstreamError as exc:
            self._failed(member, exc)
            raise type(exc)(f"member {member}: {exc.message}") from None
        finally:
            self._calls.pop(request.id, None)
            self._part_of.pop(request.id, None)
        self._up.add(member)
        self._health.answered(member)
        return answer

    def offering(self, capability: str) -> list[str]:
        """The members that offer `capability`, in the route's order (with those whose
        capabilities are not known: after a restart, or down at initialize)."""
        known = self.capabilities
        return [
            n for n in self._order if n not in known or isinstance(known[n].get(capability), dict)
        ]

    def member_order(self) -> list[str]:
        return self._order

    def up_members(self) -> list[str]:
        """The members whose session is open, in the route's order."""
        return [n for n in self._order if n in self._up]

    def listed(self, member: str) -> bool:
        """Whether lists ask `member` now (not while it is down and not yet due a retry)."""
        return self._health.listed(member)

    # -- from the members

    def related(self, related: jsonrpc.RequestId) -> jsonrpc.RequestId:
        """The session's request a member's message or stream relates to: `related`, or the
        request its list page is part of (so that a member's SSE framing of its page makes
        the client's answer SSE, as a route of one upstream does)."""
        return self._part_of.get(related, related)

    def from_member(
        self, member: str, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        if isinstance(message, jsonrpc.Request):
            message = self._asks.asked(member, message, f"{member}:{self.next_id()}")
        elif (
            isinstance(message, jsonrpc.Notification)
            and message.method == "notifications/cancelled"
        ):
            withdrawn = self._asks.withdrawn(member, message)
            if withdrawn is None:
                return  # cancels nothing the session was told of
            message = withdrawn
        self._listener.on_server_message(
            message, None if related is None else self.related(related)
        )

    def _failed(self, member: str, failure: UpstreamError | jsonrpc.ErrorResponse) -> None:
        """`member` failed a call: its health is told, unless these sessions were closed
        under it (a call that gave up while its session opened) or it is still there."""
        if not self._closed:
            self._health.failed_by(member, failure)

    def changed(self) -> None:
        """A member went down or came back: the route's lists changed."""
        for key in ("tools", "prompts", "resources"):
            if self.offering(key):
                method = f"notifications/{key}/list_changed"
                self._listener.on_server_message(
                    jsonrpc.Notification(jsonrpc="2.0", method=method), None
                )
