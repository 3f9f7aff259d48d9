"""Who the upstream is told calls: a gateway-signed assertion, the gateway's own client
credentials token, or (warned about) the client's own Authorization. Real HTTP throughout:
a recording upstream, and a token endpoint that counts what it is asked."""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from gateway.app import create_app
from gateway.config import ConfigError, parse_settings
from gateway.protocol.errors import INTERNAL_ERROR

from .conftest import DEMO, StartGateway
from .fakes import SEEN
from .helpers import INIT, headers

ALICE_KEY = "alice-key-0123456789"
KEYS = {
    "api_keys": [{"principal": "alice", "sha256": hashlib.sha256(ALICE_KEY.encode()).hexdigest()}]
}
ASSERTION_KEY = "assertion-key-for-tests-0123456789abcdef"


@dataclass
class TokenEndpoint:
    url: str = ""
    expires_in: int = 3600
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
async def token_endpoint() -> AsyncIterator[TokenEndpoint]:
    state = TokenEndpoint()

    async def token(request: web.Request) -> web.Response:
        form = dict(await request.post())
        state.requests.append({**form, "authorization": request.headers.get("Authorization")})
        if state.status != 200:
            return web.json_response({"error": "invalid_client"}, status=state.status)
        answer = {"access_token": f"gw-token-{len(state.requests)}", "token_type": "Bearer"}
        return web.json_response({**answer, "expires_in": state.expires_in})

    app = web.Application()
    app.router.add_post("/token", token)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.url = str(server.make_url("/token"))
    yield state
    await server.close()


