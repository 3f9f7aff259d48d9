"""JWT keys from an identity provider's `jwks_url`: a real local JWKS server, real RS256 keys.

The JWKS server runs on the test's own event loop, so a fetch made on the loop thread would
never be answered: every test here passing also shows the fetch runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import RSAAlgorithm

from gateway.config import parse_settings
from gateway.observability.metrics import Metrics
from gateway.protocol.errors import INTERNAL_ERROR
from gateway.route import Route
from gateway.security.auth import Authenticator, Principal
from gateway.security.errors import AuthError, IdentityProviderUnavailable

from .conftest import DEMO, StartGateway, free_port
from .helpers import INIT, headers

AUDIENCE = "mcp-task-gateway"
ROUTES = [{"name": "r", "upstream": {"transport": "sse", "url": "http://127.0.0.1:9/sse"}}]
UNAVAILABLE = "identity provider unavailable: try again later"


@dataclass
class Provider:
    """What the fake identity provider serves at /jwks.json, and how often it was asked."""

    url: str
    keys: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    body: str | None = None  # served instead of the key set when set
    fetches: int = 0

    def publish(self, kid: str, key: rsa.RSAPrivateKey) -> None:
        self.keys.append({**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid})


@pytest.fixture
async def provider() -> AsyncIterator[Provider]:
    state = Provider(url="")

    async def jwks(request: web.Request) -> web.Response:
        state.fetches += 1
        body = state.body if state.body is not None else json.dumps({"keys": state.keys})
        return web.Response(text=body, status=state.status, content_type="application/json")

    app = web.Application()
    app.router.add_get("/jwks.json", jwks)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.url = str(server.make_url("/jwks.json"))
    yield state
    await server.close()


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwt_auth(url: str, **options: Any) -> dict[str, Any]:
    return {"jwt": {"algorithms": ["RS256"], "audience": AUDIENCE, "jwks_url": url, **options}}


def _authenticator(url: str, **options: Any) -> Authenticator:
    settings = parse_settings({"auth": _jwt_auth(url, **options), "routes": ROUTES}, "t", env={})
    return Authenticator(settings.auth)


def _bearer(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str | None) -> str:
    claims = {"sub": "alice", "aud": AUDIENCE, "exp": int(time.time()) + 600}
    algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    headers = {} if kid is None else {"kid": kid}
    return f"Bearer {jwt.encode(claims, key, algorithm=algorithm, headers=headers)}"


async def _reason(auth: Authenticator, authorization: str) -> str:
    with pytest.raises(AuthError) as info:
        await auth.authenticate(authorization)
    return info.value.reason


async def _unavailable(auth: Authenticator, authorization: str) -> IdentityProviderUnavailable:
    with pytest.raises(IdentityProviderUnavailable) as info:
        await auth.authenticate(authorization)
    return info.value


ALICE = Principal(name="alice", method="jwt")


async def test_a_token_signed_by_a_published_key_is_accepted_and_the_set_fetched_once(
    provider: Provider,
) -> None:
    key = _rsa_key()
    provider.publish("k1", key)
    auth = _authenticator(provider.url)

    answers = [await auth.authenticate(_bearer(key, "k1")) for _ in range(3)]

    assert answers == [ALICE] * 3 and provider.fetches == 1


async def test_a_rotated_in_key_is_accepted_after_the_set_is_fetched_again(
    provider: Provider,
) -> None:
    old, new = _rsa_key(), _rsa_key()
    provider.publish("old", old)
    auth = _authenticator(provider.url, jwks_cooldown_seconds=0)
    assert await auth.authenticate(_bearer(old, "old")) == ALICE

    provider.keys.clear()
    provider.publish("new", new)  # the provider rotated: "new" appears, "old" is gone

    assert await auth.authenticate(_bearer(new, "new")) == ALICE
    assert provider.fetches == 2
    # Within the cache's lifespan the old key is still known; it was not refetched for.
    assert await auth.authenticate(_bearer(new, "new")) == ALICE and provider.fetches == 2


async def test_a_flood_of_made_up_key_ids_fetches_the_set_once_per_cooldown(
    provider: Provider,
) -> None:
    key = _rsa_key()
    provider.publish("k1", key)
    auth = _authenticator(provider.url)  # the default cooldown, 30 s
    made_up = [_bearer(key, f"made-up-{n}") for n in range(50)]

    reasons = await asyncio.gather(*(_reason(auth, token) for token in made_up))

    assert set(reasons) == {"unknown key id"}
    assert provider.fetches == 1
    # A real key published meanwhile waits for the cooldown too: that is the price of the cap.
    provider.publish("k2", late := _rsa_key())
    assert await _reason(auth, _bearer(late, "k2")) == "unknown key id"
    assert await auth.authenticate(_bearer(key, "k1")) == ALICE and provider.fetches == 1


async def test_an_unreachable_identity_provider_gives_503_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{free_port()}/jwks.json"  # nothing listens there
    auth = _authenticator(url)

    first = await _unavailable(auth, _bearer(_rsa_key(), "k1"))
    second = await _unavailable(auth, _bearer(_rsa_key(), "k1"))

    for refusal in (first, second):
        assert (refusal.http_status, refusal.code) == (503, INTERNAL_ERROR)
        assert refusal.message == UNAVAILABLE and 1 <= int(refusal.headers["Retry-After"]) <= 30
    warnings = [r for r in caplog.records if r.name == "gateway.security.jwt_verify"]
    assert len(warnings) == 1 and url in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("status", "body"),
    [(500, "oops"), (200, "not json"), (200, "[]"), (200, '{"keys": []}')],
    ids=["server-error", "not-json", "not-an-object", "no-keys"],
)
async def test_a_failing_identity_provider_gives_503_and_is_not_asked_again_within_the_cooldown(
    provider: Provider, status: int, body: str
) -> None:
    provider.status, provider.body = status, body
    auth = _authenticator(provider.url)

    for _ in range(3):
        assert (await _unavailable(auth, _bearer(_rsa_key(), "k1"))).message == UNAVAILABLE

    assert provider.fetches == 1


async def test_known_keys_keep_working_from_the_cache_while_the_provider_is_down(
    provider: Provider,
) -> None:
    key = _rsa_key()
    provider.publish("k1", key)
    auth = _authenticator(provider.url)
    assert await auth.authenticate(_bearer(key, "k1")) == ALICE

    provider.status = 503

    assert await auth.authenticate(_bearer(key, "k1")) == ALICE
    assert provider.fetches == 1


async def test_the_provider_coming_back_is_used_and_logged(
    provider: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    key = _rsa_key()
    provider.publish("k1", key)
    provider.status = 502
    auth = _authenticator(provider.url, jwks_cooldown_seconds=0)
    await _unavailable(auth, _bearer(key, "k1"))

    provider.status = 200

    assert await auth.authenticate(_bearer(key, "k1")) == ALICE
    messages = [r.getMessage() for r in caplog.records if r.name == "gateway.security.jwt_verify"]
    where = f"auth.jwt.jwks_url {provider.url}"
    assert len(messages) == 2 and messages[0].startswith(f"{where}: cannot fetch the key set")
    assert messages[1] == f"{where}: the key set can be fetched again"


async def test_the_outage_warning_names_the_oauth_section_of_the_route_that_wrote_it(
    provider: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    """It said `jwt.jwks_url` for every section: neither `oauth` nor the route was named."""
    key = _rsa_key()
    provider.status = 503
    oauth = {"issuer": "https://issuer.test", "jwks_url": provider.url, "public_url": "https://gw"}
    routes = [ROUTES[0], {**ROUTES[0], "name": "s", "auth": {"oauth": oauth}}]
    settings = parse_settings({"routes": routes}, "t", env={})
    route = Route(settings, settings.routes[1], Metrics(["r", "s"]))
    try:
        await _unavailable(route.authenticator, _bearer(key, "k1"))
    finally:
        await route.close()

    messages = [r.getMessage() for r in caplog.records if r.name == "gateway.security.jwt_verify"]
    (warning,) = messages
    assert warning.startswith(f"routes[1].auth.oauth.jwks_url {provider.url}: cannot fetch")


async def test_tokens_the_key_set_cannot_verify_are_refused(provider: Provider) -> None:
    key = _rsa_key()
    provider.publish("k1", key)
    es_key = ec.generate_private_key(ec.SECP256R1())
    auth = _authenticator(provider.url)

    assert await _reason(auth, _bearer(key, None)) == "token has no key id"
    assert await _reason(auth, _bearer(_rsa_key(), "k1")) == "invalid signature"
    assert await _reason(auth, _bearer(es_key, "k1")) == "algorithm not allowed"


# -- over HTTP


async def test_a_route_with_jwks_url_accepts_a_token_and_answers_503_when_the_provider_is_down(
    provider: Provider, start_gateway: StartGateway
) -> None:
    key = _rsa_key()
    provider.publish("k1", key)
    down = f"http://127.0.0.1:{free_port()}/jwks.json"
    base = await start_gateway(
        [
            {"name": "up", "upstream": DEMO, "auth": _jwt_auth(provider.url)},
            {"name": "down", "upstream": DEMO, "auth": _jwt_auth(down)},
        ]
    )
    bearer = {"Authorization": _bearer(key, "k1")}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/up/mcp", json=INIT, headers=headers(**bearer)) as ok:
            accepted = ok.status
        async with http.post(f"{base}/down/mcp", json=INIT, headers=headers(**bearer)) as resp:
            status, retry_after, body = resp.status, resp.headers["Retry-After"], await resp.json()
        async with http.post(f"{base}/up/mcp", json=INIT, headers=headers()) as missing:
            unauthenticated = missing.status

    assert accepted == 200 and unauthenticated == 401
    assert status == 503 and int(retry_after) >= 1
    assert body["error"] == {"code": INTERNAL_ERROR, "message": UNAVAILABLE}
