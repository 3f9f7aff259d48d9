"""A 2026-07-28 client: no session, every request its own, spread over the gateways.

Each call is a `tools/call` declaring the tasks extension (and elicitation, for `ask`) in its
`_meta`; every tool is `required` on the routes, so the answer is a flat `CreateTaskResult`, or
first an MRTR round where the route has a sync window and the upstream asked within it (the
round is answered and the call retried with `inputResponses` and `requestState`).
Then `tasks/get` until the task is terminal: an `input_required` task's question (its
`inputRequests`) is checked against the task's nonce and answered with `tasks/update`; a `hang`
task is cancelled with `tasks/cancel`. The terminal `tasks/get` carries the result or error.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import aiohttp

from tests.integrity.calls import TERMINAL, Call, JsonObj, Poll, answer_for
from tests.integrity.procs import Client
from tests.integrity.wire import (
    RELATED,
    TASKS_EXTENSION,
    Reply,
    Spread,
    Unanswered,
    again,
    modern_headers,
    modern_meta,
    tool_names,
)

POLL_SECONDS = 0.1
#: MRTR rounds a call may take before it becomes a task (`ask` asks once).
MAX_ROUNDS = 3


class ModernClient:
    """One caller's calls on one route."""

    def __init__(self, http: aiohttp.ClientSession, spread: Spread, caller: Client) -> None:
        self.http, self.spread, self.caller = http, spread, caller
        self._ids = itertools.count(1)

    def _message(self, call: Call, method: str, params: JsonObj) -> JsonObj:
        capabilities: JsonObj = {"extensions": {TASKS_EXTENSION: {}}}
        if call.tool == "ask":
            capabilities["elicitation"] = {}
        params = {**params, "_meta": modern_meta(capabilities)}
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}

    async def tools(self) -> list[str]:
        """The tools the caller is listed (every page): before the run, this also opens the
        upstream session the gateway holds for the caller's calls that ask nothing."""

        async def send(params: JsonObj) -> Reply:
            meta = modern_meta({"extensions": {TASKS_EXTENSION: {}}})
            message = {"jsonrpc": "2.0", "id": next(self._ids), "method": "tools/list"}
            message["params"] = {**params, "_meta": meta}
            headers = modern_headers(self.caller.key, message)
            return await self.spread.send(self.http, message, headers)

        return await tool_names(send)

    async def _send(self, call: Call, method: str, params: JsonObj) -> Reply:
        message = self._message(call, method, params)
        headers = modern_headers(self.caller.key, message)
        return await again(self.spread, self.http, message, headers, call.breaks)

    async def _start(self, call: Call) -> Reply | None:
        """The tools/call, and its retries while it answers with MRTR rounds (a question
        asked within the route's sync window); the reply that made the task, or None."""
        params: JsonObj = {"name": call.name, "arguments": call.args}
        while True:
            message = self._message(call, "tools/call", params)
            try:
                reply = await self.spread.send(
                    self.http, message, modern_headers(self.caller.key, message)
                )
            except Unanswered as exc:
                call.cut = (exc.where, time.time())
                return None
            result = reply.answer.get("result")
            kind = result.get("resultType") if isinstance(result, dict) else None
            if kind == "task":
                return reply
            if kind != "input_required" or call.mrtr_rounds >= MAX_ROUNDS:
                call.direct = kind == "complete"
                call.problems.append(
                    f"a required tool's tools/call answered HTTP {reply.status} {reply.answer}"
                )
                return None
            assert isinstance(result, dict)
            call.mrtr_rounds += 1
            responses = self._responses(call, result, set())
            params = {"name": call.name, "arguments": call.args, "inputResponses": responses}
            params["requestState"] = result.get("requestState")

    async def call(self, call: Call) -> None:
        reply = await self._start(call)
        if reply is None:
            return
        result = reply.answer["result"]
        call.task_id, call.created_on = result["taskId"], reply.where
        call.created_at = reply.arrived
        answered: set[str] = set()
        while True:
            if call.tool == "hang" and call.cancelled_at is None:
                if time.time() >= call.created_at + call.cancel_after:
                    await self._cancel(call)
            task = await self._get(call)
            if task is None or call.status in TERMINAL:
                break
            if call.status == "input_required":
                await self._answer(call, task, answered)
            await asyncio.sleep(POLL_SECONDS)
        if task is not None:
            self._terminal(call, task)

    async def _get(self, call: Call) -> JsonObj | None:
        assert call.task_id is not None
        reply = await self._send(call, "tasks/get", {"taskId": call.task_id})
        task = reply.answer.get("result")
        if not isinstance(task, dict) or task.get("resultType") != "complete":
            call.problems.append(f"tasks/get answered HTTP {reply.status} {reply.answer}")
            return None
        call.polls.append(Poll(reply.sent, task["status"], reply.where))
        call.status, call.status_message = task["status"], task.get("statusMessage")
        call.last_updated = task.get("lastUpdatedAt")
        return task

    def _terminal(self, call: Call, task: JsonObj) -> None:
        if "result" in task:
            result = dict(task["result"])
            if result.pop("resultType", None) != "complete":
                call.problems.append("the inlined result has no resultType 'complete'")
            if RELATED in (result.get("_meta") or {}):
                call.problems.append("the inlined result carries the related-task meta")
            call.delivered = ("result", result)
        elif "error" in task:
            call.delivered = ("error", dict(task["error"]))
        else:
            call.delivered = ("none", {})

    async def _answer(self, call: Call, task: JsonObj, answered: set[str]) -> None:
        responses = self._responses(call, task, answered)
        if not responses:
            return
        params = {"taskId": call.task_id, "inputResponses": responses}
        reply = await self._send(call, "tasks/update", params)
        if reply.answer.get("result") != {"resultType": "complete"}:
            call.problems.append(f"tasks/update answered {reply.answer}")
        answered.update(responses)

    def _responses(self, call: Call, holder: JsonObj, answered: set[str]) -> JsonObj:
        """Answers to the input requests in `holder` not yet `answered`: each must be this
        call's own question (its nonce in the message)."""
        responses: JsonObj = {}
        for key, request in (holder.get("inputRequests") or {}).items():
            if key in answered:
                continue
            message = (request.get("params") or {}).get("message")
            if request.get("method") != "elicitation/create" or message != f"ask:{call.nonce}":
                call.problems.append(f"an input request for another call: {request}")
                continue
            content = {"answer": answer_for(call.nonce)}
            responses[key] = {"action": "accept", "content": content}
        return responses

    async def _cancel(self, call: Call) -> None:
        call.cancelled_at = time.time()
        reply = await self._send(call, "tasks/cancel", {"taskId": call.task_id})
        if reply.answer.get("result") != {"resultType": "complete"}:
            call.problems.append(f"tasks/cancel answered {reply.answer}")
