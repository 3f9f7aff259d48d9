"""Upstream output the gateway cannot read (nested too deep, not UTF-8, over the line cap,
without an id) fails the call it answers at once with a clear error, and the upstream goes on
serving the session; SSE lines may end in CR, LF or CRLF (the parser itself: test_sse_reader)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import ClientSession, types
from mcp.shared.exceptions import McpError

from gateway.protocol.errors import INTERNAL_ERROR

from .conftest import DEMO, ROOT, StartGateway, mcp_client
from .helpers import open_session, rpc, start_task, task_terminal, text
from .unreadable_upstream import BROKEN, answer

# Within this every failure must have arrived: far below the route's request timeout (300 s),
# so a call that waited for an answer that never came cannot pass.
PROMPTLY = 30

OPENED = web.AppKey("opened", list[str])
OUTBOXES = web.AppKey("outboxes", dict[str, "asyncio.Queue[dict[str, Any]]"])


async def _write_answer(response: web.StreamResponse, message: dict[str, Any]) -> None:
    """The answer to `message` as an SSE event, framed (or broken) as its tool says."""
    data = answer(message)
    tool = (message.get("params") or {}).get("name") if message["method"] == "tools/call" else None
    if tool == "bare_cr":
        await response.write(b"event: message\rdata: " + data + b"\r\r")
    elif tool == "split_crlf":
        # The JSON spread over two data lines, with a CRLF cut between two writes.
        cut = data.index(b", ") + 1
        await response.write(b"data: " + data[:cut] + b"\r")
        await response.write(b"\ndata: " + data[cut:] + b"\r\n\r\n")
    elif tool == "too_long":
        await response.write(b"data: " + data)  # and the line never ends
    else:
        await response.write(b"event: message\ndata: " + data + b"\n\n")


async def _sse_response(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    return response


def streamable_app() -> web.Application:
    """Streamable HTTP: every answer on the POST's own SSE stream."""

    async def post(request: web.Request) -> web.StreamResponse:
        message: dict[str, Any] = await request.json()
        if "id" not in message or "method" not in message:
            return web.Response(status=202)
        if message["method"] == "initialize":
            body = answer(message)
            return web.Response(
                body=body, content_type="application/json", headers={"Mcp-Session-Id": "s1"}
            )
        response = await _sse_response(request)
        await _write_answer(response, message)
        if (message.get("params") or {}).get("name") == "too_long":
            await asyncio.Event().wait()  # the stream stays open: only the cap ends it
        return response

    async def no_get_stream(request: web.Request) -> web.Response:
        return web.Response(status=405)

    async def end_session(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", no_get_stream)
    app.router.add_delete("/mcp", end_session)
    return app


def legacy_sse_app() -> web.Application:
    """HTTP+SSE (2024-11-05): one GET stream per session carries every answer."""

    async def stream(request: web.Request) -> web.StreamResponse:
        session = secrets.token_hex(8)
        outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        request.app[OUTBOXES][session] = outbox
        request.app[OPENED].append(session)
        response = await _sse_response(request)
        await response.write(f"event: endpoint\ndata: /messages?s={session}\n\n".encode())
        while True:
            await _write_answer(response, await outbox.get())

    async def post(request: web.Request) -> web.Response:
        message: dict[str, Any] = await request.json()
        if "id" in message and "method" in message:
            request.app[OUTBOXES][request.query["s"]].put_nowait(message)
        return web.Response(status=202)

    app = web.Application()
    app[OPENED] = []
    app[OUTBOXES] = {}
    app.router.add_get("/sse", stream)
    app.router.add_post("/messages", post)
    return app


@pytest.fixture
async def streamable_url() -> AsyncIterator[str]:
    server = TestServer(streamable_app(), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/mcp"))
    await server.close()


@pytest.fixture
async def legacy_server() -> AsyncIterator[TestServer]:
    server = TestServer(legacy_sse_app(), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def fails_promptly(client: ClientSession, tool: str) -> None:
    async with asyncio.timeout(PROMPTLY):
        with pytest.raises(McpError) as raised:
            await client.call_tool(tool, {})
    assert raised.value.error.code == INTERNAL_ERROR


@pytest.mark.parametrize("tool", BROKEN)
async def test_unreadable_line_from_a_stdio_child_fails_its_call_and_the_same_child_serves_on(
    tool: str, start_gateway: StartGateway
) -> None:
    command = ["python", str(ROOT / "tests" / "unreadable_upstream.py")]
    base = await start_gateway(
        [{"name": "u", "upstream": {"transport": "stdio", "command": command}}]
    )
    async with mcp_client(f"{base}/u/mcp") as client:
        pid = text(await client.call_tool("pid", {}))
        await fails_promptly(client, tool)
        async with asyncio.timeout(PROMPTLY):
            assert text(await client.call_tool("pid", {})) == pid


@pytest.mark.parametrize("tool", BROKEN)
async def test_unreadable_event_on_a_streamable_http_answer_fails_its_call_and_the_session_goes_on(
    tool: str, start_gateway: StartGateway, streamable_url: str
) -> None:
    upstream = {"transport": "streamable_http", "url": streamable_url}
    base = await start_gateway([{"name": "u", "upstream": upstream}])
    async with mcp_client(f"{base}/u/mcp") as client:
        await fails_promptly(client, tool)
        async with asyncio.timeout(PROMPTLY):
            await client.call_tool("pid", {})


@pytest.mark.parametrize("tool", [t for t in BROKEN if t != "too_long"])
async def test_unreadable_event_on_a_legacy_sse_stream_fails_its_call_and_the_stream_goes_on(
    tool: str, start_gateway: StartGateway, legacy_server: TestServer
) -> None:
    upstream = {"transport": "sse", "url": str(legacy_server.make_url("/sse"))}
    base = await start_gateway([{"name": "u", "upstream": upstream}])
    async with mcp_client(f"{base}/u/mcp") as client:
        await fails_promptly(client, tool)
        async with asyncio.timeout(PROMPTLY):
            await client.call_tool("pid", {})
    assert len(legacy_server.app[OPENED]) == 1


async def test_endless_line_on_a_legacy_sse_stream_loses_it_and_the_next_call_opens_another(
    start_gateway: StartGateway, legacy_server: TestServer
) -> None:
    upstream = {"transport": "sse", "url": str(legacy_server.make_url("/sse"))}
    base = await start_gateway([{"name": "u", "upstream": upstream}])
    async with mcp_client(f"{base}/u/mcp") as client:
        await fails_promptly(client, "too_long")
        async with asyncio.timeout(PROMPTLY):
            await client.call_tool("pid", {})
    assert len(legacy_server.app[OPENED]) == 2


@pytest.mark.parametrize("tool", ["bare_cr", "split_crlf"])
@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_sse_answers_whose_lines_end_in_cr_or_a_split_crlf_arrive(
    tool: str,
    transport: str,
    start_gateway: StartGateway,
    streamable_url: str,
    legacy_server: TestServer,
) -> None:
    url = streamable_url if transport == "streamable_http" else str(legacy_server.make_url("/sse"))
    base = await start_gateway([{"name": "u", "upstream": {"transport": transport, "url": url}}])
    async with mcp_client(f"{base}/u/mcp") as client:
        async with asyncio.timeout(PROMPTLY):
            assert text(await client.call_tool(tool, {})).isdigit()


@pytest.mark.parametrize("token", [{"call": 1}, [1], None, True])
async def test_progress_with_a_token_that_names_no_call_is_dropped_and_the_call_answers(
    start_gateway: StartGateway, token: Any
) -> None:
    from gateway.demo.server import Message, Tool, ToolContext, text_result
    from gateway.demo.tools import NoArgs

    from .fakes import legacy_sse_app

    async def odd_progress(ctx: ToolContext, args: NoArgs) -> Message:
        # The upstream answers with a token no client request carried (not even an id's type).
        await ctx._server.notify("notifications/progress", {"progressToken": token, "progress": 1})
        return text_result("done")

    upstream = TestServer(legacy_sse_app([Tool("odd", "Odd progress.", NoArgs, odd_progress)]))
    await upstream.start_server()
    try:
        route = {
            "name": "odd",
            "upstream": {"transport": "sse", "url": str(upstream.make_url("/sse"))},
        }
        url = f"{await start_gateway([route])}/odd/mcp"
        async with asyncio.timeout(PROMPTLY), mcp_client(url) as client:
            result = await client.call_tool("odd", {})
            assert isinstance(result.content[0], types.TextContent)
            assert result.content[0].text == "done"
    finally:
        await upstream.close()


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
async def test_an_answer_over_max_result_bytes_fails_its_call_and_its_task_and_is_not_kept(
    start_gateway: StartGateway, faulty_upstream: TestServer, transport: str
) -> None:
    upstream = (
        DEMO
        if transport == "stdio"
        else {"transport": "streamable_http", "url": str(faulty_upstream.make_url("/mcp"))}
    )
    base = await start_gateway([{"name": "r", "upstream": upstream, "max_result_bytes": 4096}])
    url = f"{base}/r/mcp"
    big = {"name": "echo", "arguments": {"text": "x" * 5000}}
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        plain = await rpc(http, url, session, "tools/call", big, request_id=2)
        small = {"name": "echo", "arguments": {"text": "fits"}}
        after = await rpc(http, url, session, "tools/call", small, request_id=3)
        task_id = await start_task(http, url, session, "echo", {"text": "y" * 5000})
        task = await task_terminal(http, url, session, task_id)
        result = await rpc(http, url, session, "tasks/result", {"taskId": task_id}, request_id=4)
        metrics = await (await http.get(f"{base}/metrics")).text()
    says = "larger than 4096 bytes (routes[].max_result_bytes)"
    assert plain["error"]["code"] == INTERNAL_ERROR and says in plain["error"]["message"]
    assert after["result"]["content"][0]["text"] == "fits"  # the session goes on
    assert task["status"] == "failed" and says in task["statusMessage"]
    # What the task keeps is the refusal, not the answer it refused.
    assert says in result["error"]["message"] and "y" * 100 not in json.dumps(result)
    assert 'outcome="too_large"' in metrics
