"""What a careless or hostile client sends: every case gets a clear 4xx or JSON-RPC error, the
session it came in goes on, and nothing is an HTTP 500 or a traceback.

The gateway runs on the server the command runs (`gateway.http.listen`), over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web
from multidict import CIMultiDict

from gateway.app import create_app
from gateway.config import ListenConfig
from gateway.http import listen, middleware
from gateway.http.keys import STORE
from gateway.protocol import modern
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

from .conftest import DEMO, StartGateway
from .helpers import (
    INIT,
    answer_to,
    answered_and_closed,
    error_of,
    expecting,
    headers,
    open_session,
    rpc,
    store_commits,
)

LIMIT = 4 * 1024 * 1024  # limits.max_body_bytes by default


@pytest.fixture
async def gateway(start_gateway: StartGateway) -> str:
    return f"{await start_gateway()}/demo/mcp"


def echo_call(text: str, request_id: int = 7) -> bytes:
    call = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }
    return json.dumps(call).encode()


def sized_echo(size: int) -> tuple[bytes, str]:
    """An echo call whose body is exactly `size` bytes, and the text it carries."""
    empty = len(echo_call(""))
    text = "x" * (size - empty)
    body = echo_call(text)
    assert len(body) == size
    return body, text


async def trickle(body: bytes, pieces: int, pause: float) -> AsyncIterator[bytes]:
    step = -(-len(body) // pieces)
    for start in range(0, len(body), step):
        yield body[start : start + step]
        await asyncio.sleep(pause)


async def assert_session_lives(http: aiohttp.ClientSession, url: str, session_id: str) -> None:
    answer = await rpc(http, url, session_id, "ping", {}, request_id=99)
    assert answer == {"jsonrpc": "2.0", "id": 99, "result": {}}


# -- bodies: read whole, however chunked (item 2)


@pytest.mark.parametrize("size", [64 * 1024, 1024 * 1024, LIMIT - 16], ids=["64K", "1M", "limit"])
async def test_a_body_sent_in_many_small_pieces_arrives_whole_with_aiohttp(
    gateway: str, size: int
) -> None:
    body, text = sized_echo(size)
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        chunks = trickle(body, pieces=200, pause=0.002)
        async with http.post(gateway, data=chunks, headers=headers(session_id)) as resp:
            assert resp.status == 200, await resp.text()
            answer = await resp.json()
    assert answer["result"]["content"][0]["text"] == text


@pytest.mark.parametrize("size", [64 * 1024, 1024 * 1024, LIMIT - 16], ids=["64K", "1M", "limit"])
async def test_a_body_sent_in_many_small_pieces_arrives_whole_with_httpx(
    gateway: str, size: int
) -> None:
    body, text = sized_echo(size)
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
    async with httpx.AsyncClient(timeout=30) as client:
        # With Content-Length, as the SDK's client sends it, but written piece by piece.
        plain = await client.post(gateway, content=body, headers=headers(session_id))
        chunked = await client.post(
            gateway, content=trickle(body, pieces=300, pause=0.001), headers=headers(session_id)
        )
    for resp in (plain, chunked):
        assert resp.status_code == 200, resp.text
        assert resp.json()["result"]["content"][0]["text"] == text


async def test_a_chunked_body_over_the_limit_gets_413_and_the_session_lives_on(
    gateway: str,
) -> None:
    body, _ = sized_echo(LIMIT + 1024)
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        chunks = trickle(body, pieces=64, pause=0)
        async with http.post(gateway, data=chunks, headers=headers(session_id)) as resp:
            assert resp.status == 413
            assert (await error_of(resp))["code"] == INVALID_REQUEST
        await assert_session_lives(http, gateway, session_id)


async def test_a_body_that_stalls_gets_408_within_the_body_timeout(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(http={'body_timeout_seconds': 0.5})}/demo/mcp"
    body, _ = sized_echo(4096)

    async def stalls() -> AsyncIterator[bytes]:
        yield body[:100]
        await asyncio.sleep(30)
        yield body[100:]

    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        async with asyncio.timeout(10):
            async with http.post(url, data=stalls(), headers=headers(session_id)) as resp:
                assert resp.status == 408
                error = await error_of(resp)
        assert "http.body_timeout_seconds" in error["message"]
        await assert_session_lives(http, url, session_id)


# -- JSON that could not be stored or relayed (item 3)


def ping_nested(levels: int) -> str:
    """A ping whose params hold arrays nested `levels` deep."""
    nested = "[" * levels + "]" * levels
    return '{"jsonrpc":"2.0","id":5,"method":"ping","params":{"a":' + nested + "}}"


HOSTILE_BODIES = {
    "nested-200": ping_nested(200),
    "nested-1000": ping_nested(1000),
    "nested-100000": ping_nested(100_000),
    "ttl-Infinity": '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":'
    '{"name":"echo","arguments":{"text":"x"},"task":{"ttl":Infinity}}}',
    "ttl-NaN": '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":'
    '{"name":"echo","arguments":{"text":"x"},"task":{"ttl":NaN}}}',
    "ttl-1e400": '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":'
    '{"name":"echo","arguments":{"text":"x"},"task":{"ttl":1e400}}}',
    "lone-surrogate-task-id": '{"jsonrpc":"2.0","id":5,"method":"tasks/get",'
    '"params":{"taskId":"\\ud800"}}',
    "lone-surrogate-argument": '{"jsonrpc":"2.0","id":5,"method":"tools/call",'
    '"params":{"name":"echo","arguments":{"text":"a\\udfffb"}}}',
}


@pytest.mark.parametrize("body", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
async def test_json_the_gateway_cannot_store_or_relay_gets_a_parse_error(
    gateway: str, body: str
) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        async with http.post(gateway, data=body, headers=headers(session_id)) as resp:
            assert resp.status == 400
            error = await error_of(resp)
        assert error["code"] == PARSE_ERROR
        await assert_session_lives(http, gateway, session_id)


async def test_a_surrogate_pair_is_a_character_and_crosses_unchanged(gateway: str) -> None:
    body = '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo",'
    body += '"arguments":{"text":"\\ud83d\\ude00"}}}'
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        async with http.post(gateway, data=body, headers=headers(session_id)) as resp:
            assert (await resp.json())["result"]["content"][0]["text"] == "\U0001f600"


@pytest.mark.parametrize("request_id", [{"a": 1}, [1, 2], None, True, 1.5])
async def test_a_cancellation_naming_no_request_id_is_ignored(
    gateway: str, request_id: Any
) -> None:
    # Cancellation spec: "Invalid cancellation notifications SHOULD be ignored."
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}
    note["params"] = {"requestId": request_id, "reason": "x"}
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        async with http.post(gateway, json=note, headers=headers(session_id)) as resp:
            assert resp.status == 202
        await assert_session_lives(http, gateway, session_id)


async def test_a_message_with_both_result_and_error_gets_400(gateway: str) -> None:
    both = {"jsonrpc": "2.0", "id": 3, "result": {}, "error": {"code": 1, "message": "x"}}
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        async with http.post(gateway, json=both, headers=headers(session_id)) as resp:
            assert resp.status == 400
            assert (await error_of(resp))["code"] == INVALID_REQUEST
        await assert_session_lives(http, gateway, session_id)


async def raw_request(
    url: str, head_lines: list[bytes], body: bytes = b"", method: str = "POST"
) -> tuple[int, bytes]:
    """One HTTP/1.1 request written byte for byte (for headers no client library sends)."""
    parsed = httpx.URL(url)
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
    try:
        head = [
            f"{method} {parsed.path} HTTP/1.1".encode(),
            f"Host: {parsed.netloc.decode()}".encode(),
        ]
        head += [*head_lines, f"Content-Length: {len(body)}".encode(), b"Connection: close"]
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()
    finally:
        writer.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("session_id", [b"\xff\xfe", b"caf\xc3\xa9", b"a b", b"x" * 300], ids=repr)
async def test_a_session_id_that_is_not_visible_ascii_is_an_unknown_session(
    gateway: str, session_id: bytes
) -> None:
    lines = [
        b"Content-Type: application/json",
        b"Accept: application/json, text/event-stream",
        b"Mcp-Session-Id: " + session_id,
    ]
    status, body = await raw_request(gateway, lines, b'{"jsonrpc":"2.0","id":4,"method":"ping"}')
    assert status == 404
    assert json.loads(body)["error"] == {
        "code": INVALID_REQUEST,
        "message": "Session not found: it ended, expired or never existed; "
        "send a new initialize without MCP-Session-Id",
    }


@pytest.mark.parametrize(
    ("method", "in_session"), [("POST", True), ("POST", False), ("GET", True), ("DELETE", True)]
)
async def test_a_protocol_version_header_that_is_not_utf8_gets_400_with_its_bytes_escaped(
    gateway: str, method: str, in_session: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A byte that is not UTF-8 reaches the handler as a lone surrogate, which the error's
    `requested` once carried into a JSON body that could not be written: a 500. The
    transports spec: "If the server receives a request with an invalid or unsupported
    MCP-Protocol-Version, it MUST respond with 400 Bad Request"."""
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        lines = [
            b"Content-Type: application/json",
            b"Accept: application/json, text/event-stream",
            b"MCP-Protocol-Version: 2025-11-25\xe9",
            *([b"Mcp-Session-Id: " + session_id.encode()] if in_session else []),
        ]
        ping = b'{"jsonrpc":"2.0","id":4,"method":"ping"}' if method == "POST" else b""
        status, body = await raw_request(gateway, lines, ping, method)
        assert status == 400
        error = json.loads(body)["error"]
        assert error["data"]["requested"] == "2025-11-25\\udce9"
        await assert_session_lives(http, gateway, session_id)
    assert "Traceback" not in caplog.text and "ERROR" not in caplog.text


