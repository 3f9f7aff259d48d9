"""The gateway as an OAuth 2.1 resource server, over real HTTP with real RS256 keys.

An identity provider stand-in serves its JWK set over HTTP and signs tokens with exactly the
claims a test needs; the gateway listens on a port chosen first, so its public URL (and so each
route's resource) is known before it starts. The full sign-in through a real authorization
server and the SDK's OAuth client is in test_oauth_journeys.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from gateway.app import create_app
from gateway.config import ConfigError, ListenConfig, parse_settings
from gateway.http import listen
from gateway.protocol.errors import INVALID_REQUEST

from .conftest import DEMO, free_port
from .helpers import INIT, headers

WELL_KNOWN = "/.well-known/oauth-protected-resource"


@dataclass
class Issuer:
    """An identity provider's keys: the JWK set it serves, and tokens it signs."""

    url: str = ""
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    kid: str = "k1"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks.json"

    def token(self, audience: object, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "sub": "alice", "aud": audience, "iat": now, "exp": now + 600}
        payload.update(claims)
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    state = Issuer()

    async def jwks(request: web.Request) -> web.Response:
        jwk = {**RSAAlgorithm.to_jwk(state.key.public_key(), as_dict=True), "kid": state.kid}
        return web.json_response({"keys": [jwk]})

    app = web.Application()
    app.router.add_get("/jwks.json", jwks)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.url = str(server.make_url("")).rstrip("/")
    yield state
    await server.close()


Gateway = Callable[..., Awaitable[str]]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    """Starts the gateway on a port picked first; returns its public URL."""
    runners: list[web.AppRunner] = []

    async def start(routes: list[dict[str, Any]], oauth: dict[str, Any]) -> str:
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        data = {
            "store": {"path": str(tmp_path / f"{port}.db")},
            "auth": {"oauth": {"public_url": public, **oauth}},
            "routes": routes,
        }
        settings = parse_settings(data, "test settings", env={})
        runner = await listen.start(
            create_app(settings), ListenConfig(host="127.0.0.1", port=port), settings.http
        )
        runners.append(runner)
        return public

    yield start
    for runner in runners:
        await runner.cleanup()


def _oauth(issuer: Issuer, **more: Any) -> dict[str, Any]:
    return {"issuer": issuer.url, "jwks_url": issuer.jwks_url, **more}


async def _post(url: str, token: str | None = None, body: Any = INIT) -> tuple[int, Any, str]:
    extra = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers=headers(**extra)) as resp:
            text = await resp.text()
            body = json.loads(text) if resp.content_type == "application/json" else text
            return resp.status, body, resp.headers.get("WWW-Authenticate", "")


async def test_each_route_publishes_its_own_metadata_naming_its_resource_and_servers(
    issuer: Issuer, gateway: Gateway
) -> None:
    oauth = _oauth(issuer, required_scopes=["mcp"], authorization_servers=["https://as.test/"])
    routes = [
        {"name": "files", "upstream": DEMO, "tool_scopes": {"delete": ["files:write"]}},
        {"name": "other", "path": "/x/y", "upstream": DEMO, "required_scopes": ["ops"]},
    ]
    base = await gateway(routes, oauth)

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}{WELL_KNOWN}/files/mcp") as resp:
            files = await resp.json()
        async with http.get(f"{base}{WELL_KNOWN}/x/y") as resp:
            other = await resp.json()
        async with http.get(f"{base}{WELL_KNOWN}") as resp:
            root_status = resp.status

    assert files == {
        "resource": f"{base}/files/mcp",
        "authorization_servers": ["https://as.test/"],
        "bearer_methods_supported": ["header"],
        "resource_name": "files",
        "scopes_supported": ["files:write", "mcp"],
    }
    assert other["resource"] == f"{base}/x/y" and other["scopes_supported"] == ["mcp", "ops"]
    # Without shared_resource no single document describes the gateway as a whole.
    assert root_status == 404


