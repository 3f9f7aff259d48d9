"""The client-facing Streamable HTTP endpoint: transport rules and bad input, over raw HTTP.

Each test quotes the rule of the 2025-11-25 transports spec it checks.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.protocol.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
)

from .conftest import StartGateway
from .fakes import FAULT_HOOKS
from .helpers import INIT, error_of, headers, open_session, read_events


@pytest.fixture
async def endpoint(start_gateway: StartGateway) -> str:
    return f"{await start_gateway()}/demo/mcp"


async def test_initialize_issues_a_random_visible_ascii_session_id(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        first, second = await open_session(http, endpoint), await open_session(http, endpoint)
    # "The session ID SHOULD be globally unique and cryptographically secure" and "MUST only
    # contain visible ASCII characters (ranging from 0x21 to 0x7E)".
    assert first != second and len(first) >= 32
    assert all(0x21 <= ord(c) <= 0x7E for c in first)


async def test_request_without_session_gets_400(endpoint: str) -> None:
    # "Servers that require a session ID SHOULD respond to requests without an MCP-Session-Id
    # header (other than initialization) with HTTP 400 Bad Request."
    async with aiohttp.ClientSession() as http:
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        async with http.post(endpoint, json=ping, headers=headers()) as resp:
            assert resp.status == 400
            assert (await error_of(resp))["code"] == INVALID_REQUEST


async def test_unknown_session_gets_404(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        async with http.post(endpoint, json=ping, headers=headers("not-a-session")) as resp:
            assert resp.status == 404
        async with http.get(
            endpoint, headers={"Accept": "text/event-stream", "Mcp-Session-Id": "nope"}
        ) as resp:
            assert resp.status == 404


async def test_delete_ends_the_session_and_then_its_id_gets_404(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        async with http.delete(endpoint, headers={"Mcp-Session-Id": session_id}) as resp:
            assert resp.status == 200
        # "The server MUST respond to requests containing that session ID with HTTP 404."
        ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
        async with http.post(endpoint, json=ping, headers=headers(session_id)) as resp:
            assert resp.status == 404
        async with http.delete(endpoint, headers={"Mcp-Session-Id": session_id}) as resp:
            assert resp.status == 404


async def test_unsupported_protocol_version_header_gets_400(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        # "If the server receives a request with an invalid or unsupported
        # MCP-Protocol-Version, it MUST respond with 400 Bad Request."
        bad = headers(session_id, **{"MCP-Protocol-Version": "2099-01-01"})
        async with http.post(endpoint, json=ping, headers=bad) as resp:
            assert resp.status == 400
            error = await error_of(resp)
            assert error["data"]["requested"] == "2099-01-01"
            assert "2025-11-25" in error["data"]["supported"]
        good = headers(session_id, **{"MCP-Protocol-Version": "2025-11-25"})
        async with http.post(endpoint, json=ping, headers=good) as resp:
            assert resp.status == 200


async def test_foreign_origin_gets_403_and_a_listed_origin_is_served(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        # "If the Origin header is present and invalid, servers MUST respond with HTTP 403."
        evil = headers(Origin="http://evil.example")
        async with http.post(endpoint, json=INIT, headers=evil) as resp:
            assert resp.status == 403
            assert (await error_of(resp))["code"] == INVALID_REQUEST
        local = headers(Origin="http://localhost:3000")
        async with http.post(endpoint, json=INIT, headers=local) as resp:
            assert resp.status == 200


async def test_origin_allow_list_comes_from_config(start_gateway: StartGateway) -> None:
    base = await start_gateway(http={"allowed_origins": ["https://app.example.com"]})
    async with aiohttp.ClientSession() as http:
        for origin, status in [("https://app.example.com", 200), ("http://localhost:3000", 403)]:
            async with http.post(
                f"{base}/demo/mcp", json=INIT, headers=headers(Origin=origin)
            ) as resp:
                assert resp.status == status, origin


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream", "text/html"])
async def test_post_without_both_accepted_media_types_gets_406(endpoint: str, accept: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(endpoint, json=INIT, headers=headers(Accept=accept)) as resp:
            assert resp.status == 406


async def test_get_without_event_stream_accept_gets_406(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        async with http.get(
            endpoint, headers={"Accept": "application/json", "Mcp-Session-Id": session_id}
        ) as resp:
            assert resp.status == 406


async def test_wrong_content_type_gets_415(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        bad = headers(**{"Content-Type": "text/plain"})
        async with http.post(endpoint, data=json.dumps(INIT), headers=bad) as resp:
            assert resp.status == 415


async def test_notifications_and_responses_get_202_without_body(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        for message in (
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": 99, "result": {}},
        ):
            async with http.post(endpoint, json=message, headers=headers(session_id)) as resp:
                assert resp.status == 202
                assert await resp.read() == b""


async def test_malformed_json_gets_parse_error(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            endpoint, data=b'{"jsonrpc": "2.0", "id": 1,', headers=headers()
        ) as resp:
            assert resp.status == 400
            assert (await error_of(resp))["code"] == PARSE_ERROR


async def test_json_rpc_batch_gets_a_clear_error(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(endpoint, json=[INIT], headers=headers()) as resp:
            assert resp.status == 400
            error = await error_of(resp)
            assert error["code"] == INVALID_REQUEST and "batching" in error["message"]


async def test_not_a_json_rpc_message_gets_invalid_request(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        for body in ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, {"hello": "world"}, "text"):
            async with http.post(endpoint, json=body, headers=headers()) as resp:
                assert resp.status == 400
                assert (await error_of(resp))["code"] == INVALID_REQUEST


async def test_body_over_the_configured_size_gets_413_and_the_session_lives_on(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(limits={'max_body_bytes': 2048})}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        huge = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x" * 4096}},
        }
        async with http.post(url, json=huge, headers=headers(session_id)) as resp:
            assert resp.status == 413
        small = {**huge, "params": {"name": "echo", "arguments": {"text": "fits"}}}
        async with http.post(url, json=small, headers=headers(session_id)) as resp:
            assert resp.status == 200
            assert (await resp.json())["result"]["content"][0]["text"] == "fits"


async def test_a_server_discover_without_its_envelope_is_refused_and_initialize_still_works(
    endpoint: str,
) -> None:
    # server/discover exists only in 2026-07-28, which needs params._meta on every request
    # (served: test_modern_endpoint); a client that cannot send it initializes as before.
    probe = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    async with aiohttp.ClientSession() as http:
        for extra in ({"MCP-Protocol-Version": "2026-07-28"}, {}):
            async with http.post(endpoint, json=probe, headers=headers(**extra)) as resp:
                assert resp.status == 400
                body = await resp.json()
                assert "result" not in body and body["id"] == 1
                assert body["error"]["code"] == INVALID_PARAMS
        await open_session(http, endpoint)


async def test_initialize_with_a_session_id_is_rejected(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        async with http.post(endpoint, json=INIT, headers=headers(session_id)) as resp:
            assert resp.status == 400


async def test_slow_call_streams_sse_events_with_ids_and_a_priming_event(endpoint: str) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "slow",
            "arguments": {"seconds": 0.6, "steps": 2},
            "_meta": {"progressToken": "tok-1"},
        },
    }
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        async with http.post(endpoint, json=call, headers=headers(session_id)) as resp:
            assert resp.content_type == "text/event-stream"
            events = await read_events(resp, 4)
    # "The server SHOULD immediately send an SSE event consisting of an event ID and an empty
    # data field in order to prime the client to reconnect."
    assert events[0]["data"] == "" and events[0]["id"]
    ids = [e["id"] for e in events]
    assert len(set(ids)) == 4
    messages = [json.loads(e["data"]) for e in events[1:]]
    assert [m["params"]["progressToken"] for m in messages[:2]] == ["tok-1", "tok-1"]
    assert messages[2]["id"] == 7 and messages[2]["result"]["content"][0]["text"] == "slept 0.6 s"


async def test_reconnect_with_last_event_id_replays_what_was_missed(endpoint: str) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 8,
        "method": "tools/call",
        "params": {
            "name": "slow",
            "arguments": {"seconds": 0.6, "steps": 3},
            "_meta": {"progressToken": 5},
        },
    }
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        resp = await http.post(endpoint, json=call, headers=headers(session_id))
        priming, first = await read_events(resp, 2)
        resp.close()  # the connection drops after the first progress event
        resume = {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session_id,
            "Last-Event-ID": first["id"],
        }
        async with http.get(endpoint, headers=resume) as again:
            rest = await read_events(again, 3)
    assert json.loads(first["data"])["params"]["progress"] == 1
    missed = [json.loads(e["data"]) for e in rest]
    assert [m["params"]["progress"] for m in missed[:2]] == [2, 3]
    assert missed[2]["id"] == 8 and "result" in missed[2]
    assert priming["id"] not in {e["id"] for e in rest}


async def test_unknown_last_event_id_gets_400(endpoint: str) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, endpoint)
        resume = {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session_id,
            "Last-Event-ID": "999:3",
        }
        async with http.get(endpoint, headers=resume) as resp:
            assert resp.status == 400


async def test_idle_get_stream_gets_keep_alive_comments(start_gateway: StartGateway) -> None:
    url = f"{await start_gateway(http={'keepalive_seconds': 0.1})}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        async with http.get(
            url, headers={"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        ) as resp:
            assert resp.status == 200 and resp.content_type == "text/event-stream"
            lines: list[bytes] = []
            async with asyncio.timeout(5):
                while not any(line.startswith(b":") for line in lines):
                    lines.append(await resp.content.readline())
    assert b": keep-alive\n" in lines


async def test_a_long_plain_call_keeps_its_connection_alive_until_the_answer(
    start_gateway: StartGateway,
) -> None:
    # Past the JSON window a plain call is answered as SSE, with keep-alive comments while
    # the tool runs: proxies and clients that cut an idle connection see it is not.
    url = f"{await start_gateway(http={'keepalive_seconds': 0.2})}/demo/mcp"
    call = {"name": "slow", "arguments": {"seconds": 1.5, "steps": 1}}
    message = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": call}
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        async with http.post(url, json=message, headers=headers(session_id)) as resp:
            assert resp.content_type == "text/event-stream"
            lines = [line async for line in resp.content]
    answer = next(i for i, line in enumerate(lines) if line.startswith(b"data: {"))
    assert lines[:answer].count(b": keep-alive\n") >= 3
    assert json.loads(lines[answer][6:])["id"] == 5


async def test_a_client_that_declared_no_elicitation_is_never_asked_and_its_call_ends(
    start_gateway: StartGateway,
) -> None:
    # The demo's `ask` elicits; this client's initialize declared no capability at all, so
    # the upstream hears -32601 at once and its tool ends, instead of waiting on a question
    # the client could not answer.
    url = f"{await start_gateway()}/demo/mcp"
    message = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "ask"}}
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        async with asyncio.timeout(10):
            async with http.post(url, json=message, headers=headers(session_id)) as resp:
                body = await resp.text()
    said = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")] or [
        json.loads(body)
    ]
    assert not [m for m in said if m.get("method") == "elicitation/create"]
    (answer,) = [m for m in said if m.get("id") == 8]
    assert "error" in answer or answer["result"].get("isError")


async def test_cancelled_notification_stops_the_upstream_call_and_no_answer_is_sent(
    start_gateway: StartGateway, faulty_upstream: TestServer
) -> None:
    upstream = {"transport": "streamable_http", "url": str(faulty_upstream.make_url("/mcp"))}
    url = f"{await start_gateway([{'name': 'f', 'upstream': upstream}])}/f/mcp"
    hooks = faulty_upstream.app[FAULT_HOOKS]
    call = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": "hang", "arguments": {}},
    }
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 9, "reason": "user gave up"},
    }
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        async with http.post(url, json=call, headers=headers(session_id)) as resp:
            async with asyncio.timeout(5):
                await hooks.arrived["hang"].wait()  # the call is running upstream
            async with http.post(url, json=cancel, headers=headers(session_id)) as sent:
                assert sent.status == 202
            async with asyncio.timeout(5):
                rest = await resp.content.read()
    # The stream ends at once, with no answer to the cancelled request...
    assert b'"id":9' not in rest
    # ...and the upstream was told, under the id it knows the call by.
    upstream_call = next(m for m in hooks.received if m.get("method") == "tools/call")
    cancels = [m for m in hooks.received if m.get("method") == "notifications/cancelled"]
    assert [c["params"] for c in cancels] == [
        {"requestId": upstream_call["id"], "reason": "user gave up"}
    ]
