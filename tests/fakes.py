"""Upstream MCP servers for tests: real aiohttp apps around `LegacyServer`.

* `legacy_sse_app()`: the 2024-11-05 HTTP+SSE transport (GET /sse, POST /messages), keeping
  the headers of every POST in `app[SEEN]`.
* `faulty_streamable_app()`: Streamable HTTP (POST /mcp, JSON answers only) whose tools break the
  transport on purpose; `app[FAULT_HOOKS]` holds events tests await instead of sleeping.
* `recording_upstream()`: Streamable HTTP answering everything with an empty result, and
  keeping the headers of every request it got in `app[SEEN]`, its body in `app[RECEIVED]`;
  it offers no GET stream (405), and keeps the headers of each GET in `app[STREAMS]`.
* `ScriptedUpstream`: no server at all but the upstream seam itself, a `Transport` the test
  drives: it answers `initialize` and keeps the rest for the test to answer or speak to;
  `ScriptedRoute` gives a route's sessions one each.

The first two answer in the session that asked, under the id it was asked with, at once (no
waits to let the gateway's windows win), and refuse a request whose id is already in flight in
its session (HTTP 400): a server that routes answers by id, as every SDK server does, would
cross the two. For a real stateful server, see tests/mcp2_upstream.py.

Run one standalone with `python -m tests.fakes {sse,streamable} [--port N]`.
"""

import argparse
import asyncio
import json
import secrets
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDictProxy

from gateway.config import RouteConfig
from gateway.demo.server import (
    LegacyServer,
    Message,
    Tool,
    ToolContext,
    text_result,
)
from gateway.demo.tools import DEMO_TOOLS, EchoArgs, NoArgs, echo
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INVALID_REQUEST, PARSE_ERROR
from gateway.upstream import UpstreamRoute
from gateway.upstream.base import Sink, Transport
from gateway.upstream.streamable_http import UpstreamSessionExpired

SESSION_NOT_FOUND = -32001
#: Why a fake refuses a request: a server that routes answers by id cannot tell two apart.
DUPLICATE_ID = "a request with this id is already in flight in this session"


@dataclass
class _SseSession:
    server: LegacyServer
    # None ends the stream: the server is shutting down.
    outbox: "asyncio.Queue[Message | None]"
    #: The ids of the client's requests not answered (nor cancelled) yet.
    in_flight: set[Any] = field(default_factory=set)


SSE_SESSIONS = web.AppKey("sse_sessions", dict[str, _SseSession])
#: The headers of every request a recording fake got (the legacy SSE one: of its POSTs).
SEEN = web.AppKey("seen", list[CIMultiDictProxy[str]])
SSE_TOOLS = web.AppKey("sse_tools", tuple[Tool[Any], ...])


def legacy_sse_app(tools: Sequence[Tool[Any]] = DEMO_TOOLS) -> web.Application:
    """An old-style MCP server: one LegacyServer per open GET /sse stream."""
    app = web.Application()
    app[SSE_SESSIONS] = {}
    app[SEEN] = []
    app.router.add_get("/sse", _open_sse_stream)
    app.router.add_post("/messages", _post_sse_message)
    app.on_shutdown.append(_end_sse_streams)
    app[SSE_TOOLS] = tuple(tools)
    return app


def _sse_event(event: str, data: str) -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


async def _open_sse_stream(request: web.Request) -> web.StreamResponse:
    tools = request.app[SSE_TOOLS]
    outbox: asyncio.Queue[Message | None] = asyncio.Queue()
    in_flight: set[Any] = set()

    async def send(message: Message) -> None:
        if "method" not in message:  # an answer: its request is no longer in flight
            in_flight.discard(message.get("id"))
        await outbox.put(message)

    session = _SseSession(LegacyServer(tools, send), outbox, in_flight)
    session_id = secrets.token_hex(16)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    await response.write(_sse_event("endpoint", f"/messages?session_id={session_id}"))
    request.app[SSE_SESSIONS][session_id] = session
    try:
        # Runs until the client disconnects (aiohttp cancels the handler) or shutdown.
        while (message := await outbox.get()) is not None:
            await response.write(_sse_event("message", json.dumps(message)))
    finally:
        del request.app[SSE_SESSIONS][session_id]
        await session.server.close()
    return response