async def test_a_request_without_a_token_gets_401_pointing_to_the_metadata_and_scopes(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway(
        [{"name": "r", "upstream": DEMO, "required_scopes": ["tools"]}],
        _oauth(issuer, required_scopes=["mcp"]),
    )

    status, body, challenge = await _post(f"{base}/r/mcp")

    assert status == 401 and body["error"]["code"] == INVALID_REQUEST
    # RFC 6750 section 3.1: a request with no credentials gets no error code.
    assert challenge == f'Bearer resource_metadata="{base}{WELL_KNOWN}/r/mcp", scope="mcp tools"'


async def test_a_token_for_this_route_is_accepted_and_one_for_another_resource_is_not(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway(
        [{"name": "a", "upstream": DEMO}, {"name": "b", "upstream": DEMO}], _oauth(issuer)
    )
    for_a = issuer.token(f"{base}/a/mcp")

    ok, _, _ = await _post(f"{base}/a/mcp", for_a)
    refusals = [
        await _post(f"{base}/b/mcp", for_a),  # another route of the same gateway
        await _post(f"{base}/a/mcp", issuer.token(base)),  # the gateway as a whole
        await _post(f"{base}/a/mcp", issuer.token("https://elsewhere.test/mcp")),
        await _post(f"{base}/a/mcp", issuer.token(None)),
    ]

    assert ok == 200
    for status, _, challenge in refusals:
        assert status == 401
        assert 'error="invalid_token"' in challenge and "resource_metadata=" in challenge
    descriptions = [c.split('error_description="')[1].rstrip('"') for _, _, c in refusals]
    assert descriptions == ["wrong audience"] * 3 + ["token is missing claim aud"]


async def test_an_audience_list_naming_the_route_is_accepted(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway([{"name": "a", "upstream": DEMO}], _oauth(issuer))

    status, _, _ = await _post(f"{base}/a/mcp", issuer.token(["https://x.test", f"{base}/a/mcp"]))

    assert status == 200


async def test_the_issuer_expiry_and_signature_are_checked(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway([{"name": "a", "upstream": DEMO}], _oauth(issuer, leeway_seconds=0))
    resource = f"{base}/a/mcp"
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {"iss": issuer.url, "sub": "x", "aud": resource, "exp": int(time.time()) + 60},
        stranger,
        algorithm="RS256",
        headers={"kid": issuer.kid},
    )

    cases = {
        "wrong issuer": issuer.token(resource, iss="https://evil.test"),
        "token expired": issuer.token(resource, exp=int(time.time()) - 5),
        "invalid signature": forged,
        "token is missing claim sub": issuer.token(resource, sub=None),
    }
    for reason, token in cases.items():
        status, _, challenge = await _post(resource, token)
        assert (status, reason in challenge) == (401, True), reason


async def test_a_token_without_the_route_scopes_gets_403_insufficient_scope(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway(
        [{"name": "a", "upstream": DEMO, "required_scopes": ["tools"]}],
        _oauth(issuer, required_scopes=["mcp"]),
    )
    resource = f"{base}/a/mcp"

    status, body, challenge = await _post(resource, issuer.token(resource, scope="mcp"))
    granted, _, _ = await _post(resource, issuer.token(resource, scp=["mcp", "tools", "x"]))

    assert status == 403 and body["error"]["data"] == {"missing": ["tools"]}
    assert challenge == (
        f'Bearer resource_metadata="{base}{WELL_KNOWN}/a/mcp", scope="mcp tools", '
        'error="insufficient_scope", error_description="needs scope tools"'
    )
    assert granted == 200


async def test_a_tool_with_its_own_scope_is_refused_to_a_token_without_it(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway(
        [{"name": "a", "upstream": DEMO, "tool_scopes": {"echo": ["echo:run"]}}], _oauth(issuer)
    )
    resource = f"{base}/a/mcp"
    plain, allowed = issuer.token(resource, scope="mcp"), issuer.token(resource, scope="echo:run")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo"}}

    async with aiohttp.ClientSession() as http:
        async with http.post(
            resource, json=INIT, headers=headers(Authorization=f"Bearer {plain}")
        ) as resp:
            session = resp.headers["Mcp-Session-Id"]
        async with http.post(
            resource, json=call, headers=headers(session, Authorization=f"Bearer {plain}")
        ) as resp:
            refused, challenge = resp.status, resp.headers["WWW-Authenticate"]
        listing = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
        async with http.post(
            resource, json=listing, headers=headers(session, Authorization=f"Bearer {plain}")
        ) as resp:
            listed = resp.status

    assert refused == 403 and 'scope="echo:run"' in challenge and listed == 200
    status, _, _ = await _post(resource, allowed)
    assert status == 200


async def test_a_renamed_tools_scopes_are_named_by_its_client_name(
    issuer: Issuer, gateway: Gateway
) -> None:
    route = {
        "name": "a",
        "upstream": DEMO,
        "tools": {"rename": {"echo": "say"}},
        "tool_scopes": {"say": ["say:run"]},  # policies name tools as clients see them
    }
    base = await gateway([route], _oauth(issuer))
    resource = f"{base}/a/mcp"
    plain = issuer.token(resource, scope="mcp")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "say"}}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            resource, json=INIT, headers=headers(Authorization=f"Bearer {plain}")
        ) as resp:
            session = resp.headers["Mcp-Session-Id"]
        async with http.post(
            resource, json=call, headers=headers(session, Authorization=f"Bearer {plain}")
        ) as resp:
            refused, challenge = resp.status, resp.headers["WWW-Authenticate"]
    assert refused == 403 and 'scope="say:run"' in challenge


async def test_tenant_and_principal_claims_name_the_caller_and_bad_claim_types_are_refused(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway(
        [{"name": "a", "upstream": DEMO}],
        _oauth(issuer, principal_claim="email", tenant_claim="tid"),
    )
    resource = f"{base}/a/mcp"

    good, _, _ = await _post(resource, issuer.token(resource, email="a@x.test", tid="t1"))
    cases = {
        "claim tid must be a non-empty string": issuer.token(resource, email="a@x", tid=7),
        "claim email must be a non-empty string": issuer.token(resource, email=["a"], tid="t"),
        "claim scope must be a string or a list of strings": issuer.token(
            resource, email="a@x", tid="t", scope={"a": 1}
        ),
    }

    assert good == 200
    for reason, token in cases.items():
        status, _, challenge = await _post(resource, token)
        assert (status, reason in challenge) == (401, True), reason


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer " + "a" * 7000,  # under aiohttp's header limit, over nothing else
        "Bearer not.a.jwt",
        "Bearer e30.e30.e30",  # empty header and claims
        "Bearer " + "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",  # alg none
        "Bearer ....",
        "Bearer eyJraWQiOlsxXSwiYWxnIjoiUlMyNTYifQ.e30.AA",  # kid of the wrong type
    ],
    ids=["long", "not-jwt", "empty-json", "alg-none", "dots", "kid-list"],
)
async def test_malformed_tokens_get_401_never_a_500(
    issuer: Issuer, gateway: Gateway, authorization: str
) -> None:
    base = await gateway([{"name": "a", "upstream": DEMO}], _oauth(issuer))

    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base}/a/mcp", json=INIT, headers=headers(Authorization=authorization)
        ) as resp:
            status, challenge = resp.status, resp.headers["WWW-Authenticate"]

    assert status == 401 and 'error="invalid_token"' in challenge


