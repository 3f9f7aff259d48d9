"""The bookkeeping of one upstream client session: its id space, who awaits what, how long.

`Answers` hands out the ids of the client's requests, holds each call's future until the
answer with its id arrives (or fails it when the answer cannot be read, or the upstream is
lost), and keeps the requests the upstream made that the client has not answered yet:
stopping the upstream while either is outstanding would lose something. `CallLimit` is how
long a call waits for its answer, and `timed_out` what it says when that runs out. The
session's lifecycle (handshake, reconnect, close) is `client.UpstreamClient`'s.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from typing import NamedTuple

from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    ResultTooLarge,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.protocol.jsonrpc import Answer
from gateway.upstream.unreadable import Unreadable

log = logging.getLogger(__name__)


class CallLimit(NamedTuple):
    """How long one call may take, and what its timeout error says: the setting's key."""

    seconds: float | None
    what: str
    key: str


def timed_out(limit: CallLimit | None) -> UpstreamTimeout:
    """The error of a call whose `limit` ran out (with none, the connection's own did)."""
    if limit is None or limit.seconds is None:
        return UpstreamTimeout("the upstream's connection timed out")
    return UpstreamTimeout(
        f"the upstream did not {limit.what} within {limit.seconds:g} s ({limit.key})"
    )


class Answers:
    """The calls of one upstream session waiting on their answers, and the upstream's
    questions waiting on ours."""

    def __init__(self) -> None:
        # Every replica that continues one upstream session, and every process that adopts
        # a stored one after a restart, has a client of its own; a stateful upstream routes
        # answers by id within its session, so ids counted from 1 by each would be crossed.
        # A prefix of 64 random bits per client keeps them apart (JSON-RPC ids may be
        # strings), with no coordination between replicas.
        self._id_prefix = f"{secrets.token_hex(8)}-"
        self._ids = itertools.count(1)
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[Answer]] = {}
        #: Requests the upstream made that we have not answered yet.
        self._asked: set[jsonrpc.RequestId] = set()

    def next_id(self) -> str:
        """An id no other client of this upstream session sends: see `_id_prefix`."""
        return f"{self._id_prefix}{next(self._ids)}"

    @property
    def outstanding(self) -> bool:
        """True while a call awaits its answer or a question of the upstream awaits ours."""
        return bool(self._pending) or bool(self._asked)

    def expect(self, request_id: jsonrpc.RequestId) -> asyncio.Future[Answer]:
        """The future the answer to `request_id` settles; `forget` it once the call ends."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return future

    def forget(self, request_id: jsonrpc.RequestId) -> None:
        self._pending.pop(request_id, None)

    def take(self, message: jsonrpc.Message) -> bool:
        """True when `message` is an answer, settled here (or dropped: no call awaits it);
        anything else is for the listener, the upstream's questions noted on the way."""
        if isinstance(message, jsonrpc.Response | jsonrpc.ErrorResponse):
            future = self._pending.get(message.id) if message.id is not None else None
            if future is not None and not future.done():
                future.set_result(message)
            elif isinstance(message, jsonrpc.ErrorResponse):
                log.warning("upstream error not tied to a request: %s", message.error.message)
            return True
        if isinstance(message, jsonrpc.Request):
            self._asked.add(message.id)
        elif isinstance(message, jsonrpc.Notification) and message.method == (
            "notifications/cancelled"
        ):
            withdrawn = jsonrpc.param(message, "requestId")
            if jsonrpc.is_request_id(withdrawn):
                self._asked.discard(withdrawn)
        return False

    def replied(self, message: jsonrpc.Notification | Answer) -> None:
        """`message` goes upstream: if it answers a question of the upstream, that one is done."""
        if isinstance(message, jsonrpc.Response | jsonrpc.ErrorResponse) and message.id is not None:
            self._asked.discard(message.id)

    def unreadable(self, message: Unreadable) -> None:
        """Fail the call an unreadable answer was for, or every call if it cannot be told."""
        if message.answers is not None:
            waiting = [self._pending.get(message.answers)]
            error = f"the upstream sent an answer the gateway cannot read: {message.reason}"
        elif message.is_answer:
            # It answers one of them, but which cannot be told: none can rely on its answer.
            waiting = list(self._pending.values())
            error = (
                f"the upstream sent an answer the gateway cannot read ({message.reason}) "
                "without an id, so every call waiting on it fails"
            )
        else:
            return
        failure = ResultTooLarge if message.too_large else UpstreamProtocolError
        for future in waiting:
            if future is not None and not future.done():
                future.set_exception(failure(error))

    def questions_gone(self) -> None:
        """The upstream stopped: its unanswered questions went with it."""
        self._asked.clear()

    def fail_all(self, reason: str) -> None:
        """No answer will come: every waiting call fails with `UpstreamUnavailable(reason)`."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(UpstreamUnavailable(reason))
