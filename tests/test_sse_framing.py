"""The client sees the upstream's framing: an SSE answer stays SSE, and an upstream that closes
its stream early (SSE polling) makes the client resume with Last-Event-ID, as it would directly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import types

from .conftest import StartGateway, mcp_client
from .helpers import headers, open_session, read_events

PENDING = web.AppKey("pending", dict[str, dict[str, Any]])
RELEASE = web.AppKey("release", asyncio.Event)


def _event(event_id: str, data: str = "", retry: int | None = None) -> bytes:
    lines = [f"id: {event_id}"] + ([f"retry: {retry}"] if retry else [])
    lines += [f"data: {data}"] if data else ["data: "]
    return ("\n".join(lines) + "\n\n").encode()


def polling_upstream() -> web.Application:
    """Streamable HTTP: `poll` closes its stream after a priming event and answers on the
    resumed GET (then keeps that stream open); `sse` answers on an SSE stream at once."""

    async def post(request: web.Request) -> web.StreamResponse:
        message: dict[str, Any] = await request.json()
        if "id" not in message:
            return web.Response(status=202)
        if message["method"] == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "poller", "version": "1"},
            }
            return web.json_response(
                {"jsonrpc": "2.0", "id": message["id"], "result": result},
                headers={"Mcp-Session-Id": "s1"},
            )
        tool = (message.get("params") or {}).get("name")
        if message["method"] == "tools/list":
            schema = {"type": "object"}
            tools = [{"name": name, "inputSchema": schema} for name in ("poll", "sse")]
            return web.json_response(
                {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": tools}}
            )
        if message["method"] != "tools/call" or tool not in ("poll", "sse"):
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        answer = {
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {"content": [{"type": "text", "text": f"{tool} answered"}]},
        }
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if tool == "sse":
            await response.write(_event("a1", json.dumps(answer)))
            return response
        request.app[PENDING]["p1"] = answer
        await response.write(_event("p1", retry=50))
        return response  # the connection closes with no answer: the client must poll

    async def get(request: web.Request) -> web.StreamResponse:
        last = request.headers.get("Last-Event-ID")
        if last is None:
            return web.Response(status=405)
        answer = request.app[PENDING].pop(last)
        await request.app[RELEASE].wait()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_event("p2", json.dumps(answer)))
        await asyncio.Event().wait()  # stays open after the answer, as real servers' may
        return response

    app = web.Application()
    app[PENDING] = {}
    app[RELEASE] = asyncio.Event()
    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", get)
    return app


@pytest.fixture
async def poller_server() -> AsyncIterator[TestServer]:
    server = TestServer(polling_upstream(), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
def poller(poller_server: TestServer) -> str:
    return str(poller_server.make_url("/mcp"))


def call(request_id: int, tool: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}},
    }


async def test_upstream_sse_answer_reaches_the_client_as_sse(
    start_gateway: StartGateway, poller: str
) -> None:
    base = await start_gateway(
        [{"name": "p", "upstream": {"transport": "streamable_http", "url": poller}}]
    )
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, f"{base}/p/mcp")
        async with http.post(
            f"{base}/p/mcp", json=call(4, "sse"), headers=headers(session_id)
        ) as resp:
            assert resp.content_type == "text/event-stream"
            # Answered within the JSON window: the stream goes out whole, in one write with
            # a length, not as a chunk per event.
            assert resp.content_length is not None
            assert "Transfer-Encoding" not in resp.headers
            priming, answer = await read_events(resp, 2)
            assert await resp.content.read() == b""
    assert priming["data"] == "" and priming["id"].endswith(":0")
    assert json.loads(answer["data"])["result"]["content"][0]["text"] == "sse answered"


async def test_upstream_polling_close_is_mirrored_and_the_answer_comes_on_resume(
    start_gateway: StartGateway, poller: str, poller_server: TestServer
) -> None:
    base = await start_gateway(
        [{"name": "p", "upstream": {"transport": "streamable_http", "url": poller}}]
    )
    url = f"{base}/p/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        async with http.post(url, json=call(5, "poll"), headers=headers(session_id)) as resp:
            assert resp.content_type == "text/event-stream"
            async with asyncio.timeout(10):
                body = await resp.content.read()  # ends: the gateway closed the connection
        poller_server.app[RELEASE].set()  # only now may the upstream answer the resumed GET
        priming = [line for line in body.decode().splitlines() if line.startswith("id: ")]
        assert priming and '"id":5' not in body.decode()
        resume = {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session_id,
            "Last-Event-ID": priming[-1].removeprefix("id: "),
        }
        async with http.get(url, headers=resume) as again:
            (answer,) = await read_events(again, 1)
    message = json.loads(answer["data"])
    assert message["id"] == 5 and message["result"]["content"][0]["text"] == "poll answered"


async def test_sdk_client_gets_a_polled_answer_through_the_gateway(
    start_gateway: StartGateway, poller: str, poller_server: TestServer
) -> None:
    poller_server.app[RELEASE].set()
    base = await start_gateway(
        [{"name": "p", "upstream": {"transport": "streamable_http", "url": poller}}]
    )
    async with mcp_client(f"{base}/p/mcp") as client:
        async with asyncio.timeout(15):
            result = await client.call_tool("poll", {})
    block = result.content[0]
    assert isinstance(block, types.TextContent) and block.text == "poll answered"
