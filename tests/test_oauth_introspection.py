"""Opaque access tokens, checked by RFC 7662 introspection at a real authorization server
process (tests/oauth_server.py with `opaque` set), over real HTTP through the gateway.

The server counts the introspections it answers (its /control says how many), so a test sees
how often the gateway asked. What needs time to pass (a kept answer outliving `exp` or
`cache_seconds_max`) drives the `Introspector` with a clock the test moves, against the same
server.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from gateway.app import create_app
from gateway.config import ConfigError, ListenConfig, parse_settings
from gateway.http import listen
from gateway.security.errors import AuthError, IdentityProviderUnavailable
from gateway.security.introspection import Introspector

from .conftest import DEMO, ROOT, free_port, wait_for_port
from .helpers import INIT, headers

SECRET_ENV = {"INTROSPECTION_SECRET": "gateway-secret"}


class AuthServer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.issuer = f"{url}/"  # as the server's metadata names it

    async def control(self, **change: Any) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{self.url}/control", json=change)
            answer.raise_for_status()
            result: dict[str, Any] = answer.json()
            return result

    async def mint(self, resource: str, scopes: tuple[str, ...] = ("mcp",)) -> str:
        """An access token as the token endpoint would issue it, without the browser steps."""
        answer = await self.control(mint={"scopes": list(scopes), "resource": resource})
        token: str = answer["access_token"]
        return token

    async def introspections(self) -> int:
        count: int = (await self.control())["introspections"]
        return count


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


def _oauth(server: AuthServer, public: str, **introspection: Any) -> dict[str, Any]:
    return {
        "issuer": server.issuer,
        "jwks_url": f"{server.url}/jwks.json",
        "public_url": public,
        "introspection": {
            "url": f"{server.url}/introspect",
            "client_id": "mcp-task-gateway",
            "client_secret_env": "INTROSPECTION_SECRET",
            **introspection,
        },
    }


@asynccontextmanager
async def running_gateway(
    tmp_path: Path,
    server: AuthServer,
    routes: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
    **introspection: Any,
) -> AsyncIterator[str]:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    data = {
        "store": {"path": str(tmp_path / "g.db")},
        "auth": {"oauth": _oauth(server, public, **introspection)},
        "routes": routes or [{"name": "demo", "upstream": DEMO}],
    }
    settings = parse_settings(data, "test settings", env=SECRET_ENV if env is None else env)
    runner = await listen.start(
        create_app(settings), ListenConfig(host="127.0.0.1", port=port), settings.http
    )
    try:
        yield public
    finally:
        await runner.cleanup()


async def _post(url: str, token: str) -> tuple[int, str, str]:
    """The status, WWW-Authenticate and Retry-After of an initialize sent with `token`."""
    async with aiohttp.ClientSession() as http:
        extra = headers(Authorization=f"Bearer {token}")
        async with http.post(url, json=INIT, headers=extra) as resp:
            await resp.read()
            return (
                resp.status,
                resp.headers.get("WWW-Authenticate", ""),
                resp.headers.get("Retry-After", ""),
            )


async def test_an_opaque_token_is_introspected_once_and_accepted_on_many_requests(
    auth_server: AuthServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await auth_server.control(opaque=True)
    async with running_gateway(tmp_path, auth_server) as base:
        url = f"{base}/demo/mcp"
        token = await auth_server.mint(url)
        first = await _post(url, token)
        # Many requests at once with the same token: one question between them.
        many = await asyncio.gather(*(_post(url, token) for _ in range(8)))
        after = await _post(url, token)

    assert "." not in token  # opaque, not a JWT
    assert first[0] == 200 and after[0] == 200
    assert [status for status, _, _ in many] == [200] * 8
    assert await auth_server.introspections() == 1
    assert token not in caplog.text


async def test_a_jwt_is_still_verified_with_the_key_set_and_never_introspected(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    async with running_gateway(tmp_path, auth_server) as base:
        url = f"{base}/demo/mcp"
        status, _, _ = await _post(url, await auth_server.mint(url))

    assert status == 200
    assert await auth_server.introspections() == 0


async def test_an_inactive_token_gets_401_and_is_asked_about_once(
    auth_server: AuthServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    never_issued = secrets.token_urlsafe(32)
    async with running_gateway(tmp_path, auth_server) as base:
        answers = [await _post(f"{base}/demo/mcp", never_issued) for _ in range(3)]

    assert [status for status, _, _ in answers] == [401] * 3
    challenge = answers[0][1]
    assert 'error="invalid_token"' in challenge
    assert 'error_description="token not active"' in challenge
    assert "resource_metadata=" in challenge
    assert await auth_server.introspections() == 1  # the refusal is kept a little while
    assert never_issued not in caplog.text


async def test_an_opaque_token_for_another_resource_is_refused(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    await auth_server.control(opaque=True)
    routes = [{"name": "a", "upstream": DEMO}, {"name": "b", "upstream": DEMO}]
    async with running_gateway(tmp_path, auth_server, routes) as base:
        for_a = await auth_server.mint(f"{base}/a/mcp")
        on_a = await _post(f"{base}/a/mcp", for_a)
        on_b = await _post(f"{base}/b/mcp", for_a)

    assert on_a[0] == 200
    assert on_b[0] == 401 and 'error_description="wrong audience"' in on_b[1]


async def test_an_opaque_token_without_the_route_scope_gets_403_insufficient_scope(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    await auth_server.control(opaque=True)
    routes = [{"name": "demo", "upstream": DEMO, "required_scopes": ["reports:write"]}]
    async with running_gateway(tmp_path, auth_server, routes) as base:
        url = f"{base}/demo/mcp"
        without = await _post(url, await auth_server.mint(url, ("mcp",)))
        with_it = await _post(url, await auth_server.mint(url, ("mcp", "reports:write")))

    assert without[0] == 403
    assert 'error="insufficient_scope"' in without[1] and 'scope="reports:write"' in without[1]
    assert with_it[0] == 200


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"exp": int(time.time()) - 3600}, "token expired"),
        ({"nbf": int(time.time()) + 3600}, "token not yet valid"),
        ({"iss": "https://elsewhere.example"}, "wrong issuer"),
        ({"aud": None}, "token is missing claim aud"),
        ({"sub": 42}, "claim sub must be a non-empty string"),
        ({"scope": 7}, "claim scope must be a string or a list of strings"),
    ],
)
async def test_an_active_answer_is_checked_like_a_jwt_s_claims(
    auth_server: AuthServer, tmp_path: Path, answer: dict[str, Any], reason: str
) -> None:
    # A provider whose introspection answers say "active" but carry bad claims.
    await auth_server.control(opaque=True, answer=answer)
    async with running_gateway(tmp_path, auth_server) as base:
        url = f"{base}/demo/mcp"
        status, challenge, _ = await _post(url, await auth_server.mint(url))

    assert status == 401 and f'error_description="{reason}"' in challenge


async def test_provider_down_gets_503_with_retry_after_not_401(
    auth_server: AuthServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await auth_server.control(opaque=True)
    token = await auth_server.mint("http://unused.example/demo/mcp")
    nobody = f"http://127.0.0.1:{free_port()}"
    caplog.set_level(logging.WARNING, "gateway.security.introspection")
    async with running_gateway(tmp_path, auth_server, url=f"{nobody}/introspect") as base:
        first = await _post(f"{base}/demo/mcp", token)
        again = await _post(f"{base}/demo/mcp", token)  # within the retry pause: not asked

    assert first[0] == 503 and int(first[2]) >= 1
    assert again[0] == 503 and int(again[2]) >= 1
    assert token not in caplog.text
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "opaque tokens get 503" in caplog.records[0].getMessage()
    assert caplog.records[0].getMessage().startswith("auth.oauth.introspection.url ")


async def test_a_routes_own_introspection_endpoint_is_named_where_the_file_writes_it(
    auth_server: AuthServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await auth_server.control(opaque=True)
    token = await auth_server.mint("http://unused.example/demo/mcp")
    dead = f"http://127.0.0.1:{free_port()}/introspect"
    own = {"mode": "oauth", "oauth": _oauth(auth_server, "http://gw.example", url=dead)}
    routes = [{"name": "first", "upstream": DEMO}, {"name": "demo", "upstream": DEMO, "auth": own}]
    caplog.set_level(logging.WARNING, "gateway.security.introspection")
    async with running_gateway(tmp_path, auth_server, routes=routes) as base:
        assert (await _post(f"{base}/demo/mcp", token))[0] == 503

    line = caplog.records[0].getMessage()
    assert line.startswith(f"routes[1].auth.oauth.introspection.url {dead}: cannot reach it")


async def test_a_gateway_the_provider_does_not_know_gets_503_not_401(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    await auth_server.control(opaque=True)
    wrong = {"INTROSPECTION_SECRET": "not-the-secret"}
    async with running_gateway(tmp_path, auth_server, env=wrong) as base:
        url = f"{base}/demo/mcp"
        status, _, retry_after = await _post(url, await auth_server.mint(url))

    # The token may be fine: a 401 would send the client back to sign in for nothing.
    assert status == 503 and retry_after


async def test_the_secret_may_be_sent_in_the_form(auth_server: AuthServer, tmp_path: Path) -> None:
    await auth_server.control(opaque=True)
    async with running_gateway(tmp_path, auth_server, auth_method="client_secret_post") as base:
        url = f"{base}/demo/mcp"
        status, _, _ = await _post(url, await auth_server.mint(url))

    assert status == 200 and await auth_server.introspections() == 1


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _introspector(server: AuthServer, clock: Clock, resource: str, **more: Any) -> Introspector:
    data = {
        "routes": [{"name": "demo", "upstream": DEMO}],
        "auth": {"oauth": _oauth(server, "http://gw.example", **more)},
    }
    oauth = parse_settings(data, "test settings", env=SECRET_ENV).auth.oauth
    assert oauth is not None and oauth.introspection is not None
    return Introspector(
        oauth.introspection,
        issuer=oauth.issuer,
        audiences=(resource,),
        leeway_seconds=0,
        clock=clock,
    )


async def test_a_kept_answer_is_not_used_past_the_token_s_expiry(auth_server: AuthServer) -> None:
    resource = "http://gw.example/demo/mcp"
    await auth_server.control(opaque=True, lifetime=60)
    token = await auth_server.mint(resource)
    clock = Clock()
    introspector = _introspector(auth_server, clock, resource, cache_seconds_max=3600)

    first = await introspector.claims(token)
    clock.now += 50
    await introspector.claims(token)
    asked_before_expiry = await auth_server.introspections()
    clock.now += 20  # past exp: the kept answer is gone, and the token has expired
    with pytest.raises(AuthError) as refused:
        await introspector.claims(token)

    assert first["sub"] == "alice"
    assert asked_before_expiry == 1
    # Asked again (the server's own clock still says active), and refused by the gateway's.
    assert await auth_server.introspections() == 2
    assert refused.value.reason == "token expired"


async def test_an_answer_is_kept_at_most_cache_seconds_max(auth_server: AuthServer) -> None:
    resource = "http://gw.example/demo/mcp"
    await auth_server.control(opaque=True, lifetime=3600)
    token = await auth_server.mint(resource)
    clock = Clock()
    introspector = _introspector(auth_server, clock, resource, cache_seconds_max=30)

    await introspector.claims(token)
    clock.now += 29
    await introspector.claims(token)
    kept = await auth_server.introspections()
    clock.now += 2
    await introspector.claims(token)

    assert kept == 1 and await auth_server.introspections() == 2


async def test_cache_seconds_max_zero_asks_every_time(auth_server: AuthServer) -> None:
    resource = "http://gw.example/demo/mcp"
    await auth_server.control(opaque=True)
    token = await auth_server.mint(resource)
    introspector = _introspector(auth_server, Clock(), resource, cache_seconds_max=0)

    for _ in range(3):
        await introspector.claims(token)
    with pytest.raises(AuthError):
        await introspector.claims("unknown")
    with pytest.raises(AuthError):
        await introspector.claims("unknown")

    assert await auth_server.introspections() == 5


async def test_after_a_failure_the_provider_is_asked_again_once_the_pause_is_over(
    auth_server: AuthServer,
) -> None:
    resource = "http://gw.example/demo/mcp"
    await auth_server.control(opaque=True)
    token = await auth_server.mint(resource)
    clock = Clock()
    bad = parse_settings(
        {
            "routes": [{"name": "demo", "upstream": DEMO}],
            "auth": {"oauth": _oauth(auth_server, "http://gw.example")},
        },
        "test settings",
        env={"INTROSPECTION_SECRET": "wrong"},
    ).auth.oauth
    good = _introspector(auth_server, clock, resource)
    assert bad is not None and bad.introspection is not None
    failing = Introspector(
        bad.introspection, issuer=bad.issuer, audiences=(resource,), leeway_seconds=0, clock=clock
    )

    with pytest.raises(IdentityProviderUnavailable):
        await failing.claims(token)
    with pytest.raises(IdentityProviderUnavailable):
        await failing.claims(token)  # within the pause: not asked
    asked = await auth_server.introspections()
    clock.now += 10
    with pytest.raises(IdentityProviderUnavailable):
        await failing.claims(token)

    assert asked == 1 and await auth_server.introspections() == 2
    assert (await good.claims(token))["sub"] == "alice"


@pytest.mark.parametrize(
    ("change", "env", "expected"),
    [
        ({}, {}, "auth.oauth.introspection.client_secret_env: environment variable"),
        ({"url": "ftp://idp.example/introspect"}, SECRET_ENV, "auth.oauth.introspection.url"),
        ({"client_secret": "in-the-file"}, SECRET_ENV, "auth.oauth.introspection.client_secret"),
        ({"client_id": ""}, SECRET_ENV, "auth.oauth.introspection.client_id"),
        ({"cache_seconds_max": -1}, SECRET_ENV, "auth.oauth.introspection.cache_seconds_max"),
        ({"auth_method": "none"}, SECRET_ENV, "auth.oauth.introspection.auth_method"),
    ],
)
def test_refused_introspection_sections_name_the_key(
    change: dict[str, Any], env: dict[str, str], expected: str
) -> None:
    server = AuthServer("http://idp.example")
    oauth = _oauth(server, "http://gw.example")
    oauth["introspection"] = {**oauth["introspection"], **change}
    data = {"routes": [{"name": "demo", "upstream": DEMO}], "auth": {"oauth": oauth}}
    with pytest.raises(ConfigError) as refused:
        parse_settings(data, "f.yaml", env=env)

    assert f"f.yaml: {expected}" in str(refused.value)
    assert "in-the-file" not in str(refused.value)  # a secret written in the file is not echoed