@pytest.mark.parametrize(
    ("method", "name", "second"),
    [
        ("POST", "Mcp-Session-Id", None),  # None: the session's own id again
        ("POST", "Mcp-Session-Id", "another-session"),
        ("GET", "Mcp-Session-Id", "another-session"),
        ("DELETE", "Mcp-Session-Id", None),
        ("POST", "MCP-Protocol-Version", "2025-11-25"),
        ("POST", "MCP-Protocol-Version", "2025-06-18"),
        ("DELETE", "MCP-Protocol-Version", "2025-06-18"),
    ],
)
async def test_a_session_header_sent_twice_gets_400_and_the_session_lives_on(
    gateway: str, method: str, name: str, second: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Two values of a header read as one (a proxy merged two requests, or a client hides one
    value from the checks that read the other) name no session and no version: 400, the
    values never in the log, and the session the first one names goes on (a DELETE does not
    end it)."""
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        sent = CIMultiDict(headers(session_id))
        if name == "MCP-Protocol-Version":
            sent.add(name, "2025-11-25")
        sent.add(name, second or session_id)
        if method == "GET":
            sent["Accept"] = "text/event-stream"
        ping = {"jsonrpc": "2.0", "id": 4, "method": "ping"} if method == "POST" else None
        async with http.request(method, gateway, json=ping, headers=sent) as resp:
            assert resp.status == 400
            error = await error_of(resp)
        assert error["code"] == INVALID_REQUEST
        assert error["data"]["header"].lower() == name.lower()
        await assert_session_lives(http, gateway, session_id)
    assert session_id not in caplog.text


@pytest.mark.parametrize("second", ["2026-07-28", "2025-11-25"])
async def test_a_2026_07_28_request_with_its_version_header_twice_gets_400(
    gateway: str, second: str
) -> None:
    """The 2026-07-28 path chose by the first value and checked the envelope against the
    last: the two must be one."""
    ping = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "ping",
        "params": {"_meta": {modern.VERSION_META: "2026-07-28", modern.CAPABILITIES_META: {}}},
    }
    sent = CIMultiDict(headers(**{"Mcp-Method": "ping"}))
    sent.add("MCP-Protocol-Version", "2026-07-28")
    sent.add("MCP-Protocol-Version", second)
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway, json=ping, headers=sent) as resp:
            assert resp.status == 400
            assert (await error_of(resp))["code"] == INVALID_REQUEST


@pytest.mark.parametrize(
    ("method", "header", "lines"),
    [
        ("tools/call", "Mcp-Method", [("Mcp-Method", "tools/call")] * 2),
        ("tools/call", "Mcp-Method", [("Mcp-Method", "smuggled"), ("Mcp-Method", "tools/call")]),
        ("tools/call", "Mcp-Method", [("Mcp-Method", "tools/call"), ("mcp-method", "tools/call")]),
        ("tools/call", "Mcp-Method", [("Mcp-Method", ""), ("Mcp-Method", "tools/call")]),
        ("tools/call", "Mcp-Name", [("Mcp-Name", "echo")] * 2),
        ("tools/call", "Mcp-Name", [("Mcp-Name", "smuggled"), ("MCP-NAME", "echo")]),
        ("tools/call", "Mcp-Name", [("Mcp-Name", "echo"), ("Mcp-Name", "")]),
        ("notifications/cancelled", "Mcp-Method", [("Mcp-Method", "notifications/cancelled")] * 2),
    ],
    ids=["equal", "last-matches", "other-case", "empty", "name", "name-case", "name-empty", "note"],
)
async def test_a_2026_07_28_method_or_name_header_sent_twice_gets_400_naming_it(
    gateway: str,
    method: str,
    header: str,
    lines: list[tuple[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The envelope check read the last value of each (and a notification was taken unread):
    two values of a header read as one must be one, whichever the body agrees with."""
    caplog.set_level(logging.DEBUG)
    meta = {modern.VERSION_META: "2026-07-28", modern.CAPABILITIES_META: {}}
    if method == "tools/call":
        params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta}
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": 5, "method": method, "params": params}
    else:
        message = {"jsonrpc": "2.0", "method": method, "params": {"requestId": 1, "_meta": meta}}
    sent = [
        b"Content-Type: application/json",
        b"Accept: application/json, text/event-stream",
        b"MCP-Protocol-Version: 2026-07-28",
    ]
    for name, value in (("Mcp-Method", method), ("Mcp-Name", "echo")):
        if name != header:
            sent.append(f"{name}: {value}".encode())
    # Written byte for byte: aiohttp's client folds names that differ only in case.
    sent += [f"{name}: {value}".encode() for name, value in lines]
    status, answer = await raw_request(gateway, sent, json.dumps(message).encode())
    assert status == 400
    error = json.loads(answer)["error"]
    assert (error["code"], error["data"]) == (INVALID_REQUEST, {"header": header})
    assert b"smuggled" not in answer and "smuggled" not in caplog.text


