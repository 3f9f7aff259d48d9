"""Messages an upstream sends on its own (not tied to any request) reach the client."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import types

from .conftest import StartGateway, mcp_client

PUSHED = web.AppKey("pushed", asyncio.Event)


def pushing_upstream() -> web.Application:
    """A Streamable HTTP upstream whose GET stream announces a tool-list change."""

    async def post(request: web.Request) -> web.StreamResponse:
        message: dict[str, Any] = await request.json()
        if "id" not in message:
            return web.Response(status=202)
        result: dict[str, Any] = {}
        if message["method"] == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "pusher", "version": "1"},
            }
        return web.json_response(
            {"jsonrpc": "2.0", "id": message["id"], "result": result},
            headers={"Mcp-Session-Id": "upstream-session-1"},
        )

    async def get(request: web.Request) -> web.StreamResponse:
        assert request.headers["Mcp-Session-Id"] == "upstream-session-1"
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        await response.write(f"id: 1\nevent: message\ndata: {json.dumps(note)}\n\n".encode())
        request.app[PUSHED].set()
        await asyncio.Event().wait()  # held open until the gateway disconnects
        return response

    app = web.Application()
    app[PUSHED] = asyncio.Event()
    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", get)
    return app


@pytest.fixture
async def pusher() -> AsyncIterator[TestServer]:
    server = TestServer(pushing_upstream(), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_upstream_get_stream_messages_reach_the_client_get_stream(
    start_gateway: StartGateway, pusher: TestServer
) -> None:
    url = str(pusher.make_url("/mcp"))
    base = await start_gateway(
        [{"name": "p", "upstream": {"transport": "streamable_http", "url": url}}]
    )
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            changed.set()

    async with mcp_client(f"{base}/p/mcp", message_handler=on_message):
        async with asyncio.timeout(10):
            await pusher.app[PUSHED].wait()
            await changed.wait()


async def test_stdio_child_stderr_goes_to_the_gateway_log(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway")
    base = await start_gateway()
    async with mcp_client(f"{base}/demo/mcp") as client:
        await client.call_tool("echo", {"text": "x"})
    assert any("gateway.demo: serving 8 tools on stdio" in r.getMessage() for r in caplog.records)