async def _post_sse_message(request: web.Request) -> web.Response:
    session = request.app[SSE_SESSIONS].get(request.query.get("session_id", ""))
    if session is None:
        raise web.HTTPNotFound(text="unknown session")
    request.app[SEEN].append(request.headers)
    try:
        message = await request.json()
    except json.JSONDecodeError as exc:
        raise web.HTTPBadRequest(text=f"invalid JSON: {exc}") from exc
    if "method" in message and "id" in message:
        if message["id"] in session.in_flight:
            # Its answer could be taken for the other's on the one stream: refused, loudly.
            raise web.HTTPBadRequest(text=DUPLICATE_ID)
        session.in_flight.add(message["id"])
    elif message.get("method") == "notifications/cancelled":
        session.in_flight.discard(message.get("params", {}).get("requestId"))
    await session.server.handle(message)
    return web.Response(status=202, text="Accepted")


async def _end_sse_streams(app: web.Application) -> None:
    for session in app[SSE_SESSIONS].values():
        session.outbox.put_nowait(None)


@dataclass
class FaultHooks:
    """What the faulty server saw, as events a test awaits instead of sleeping."""

    # tool name -> set once a tools/call for it arrived
    arrived: defaultdict[str, asyncio.Event] = field(
        default_factory=lambda: defaultdict(asyncio.Event)
    )
    # set when a caller disconnected before its call was answered
    abandoned: asyncio.Event = field(default_factory=asyncio.Event)
    # every JSON-RPC message posted, in arrival order
    received: list[Message] = field(default_factory=list)


FAULT_HOOKS = web.AppKey("fault_hooks", FaultHooks)


class _JsonSession:
    """A LegacyServer whose answers go back on the POST that asked, as JSON."""

    def __init__(self, tools: Sequence[Tool[Any]]) -> None:
        self.server = LegacyServer(tools, self._deliver)
        self._waiting: dict[Any, asyncio.Future[Message]] = {}

    def in_flight(self, request_id: Any) -> bool:
        return request_id in self._waiting

    async def ask(self, request: Message) -> Message:
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[request["id"]] = future
        try:
            await self.server.handle(request)
            return await future
        finally:
            del self._waiting[request["id"]]

    async def _deliver(self, message: Message) -> None:
        # Without SSE there is nowhere to put notifications or server->client requests.
        future = self._waiting.get(message.get("id")) if "method" not in message else None
        if future is not None and not future.done():
            future.set_result(message)


async def _never_answer(ctx: ToolContext, args: NoArgs) -> Message:
    forever: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    return await forever


async def _answer_normally(ctx: ToolContext, args: NoArgs) -> Message:
    return text_result("done")


FAULT_TOOLS: tuple[Tool[Any], ...] = (
    Tool("echo", "Returns the text it was given.", EchoArgs, echo),
    Tool("hang", "Never answers.", NoArgs, _never_answer),
    Tool("drop", "Runs, then the connection closes before the answer.", NoArgs, _answer_normally),
    Tool("garbage", "Runs, then answers 200 with invalid JSON.", NoArgs, _answer_normally),
    Tool("crash", "Runs, then answers 500 and forgets every session.", NoArgs, _answer_normally),
)

JSON_SESSIONS = web.AppKey("json_sessions", dict[str, _JsonSession])


def faulty_streamable_app(hooks: FaultHooks | None = None) -> web.Application:
    """A Streamable HTTP server at /mcp whose fault tools break the HTTP exchange after running.

    `drop` closes the connection instead of answering, `garbage` answers 200 with invalid JSON,
    `crash` answers 500 and forgets all sessions (so old session ids get 404, as after a restart),
    `hang` never answers. Events land in `hooks` (also at `app[FAULT_HOOKS]`).
    """
    app = web.Application()
    app[FAULT_HOOKS] = hooks or FaultHooks()
    app[JSON_SESSIONS] = {}
    app.router.add_post("/mcp", _post_mcp)
    app.router.add_delete("/mcp", _delete_mcp)
    app.on_cleanup.append(_close_json_sessions)
    return app