@pytest.mark.parametrize("last_event_id", ["x:²", "²", "x:" + "9" * 5000, "x:-1", "x:1e3"])
async def test_a_last_event_id_that_is_no_event_number_gets_400(
    gateway: str, last_event_id: str
) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        listen = {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session_id,
            "Last-Event-ID": last_event_id,
        }
        async with http.get(gateway, headers=listen) as resp:
            assert resp.status == 400
            error = await error_of(resp)
        assert error["code"] == INVALID_REQUEST
        assert len(error["message"]) < 300  # a 5,000-digit header is not echoed back whole
        await assert_session_lives(http, gateway, session_id)


async def test_a_header_over_the_limit_is_431_and_its_value_stays_out_of_the_log(
    gateway: str, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's complaint quotes the start of the line it refused: a key or a cookie."""
    caplog.set_level(logging.INFO)
    secret = "Bearer alice-key-0123456789"
    for line in (f"Authorization: {secret}", f"Cookie: session={secret}"):
        status, _ = await raw_request(gateway, [(line + "y" * 9000).encode()], b"{}")
        assert status == 431
    assert "bad HTTP request from 127.0.0.1: Got more than 8190 bytes" in caplog.text
    assert "alice-key" not in caplog.text


async def test_a_client_gone_before_its_100_continue_leaves_no_error_in_the_log(
    gateway: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that asked for `100 Continue` and left before it was written made an ERROR
    with a traceback, each time, for whoever cared to."""
    url = httpx.URL(gateway)
    for _ in range(3):
        reader, writer = await asyncio.open_connection(url.host, url.port)
        writer.write(
            f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Expect: 100-continue\r\nContent-Length: 40\r\n\r\n".encode()
        )
        writer.transport.abort()
    await asyncio.sleep(0.3)  # its handler runs once the loop reads the head
    async with aiohttp.ClientSession() as http:
        await assert_session_lives(http, gateway, await open_session(http, gateway))
    assert "ERROR" not in caplog.text and "Traceback" not in caplog.text


KEY = "expect-key-0123456789"


@pytest.fixture
async def keyed(start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch) -> str:
    """The demo behind an API key (`KEY`)."""
    monkeypatch.setenv("EXPECT_KEY", KEY)
    auth = {"mode": "api_keys", "api_keys": [{"principal": "alice", "key_env": "EXPECT_KEY"}]}
    return f"{await start_gateway([{'name': 'demo', 'upstream': DEMO, 'auth': auth}])}/demo/mcp"


WITH_KEY = f"Authorization: Bearer {KEY}".encode()
JSON_LINES = [b"Content-Type: application/json", b"Accept: application/json, text/event-stream"]


@pytest.mark.parametrize(
    ("host", "lines", "status"),
    [
        (None, [WITH_KEY, b"Origin: https://evil.example"], 403),
        ("evil.example", [WITH_KEY], 421),
        (None, [], 401),
        (None, [b"Authorization: Bearer not-the-key"], 401),
    ],
    ids=["origin", "host", "no-credentials", "wrong-key"],
)
async def test_a_request_that_will_be_refused_gets_its_refusal_and_no_100_continue(
    keyed: str, host: str | None, lines: list[bytes], status: int
) -> None:
    """aiohttp sent `100 Continue` before any check had run: the client was told to send its
    body, and only then refused."""
    await answered_and_closed(keyed, [*JSON_LINES, *lines], status, host=host)


@pytest.mark.parametrize(
    ("method", "path", "status"), [("POST", "/nowhere", 404), ("PUT", "", 405)]
)
async def test_the_url_tables_answer_to_a_request_holding_its_body_back_closes_it(
    keyed: str, method: str, path: str, status: int
) -> None:
    """aiohttp's own 404 and 405 left the connection waiting 10 s for the body; a request
    sent next on it had its first bytes taken as that body."""
    url = keyed.removesuffix("/demo/mcp") + path if path else keyed
    await answered_and_closed(url, JSON_LINES, status, method=method)


async def test_a_body_sent_without_waiting_for_100_continue_keeps_the_connection(
    keyed: str,
) -> None:
    """A client may send its body without waiting for the go-ahead (RFC 9110 section
    10.1.1): the body is there, the answer needs no `100 Continue`, and the connection stays
    open for the next request."""
    body = json.dumps(INIT).encode()
    parsed = httpx.URL(keyed)
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
    head = [
        f"POST {parsed.raw_path.decode()} HTTP/1.1".encode(),
        f"Host: {parsed.netloc.decode()}".encode(),
        *JSON_LINES,
        WITH_KEY,
        b"Expect: 100-continue",
        f"Content-Length: {len(body)}".encode(),
    ]
    try:
        for _ in range(2):
            writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
            answer, content = await answer_to(reader)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            assert b"connection: close" not in answer.lower()
            assert json.loads(content)["result"]["protocolVersion"] == "2025-11-25"
    finally:
        writer.close()


async def test_a_request_that_passes_gets_100_continue_then_its_answer(keyed: str) -> None:
    body = json.dumps(INIT).encode()
    go_ahead, reader, writer = await expecting(keyed, [*JSON_LINES, WITH_KEY], body)
    try:
        assert go_ahead == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        head, answer = await answer_to(reader)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 200 ")
    assert json.loads(answer)["result"]["protocolVersion"] == "2025-11-25"


async def test_a_megabyte_header_gets_431(gateway: str) -> None:
    big = b"X-Big: " + b"a" * (1024 * 1024)
    status, body = await raw_request(gateway, [b"Content-Type: application/json", big], b"{}")
    assert status == 431
    assert b"Header" in body


async def test_a_defect_becomes_minus_32603_without_detail_logged_once_with_its_traceback(
    make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The backstop for exceptions that are not the gateway's own: the client learns nothing
    of the internals, the log has the traceback once."""
    app = create_app(make_settings())

    async def defect(request: web.Request) -> web.Response:
        raise KeyError("secret internal detail")

    # A handler with a defect, behind the same guard as every handler of the URL table.
    app.router.add_post("/defect", middleware.guarded(app, defect))
    runner = await listen.start(app, ListenConfig(port=0), make_settings().http)
    try:
        host, port = runner.addresses[0][:2]
        with caplog.at_level(logging.ERROR):
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://{host}:{port}/defect", data=b"{}") as resp:
                    assert resp.status == 500
                    body = await resp.json()
    finally:
        await runner.cleanup()
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": INTERNAL_ERROR, "message": "Internal error"},
    }
    tracebacks = [
        r for r in caplog.records if r.exc_info and "secret internal detail" in str(r.exc_info[1])
    ]
    assert len(tracebacks) == 1


# -- pinned to a version we do not serve (item 11); 2026-07-28 itself: test_modern_endpoint


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}},
    ],
    ids=["tools/list", "tools/call"],
)
async def test_a_sessionless_request_pinned_to_an_unknown_version_gets_the_supported_versions(
    gateway: str, message: dict[str, Any]
) -> None:
    extra = {"MCP-Protocol-Version": "2099-01-01"}
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway, json=message, headers=headers(**extra)) as resp:
            assert resp.status == 400
            body = await resp.json()
    assert body["id"] == 1
    assert body["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert body["error"]["data"] == {
        "requested": "2099-01-01",
        "supported": ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"],
    }