async def test_a_token_over_the_header_limit_is_refused_before_it_is_read(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway([{"name": "a", "upstream": DEMO}], _oauth(issuer))

    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base}/a/mcp", json=INIT, headers=headers(Authorization="Bearer " + "a" * 20000)
        ) as resp:
            status = resp.status

    assert status in (400, 431)


async def test_a_shared_resource_is_served_at_the_root_form_and_its_tokens_work_on_every_route(
    issuer: Issuer, gateway: Gateway
) -> None:
    base = await gateway(
        [
            {"name": "a", "upstream": DEMO, "required_scopes": ["a"]},
            {"name": "b", "upstream": DEMO, "required_scopes": ["b"]},
        ],
        _oauth(issuer, shared_resource=True),
    )

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}{WELL_KNOWN}") as resp:
            root = await resp.json()
    shared = issuer.token(base, scope="a b")
    statuses = [(await _post(f"{base}/{name}/mcp", shared))[0] for name in ("a", "b")]

    assert root["resource"] == base and root["scopes_supported"] == ["a", "b"]
    assert statuses == [200, 200]


SSE = {"transport": "sse", "url": "http://u/sse"}
GOOD = {"issuer": "http://i", "jwks_url": "http://i/j", "public_url": "http://gw"}


@pytest.mark.parametrize(
    ("oauth", "expected"),
    [
        ({"issuer": None}, "auth.oauth.issuer: required"),
        ({"jwks_url": None}, "auth.oauth.jwks_url: required"),
        ({"public_url": None}, "auth.oauth.public_url: required"),
        ({"public_url": 8080}, "auth.oauth.public_url: Input should be a valid string"),
        (
            {"public_url": "localhost:8080"},
            "auth.oauth.public_url: must be an absolute http:// or https:// URL",
        ),
        (
            {"public_url": "http://gw.test/?x=1"},
            "auth.oauth.public_url: must have no query",
        ),
        (
            {"public_url": "https://user:pw@gw.test"},
            "auth.oauth.public_url: must not hold a user name or password",
        ),
        ({"issuer": "ftp://i"}, "auth.oauth.issuer: must be an absolute"),
        ({"authorization_servers": "http://as"}, "auth.oauth.authorization_servers: a list"),
        ({"authorization_servers": [7]}, "auth.oauth.authorization_servers[0]: Input should"),
        ({"required_scopes": ['a"b']}, "auth.oauth.required_scopes[0]: String should match"),
        ({"required_scopes": "mcp"}, "auth.oauth.required_scopes: a list is expected"),
        ({"leeway_seconds": 3600}, "auth.oauth.leeway_seconds: Input should be less than"),
        ({"algorithms": ["HS256"]}, "auth.oauth.algorithms[0]: Input should be 'RS256'"),
        ({"shared_resourse": True}, "auth.oauth.shared_resourse: unknown key"),
    ],
    ids=[
        "no-issuer",
        "no-jwks-url",
        "no-public-url",
        "public-url-number",
        "public-url-no-scheme",
        "public-url-query",
        "public-url-credentials",
        "issuer-not-http",
        "servers-string",
        "servers-number",
        "scope-with-quote",
        "scopes-string",
        "leeway-too-long",
        "hs256",
        "typo",
    ],
)
def test_bad_oauth_sections_name_the_key(oauth: dict[str, Any], expected: str) -> None:
    section = {k: v for k, v in {**GOOD, **oauth}.items() if v is not None}
    data = {"auth": {"oauth": section}, "routes": [{"name": "r", "upstream": DEMO}]}

    with pytest.raises(ConfigError) as raised:
        parse_settings(data, "f.yaml", env={})

    assert f"f.yaml: {expected}" in str(raised.value)


