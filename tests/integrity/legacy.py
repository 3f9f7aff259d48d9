"""A 2025-11-25 client: one session per route, its requests spread over the gateways.

Each call is a task-augmented `tools/call`; then, mostly, a blocking `tasks/result` sent at once
(an `ask` task's question arrives on that stream with the related-task meta, and is answered
by a POST of a JSON-RPC response, to whichever gateway is next), or else `tasks/get` polled
until the task is terminal and then `tasks/result`; a `hang` task is cancelled with
`tasks/cancel` while its `tasks/result` waits. A last `tasks/get` reads the final status.
Questions and progress are checked as they come: a question must be one of this session's
tasks' and name that task's nonce; progress must carry a token this session sent.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Coroutine
from typing import Any

import aiohttp

from tests.integrity.calls import TERMINAL, Call, JsonObj, Poll, Wait, answer_for
from tests.integrity.procs import MEMBERS, Client
from tests.integrity.wire import (
    LEGACY,
    RELATED,
    Reply,
    Spread,
    Unanswered,
    again,
    legacy_headers,
    listen,
    tool_names,
)

POLL_SECONDS = 0.1
#: What else may come on a stream: task status notes, log lines, and a question withdrawn
#: (notifications/cancelled naming the server's own request: the task's call ended).
OTHER_MESSAGES = ("notifications/tasks/status", "notifications/message", "notifications/cancelled")
#: ... and on the member route, lists changed (a member left them, or came back).
LIST_CHANGED = tuple(
    f"notifications/{kind}/list_changed" for kind in ("tools", "prompts", "resources")
)


class LegacySession:
    """One client's session on one route."""

    def __init__(self, http: aiohttp.ClientSession, spread: Spread, caller: Client) -> None:
        self.http, self.spread, self.caller = http, spread, caller
        self.session: str | None = None
        self._ids = itertools.count(1)
        #: This session's calls by task id and by nonce, and the progress tokens it sent.
        self.tasks: dict[str, Call] = {}
        self.nonces: dict[str, Call] = {}
        #: Set, per nonce, once its tools/call has answered (or broke).
        self._answered_call: dict[str, asyncio.Event] = {}
        self.tokens: set[str] = set()
        self._answered: set[tuple[str, object]] = set()
        self._spawned: set[asyncio.Task[None]] = set()
        self._listening: asyncio.Future[None] | None = None
        #: What went wrong on the GET stream (no call to charge it to).
        self.problems: list[str] = []
        #: list_changed notifications (on the member route: a member left or came back).
        self.list_changes = 0

    def _headers(self) -> dict[str, str]:
        return legacy_headers(self.caller.key, self.session)

    def _request(self, method: str, params: JsonObj) -> JsonObj:
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}

    async def open(self) -> None:
        params = {
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": f"integrity-{self.caller.principal}", "version": "1"},
        }
        message = self._request("initialize", params)
        reply = await self.spread.send(self.http, message, self._headers())
        if reply.status != 200 or "result" not in reply.answer:
            raise RuntimeError(f"initialize: HTTP {reply.status} {reply.answer}")
        self.session = reply.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self.spread.send(self.http, note, self._headers())
        self._listening = asyncio.ensure_future(self._listen())

    async def tools(self) -> list[str]:
        """The tools the session lists (every page)."""

        async def send(params: JsonObj) -> Reply:
            message = self._request("tools/list", params)
            return await self.spread.send(self.http, message, self._headers())

        return await tool_names(send)

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
        for spawned in list(self._spawned):
            spawned.cancel()

    async def _listen(self) -> None:
        """The session's GET stream, as SDK clients keep one open: where the gateway relays a
        question it cannot tie to a call (a stdio upstream asking while several calls of the
        session run). Opened again, on the next gateway, whenever it ends."""
        while True:
            where, url = self.spread.next()
            try:
                await listen(self.http, url, self._headers(), self._on_stream)
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)

    def _on_stream(self, message: JsonObj) -> None:
        params = message.get("params") or {}
        meta = params.get("_meta") or {}
        if message.get("method") != "elicitation/create" or RELATED in meta:
            self._on_message(None, message)
            return
        # No related-task meta: the question names its call only by the nonce in its text.
        text = str(params.get("message"))
        owner = self.nonces.get(text.removeprefix("ask:"))
        if owner is None:
            self.problems.append(f"on the GET stream, a question for no call of ours: {text}")
            return
        owner.unattributed += 1
        self._spawn(self._unattributed(owner, message))

    async def _unattributed(self, owner: Call, message: JsonObj) -> None:
        """Answer it as the question of `owner`'s task, once its tools/call has answered
        (the upstream asks at once: the question may come first)."""
        async with asyncio.timeout(30):
            await self._answered_call[owner.nonce].wait()
        if owner.task_id is None:
            return
        params = {**message["params"], "_meta": {RELATED: {"taskId": owner.task_id}}}
        self._question(owner, {**message, "params": params})

    async def _after_calls(self, call: Call | None, message: JsonObj) -> None:
        pending = [event.wait() for event in self._answered_call.values() if not event.is_set()]
        async with asyncio.timeout(30):
            await asyncio.gather(*pending)
        self._question(call, message, again=True)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        spawned = asyncio.ensure_future(work)
        self._spawned.add(spawned)
        spawned.add_done_callback(self._spawned.discard)

    async def call(self, call: Call) -> None:
        token = f"pt-{call.nonce}"
        self.tokens.add(token)
        self.nonces[call.nonce] = call
        answered = self._answered_call[call.nonce] = asyncio.Event()
        params = {"name": call.name, "arguments": call.args, "task": {}}
        params["_meta"] = {"progressToken": token}
        try:
            reply = await self.spread.send(
                self.http, self._request("tools/call", params), self._headers()
            )
        except Unanswered as exc:
            call.cut = (exc.where, time.time())
            return
        finally:
            answered.set()
        task = reply.answer.get("result", {}).get("task")
        if not isinstance(task, dict) or "taskId" not in task:
            call.problems.append(f"tools/call answered HTTP {reply.status} {reply.answer}")
            return
        self.tasks[task["taskId"]] = call
        call.task_id, call.created_on, call.created_at = task["taskId"], reply.where, reply.arrived
        if call.tool == "hang":
            waiting = asyncio.ensure_future(self._result(call))
            try:
                await asyncio.sleep(max(0.0, call.created_at + call.cancel_after - time.time()))
                await self._cancel(call)
                await waiting
            finally:
                waiting.cancel()
        elif call.mode == "poll":
            await self._poll(call)
            await self._result(call)
        else:
            await self._result(call)
        await self._get(call)
        if call.status not in TERMINAL:
            call.problems.append(f"tasks/get after tasks/result answered read {call.status}")

    async def _send(self, call: Call, method: str, params: JsonObj, watch: bool = False) -> Reply:
        on_message = (lambda message: self._on_message(call, message)) if watch else None
        message = self._request(method, params)
        return await again(
            self.spread, self.http, message, self._headers(), call.breaks, on_message
        )

    async def _get(self, call: Call) -> None:
        assert call.task_id is not None
        reply = await self._send(call, "tasks/get", {"taskId": call.task_id})
        task = reply.answer.get("result")
        if not isinstance(task, dict):
            call.problems.append(f"tasks/get answered {reply.answer}")
            return
        call.polls.append(Poll(reply.sent, task["status"], reply.where))
        call.status, call.status_message = task["status"], task.get("statusMessage")
        call.last_updated = task.get("lastUpdatedAt")

    async def _poll(self, call: Call) -> None:
        while call.status not in TERMINAL:
            await self._get(call)
            if call.status not in TERMINAL:
                await asyncio.sleep(POLL_SECONDS)

    async def _result(self, call: Call) -> None:
        assert call.task_id is not None
        reply = await self._send(call, "tasks/result", {"taskId": call.task_id}, watch=True)
        call.waits.append(Wait(reply.sent, reply.arrived, reply.where))
        answer = reply.answer
        if "result" in answer:
            result = dict(answer["result"])
            meta = dict(result.get("_meta") or {})
            related = meta.pop(RELATED, None)
            if related != {"taskId": call.task_id}:
                call.problems.append(f"tasks/result's related-task meta is {related}")
            if meta:
                result["_meta"] = meta
            else:
                result.pop("_meta", None)
            call.delivered = ("result", result)
        elif "error" in answer:
            call.delivered = ("error", dict(answer["error"]))
        else:
            call.problems.append(f"tasks/result answered HTTP {reply.status} {answer}")

    async def _cancel(self, call: Call) -> None:
        assert call.task_id is not None
        call.cancelled_at = time.time()
        reply = await self._send(call, "tasks/cancel", {"taskId": call.task_id})
        status = reply.answer.get("result", {}).get("status")
        if status != "cancelled" and reply.answer.get("error", {}).get("code") != -32602:
            call.problems.append(f"tasks/cancel answered {reply.answer}")

    def _on_message(self, call: Call | None, message: JsonObj) -> None:
        """A message on a stream: `call`'s tasks/result stream, or (None) the GET stream."""
        method = message.get("method")
        params = message.get("params") or {}
        problems = call.problems if call is not None else self.problems
        if method == "notifications/progress":
            if params.get("progressToken") not in self.tokens:
                problems.append(f"progress with a token this session never sent: {params}")
        elif method == "elicitation/create":
            self._question(call, message)
        elif method in LIST_CHANGED and self.spread.route == MEMBERS:
            self.list_changes += 1
        elif method not in OTHER_MESSAGES:
            problems.append(f"unexpected on a stream: {message}")

    def _question(self, call: Call | None, message: JsonObj, again: bool = False) -> None:
        params = message.get("params") or {}
        related = (params.get("_meta") or {}).get(RELATED, {}).get("taskId")
        owner = self.tasks.get(str(related))
        if owner is None and not again:
            # Maybe the task of a tools/call whose answer is still on its way: look again
            # once every tools/call of the session sent so far has answered.
            self._spawn(self._after_calls(call, message))
            return
        if owner is None:
            problems = call.problems if call is not None else self.problems
            problems.append(f"a question for a task not of this session: {message}")
            return
        if params.get("message") != f"ask:{owner.nonce}":
            owner.problems.append(f"a question for another call: {params.get('message')}")
            return
        if (str(related), message["id"]) in self._answered:
            return
        self._answered.add((str(related), message["id"]))
        content = {"answer": answer_for(owner.nonce)}
        response = {"jsonrpc": "2.0", "id": message["id"]}
        response["result"] = {"action": "accept", "content": content}
        self._spawn(self._answer(owner, response))

    async def _answer(self, call: Call, response: JsonObj) -> None:
        reply = await again(self.spread, self.http, response, self._headers(), call.breaks)
        if reply.status != 202:
            call.problems.append(f"an answer got HTTP {reply.status} {reply.answer}")