# -- Host (item 8)


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example:8080", 421),
        ("127.0.0.1.evil.example", 421),
        ("localhost.", 200),
        ("LOCALHOST:1234", 200),
        ("[::1]:80", 200),
        ("127.0.0.1", 200),
    ],
)
async def test_a_loopback_gateway_serves_only_loopback_host_names(
    gateway: str, host: str, status: int
) -> None:
    # DNS rebinding: a page on evil.example, its name re-pointed at 127.0.0.1, is same-origin
    # to itself and may send no Origin; its Host header still says evil.example.
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway, json=INIT, headers=headers(Host=host)) as resp:
            assert resp.status == status
            if status == 421:
                assert (await error_of(resp))["code"] == INVALID_REQUEST


async def test_allowed_hosts_from_config_replace_the_loopback_default(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(http={"allowed_hosts": ["mcp.example.com", "*.corp.example"]})
    url = f"{base}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        for host, status in [
            ("mcp.example.com", 200),
            ("a.corp.example:443", 200),
            ("corp.example", 421),
            ("localhost", 421),
        ]:
            async with http.post(url, json=INIT, headers=headers(Host=host)) as resp:
                assert resp.status == status, host


def test_a_gateway_listening_beyond_loopback_checks_no_host_unless_configured(
    make_settings: Any,
) -> None:
    from gateway.http.middleware import allowed_hosts

    http = make_settings().http
    assert allowed_hosts(http, "0.0.0.0") is None
    assert allowed_hosts(http, "::1") == ("localhost", "127.0.0.1", "::1")
    assert allowed_hosts(http, "localhost") == ("localhost", "127.0.0.1", "::1")
    configured = make_settings(http={"allowed_hosts": ["GW.example."]}).http
    assert allowed_hosts(configured, "0.0.0.0") == ("gw.example",)