def _json_error(status: int, code: int, message: str) -> web.Response:
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return web.json_response(error, status=status)


async def _post_mcp(request: web.Request) -> web.StreamResponse:
    hooks, sessions = request.app[FAULT_HOOKS], request.app[JSON_SESSIONS]
    try:
        message = await request.json()
    except json.JSONDecodeError as exc:
        return _json_error(400, PARSE_ERROR, f"Parse error: {exc}")
    hooks.received.append(message)
    if message.get("method") == "initialize":
        session_id = secrets.token_hex(16)
        sessions[session_id] = _JsonSession(FAULT_TOOLS)
    else:
        session_id = request.headers.get("Mcp-Session-Id", "")
        if not session_id:
            return _json_error(400, INVALID_REQUEST, "Missing session ID")
        if session_id not in sessions:
            return _json_error(404, SESSION_NOT_FOUND, "Session not found")
    session = sessions[session_id]
    if "id" not in message or "method" not in message:
        await session.server.handle(message)
        return web.Response(status=202)

    if session.in_flight(message["id"]):
        # Its answer could be taken for the other's: refused on its own POST, loudly.
        return _json_error(400, INVALID_REQUEST, DUPLICATE_ID)
    tool = message.get("params", {}).get("name") if message["method"] == "tools/call" else None
    if tool is not None:
        hooks.arrived[tool].set()
    try:
        answer = await session.ask(message)
    except asyncio.CancelledError:
        # aiohttp cancels the handler when the caller disconnects; a real server would cancel too.
        hooks.abandoned.set()
        cancel = {"requestId": message["id"], "reason": "client disconnected"}
        await session.server.handle(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
        )
        raise

    if tool == "drop":
        assert request.transport is not None
        request.transport.close()
    elif tool == "garbage":
        return web.Response(text='{"jsonrpc": "2.0", "id": ', content_type="application/json")
    elif tool == "crash":
        await _close_json_sessions(request.app)
        return web.Response(status=500, text="Internal Server Error")
    return web.json_response(answer, headers={"Mcp-Session-Id": session_id})


async def _delete_mcp(request: web.Request) -> web.Response:
    session = request.app[JSON_SESSIONS].pop(request.headers.get("Mcp-Session-Id", ""), None)
    if session is None:
        raise web.HTTPNotFound(text="unknown session")
    await session.server.close()
    return web.Response()


async def _close_json_sessions(app: web.Application) -> None:
    sessions = app[JSON_SESSIONS]
    while sessions:
        await sessions.popitem()[1].server.close()


RECEIVED = web.AppKey("received", list[dict[str, Any]])
STREAMS = web.AppKey("streams", list[CIMultiDictProxy[str]])


def recording_upstream() -> web.Application:
    # Bends on purpose, to record what the gateway sends: stateless (no Mcp-Session-Id, as an
    # SDK server in stateless mode); each answer goes at once on the POST that asked, so none
    # can be taken for another's.
    async def post(request: web.Request) -> web.Response:
        request.app[SEEN].append(request.headers)
        message: dict[str, Any] = await request.json()
        request.app[RECEIVED].append(message)
        if "id" not in message:
            return web.Response(status=202)
        result: dict[str, Any] = {"tools": []} if message["method"] == "tools/list" else {}
        if message["method"] == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "recorder", "version": "1"},
            }
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})

    async def get(request: web.Request) -> web.Response:
        request.app[STREAMS].append(request.headers)
        return web.Response(status=405)  # no GET stream: the spec lets a server offer none

    app = web.Application()
    app[SEEN] = []
    app[RECEIVED] = []
    app[STREAMS] = []
    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", get)
    return app


