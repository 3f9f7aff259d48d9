"""A client's answer to an upstream question that a Streamable HTTP upstream refuses with an
HTTP error is not lost: the client hears it (502) and the question stays open for a retry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.protocol.errors import INTERNAL_ERROR

from .conftest import StartGateway
from .helpers import INIT, headers

REFUSED = web.AppKey("refused", list[int])
RELAYS = web.AppKey("relays", set["asyncio.Task[Any]"])


def refusing_proxy(upstream: str) -> web.Application:
    """Passes everything to `upstream`, but answers the first JSON-RPC response it is sent
    (a client's answer to a question) with HTTP 503, as an overloaded server would."""
    app = web.Application()
    app[REFUSED] = []
    # Streams the gateway holds open through the proxy (its GET stream) end with the proxy.
    app[RELAYS] = set()

    async def end_relays(app: web.Application) -> None:
        for relay in app[RELAYS]:
            relay.cancel()

    app.on_shutdown.append(end_relays)

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        message = json.loads(body) if body else {}
        if "result" in message and "method" not in message and not app[REFUSED]:
            app[REFUSED].append(message["id"])
            return web.Response(status=503, text="busy")
        me = asyncio.current_task()
        assert me is not None
        app[RELAYS].add(me)
        me.add_done_callback(app[RELAYS].discard)
        skip = {"host", "content-length", "transfer-encoding"}
        forwarded = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        async with aiohttp.ClientSession() as http:
            async with http.request(request.method, upstream, data=body, headers=forwarded) as up:
                headers = {
                    k: v
                    for k, v in up.headers.items()
                    if k.lower() in ("content-type", "mcp-session-id")
                }
                response = web.StreamResponse(status=up.status, headers=headers)
                await response.prepare(request)
                async for chunk in up.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

    app.router.add_route("*", "/mcp", relay)
    return app


@pytest.fixture
async def proxied(sdk_upstream: str) -> AsyncIterator[TestServer]:
    server = TestServer(refusing_proxy(sdk_upstream), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def messages(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    async for line in resp.content:
        if line.startswith(b"data: {"):
            yield json.loads(line[6:])


async def test_an_answer_refused_with_an_http_error_gets_502_and_the_retry_completes_the_task(
    start_gateway: StartGateway, proxied: TestServer
) -> None:
    upstream = {"transport": "streamable_http", "url": str(proxied.make_url("/mcp"))}
    url = f"{await start_gateway([{'name': 't', 'upstream': upstream}])}/t/mcp"
    # A client that answers questions declares elicitation in its capabilities.
    init = {**INIT, "params": {**INIT["params"], "capabilities": {"elicitation": {}}}}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=init, headers=headers()) as resp:
            session = headers(resp.headers["Mcp-Session-Id"])
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(url, json=note, headers=session):
            pass
        call = {"name": "ask", "arguments": {}, "task": {}}
        message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        async with http.post(url, json=message, headers=session) as resp:
            task_id = (await resp.json())["result"]["task"]["taskId"]
        wait = {"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id}}
        async with asyncio.timeout(20), http.post(url, json=wait, headers=session) as stream:
            incoming = messages(stream)
            question = await anext(incoming)
            assert question["method"] == "elicitation/create"
            reply = {
                "jsonrpc": "2.0",
                "id": question["id"],
                "result": {"action": "accept", "content": {"name": "Ada"}},
            }
            async with http.post(url, json=reply, headers=session) as refused:
                status, body = refused.status, await refused.json()
            async with http.post(url, json=reply, headers=session) as again:
                assert again.status == 202
            final = await anext(m async for m in incoming if m.get("id") == 3)
    assert status == 502
    assert body["error"]["code"] == INTERNAL_ERROR and "HTTP 503" in body["error"]["message"]
    assert proxied.app[REFUSED]  # the upstream really refused one answer
    assert "Ada" in json.dumps(final["result"])