# -- /healthz (item 10)


async def test_healthz_costs_at_most_one_write_however_often_it_is_asked(
    make_settings: Any,
) -> None:
    app = create_app(make_settings())
    runner = await listen.start(app, ListenConfig(port=0), make_settings().http)
    try:
        host, port = runner.addresses[0][:2]
        async with aiohttp.ClientSession() as http:

            async def ask(query: str = "") -> tuple[int, Any]:
                async with http.get(f"http://{host}:{port}/healthz{query}") as resp:
                    return resp.status, await resp.json()

            before = store_commits(app)
            answers = await asyncio.gather(*(ask() for _ in range(50)))
            answers += await asyncio.gather(*(ask("?deep=1") for _ in range(50)))
            assert all(answer == (200, {"status": "ok"}) for answer in answers)
            # Start-up recovery just committed: the cheap check trusts it, and the 50 deep
            # checks share one probe write.
            assert store_commits(app) - before <= 1
    finally:
        await runner.cleanup()


async def test_healthz_says_unavailable_without_internals_when_the_store_takes_no_writes(
    make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(make_settings())
    runner = await listen.start(app, ListenConfig(port=0), make_settings().http)
    try:
        host, port = runner.addresses[0][:2]
        await app[STORE].close()  # the store goes away under a running gateway
        async with aiohttp.ClientSession() as http:
            for _ in range(3):
                async with http.get(f"http://{host}:{port}/healthz?deep=1") as resp:
                    assert resp.status == 503
                    assert await resp.json() == {"status": "unavailable", "reason": "store"}
    finally:
        await runner.cleanup()
    # Why is for the operator, once per failure streak.
    reasons = [r for r in caplog.records if "takes no writes" in r.getMessage()]
    assert len(reasons) == 1 and "closed" in reasons[0].getMessage()