class ScriptedUpstream(Transport):
    """The upstream seam in-process: `initialize` is answered at once with `handshake` (or
    refused when `refusal` is set); everything sent is kept in `sent`, and the test answers
    (`answer`), speaks first (`say`) or loses the connection (`sink.on_lost`).

    Not a server: the test plays the upstream, and answers the request it names; one client
    uses it, so no other can send an id it has in flight (tests/mcp2_upstream.py is the
    real server for what ids do across clients)."""

    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        #: The client it was made for (`sink` is let go once closed).
        self.client = sink
        self.sent: list[jsonrpc.Message] = []
        self.starts = 0
        self.closes = 0
        self.handshake: jsonrpc.JsonObject = {"protocolVersion": "2025-06-18", "capabilities": {}}
        #: The error message the next initialize is refused with, if any.
        self.refusal: str | None = None
        #: The next request sent fails as if the upstream had forgotten our session (HTTP 404).
        self.forget_session = False
        self._changed = asyncio.Event()

    async def start(self) -> None:
        self.starts += 1

    async def send(self, message: jsonrpc.Message) -> None:
        if self.forget_session and isinstance(message, jsonrpc.Request):
            self.forget_session = False
            raise UpstreamSessionExpired("the upstream no longer knows the session")
        self.sent.append(message)
        self._changed.set()
        self._changed = asyncio.Event()
        if isinstance(message, jsonrpc.Request) and message.method == "initialize":
            if self.refusal is not None:
                refused = jsonrpc.error_response(message.id, -32000, self.refusal)
                self.sink.on_message(refused, message.id)
            else:
                self.answer(message, self.handshake)

    async def close(self) -> None:
        self.closes += 1

    def methods(self) -> list[str]:
        """The method of every request and notification sent, in order."""
        kinds = jsonrpc.Request | jsonrpc.Notification
        return [m.method for m in self.sent if isinstance(m, kinds)]

    async def until(self, condition: Callable[[], bool]) -> None:
        """Return once `condition()` holds, re-checked whenever something is sent (callers
        bound the wait)."""
        while not condition():
            await self._changed.wait()

    async def received(
        self, method: str, count: int = 1
    ) -> list[jsonrpc.Request | jsonrpc.Notification]:
        """The first `count` messages sent with `method`, once they are."""

        def found() -> list[jsonrpc.Request | jsonrpc.Notification]:
            kinds = jsonrpc.Request | jsonrpc.Notification
            return [m for m in self.sent if isinstance(m, kinds) and m.method == method]

        await self.until(lambda: len(found()) >= count)
        return found()[:count]

    async def request(self, method: str) -> jsonrpc.Request:
        """The first request sent with `method`, once it is."""
        (found,) = await self.received(method)
        assert isinstance(found, jsonrpc.Request)
        return found

    def answers(self) -> list[jsonrpc.Response | jsonrpc.ErrorResponse]:
        """Every answer sent (to the upstream's own requests), in order."""
        return [m for m in self.sent if isinstance(m, jsonrpc.Response | jsonrpc.ErrorResponse)]

    def answer(self, request: jsonrpc.Request, result: jsonrpc.JsonObject) -> None:
        self.sink.on_message(jsonrpc.Response(jsonrpc="2.0", id=request.id, result=result), None)

    def garble(self, raw: bytes) -> None:
        """Bytes the upstream sends that may not be a readable message."""
        self._deliver(raw, "the scripted upstream")

    def say(self, message: jsonrpc.Message, related: jsonrpc.RequestId | None = None) -> None:
        """A message the upstream sends, on the stream of request `related` if given."""
        self.sink.on_message(message, related)


class ScriptedRoute(UpstreamRoute):
    """A route's upstream side whose every session gets a `ScriptedUpstream` (in `made`)."""

    def __init__(self, config: RouteConfig) -> None:
        super().__init__(config, "routes[0]")
        self.made: list[ScriptedUpstream] = []

    def transport(
        self,
        sink: Any,
        forwarded: Callable[[], Mapping[str, str]],
        principal: str | None = None,
    ) -> Transport:
        self.made.append(ScriptedUpstream(sink))
        return self.made[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve one fake upstream on 127.0.0.1.")
    parser.add_argument("kind", choices=["sse", "streamable"])
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    app = legacy_sse_app() if args.kind == "sse" else faulty_streamable_app()
    # Tests get handler cancellation from aiohttp's TestServer; the SSE sessions rely on it.
    web.run_app(app, host="127.0.0.1", port=args.port, handler_cancellation=True)


if __name__ == "__main__":
    main()
