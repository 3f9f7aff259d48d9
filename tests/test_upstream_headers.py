"""What reaches the upstream in HTTP headers: the route's static headers, never the client's."""

from __future__ import annotations

import httpx
import pytest
from aiohttp.test_utils import TestServer
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .conftest import StartGateway
from .fakes import SEEN


async def test_client_credentials_never_reach_the_upstream_but_route_headers_do(
    start_gateway: StartGateway, recorder: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", "route-secret")
    upstream = {
        "transport": "streamable_http",
        "url": str(recorder.make_url("/mcp")),
        "headers": {"X-Api-Key": "${UPSTREAM_KEY}"},
    }
    base = await start_gateway([{"name": "r", "upstream": upstream}])

    client_headers = {"Authorization": "Bearer client-secret", "Cookie": "sid=client"}
    async with httpx.AsyncClient(headers=client_headers) as http:
        async with streamable_http_client(f"{base}/r/mcp", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as client:
                await client.initialize()
                await client.list_tools()
    seen = recorder.app[SEEN]
    assert len(seen) >= 3  # initialize, initialized, tools/list
    for headers in seen:
        assert headers["X-Api-Key"] == "route-secret"
        assert "Authorization" not in headers and "Cookie" not in headers


async def test_a_route_may_opt_in_to_forwarding_the_clients_authorization(
    start_gateway: StartGateway, recorder: TestServer
) -> None:
    upstream = {
        "transport": "streamable_http",
        "url": str(recorder.make_url("/mcp")),
        "forward_headers": ["Authorization"],
    }
    base = await start_gateway([{"name": "r", "upstream": upstream}])
    async with httpx.AsyncClient(
        headers={"Authorization": "Bearer passed-on", "Cookie": "sid=kept-here"}
    ) as http:
        async with streamable_http_client(f"{base}/r/mcp", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as client:
                await client.initialize()
                await client.list_tools()
    seen = recorder.app[SEEN]
    assert seen and all(h["Authorization"] == "Bearer passed-on" for h in seen)
    assert all("Cookie" not in h for h in seen)  # only what the route names crosses
