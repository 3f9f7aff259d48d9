"""`NativeCall`: a 2026-07-28 call relayed on the 2026-07-28 wire (`upstream.modern: native`).

The upstream does its own MRTR: while no task holds the call, its `InputRequiredResult` is
just the call's answer, and goes back to the client as it came (the client's retry is a new
call carrying the upstream's own `requestState`). Once the call has become a task, nobody is
waiting for that answer, so the round becomes the task's questions: its `inputRequests` are
stored under the upstream's keys, and when the last is answered (`tasks/update`) the gateway
retries the request upstream with the answers and the upstream's `requestState`, and waits
again. Stopping the call is closing its connection, which the 2026-07-28 wire defines as
cancelling the request.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gateway.calls.call import Ask, Asked, Finished, Running, TaskHooks
from gateway.protocol import jsonrpc
from gateway.upstream import Answer, native

if TYPE_CHECKING:
    from gateway.observability.traces import UpstreamSpans
    from gateway.upstream import UpstreamRoute

_ids = itertools.count(1)


def input_required(answer: Answer) -> bool:
    return isinstance(answer, jsonrpc.Response) and (
        answer.result.get("resultType") == "input_required"
    )


class NativeCall:
    def __init__(
        self,
        upstream: UpstreamRoute,
        url: str,
        request: jsonrpc.Request,
        headers: Mapping[str, str],
    ) -> None:
        self._upstream = upstream
        self._url = url
        self._headers = dict(headers)
        meta = request.meta
        if "progressToken" not in meta:
            # The gateway's own token, so that a task's statusMessage follows its progress.
            request = jsonrpc.with_meta(request, "progressToken", f"mcp-gateway-{next(_ids)}")
        self.outgoing = request
        self.pending: dict[str, Ask] = {}
        self.hooks: TaskHooks | None = None
        self.on_progress: Callable[[jsonrpc.JsonObject], None] | None = None
        self.on_log: Callable[[jsonrpc.JsonObject], None] | None = None
        self._answers: dict[str, jsonrpc.JsonObject] = {}
        self._all_answered = asyncio.Event()
        self._answer: asyncio.Task[Answer] | None = None
        #: With tracing on: the span each exchange (a retry too) gets.
        self.spans: UpstreamSpans | None = None

    @property
    def upstream_session_id(self) -> str | None:
        return None  # the 2026-07-28 wire has no sessions: closing the stream cancels

    def start(self) -> None:
        self._answer = asyncio.create_task(  # noqa: TID251 - awaited by wait()/result(), cancelled by end()
            self._exchange(self.outgoing), name="2026-07-28 native call"
        )

    async def _exchange(self, request: jsonrpc.Request) -> Answer:
        return await native.exchange(
            self._upstream.http(), self._url, request, self._headers, self._note, self.spans
        )

    def _note(self, note: jsonrpc.Notification) -> None:
        if note.params is None:
            return
        if note.method == "notifications/progress":
            if self.hooks is not None:
                self.hooks.progress(note.params)
            elif self.on_progress is not None:
                self.on_progress(note.params)
        elif note.method == "notifications/message" and self.hooks is None and self.on_log:
            self.on_log(note.params)

    async def wait(self, window: float | None) -> Finished | Asked | Running:
        """Until the upstream answers (its MRTR round is an answer too) or `window` passes.

        Raises:
            UpstreamError: the upstream could not answer.
        """
        assert self._answer is not None, "start() first"
        await asyncio.wait({self._answer}, timeout=window)
        if self._answer.done():
            return Finished(self._answer.result())
        return Running()

    async def result(self) -> Answer:
        """The call's final answer, the task's rounds answered through `tasks/update`."""
        assert self._answer is not None, "start() first"
        answer = await self._answer
        while input_required(answer) and self.hooks is not None:
            assert isinstance(answer, jsonrpc.Response)
            self._all_answered.clear()
            self._answers = {}
            requests = answer.result.get("inputRequests")
            for key, entry in (requests if isinstance(requests, dict) else {}).items():
                if isinstance(entry, dict) and isinstance(entry.get("method"), str):
                    params = entry.get("params")
                    ask = Ask(key, key, entry["method"], params if isinstance(params, dict) else {})
                    self.pending[key] = ask
                    self.hooks.asked(ask)
            if self.pending:
                await self._all_answered.wait()
            retry = jsonrpc.with_param(self.outgoing, "inputResponses", self._answers)
            state = answer.result.get("requestState")
            if isinstance(state, str):
                retry = jsonrpc.with_param(retry, "requestState", state)
            # "The JSON-RPC id MUST be different between the initial request and the retry."
            retry = jsonrpc.with_id(retry, f"{self.outgoing.id}-retry-{next(_ids)}")
            self._answer = asyncio.create_task(  # noqa: TID251 - awaited here, cancelled by end()
                self._exchange(retry), name="2026-07-28 native retry"
            )
            answer = await self._answer
        return answer

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool:
        if self.pending.pop(key, None) is None:
            return False
        self._answers[key] = response
        if not self.pending:
            self._all_answered.set()
        return True

    async def refuse(self, key: str, reply: Answer) -> bool:
        """Nobody answered in time: elicitation's default goes in the retry; a question
        with no result to give is left out (the upstream may ask again)."""
        if self.pending.pop(key, None) is None:
            return False
        if isinstance(reply, jsonrpc.Response):
            self._answers[key] = reply.result
        if not self.pending:
            self._all_answered.set()
        return True

    async def stop(self, reason: str) -> None:
        if self._answer is not None:
            self._answer.cancel()  # closes the connection: the request is cancelled upstream

    async def end(self, reason: str | None = None) -> None:
        if self._answer is None:
            return
        if reason is not None:
            self._answer.cancel()
        await asyncio.wait({self._answer})