@pytest.mark.parametrize(
    ("route", "auth", "expected"),
    [
        (
            {"required_scopes": ["x"]},
            {"api_keys": [{"principal": "a", "sha256": "0" * 64}]},
            "routes[0].required_scopes: scopes come with auth mode oauth",
        ),
        (
            {"tool_scopes": {"t": ["x"]}},
            {},
            "routes[0].tool_scopes: scopes come with auth mode oauth; this route's mode is none",
        ),
        (
            {"upstream": {**SSE, "forward_headers": ["authorization"]}},
            "oauth",
            "routes[0].upstream.forward_headers: Authorization holds OAuth tokens",
        ),
        (
            {"auth": {"mode": "jwt"}},
            "oauth",
            "routes[0].auth.jwt: mode jwt needs this section",
        ),
        (
            {"auth": {"mode": "none", "oauth": GOOD}},
            "oauth",
            "routes[0].auth.oauth: written, but `mode: none`",
        ),
    ],
    ids=["scopes-api-keys", "tool-scopes-none", "forward-authorization", "mode-jwt", "none"],
)
def test_route_scopes_and_passthrough_are_refused_where_they_cannot_work(
    route: dict[str, Any], auth: dict[str, Any] | str, expected: str
) -> None:
    if auth == "oauth":
        auth = {"oauth": GOOD}
    data = {"auth": auth, "routes": [{"name": "r", "upstream": DEMO, **route}]}

    with pytest.raises(ConfigError) as raised:
        parse_settings(data, "f.yaml", env={})

    assert f"f.yaml: {expected}" in str(raised.value)


def test_a_public_url_is_made_canonical_and_mode_oauth_is_inferred() -> None:
    oauth = {"issuer": "https://id.test/", "jwks_url": "https://id.test/k"}
    oauth["public_url"] = "HTTPS://GW.Test:8443/"
    settings = parse_settings(
        {"auth": {"oauth": oauth}, "routes": [{"name": "r", "upstream": DEMO}]}, "f", env={}
    )

    assert settings.auth.mode == "oauth" and settings.auth.oauth is not None
    assert settings.auth.oauth.public_url == "https://gw.test:8443"
    # An issuer is compared with `iss` as a plain string: kept as written.
    assert settings.auth.oauth.issuer == "https://id.test/"
    assert settings.auth.oauth.servers == ("https://id.test/",)