async def _use(url: str, credential: str = ALICE_KEY, sessions: int = 1) -> None:
    """Sessions of the real client, each listing the tools."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {credential}"}) as http:
        for _ in range(sessions):
            async with streamable_http_client(url, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    await client.list_tools()


def _upstream(recorder: TestServer, **identity: Any) -> dict[str, Any]:
    url = str(recorder.make_url("/mcp"))
    return {"transport": "streamable_http", "url": url, "identity": identity}


async def test_a_signed_assertion_names_the_principal_and_the_route_and_not_the_clients_key(
    start_gateway: StartGateway, recorder: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSERTION_KEY", ASSERTION_KEY)
    upstream = _upstream(recorder, mode="signed_assertion", key_env="ASSERTION_KEY")
    base = await start_gateway([{"name": "r", "upstream": upstream}], auth=KEYS)

    await _use(f"{base}/r/mcp")

    seen = recorder.app[SEEN]
    assert len(seen) >= 3
    for sent in seen:
        token = sent["Authorization"].removeprefix("Bearer ")
        claims = jwt.decode(
            token, ASSERTION_KEY, algorithms=["HS256"], audience=str(recorder.make_url("/mcp"))
        )
        assert (claims["sub"], claims["route"], claims["iss"]) == ("alice", "r", "mcp-task-gateway")
        assert claims["exp"] - claims["iat"] == 300 and ALICE_KEY not in sent["Authorization"]


async def test_an_es256_assertion_in_its_own_header_verifies_with_the_public_key(
    start_gateway: StartGateway, recorder: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    monkeypatch.setenv("ASSERTION_PEM", pem.decode())
    upstream = _upstream(
        recorder,
        mode="signed_assertion",
        key_env="ASSERTION_PEM",
        algorithm="ES256",
        key_id="gw-1",
        header="X-Caller",
        audience="urn:reports",
        lifetime_seconds=60,
    )
    base = await start_gateway([{"name": "r", "upstream": upstream}], auth=KEYS)

    await _use(f"{base}/r/mcp")

    assertion = recorder.app[SEEN][0]["X-Caller"]
    assert jwt.get_unverified_header(assertion)["kid"] == "gw-1"
    claims = jwt.decode(assertion, key.public_key(), algorithms=["ES256"], audience="urn:reports")
    assert claims["sub"] == "alice" and claims["exp"] - claims["iat"] == 60
    assert "Authorization" not in recorder.app[SEEN][0]


async def test_the_gateways_client_credentials_token_is_fetched_once_and_shared(
    start_gateway: StartGateway,
    recorder: TestServer,
    token_endpoint: TokenEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GW_SECRET", "s3cret:/")
    upstream = _upstream(
        recorder,
        mode="client_credentials",
        token_url=token_endpoint.url,
        client_id="gateway",
        client_secret_env="GW_SECRET",
        scopes=["reports:read"],
        resource="https://reports.test/mcp",
    )
    base = await start_gateway([{"name": "r", "upstream": upstream}], auth=KEYS)

    await _use(f"{base}/r/mcp", sessions=2)

    assert len(token_endpoint.requests) == 1
    asked = token_endpoint.requests[0]
    basic = base64.b64encode(b"gateway:s3cret%3A%2F").decode()
    assert asked == {
        "grant_type": "client_credentials",
        "scope": "reports:read",
        "resource": "https://reports.test/mcp",
        "authorization": f"Basic {basic}",
    }
    assert {h["Authorization"] for h in recorder.app[SEEN]} == {"Bearer gw-token-1"}


async def test_a_token_near_its_expiry_is_fetched_again(
    start_gateway: StartGateway,
    recorder: TestServer,
    token_endpoint: TokenEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GW_SECRET", "secret")
    token_endpoint.expires_in = 30  # under the refresh margin: never reused
    upstream = _upstream(
        recorder,
        mode="client_credentials",
        token_url=token_endpoint.url,
        client_id="gateway",
        client_secret_env="GW_SECRET",
        auth_method="client_secret_post",
    )
    base = await start_gateway([{"name": "r", "upstream": upstream}], auth=KEYS)

    await _use(f"{base}/r/mcp")

    assert len(token_endpoint.requests) >= 3
    assert token_endpoint.requests[0]["client_secret"] == "secret"
    assert token_endpoint.requests[0]["authorization"] is None


async def test_a_refusing_token_endpoint_fails_the_call_without_leaking_the_secret(
    start_gateway: StartGateway,
    recorder: TestServer,
    token_endpoint: TokenEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("GW_SECRET", "do-not-print-me")
    token_endpoint.status = 401
    upstream = _upstream(
        recorder,
        mode="client_credentials",
        token_url=token_endpoint.url,
        client_id="gateway",
        client_secret_env="GW_SECRET",
    )
    base = await start_gateway([{"name": "r", "upstream": upstream}], auth=KEYS)

    async with aiohttp.ClientSession() as http:
        credential = headers(Authorization=f"Bearer {ALICE_KEY}")
        async with http.post(f"{base}/r/mcp", json=INIT, headers=credential) as resp:
            body = await resp.json()

    assert body["error"]["code"] == INTERNAL_ERROR
    assert "from routes[0].upstream.identity.token_url: " in body["error"]["message"]
    assert recorder.app[SEEN] == []
    assert "do-not-print-me" not in caplog.text


def test_passing_the_clients_authorization_on_is_warned_about_at_start_up(
    make_settings: Any, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(
        [{"name": "r", "upstream": _upstream(recorder, mode="passthrough")}], auth=KEYS
    )

    with caplog.at_level(logging.WARNING, logger="gateway.route"):
        create_app(settings)

    assert "route r passes each client's Authorization header" in caplog.text


@pytest.mark.parametrize(
    ("identity", "env", "expected"),
    [
        ({"mode": "signed_assertion"}, {}, "identity.key_env: mode signed_assertion needs"),
        (
            {"mode": "signed_assertion", "key_env": "K"},
            {},
            "identity: environment variable K is not set",
        ),
        ({"mode": "client_credentials", "client_id": "c"}, {}, "identity.token_url: required"),
        (
            {"mode": "static", "token_url": "http://as/token"},
            {},
            "identity.token_url: is for mode client_credentials or token_exchange, not static",
        ),
        (
            {"mode": "signed_assertion", "key_env": "K", "scopes": ["x"]},
            {"K": "k" * 32},
            "identity.scopes: is for mode client_credentials or token_exchange, not signed_",
        ),
        (
            {"mode": "passthrough", "header": "X-A"},
            {},
            "identity.header: is for the modes that add a credential",
        ),
        ({"mode": "magic"}, {}, "identity.mode: Input should be"),
        (
            {"mode": "client_credentials", "token_url": "as/token", "client_id": "c"},
            {},
            "identity.token_url: must be an absolute",
        ),
    ],
    ids=[
        "no-key",
        "key-unset",
        "no-token-url",
        "other-modes-key",
        "scopes-on-assertion",
        "header-on-passthrough",
        "unknown-mode",
        "relative-token-url",
    ],
)
def test_bad_identity_sections_name_the_key(
    identity: dict[str, Any], env: dict[str, str], expected: str
) -> None:
    upstream = {"transport": "sse", "url": "http://u/sse", "identity": identity}
    data = {"auth": KEYS, "routes": [{"name": "r", "upstream": upstream}]}

    with pytest.raises(ConfigError) as raised:
        parse_settings(data, "f.yaml", env=env)

    assert f"f.yaml: routes[0].upstream.{expected}" in str(raised.value)


def test_an_assertion_needs_callers_who_can_be_named_and_an_http_upstream() -> None:
    env = {"K": "k" * 32}
    ident = {"mode": "signed_assertion", "key_env": "K"}
    sse = {"transport": "sse", "url": "http://u", "identity": ident}
    anonymous = {"routes": [{"name": "r", "upstream": sse}]}
    stdio = {"auth": KEYS, "routes": [{"name": "r", "upstream": {**DEMO, "identity": ident}}]}

    with pytest.raises(ConfigError) as no_auth:
        parse_settings(anonymous, "f.yaml", env=env)
    with pytest.raises(ConfigError) as on_stdio:
        parse_settings(stdio, "f.yaml", env=env)

    assert "f.yaml: routes[0].upstream.identity.mode: signed_assertion names the caller" in str(
        no_auth.value
    )
    assert "f.yaml: routes[0].upstream.identity: is for HTTP upstreams" in str(on_stdio.value)


def test_an_exchange_needs_a_callers_token_not_an_api_key() -> None:
    ident = {
        "mode": "token_exchange",
        "token_url": "https://id.test/token",
        "client_id": "gw",
        "client_secret_env": "S",
    }
    upstream = {"transport": "sse", "url": "http://u/sse", "identity": ident}

    with pytest.raises(ConfigError) as raised:
        parse_settings(
            {"auth": KEYS, "routes": [{"name": "r", "upstream": upstream}]}, "f", {"S": "s"}
        )

    assert (
        "f: routes[0].upstream.identity.mode: token_exchange exchanges the caller's token"
        in str(raised.value)
    )


def test_an_unusable_signing_key_stops_start_up_naming_the_variable_where_the_file_has_it(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHORT", "too-short")
    monkeypatch.setenv("NOT_PEM", "-----BEGIN NOTHING-----")
    first = {"name": "first", "upstream": DEMO}
    for env, algorithm, members, expected in [
        ("SHORT", "HS256", False, "routes[1].upstream.identity.key_env: SHORT: an HS256 key"),
        ("NOT_PEM", "RS256", False, "routes[1].upstream.identity.key_env: NOT_PEM: not an"),
        ("SHORT", "HS256", True, "routes[1].upstreams[1].identity.key_env: SHORT: an HS256"),
    ]:
        ident = {"mode": "signed_assertion", "key_env": env, "algorithm": algorithm}
        upstream = {"transport": "sse", "url": "http://u/sse", "identity": ident}
        route: dict[str, Any] = {"name": "r", "upstream": upstream}
        if members:
            route = {"name": "r", "upstreams": [{"name": "a", **DEMO}, {"name": "b", **upstream}]}
        settings = make_settings([first, route], auth=KEYS)
        with pytest.raises(ValueError) as raised:
            create_app(settings)
        assert str(raised.value).startswith(expected) and "too-short" not in str(raised.value)
