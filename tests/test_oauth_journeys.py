"""Signing in to the gateway as real MCP clients do: the SDK's own OAuth client provider (mcp
1.30, over httpx) against a real authorization server process (tests/oauth_server.py, built on
the SDK's `mcp.server.auth`), the gateway in front of the demo.

The client knows only the route's URL. From the 401 it finds the route's metadata, then the
authorization server; it registers itself (RFC 7591), signs in with PKCE, asks for a token for
the route's resource (RFC 8707), and calls a tool, directly and as a task.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import httpx
import jwt
import pytest
from aiohttp.test_utils import TestServer
from mcp import ClientSession, types
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from gateway.app import create_app
from gateway.config import ListenConfig, parse_settings
from gateway.http import listen

from .conftest import DEMO, ROOT, free_port, wait_for_port
from .fakes import SEEN, recording_upstream
from .helpers import INIT, headers

CALLBACK = "http://127.0.0.1:9/callback"  # never reached: the redirect is read, not followed


class AuthServer:
    def __init__(self, url: str) -> None:
        self.url = url
        #: How its metadata names it (the SDK writes a root issuer with a trailing slash).
        self.issuer = f"{url}/"

    async def control(self, **change: Any) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{self.url}/control", json=change)
            answer.raise_for_status()
            result: dict[str, Any] = answer.json()
            return result


@pytest.fixture
def auth_server() -> Iterator[AuthServer]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "oauth_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield AuthServer(f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(10)


@asynccontextmanager
async def running_gateway(
    tmp_path: Path,
    server: AuthServer,
    routes: list[dict[str, Any]],
    env: dict[str, str] | None = None,
    **oauth: Any,
) -> AsyncIterator[str]:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    section = {
        "issuer": server.issuer,
        "jwks_url": f"{server.url}/jwks.json",
        "public_url": public,
        "jwks_cooldown_seconds": 0,  # a rotated key is fetched at once
        **oauth,
    }
    data = {"store": {"path": str(tmp_path / "g.db")}, "auth": {"oauth": section}, "routes": routes}
    settings = parse_settings(data, "test settings", env=env or {})
    runner = await listen.start(
        create_app(settings), ListenConfig(host="127.0.0.1", port=port), settings.http
    )
    try:
        yield public
    finally:
        await runner.cleanup()


class Storage:
    """Where the client keeps its registration and tokens (in memory)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def oauth_client(url: str, storage: Storage) -> OAuthClientProvider:
    """The SDK's provider, with a user who consents at once: the browser step is one GET of
    the authorization URL, whose redirect carries the code."""
    answer: dict[str, str | None] = {}

    async def redirect(authorization_url: str) -> None:
        async with httpx.AsyncClient() as http:
            response = await http.get(authorization_url)
        assert response.status_code == 302, response.text
        query = parse_qs(urlsplit(response.headers["Location"]).query)
        answer["code"], answer["state"] = query["code"][0], query.get("state", [None])[0]

    async def callback() -> tuple[str, str | None]:
        code = answer["code"]
        assert code is not None
        return code, answer["state"]

    metadata = OAuthClientMetadata(
        client_name="gateway journeys",
        redirect_uris=[AnyUrl(CALLBACK)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
    )
    return OAuthClientProvider(url, metadata, storage, redirect, callback)


@asynccontextmanager
async def signed_in(url: str, storage: Storage) -> AsyncIterator[ClientSession]:
    async with httpx.AsyncClient(auth=oauth_client(url, storage)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def _raw(url: str, token: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=INIT, headers=headers(Authorization=f"Bearer {token}")) as r:
            return r.status, r.headers.get("WWW-Authenticate", "")


def _claims(storage: Storage) -> dict[str, Any]:
    assert storage.tokens is not None
    claims: dict[str, Any] = jwt.decode(
        storage.tokens.access_token, options={"verify_signature": False}
    )
    return claims


async def test_a_client_signs_in_from_the_401_and_calls_a_tool_and_a_task(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    routes = [{"name": "demo", "upstream": DEMO, "required_scopes": ["tools"]}]
    async with running_gateway(tmp_path, auth_server, routes, required_scopes=["mcp"]) as base:
        storage = Storage()
        async with signed_in(f"{base}/demo/mcp", storage) as client:
            echoed = await client.call_tool("echo", {"text": "hi"})
            created = await client.experimental.call_tool_as_task("echo", {"text": "as a task"})
            result = await client.experimental.get_task_result(
                created.task.taskId, types.CallToolResult
            )

    assert echoed.structuredContent == {"text": "hi"}
    assert result.structuredContent == {"text": "as a task"}
    # Registered dynamically, and the token is for this route, with the scopes the 401 named.
    assert storage.client is not None and storage.client.client_id
    claims = _claims(storage)
    assert claims["aud"] == f"{base}/demo/mcp" and claims["sub"] == "alice"
    assert set(claims["scope"].split()) == {"mcp", "tools"}


async def test_a_token_for_one_route_is_refused_on_another_and_the_client_signs_in_again(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    routes = [{"name": "a", "upstream": DEMO}, {"name": "b", "upstream": DEMO}]
    async with running_gateway(tmp_path, auth_server, routes) as base:
        storage = Storage()
        async with signed_in(f"{base}/a/mcp", storage) as client:
            await client.list_tools()
        assert storage.tokens is not None
        for_a = storage.tokens.access_token

        refused = await _raw(f"{base}/b/mcp", for_a)
        async with signed_in(f"{base}/b/mcp", storage) as client:
            tools = await client.list_tools()

    assert refused[0] == 401 and 'error_description="wrong audience"' in refused[1]
    assert tools.tools and _claims(storage)["aud"] == f"{base}/b/mcp"


async def test_an_expired_token_is_refused(auth_server: AuthServer, tmp_path: Path) -> None:
    routes = [{"name": "a", "upstream": DEMO}]
    # The provider's clock runs an hour behind: what it signs has long expired.
    await auth_server.control(clock_skew=-3600)
    async with running_gateway(tmp_path, auth_server, routes, leeway_seconds=0) as base:
        storage = Storage()
        async with httpx.AsyncClient(auth=oauth_client(f"{base}/a/mcp", storage)) as http:
            answer = await http.post(f"{base}/a/mcp", json=INIT, headers=headers())

    # The client signed in, sent the token it got, and was refused for its age.
    assert storage.tokens is not None and answer.status_code == 401
    assert 'error_description="token expired"' in answer.headers["WWW-Authenticate"]


async def test_a_token_without_a_required_scope_gets_403_even_after_the_client_steps_up(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    routes = [{"name": "a", "upstream": DEMO, "required_scopes": ["reports:write"]}]
    await auth_server.control(grant=["mcp"])  # the user may not write reports
    async with running_gateway(tmp_path, auth_server, routes) as base:
        storage = Storage()
        async with httpx.AsyncClient(auth=oauth_client(f"{base}/a/mcp", storage)) as http:
            answer = await http.post(f"{base}/a/mcp", json=INIT, headers=headers())

    assert answer.status_code == 403
    assert 'error="insufficient_scope"' in answer.headers["WWW-Authenticate"]
    assert 'scope="reports:write"' in answer.headers["WWW-Authenticate"]
    assert _claims(storage)["scope"] == ""


async def test_a_tool_scope_is_granted_by_stepping_up_and_the_call_then_succeeds(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    routes = [{"name": "a", "upstream": DEMO, "tool_scopes": {"echo": ["reports:write"]}}]
    async with running_gateway(tmp_path, auth_server, routes, required_scopes=["mcp"]) as base:
        storage = Storage()
        async with signed_in(f"{base}/a/mcp", storage) as client:
            before = set(_claims(storage)["scope"].split())
            echoed = await client.call_tool("echo", {"text": "stepped up"})

    assert before == {"mcp"}
    assert echoed.structuredContent == {"text": "stepped up"}
    assert set(_claims(storage)["scope"].split()) == {"mcp", "reports:write"}


async def test_a_new_key_after_rotation_is_fetched_and_a_withdrawn_one_is_refused(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    routes = [{"name": "a", "upstream": DEMO}]
    async with running_gateway(tmp_path, auth_server, routes) as base:
        first = Storage()
        async with signed_in(f"{base}/a/mcp", first) as client:
            await client.list_tools()
        assert first.tokens is not None
        old_token = first.tokens.access_token

        rotated = await auth_server.control(rotate=True, keep_old=False)
        second = Storage()
        async with signed_in(f"{base}/a/mcp", second) as client:
            tools = await client.list_tools()
        withdrawn = await _raw(f"{base}/a/mcp", old_token)

    assert rotated["kid"] == "k2" and tools.tools
    assert _jwt_kid(second) == "k2" and _jwt_kid(first) == "k1"
    assert withdrawn[0] == 401 and 'error_description="unknown key id"' in withdrawn[1]


def _jwt_kid(storage: Storage) -> str:
    assert storage.tokens is not None
    kid: str = jwt.get_unverified_header(storage.tokens.access_token)["kid"]
    return kid


async def test_the_upstream_gets_a_token_exchanged_for_the_callers_never_the_callers_own(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    recorder = TestServer(recording_upstream(), host="127.0.0.1")
    await recorder.start_server()
    upstream = {
        "transport": "streamable_http",
        "url": str(recorder.make_url("/mcp")),
        "identity": {
            "mode": "token_exchange",
            "token_url": f"{auth_server.url}/exchange",
            "client_id": "mcp-task-gateway",
            "client_secret_env": "GW_SECRET",
            "resource": "https://reports.internal/mcp",
            "scopes": ["reports:write"],
        },
    }
    env = {"GW_SECRET": "gateway-secret"}
    try:
        routes = [{"name": "r", "upstream": upstream}]
        async with running_gateway(tmp_path, auth_server, routes, env) as base:
            storage = Storage()
            async with signed_in(f"{base}/r/mcp", storage) as client:
                await client.list_tools()
    finally:
        await recorder.close()

    assert storage.tokens is not None
    sent = {h["Authorization"] for h in recorder.app[SEEN]}
    assert len(sent) == 1  # exchanged once, reused for the session's requests
    token = sent.pop().removeprefix("Bearer ")
    assert token != storage.tokens.access_token
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "alice" and claims["act"] == {"sub": "mcp-task-gateway"}
    assert claims["aud"] == "https://reports.internal/mcp" and claims["scope"] == "reports:write"
