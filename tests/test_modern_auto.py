"""`upstream.modern: auto`, the default, against upstreams that do not forgive: one that claims
2026-07-28 in server/discover and then refuses session-less requests as a 2025-11-25 server
does, one whose server/discover hangs or fails, and one that changes what it speaks between
two looks (a restart into another version). Each is still served, bridged or natively, and
no request is lost to the mix-up. (The one that speaks 2026-07-28 for real, mcp 2.3's
MCPServer, is `test_modern_native.py`'s `auto` half.)"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.upstream import generation

from .conftest import StartGateway
from .helpers import modern_rpc

TOOLS: list[dict[str, Any]] = [{"name": "echo", "inputSchema": {"type": "object"}}]
STATE = web.AppKey("state", dict)


def upstream_app() -> web.Application:
    """A Streamable HTTP upstream as strict as an SDK server: a 2025-11-25 request needs the
    session initialize made (else HTTP 400 naming the session); `discover` in its state says
    what server/discover does: "modern" (lists 2026-07-28, and then serves session-less
    requests), "claims" (lists it, but serves none), "unknown" (-32601), "error" (HTTP 500),
    "hang"."""
    app = web.Application()
    app[STATE] = {"discover": "unknown", "sessions": set(), "sessionless": 0, "refused": 0}

    async def post(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        body = await request.json()
        method, rid = body.get("method"), body.get("id")
        if method == "server/discover":
            mode = state["discover"]
            if mode == "hang":
                await asyncio.sleep(3600)
            if mode == "error":
                return web.Response(status=500, text="internal error")
            if mode == "unknown":
                error = {"code": -32601, "message": "Method not found"}
                return web.json_response({"jsonrpc": "2.0", "id": rid, "error": error})
            result = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
            return web.json_response({"jsonrpc": "2.0", "id": rid, "result": result})
        if method == "initialize":
            made = secrets.token_hex(8)
            state["sessions"].add(made)
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "strict", "version": "1"},
            }
            answer = {"jsonrpc": "2.0", "id": rid, "result": result}
            return web.json_response(answer, headers={"Mcp-Session-Id": made})
        session = request.headers.get("Mcp-Session-Id")
        if session is None and state["discover"] == "modern":
            state["sessionless"] += 1
            listed: dict[str, Any] = {"tools": TOOLS, "resultType": "complete"}
            return web.json_response({"jsonrpc": "2.0", "id": rid, "result": listed})
        if session not in state["sessions"]:
            state["refused"] += 1
            error = {"code": -32000, "message": "Bad Request: No valid session ID provided"}
            return web.json_response({"jsonrpc": "2.0", "id": None, "error": error}, status=400)
        if rid is None:
            return web.Response(status=202)
        if method == "tools/list":
            return web.json_response({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        error = {"code": -32601, "message": "Method not found"}
        return web.json_response({"jsonrpc": "2.0", "id": rid, "error": error})

    async def delete(request: web.Request) -> web.Response:
        request.app[STATE]["sessions"].discard(request.headers.get("Mcp-Session-Id"))
        return web.Response(status=200)

    app.router.add_post("/mcp", post)
    app.router.add_delete("/mcp", delete)
    return app


async def served(start_gateway: StartGateway, upstream: TestServer) -> str:
    route = {
        "name": "u",
        "upstream": {"transport": "streamable_http", "url": str(upstream.make_url("/mcp"))},
    }
    return f"{await start_gateway([route])}/u/mcp"


async def tools(url: str) -> list[Any]:
    async with aiohttp.ClientSession() as http:
        status, body = await modern_rpc(http, url, "tools/list")
    assert status == 200, body
    return list(body["result"]["tools"])


@pytest.fixture
async def upstream() -> Any:
    server = TestServer(upstream_app(), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_an_upstream_that_claims_2026_and_then_wants_a_session_is_bridged_unharmed(
    start_gateway: StartGateway, upstream: TestServer
) -> None:
    upstream.app[STATE]["discover"] = "claims"
    url = await served(start_gateway, upstream)
    first = await tools(url)  # refused on the 2026-07-28 wire, unrun: answered bridged
    second = await tools(url)  # bridged from the start
    assert [tool["name"] for tool in first] == [tool["name"] for tool in second] == ["echo"]
    assert upstream.app[STATE]["refused"] == 1


@pytest.mark.parametrize("discover", ["hang", "error", "unknown"])
async def test_an_upstream_whose_discover_hangs_or_fails_is_bridged(
    start_gateway: StartGateway,
    upstream: TestServer,
    monkeypatch: pytest.MonkeyPatch,
    discover: str,
) -> None:
    monkeypatch.setattr(generation, "DISCOVER_SECONDS", 0.3)
    upstream.app[STATE]["discover"] = discover
    url = await served(start_gateway, upstream)
    async with asyncio.timeout(5):
        listed = await tools(url)
    assert [tool["name"] for tool in listed] == ["echo"]
    assert upstream.app[STATE]["sessionless"] == upstream.app[STATE]["refused"] == 0


async def test_an_upstream_that_changes_what_it_speaks_is_followed_at_the_next_look(
    start_gateway: StartGateway, upstream: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generation, "RELEARN_SECONDS", 0.2)
    url = await served(start_gateway, upstream)
    await tools(url)  # an older server: bridged
    assert upstream.app[STATE]["sessionless"] == 0
    upstream.app[STATE]["discover"] = "modern"  # restarted as a 2026-07-28 server
    await asyncio.sleep(0.3)
    await tools(url)
    assert upstream.app[STATE]["sessionless"] == 1  # spoken to natively
    upstream.app[STATE]["discover"] = "claims"  # rolled back, but still claiming it
    await asyncio.sleep(0.3)
    assert [tool["name"] for tool in await tools(url)] == ["echo"]
    assert upstream.app[STATE]["refused"] == 1
