"""One upstream call made for a 2026-07-28 caller, from its first request to its end.

A legacy upstream asks its questions (elicitation, sampling, roots) in the middle of a call
and waits for the answers; a 2026-07-28 client is never asked anything mid-request. So the
call outlives the request that started it: `wait()` tells the endpoint whether the call
finished, asked (the questions become an `InputRequiredResult` and the call is parked until
the client's retry brings the answers), or is still running after the window (it becomes a
task, and its questions become the task's `inputRequests`). Questions get keys minted here,
unique for the call's lifetime and so for the task's it may become.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.calls.held import Lease
from gateway.protocol import jsonrpc
from gateway.protocol.errors import GatewayError
from gateway.upstream import Answer

log = logging.getLogger(__name__)

#: Questions an upstream asks together reach the gateway a moment apart: the round that
#: reports the first waits this long for the others, so one round carries them all.
GATHER_SECONDS = 0.05


@dataclass(frozen=True, slots=True)
class Ask:
    """An upstream question still waiting for the client's answer."""

    key: str
    upstream_id: jsonrpc.RequestId
    method: str
    params: jsonrpc.JsonObject

    def wire(self) -> jsonrpc.JsonObject:
        """As an entry of `inputRequests`."""
        return {"method": self.method, "params": self.params}


@dataclass(frozen=True, slots=True)
class Finished:
    answer: Answer


@dataclass(frozen=True, slots=True)
class Asked:
    asks: tuple[Ask, ...]


@dataclass(frozen=True, slots=True)
class Running:
    """The window passed with the call still running and nothing asked."""


class TaskHooks(Protocol):
    """Where a call that became a task sends its questions and progress."""

    def asked(self, ask: Ask) -> None: ...

    def withdrawn(self, ask: Ask) -> None: ...

    def progress(self, params: jsonrpc.JsonObject) -> None: ...


class UpstreamCall(Protocol):
    """An upstream call made for a caller with no session: `HeldCall` over a held 2025-11-25
    upstream session, or `direct.NativeCall` on the 2026-07-28 wire."""

    outgoing: jsonrpc.Request
    pending: dict[str, Ask]
    hooks: TaskHooks | None
    on_progress: Callable[[jsonrpc.JsonObject], None] | None
    on_log: Callable[[jsonrpc.JsonObject], None] | None

    @property
    def upstream_session_id(self) -> str | None: ...

    def start(self) -> None: ...

    async def wait(self, window: float | None) -> Finished | Asked | Running: ...

    async def result(self) -> Answer: ...

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool: ...

    async def refuse(self, key: str, reply: Answer) -> bool: ...

    async def stop(self, reason: str) -> None:
        """Tell the upstream the call is over (never raises)."""

    async def end(self, reason: str | None = None) -> None: ...


