"""MCP over raw HTTP, both generations, timed: one POST and what comes back on it.

A POST is answered with JSON or with an SSE stream; on a stream the server's own requests
(an elicitation) and notifications come before the answer, and each is handed to a callback
as it arrives. The moment the answer arrived (`time.time()`, the clock the gateway's audit
lines use) is kept, so a blocking `tasks/result` can be timed against the terminal write.

`Spread` sends each request to the next gateway in turn (no stickiness: one `Balancer`, one
turn, for all clients), skipping one that refuses connections or answers 503 (down or
draining).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

JsonObj = dict[str, Any]
#: Told of each message that comes on a stream before the answer (it must not block: it
#: spawns what it has to do, so that the answer's arrival is timed as it comes).
Callback = Callable[[JsonObj], None]

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"
ACCEPT = "application/json, text/event-stream"
#: Connection errors after which a request may go to another gateway: nothing was taken.
REFUSED = (aiohttp.ClientConnectorError,)


class Unanswered(Exception):
    """The POST ended without an answer: the connection broke, or the stream ended early."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


@dataclass
class Reply:
    """What one POST got: its HTTP status, the JSON-RPC answer, and when it arrived."""

    status: int
    answer: JsonObj
    arrived: float
    sent: float
    #: Which gateway answered (its name).
    where: str
    #: Its headers, by lower-case name.
    headers: dict[str, str] = field(default_factory=dict)


def modern_meta(capabilities: JsonObj) -> JsonObj:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "integrity", "version": "1"},
    }


def legacy_headers(key: str | None, session: str | None) -> dict[str, str]:
    out = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if key is not None:
        out["Authorization"] = f"Bearer {key}"
    if session is not None:
        out["Mcp-Session-Id"] = session
        out["MCP-Protocol-Version"] = LEGACY
    return out


def modern_headers(key: str, message: JsonObj) -> dict[str, str]:
    out = {"Accept": ACCEPT, "Content-Type": "application/json"}
    out["Authorization"] = f"Bearer {key}"
    out["MCP-Protocol-Version"] = MODERN
    out["Mcp-Method"] = message["method"]
    params = message.get("params") or {}
    named = params.get("taskId", params.get("name"))
    if isinstance(named, str):
        out["Mcp-Name"] = named
    return out


async def post(
    http: aiohttp.ClientSession,
    url: str,
    where: str,
    message: JsonObj,
    headers: dict[str, str],
    on_message: Callback | None = None,
) -> Reply:
    """POST one JSON-RPC message; the answer to it (a notification's: an empty one).

    Raises:
        Unanswered: the connection broke or the stream ended before the answer.
        aiohttp.ClientConnectorError: nothing listens there (nothing was sent).
    """
    sent = time.time()
    try:
        async with http.post(url, json=message, headers=headers) as resp:
            status, kept = resp.status, {k.lower(): v for k, v in resp.headers.items()}
            if resp.content_type == "text/event-stream":
                answer, arrived = await _from_stream(resp, message.get("id"), on_message)
            else:
                body = await resp.read()
                arrived = time.time()
                answer = _json_or_empty(body) if status >= 500 else json.loads(body or b"{}")
    except REFUSED:
        raise
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        raise Unanswered(where, f"{type(exc).__name__}: {exc}") from exc
    if answer is None:
        raise Unanswered(where, f"HTTP {status}: the stream ended without an answer")
    return Reply(status, answer, arrived, sent, where, kept)


async def _from_stream(
    resp: aiohttp.ClientResponse, request_id: object, on_message: Callback | None
) -> tuple[JsonObj | None, float]:
    data: list[str] = []
    while True:
        line = await resp.content.readline()
        if not line:
            return None, time.time()
        text = line.decode().rstrip("\r\n")
        if text.startswith("data:"):
            data.append(text[5:].removeprefix(" "))
            continue
        if text or not data:
            continue  # another field, a comment, or a blank line between events
        arrived = time.time()
        text, data = "\n".join(data), []
        if not text.strip():
            continue  # an event with no data (a priming event): nothing to dispatch
        message = json.loads(text)
        if "method" not in message and message.get("id") == request_id:
            return message, arrived
        if on_message is not None:
            on_message(message)


def _json_or_empty(body: bytes) -> JsonObj:
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


async def listen(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], on_message: Callback
) -> int:
    """Read a session's GET stream (the server's messages about no request of the client's)
    until it ends; its HTTP status."""
    async with http.get(url, headers={**headers, "Accept": "text/event-stream"}) as resp:
        if resp.status == 200 and resp.content_type == "text/event-stream":
            await _from_stream(resp, _NO_ID, on_message)
        return resp.status


#: An id no answer has: `_from_stream` then reads the stream to its end.
_NO_ID = object()


class Balancer:
    """A load balancer without affinity: the gateways taken in turn, one request after
    another, whoever sends it (so one session's requests land on every gateway)."""

    def __init__(self, bases: dict[str, str]) -> None:
        self.bases = bases
        self._turn = itertools.cycle(sorted(bases))

    def next(self) -> str:
        return next(self._turn)


class Spread:
    """A route's URL on each gateway, taken in the balancer's turn; one that refuses (down)
    or answers 503 (draining) is skipped."""

    def __init__(self, balancer: Balancer, route: str) -> None:
        self.route = route
        self.urls = {name: f"{base}/{route}/mcp" for name, base in balancer.bases.items()}
        self._balancer = balancer

    def next(self) -> tuple[str, str]:
        """The next gateway in turn: its name and URL."""
        where = self._balancer.next()
        return where, self.urls[where]

    async def send(
        self,
        http: aiohttp.ClientSession,
        message: JsonObj,
        headers: dict[str, str],
        on_message: Callback | None = None,
        patience: float = 20.0,
    ) -> Reply:
        """The next gateway's answer; a refused connection or a 503 goes to the one after,
        for up to `patience` seconds (while a replica is down or draining)."""
        deadline = time.monotonic() + patience
        for tries in itertools.count(1):
            where, url = self.next()
            try:
                reply = await post(http, url, where, message, headers, on_message)
            except REFUSED:
                reply = None
            if reply is not None and reply.status != 503:
                return reply
            if time.monotonic() > deadline:
                raise Unanswered(where, "every gateway refused or was draining")
            if tries % len(self.urls) == 0:  # a whole round refused: wait a little
                await asyncio.sleep(0.05)
        raise AssertionError("unreachable")


async def again(
    spread: Spread,
    http: aiohttp.ClientSession,
    message: JsonObj,
    headers: dict[str, str],
    breaks: list[tuple[str, float, str]],
    on_message: Callback | None = None,
) -> Reply:
    """`spread.send`, sent again to the next gateway each time it breaks on its way (each
    break noted in `breaks`): for requests that may be repeated (reads, answers, cancels).
    The caller's deadline bounds it."""
    while True:
        try:
            return await spread.send(http, message, headers, on_message)
        except Unanswered as exc:
            breaks.append((exc.where, time.time(), exc.why))
            await asyncio.sleep(0.05)


async def tool_names(send: Callable[[JsonObj], Awaitable[Reply]]) -> list[str]:
    """The names a server lists, every page of `tools/list` (`send` sends one, with the
    params given); a page that is no list ends it with what came so far."""
    names: list[str] = []
    params: JsonObj = {}
    while True:
        result = (await send(params)).answer.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(result, dict) or not isinstance(tools, list):
            return names
        names += [str(tool.get("name")) for tool in tools if isinstance(tool, dict)]
        if not result.get("nextCursor"):
            return names
        params = {"cursor": result["nextCursor"]}
