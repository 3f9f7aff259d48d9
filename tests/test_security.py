"""Adversarial tests: identities, isolation, limits and audit, over real HTTP.

Two principals authenticate with API keys (route `keys`), two with HS256 JWTs (route `jwt`).
Every probe across principals must fail exactly like a probe for something that does not
exist (spec, Security Considerations: receivers MUST reject tasks/get, tasks/result and
tasks/cancel for tasks of another authorization context, and tasks/list MUST only include
the requestor's tasks).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any

import aiohttp
import jwt
import pytest
from mcp import types
from mcp.shared.exceptions import McpError

from gateway.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND, SERVER_ERROR

from .conftest import DEMO, StartGateway
from .helpers import INIT, audit_events, client_as, headers

ALICE_KEY, BOB_KEY = "alice-key-0123456789", "bob-key-9876543210"
SECRET = "jwt-shared-secret-for-tests-only-0123456789"
ISSUER, AUDIENCE = "https://issuer.test", "mcp-task-gateway"
NOT_FOUND = (INVALID_PARAMS, "Failed to retrieve task: Task not found")


#: Tokens of the parameter lists are made when the suite is collected, and some are used a
#: quarter of an hour later: they hold for a day (as the not-yet-valid one waits a day).
DAY = 86_400


def token(sub: str = "carol", **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + DAY, **claims}
    return jwt.encode(payload, claims.pop("key", SECRET), algorithm="HS256")


@pytest.fixture
def auth_routes(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setenv("BOB_KEY", BOB_KEY)
    monkeypatch.setenv("JWT_SECRET", SECRET)
    keys = {
        "mode": "api_keys",
        "api_keys": [
            {"principal": "alice", "sha256": hashlib.sha256(ALICE_KEY.encode()).hexdigest()},
            {"principal": "bob", "key_env": "BOB_KEY"},
        ],
    }
    jwt_auth = {
        "mode": "jwt",
        "jwt": {
            "algorithms": ["HS256"],
            "secret_env": "JWT_SECRET",
            "issuer": ISSUER,
            "audience": AUDIENCE,
        },
    }
    return [
        {"name": "keys", "upstream": DEMO, "auth": keys, "tasks": {"list_page_size": 1}},
        {"name": "jwt", "upstream": DEMO, "auth": jwt_auth},
    ]


async def refusal(probe: Any) -> tuple[int, str]:
    with pytest.raises(McpError) as raised:
        await probe
    return raised.value.error.code, raised.value.error.message


@pytest.mark.parametrize(
    ("route", "owner", "other"),
    [("keys", ALICE_KEY, BOB_KEY), ("jwt", token("carol"), token("dave"))],
)
async def test_every_cross_principal_probe_fails_like_an_unknown_id(
    route: str,
    owner: str,
    other: str,
    start_gateway: StartGateway,
    auth_routes: list[dict[str, Any]],
) -> None:
    url = f"{await start_gateway(auth_routes)}/{route}/mcp"
    async with client_as(url, owner) as mine, client_as(url, other) as theirs:
        created = await mine.experimental.call_tool_as_task("slow", {"seconds": 30, "steps": 1})
        task_id = created.task.taskId
        probes = [
            theirs.experimental.get_task(task_id),
            theirs.experimental.get_task_result(task_id, types.CallToolResult),
            theirs.experimental.cancel_task(task_id),
        ]
        answers = [await refusal(p) for p in probes]
        unknown = await refusal(theirs.experimental.get_task("no-such-task"))
        assert task_id not in [t.taskId for t in (await theirs.experimental.list_tasks()).tasks]
        # The owner still sees it running: the probes changed nothing.
        assert (await mine.experimental.get_task(task_id)).status == "working"
        await mine.experimental.cancel_task(task_id)
    assert answers == [NOT_FOUND] * 3 and unknown == NOT_FOUND


async def test_a_list_cursor_is_bound_to_its_principal(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    url = f"{await start_gateway(auth_routes)}/keys/mcp"
    async with client_as(url, ALICE_KEY) as alice, client_as(url, BOB_KEY) as bob:
        for i in range(2):
            await alice.experimental.call_tool_as_task("echo", {"text": str(i)})
        cursor = (await alice.experimental.list_tasks()).nextCursor
        assert cursor is not None  # page size 1 on this route
        code, _ = await refusal(bob.experimental.list_tasks(cursor))
        assert len((await alice.experimental.list_tasks(cursor)).tasks) == 1
    assert code == INVALID_PARAMS


async def test_another_principal_reusing_a_session_id_gets_404_like_an_unknown_one(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    url = f"{await start_gateway(auth_routes)}/keys/mcp"
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            url, json=INIT, headers=headers(Authorization=f"Bearer {ALICE_KEY}")
        ) as r:
            alice_session = r.headers["Mcp-Session-Id"]
        bob = {"Authorization": f"Bearer {BOB_KEY}"}
        async with http.post(url, json=ping, headers=headers(alice_session, **bob)) as stolen:
            stolen_body = (stolen.status, await stolen.json())
        async with http.post(url, json=ping, headers=headers("made-up-session", **bob)) as unknown:
            unknown_body = (unknown.status, await unknown.json())
        alice = {"Authorization": f"Bearer {ALICE_KEY}"}
        async with http.post(url, json=ping, headers=headers(alice_session, **alice)) as own:
            assert own.status == 200
    assert stolen_body == unknown_body and stolen_body[0] == 404


async def test_the_same_principal_reaches_its_task_from_a_new_session(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    url = f"{await start_gateway(auth_routes)}/jwt/mcp"
    async with client_as(url, token("carol")) as first:
        created = await first.experimental.call_tool_as_task("echo", {"text": "mine"})
    # The first session is gone (DELETE); the task is bound to carol, not to it.
    async with client_as(url, token("carol")) as second:
        result = await second.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
        listed = [t.taskId for t in (await second.experimental.list_tasks()).tasks]
    block = result.content[0]
    assert isinstance(block, types.TextContent) and block.text == "mine"
    assert created.task.taskId in listed


@pytest.mark.parametrize(
    ("credential", "reason"),
    [
        (None, "missing bearer token"),
        ("Basic dXNlcjpwYXNz", "expected Authorization: Bearer <token>"),
        (f"Bearer {token(exp=int(time.time()) - 60)}", "token expired"),
        (f"Bearer {token(nbf=int(time.time()) + DAY)}", "token not yet valid"),
        (f"Bearer {token(aud='someone-else')}", "wrong audience"),
        (f"Bearer {token(iss='https://evil.test')}", "wrong issuer"),
        (f"Bearer {token(key='not-the-secret-but-just-as-long-012345')}", "invalid signature"),
        (
            "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJtYWxsb3J5In0.",
            "algorithm not allowed",
        ),
    ],
)
async def test_bad_credentials_get_401_with_a_bearer_challenge_and_a_json_rpc_body(
    credential: str | None,
    reason: str,
    start_gateway: StartGateway,
    auth_routes: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    url = f"{await start_gateway(auth_routes)}/jwt/mcp"
    extra = {} if credential is None else {"Authorization": credential}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=INIT, headers=headers(**extra)) as resp:
            status, challenge, body = (
                resp.status,
                resp.headers["WWW-Authenticate"],
                await resp.json(),
            )
    assert status == 401 and challenge.startswith("Bearer ")
    assert body["error"]["message"] == f"Unauthorized: {reason}"
    events = audit_events(caplog)
    assert [(e["event"], e["reason"]) for e in events] == [("auth_failed", reason)]
    if credential is not None:  # the audit trail never holds the credential
        assert credential.split()[-1] not in caplog.text


async def test_denied_task_access_is_audited_with_the_principal_only(
    start_gateway: StartGateway,
    auth_routes: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    url = f"{await start_gateway(auth_routes)}/keys/mcp"
    async with client_as(url, ALICE_KEY) as alice, client_as(url, BOB_KEY) as bob:
        created = await alice.experimental.call_tool_as_task("echo", {"text": "x"})
        await refusal(bob.experimental.get_task(created.task.taskId))
    events = audit_events(caplog)
    denied = [e for e in events if e["event"] == "task_access_denied"]
    assert len(denied) == 1 and denied[0]["principal"] == "bob"
    assert BOB_KEY not in caplog.text and ALICE_KEY not in caplog.text


# -- limits


async def test_request_rate_limit_trips_with_429_and_retry_after_then_recovers(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    url = f"{await start_gateway(auth_routes, limits={'requests_per_second': 2, 'burst': 3})}"
    url += "/keys/mcp"
    # Requests that fail right after admission are cheap, so no token refills in between.
    junk = b"not json"
    alice = headers(Authorization=f"Bearer {ALICE_KEY}")
    async with aiohttp.ClientSession() as http:
        statuses = []
        for _ in range(4):
            async with http.post(url, data=junk, headers=alice) as resp:
                statuses.append(resp.status)
                retry_after = resp.headers.get("Retry-After")
        # Bob has his own bucket.
        bob = headers(Authorization=f"Bearer {BOB_KEY}")
        async with http.post(url, data=junk, headers=bob) as b:
            assert b.status == 400
        await asyncio.sleep(0.6)  # more than one token's worth at 2 per second
        async with http.post(url, data=junk, headers=alice) as again:
            recovered = again.status
    assert statuses == [400, 400, 400, 429] and retry_after == "1"
    assert recovered == 400


async def test_failed_logins_and_made_up_session_ids_are_rate_limited_per_address(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    limits = {"requests_per_second": 0.5, "burst": 3}
    base = await start_gateway([*auth_routes, {"name": "open", "upstream": DEMO}], limits=limits)
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with aiohttp.ClientSession() as http:
        guesses = []
        for n in range(4):
            bad = headers(Authorization=f"Bearer guess-{n}")
            async with http.post(f"{base}/keys/mcp", json=ping, headers=bad) as resp:
                guesses.append(resp.status)
        made_up = []
        for n in range(4):
            async with http.post(
                f"{base}/open/mcp", json=ping, headers=headers(f"made-up-{n}")
            ) as resp:
                made_up.append(resp.status)
    assert guesses == [401, 401, 401, 429]
    assert made_up == [404, 404, 404, 429]


async def test_the_same_name_on_two_routes_is_two_principals(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    base = await start_gateway(auth_routes)
    async with (
        client_as(f"{base}/keys/mcp", ALICE_KEY) as by_key,
        client_as(f"{base}/jwt/mcp", token("alice")) as by_token,
    ):
        created = await by_key.experimental.call_tool_as_task("echo", {"text": "x"})
        answer = await refusal(by_token.experimental.get_task(created.task.taskId))
        listed = (await by_token.experimental.list_tasks()).tasks
    assert answer == NOT_FOUND and listed == []


async def test_a_request_without_credentials_gets_a_bare_bearer_challenge(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    url = f"{await start_gateway(auth_routes)}/keys/mcp"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=INIT, headers=headers()) as missing:
            bare = missing.headers["WWW-Authenticate"]
        bad = headers(Authorization="Bearer wrong")
        async with http.post(url, json=INIT, headers=bad) as wrong:
            detailed = wrong.headers["WWW-Authenticate"]
    # RFC 6750 3.1: no error code when the request had no authentication information.
    assert bare == 'Bearer realm="mcp-task-gateway"'
    assert 'error="invalid_token"' in detailed and "wrong" not in detailed


async def test_auth_written_without_mode_is_enforced_and_only_mode_none_opens_a_route(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JWT_SECRET", SECRET)
    top = {
        "api_keys": [
            {"principal": "alice", "sha256": hashlib.sha256(ALICE_KEY.encode()).hexdigest()}
        ]
    }
    jwt_only = {"jwt": {"secret_env": "JWT_SECRET", "issuer": ISSUER, "audience": AUDIENCE}}
    routes = [
        {"name": "inherits", "upstream": DEMO},
        {"name": "empty", "upstream": DEMO, "auth": {}},
        {"name": "listing", "upstream": DEMO, "auth": {"list_tasks_without_auth": True}},
        {"name": "own-jwt", "upstream": DEMO, "auth": jwt_only},
        {"name": "open", "upstream": DEMO, "auth": {"mode": "none"}},
    ]
    base = await start_gateway(routes, auth=top)
    statuses: dict[str, tuple[int, int]] = {}
    async with aiohttp.ClientSession() as http:
        for route, credential in [
            ("inherits", ALICE_KEY),
            ("empty", ALICE_KEY),
            ("listing", ALICE_KEY),
            ("own-jwt", token("carol")),
            ("open", "ignored"),
        ]:
            url = f"{base}/{route}/mcp"
            async with http.post(url, json=INIT, headers=headers()) as without:
                bare = without.status
            auth = headers(Authorization=f"Bearer {credential}")
            async with http.post(url, json=INIT, headers=auth) as with_credential:
                statuses[route] = (bare, with_credential.status)
    assert statuses == {
        "inherits": (401, 200),
        "empty": (401, 200),
        "listing": (401, 200),
        "own-jwt": (401, 200),
        "open": (200, 200),
    }


async def test_active_task_limit_trips_and_recovers_when_a_task_ends(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    base = await start_gateway(auth_routes, limits={"active_tasks_per_principal": 2})
    async with (
        client_as(f"{base}/keys/mcp", ALICE_KEY) as alice,
        client_as(f"{base}/keys/mcp", BOB_KEY) as bob,
    ):
        running = [
            await alice.experimental.call_tool_as_task("slow", {"seconds": 30, "steps": 1})
            for _ in range(2)
        ]
        code, message = await refusal(alice.experimental.call_tool_as_task("echo", {"text": "x"}))
        # Bob is not affected by Alice's tasks.
        await bob.experimental.call_tool_as_task("echo", {"text": "bob"})
        await alice.experimental.cancel_task(running[0].task.taskId)
        again = await alice.experimental.call_tool_as_task("echo", {"text": "after"})
        await alice.experimental.cancel_task(running[1].task.taskId)
    assert code == SERVER_ERROR and "limits.active_tasks_per_principal" in message
    assert again.task.status == "working"


async def test_at_the_session_cap_an_idle_session_makes_room_and_only_busy_ones_refuse(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    # Clients that never send DELETE must not lock their caller out: at the cap the caller's
    # least recently used idle session is ended; 429 only when every session has work running.
    url = f"{await start_gateway(auth_routes, limits={'sessions_per_principal': 2})}/keys/mcp"
    alice = {"Authorization": f"Bearer {ALICE_KEY}"}

    async def post(session_id: str | None, message: dict[str, Any]) -> aiohttp.ClientResponse:
        extra = {"Mcp-Session-Id": session_id} if session_id else {}
        async with http.post(url, json=message, headers=headers(**alice, **extra)) as resp:
            await resp.read()
            return resp

    def slow_task(request_id: int) -> dict[str, Any]:
        params = {"name": "slow", "arguments": {"seconds": 60, "steps": 1}, "task": {}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
    async with aiohttp.ClientSession() as http:
        first, second, third = [(await post(None, INIT)).headers["Mcp-Session-Id"] for _ in "abc"]
        assert (await post(first, ping)).status == 404  # the oldest idle one made room
        assert (await post(second, ping)).status == 200
        assert (await post(third, ping)).status == 200
        for n, session_id in enumerate((second, third)):
            assert (await post(session_id, slow_task(10 + n))).status == 200
        refused = await post(None, INIT)
        assert refused.status == 429
        assert (await post(second, ping)).status == 200  # busy sessions are never ended


async def test_requested_ttl_is_clamped_by_the_limit(
    start_gateway: StartGateway, auth_routes: list[dict[str, Any]]
) -> None:
    base = await start_gateway(auth_routes, limits={"max_ttl_ms": 4000})
    async with client_as(f"{base}/keys/mcp", ALICE_KEY) as alice:
        created = await alice.experimental.call_tool_as_task("echo", {"text": "x"}, ttl=600_000)
    assert created.task.ttl == 4000


# -- no-auth mode


async def test_without_authentication_tasks_list_is_neither_offered_nor_served(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway()}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=INIT, headers=headers()) as resp:
            capabilities = (await resp.json())["result"]["capabilities"]
            session_id = resp.headers["Mcp-Session-Id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tasks/list", "params": {}}
        async with http.post(url, json=listing, headers=headers(session_id)) as resp:
            answer = await resp.json()
    # "receivers that cannot identify requestors SHOULD NOT declare the tasks.list capability"
    assert capabilities["tasks"] == {"cancel": {}, "requests": {"tools": {"call": {}}}}
    assert answer["error"]["code"] == METHOD_NOT_FOUND