class HeldCall:
    """A call on a held upstream session (for a 2026-07-28 request, or a task run again), its
    open questions, and its lease."""

    def __init__(self, lease: Lease, request: jsonrpc.Request) -> None:
        self.lease = lease
        held = lease.held
        upstream_id = held.upstream.next_id()
        #: The gateway's own progress token, so progress finds this call on any session.
        self.token = f"mcp-gateway-{upstream_id}"
        self.outgoing = jsonrpc.with_meta(
            jsonrpc.with_id(request, upstream_id), "progressToken", self.token
        )
        self.pending: dict[str, Ask] = {}
        self.hooks: TaskHooks | None = None
        #: Put before each key minted: a task's keys must never repeat, and a re-run's call
        #: counts from 1 again (`attempt2-` and so on keep them apart).
        self.key_prefix = ""
        #: Where progress and log messages go while no task has the call (the request's own
        #: response; a task has no stream, and the extension has no progress for tasks).
        self.on_progress: Callable[[jsonrpc.JsonObject], None] | None = None
        self.on_log: Callable[[jsonrpc.JsonObject], None] | None = None
        self._keys = itertools.count(1)
        self._asked = asyncio.Event()
        #: Set once the session is open and the call on its way: the window starts then,
        #: so that it measures the tool and not the upstream's start-up.
        self._sent = asyncio.Event()
        self._answer: asyncio.Task[Answer] | None = None

    @property
    def upstream_session_id(self) -> str | None:
        return self.lease.held.upstream.session_id

    def start(self) -> None:
        held = self.lease.held
        held.follow(self.token, self.outgoing.id, self)
        if held.capabilities:
            held.asker = self
        self._answer = asyncio.create_task(  # noqa: TID251 - awaited by wait()/result(), cancelled by end()
            self._call(), name="2026-07-28 upstream call"
        )

    async def _call(self) -> Answer:
        held = self.lease.held
        await held.open()
        self._sent.set()
        return await held.upstream.call(self.outgoing, bounded=False)

    # Asker: what the held session reports.
    def asked(self, request: jsonrpc.Request) -> None:
        short = request.method.split("/", 1)[0]
        key = f"{self.key_prefix}{short}-{next(self._keys)}"
        ask = Ask(key, request.id, request.method, request.params or {})
        self.pending[ask.key] = ask
        if self.hooks is not None:
            self.hooks.asked(ask)
        else:
            self._asked.set()

    def withdrawn(self, upstream_id: jsonrpc.RequestId) -> None:
        for key, ask in list(self.pending.items()):
            if ask.upstream_id == upstream_id:
                del self.pending[key]
                if self.hooks is not None:
                    self.hooks.withdrawn(ask)

    def logged(self, params: jsonrpc.JsonObject) -> None:
        if self.hooks is None and self.on_log is not None:
            self.on_log(params)

    def progress(self, params: jsonrpc.JsonObject) -> None:
        if self.hooks is not None:
            self.hooks.progress(params)
        elif self.on_progress is not None:
            self.on_progress(params)

    async def wait(self, window: float | None) -> Finished | Asked | Running:
        """Until the call ends, asks something, or `window` seconds pass (None: no window).

        Raises:
            UpstreamError: the upstream could not answer.
        """
        assert self._answer is not None, "start() first"
        if not self._sent.is_set():
            sent = asyncio.create_task(self._sent.wait())  # noqa: TID251 - cancelled below
            try:
                await asyncio.wait({self._answer, sent}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sent.cancel()
        if window == 0:
            # No window: the call is a task at once, and a question the upstream asked in the
            # moment it took to send it is the task's (its hooks take what is pending).
            return Finished(self._answer.result()) if self._answer.done() else Running()
        if not self.pending:
            loop = asyncio.get_running_loop()
            deadline = None if window is None else loop.time() + window
            # A question the upstream withdraws before the round is made leaves nothing to ask:
            # the window goes on for what time it has left.
            while not self.pending and not self._answer.done():
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    break
                self._asked.clear()
                asked = asyncio.create_task(self._asked.wait())  # noqa: TID251 - cancelled below
                try:
                    await asyncio.wait(
                        {self._answer, asked}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    asked.cancel()
            if self.pending and not self._answer.done():
                await asyncio.wait({self._answer}, timeout=GATHER_SECONDS)
        if self._answer.done():
            return Finished(self._answer.result())
        if self.pending:
            return Asked(tuple(self.pending.values()))
        return Running()

    async def result(self) -> Answer:
        """The call's answer, however long it takes (a task's run awaits this)."""
        assert self._answer is not None, "start() first"
        return await self._answer

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool:
        """Send the client's answer to the question under `key`; False if none is open.

        Raises:
            UpstreamError: the answer could not be delivered.
        """
        ask = self.pending.pop(key, None)
        if ask is None:
            return False
        reply = jsonrpc.Response(jsonrpc="2.0", id=ask.upstream_id, result=response)
        await self.lease.held.upstream.notify(reply)
        return True

    async def refuse(self, key: str, reply: Answer) -> bool:
        """Send a default answer (nobody answered in time) instead of the client's."""
        ask = self.pending.pop(key, None)
        if ask is None:
            return False
        with contextlib.suppress(GatewayError):
            await self.lease.held.upstream.notify(jsonrpc.with_id(reply, ask.upstream_id))
        return True

    async def stop(self, reason: str) -> None:
        try:
            await self.lease.held.upstream.notify(jsonrpc.cancelled(self.outgoing.id, reason))
        except GatewayError as exc:
            log.info("could not tell the upstream a call was abandoned: %s", exc.message)

    async def end(self, reason: str | None = None) -> None:
        """Release the session. With a `reason`, the call is abandoned first: stopped here
        and cancelled upstream, and its exclusive session closed rather than reused."""
        held = self.lease.held
        held.unfollow(self.token, self.outgoing.id)
        abandoned = reason is not None and self._answer is not None and not self._answer.done()
        if abandoned and self._answer is not None and reason is not None:
            self._answer.cancel()
            await self.stop(reason)
        if self._answer is not None:
            await asyncio.wait({self._answer})  # its outcome, if any, is someone else's
        await self.lease.release(reusable=not abandoned and not self.pending)
