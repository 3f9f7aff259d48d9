"""The lean HTTP/1.1 client of upstream POSTs (`gateway.upstream.http1`, `http1_response`
and `http1_pool`), against raw servers that write exactly the bytes each case needs; through
a Streamable HTTP transport, a redirect that it leaves to aiohttp; and through the gateway,
the connections the SDK servers' SSE answers leave it."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import UpstreamUnavailable
from gateway.upstream import http1, http1_pool, http1_response
from gateway.upstream.http1_pool import Http1Pool
from gateway.upstream.http1_response import Http1Error
from gateway.upstream.streamable_http import StreamableHttpTransport

from .conftest import StartGateway
from .helpers import open_session, route, rpc, upstream_of

Script = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A TCP server whose every connection runs `script`; it counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = await reader.readexactly(length)
        self.requests.append(head + body)
        return body

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/mcp?x=1"


Start = Callable[[Script], Awaitable[RawServer]]


@pytest.fixture
async def raw() -> AsyncIterator[Start]:
    servers: list[RawServer] = []

    async def start(script: Script) -> RawServer:
        server = RawServer(script)
        server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        assert server.server is not None
        server.server.close()


def keep_answering(*responses: bytes) -> Script:
    """Answer each request on the connection with the next response, then hold it open."""

    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        for response in responses:
            await server.read_request(reader)
            writer.write(response)
            await writer.drain()
        await reader.read()

    return script


def json_response(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


async def test_kept_alive_connection_serves_the_next_post(raw: Start) -> None:
    server = await raw(keep_answering(json_response(b'{"a":1}'), json_response(b'{"b":2}')))
    pool = Http1Pool(server.url, 5)
    try:
        for expected in (b'{"a":1}', b'{"b":2}'):
            async with await pool.post({"X-Test": "yes"}, b"{}") as resp:
                assert resp.status == 200
                assert resp.headers["content-type"] == "application/json"
                assert await resp.read() == expected
        assert server.connections == 1  # the second POST reused the first's connection
        head = server.requests[0].decode()
        assert head.startswith("POST /mcp?x=1 HTTP/1.1\r\n")
        assert "\r\nHost: 127.0.0.1:" in head and "\r\nX-Test: yes\r\n" in head
        assert "\r\nAccept-Encoding: identity\r\n" in head
    finally:
        pool.close()


async def test_chunked_body_and_interim_answer(raw: Start) -> None:
    chunked = (
        b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n"
    )
    server = await raw(keep_answering(chunked, json_response(b"second")))
    pool = Http1Pool(server.url, 5)
    try:
        async with await pool.post({}, b"{}") as resp:
            assert resp.status == 200 and resp.content_length is None
            assert await resp.read() == b"abcdefg"
        async with await pool.post({}, b"{}") as resp:
            assert await resp.read() == b"second"
        assert server.connections == 1
    finally:
        pool.close()


async def test_a_whole_body_is_taken_at_once_and_a_partial_one_is_streamed(raw: Start) -> None:
    go_on = asyncio.Event()

    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.write(json_response(b'{"whole":1}'))
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + b'{"part')
        await writer.drain()
        await go_on.wait()
        writer.write(b'":2}')
        await reader.read()

    server = await raw(script)
    pool = Http1Pool(server.url, 5)
    try:
        async with await pool.post({}, b"{}") as resp:
            for _ in range(50):  # (the body may trail its head by a segment)
                whole = resp.whole()
                if whole is not None:
                    break
                await asyncio.sleep(0.01)
            assert whole == b'{"whole":1}'
            assert await resp.read() == b""  # taken whole: nothing is read twice
        async with await pool.post({}, b"{}") as resp:
            assert resp.whole() is None  # not all of it yet: it is read as it comes
            go_on.set()
            assert await resp.read() == b'{"part":2}'
        assert server.connections == 1
    finally:
        pool.close()


async def test_body_until_close_ends_with_the_connection(raw: Start) -> None:
    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"x":')
        await writer.drain()
        writer.write(b"1}")
        writer.close()

    server = await raw(script)
    pool = Http1Pool(server.url, 5)
    try:
        async with await pool.post({}, b"{}") as resp:
            assert await resp.read() == b'{"x":1}'
        async with await pool.post({}, b"{}") as resp:  # a new connection: that one ended
            assert await resp.read() == b'{"x":1}'
        assert server.connections == 2
    finally:
        pool.close()


async def test_no_content_answers_keep_the_connection(raw: Start) -> None:
    accepted = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
    no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
    server = await raw(keep_answering(accepted, no_content, accepted))
    pool = Http1Pool(server.url, 5)
    try:
        for status in (202, 204, 202):
            async with await pool.post({}, b"{}") as resp:
                assert resp.status == status
                assert await resp.read() == b""
        assert server.connections == 1
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "closed the connection"),
        (b"NOT HTTP AT ALL\r\n\r\n", "invalid HTTP response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx", "invalid HTTP"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"y" * 70_000 + b"\r\n\r\n", "over 65536 bytes"),
    ],
    ids=["cut-short", "garbage", "two-lengths", "huge-head"],
)
async def test_broken_answers_fail_the_exchange(raw: Start, answer: bytes, reason: str) -> None:
    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await raw(script)
    pool = Http1Pool(server.url, 5)
    try:
        with pytest.raises(Http1Error, match=reason):
            async with await pool.post({}, b"{}") as resp:
                await resp.read()
    finally:
        pool.close()


async def test_no_server_and_unsafe_headers_are_refused_without_sending() -> None:
    with pytest.raises(Http1Error, match="cannot connect"):
        await Http1Pool("http://127.0.0.1:9/mcp", 5).post({}, b"{}")
    pool = Http1Pool("http://127.0.0.1:9/mcp", 5)
    for name, value in (("X-A", "v\r\nInjected: 1"), ("X-B\n", "v"), ("X-C", "a\0b")):
        with pytest.raises(Http1Error, match="line break"):
            await pool.post({name: value}, b"{}")
    with pytest.raises(Http1Error, match="cannot carry"):
        await pool.post({"X-D": "snow ☃"}, b"{}")
    with pytest.raises(ValueError, match="not an http"):
        Http1Pool("ftp://example.org/mcp", 5)


async def test_an_abandoned_answer_closes_its_connection(raw: Start) -> None:
    """Cancelled midway (a timeout, say): the rest of that answer must not reach the next
    request on the same connection, so the connection goes."""

    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
        await writer.drain()
        await reader.read()

    server = await raw(script)
    pool = Http1Pool(server.url, 5)
    try:
        resp = await pool.post({}, b"{}")
        chunks = resp.iter_chunks()
        assert await chunks.__anext__() == b"part"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await chunks.__anext__()
        resp.close()
        await asyncio.sleep(0.05)
        assert pool._idle == [] and pool._all == set()
    finally:
        pool.close()


async def test_a_slow_reader_pauses_the_upstream(raw: Start) -> None:
    """A body that arrives faster than it is read stops being read past the high-water mark,
    so a fast upstream cannot fill the gateway's memory."""
    size = 4 * 1024 * 1024

    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        await writer.drain()
        await reader.read()

    server = await raw(script)
    pool = Http1Pool(server.url, 5)
    try:
        async with await pool.post({}, b"{}") as resp:
            await asyncio.sleep(0.3)  # the upstream writes; nobody reads
            assert resp._buffered < size // 2
            assert len(await resp.read()) == size
    finally:
        pool.close()


async def test_a_body_whose_last_bytes_cross_the_high_water_mark_leaves_its_connection_reading(
    raw: Start,
) -> None:
    """The read that pauses a connection can also end its response: the connection goes back
    to the pool then, and the next POST on it must be read (it hung, paused, before)."""
    first = http1_response.HIGH_WATER - 10

    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (first + 20))
        writer.write(b"x" * first)
        await writer.drain()
        await asyncio.sleep(0.1)  # read by then: the next 20 bytes cross the mark and end it
        writer.write(b"y" * 20)
        await writer.drain()
        await server.read_request(reader)
        writer.write(json_response(b'{"b":2}'))
        await writer.drain()
        await reader.read()

    server = await raw(script)
    pool = Http1Pool(server.url, 5)
    try:
        async with await pool.post({}, b"{}") as resp:
            await asyncio.sleep(0.3)  # the whole body arrives before it is read
            assert len(await resp.read()) == first + 20
        async with asyncio.timeout(5):
            async with await pool.post({}, b"{}") as resp:
                assert await resp.read() == b'{"b":2}'
        assert server.connections == 1
    finally:
        pool.close()


async def test_idle_connections_are_closed_after_the_keepalive_time(
    raw: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http1_pool, "KEEPALIVE_SECONDS", 0.1)
    server = await raw(keep_answering(json_response(b"1"), json_response(b"2")))
    pool = Http1Pool(server.url, 5)
    try:
        async with await pool.post({}, b"{}") as resp:
            await resp.read()
        assert len(pool._idle) == 1
        await asyncio.sleep(0.3)
        assert pool._idle == []
    finally:
        pool.close()


async def test_a_redirected_post_is_followed_through_aiohttp(
    unused_tcp_port_factory: Callable[[], int],
) -> None:
    """FastMCP mounted at /mcp answers /mcp with 307 to /mcp/: aiohttp's client follows it."""
    seen: list[str] = []

    async def moved(request: web.Request) -> web.Response:
        seen.append(request.path)
        raise web.HTTPTemporaryRedirect("/mcp/")

    async def mcp(request: web.Request) -> web.Response:
        seen.append(request.path)
        message = await request.json()
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {"ok": 1}})

    app = web.Application()
    app.router.add_post("/mcp", moved)
    app.router.add_post("/mcp/", mcp)
    runner = web.AppRunner(app)
    await runner.setup()
    port = unused_tcp_port_factory()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}/mcp"
    received: list[jsonrpc.Message] = []

    class Sink:
        def on_message(self, message: jsonrpc.Message, related: object) -> None:
            received.append(message)

    async def no_headers() -> dict[str, str]:
        return {}

    config = UpstreamConfig(transport="streamable_http", url=url)
    pool = Http1Pool(url, 5)
    async with aiohttp.ClientSession() as http:
        transport = StreamableHttpTransport(Sink(), config, http, no_headers, pool)  # type: ignore[arg-type]
        request = jsonrpc.Request(jsonrpc="2.0", id=7, method="ping")
        await transport.send(request)
    pool.close()
    await runner.cleanup()
    assert seen == ["/mcp", "/mcp", "/mcp/"]  # ours, then aiohttp's own POST and its redirect
    assert json.loads(jsonrpc.dump(received[0])) == {"jsonrpc": "2.0", "id": 7, "result": {"ok": 1}}


async def test_a_lost_connection_is_upstream_unavailable(raw: Start) -> None:
    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        writer.transport.abort()

    server = await raw(script)

    class Sink:
        def on_message(self, message: jsonrpc.Message, related: object) -> None:
            raise AssertionError("no message")

    async def no_headers() -> dict[str, str]:
        return {}

    config = UpstreamConfig(transport="streamable_http", url=server.url)
    pool = Http1Pool(server.url, 5)
    async with aiohttp.ClientSession() as http:
        transport = StreamableHttpTransport(Sink(), config, http, no_headers, pool)  # type: ignore[arg-type]
        with pytest.raises(UpstreamUnavailable, match="closed the connection"):
            await transport.send(jsonrpc.Request(jsonrpc="2.0", id=1, method="ping"))
    pool.close()


def sse_answers(end_after: float | None, then: bytes = b"") -> Script:
    """Answer each request with a chunked SSE stream holding its answer, then end the stream
    `end_after` seconds later (None: never), as the SDK servers end theirs at once; `then`
    is sent (as one chunk) a moment after the answer."""

    async def script(
        server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            request = json.loads(await server.read_request(reader))
            answer = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}})
            event = f"event: message\r\ndata: {answer}\r\n\r\n".encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(event), event)
            )
            await writer.drain()
            if then:
                await asyncio.sleep(0.1)  # the answer has been read by then
                writer.write(b"%x\r\n%s\r\n" % (len(then), then))
                await writer.drain()
            if end_after is None:
                await reader.read()
                return
            await asyncio.sleep(end_after)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return script


async def send_pings(
    url: str, pool: Http1Pool, count: int, close: bool = False
) -> list[jsonrpc.Message]:
    """`count` pings through a Streamable HTTP transport on `pool` (initialize's, the first
    with `close`, after which the transport is closed); what it heard."""
    received: list[jsonrpc.Message] = []

    class Sink:
        def on_message(self, message: jsonrpc.Message, related: object) -> None:
            received.append(message)

        def on_stream(self, related: object, interrupted: bool) -> None:
            pass

    async def no_headers() -> dict[str, str]:
        return {}

    config = UpstreamConfig(transport="streamable_http", url=url)
    async with aiohttp.ClientSession() as http:
        transport = StreamableHttpTransport(Sink(), config, http, no_headers, pool)  # type: ignore[arg-type]
        for n in range(count):
            method = "initialize" if close and n == 0 else "ping"
            async with asyncio.timeout(5):
                await transport.send(jsonrpc.Request(jsonrpc="2.0", id=n, method=method))
            await asyncio.sleep(0.02)  # the stream's end arrives meanwhile
        if close:
            await transport.close()
    return received


async def test_a_connection_whose_sse_answer_ends_just_after_it_is_kept(raw: Start) -> None:
    server = await raw(sse_answers(end_after=0.005))
    pool = Http1Pool(server.url, 5)
    try:
        received = await send_pings(server.url, pool, 3)
        assert [m.id for m in received if isinstance(m, jsonrpc.Response)] == [0, 1, 2]
        assert server.connections == 1  # not one a call, as when it was closed at the answer
    finally:
        pool.close()


async def test_a_connection_whose_sse_answer_never_ends_is_closed_after_a_moment(
    raw: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is the caller's at once; the connection waits a moment for the stream's end,
    which a stream resumed or held open by its server may never send, and then goes."""
    monkeypatch.setattr(http1_response, "END_GRACE_SECONDS", 1.0)
    server = await raw(sse_answers(end_after=None))
    pool = Http1Pool(server.url, 5)
    try:
        received = await send_pings(server.url, pool, 1)
        assert [m.id for m in received if isinstance(m, jsonrpc.Response)] == [0]
        assert len(pool._all) == 1 and pool._idle == []  # answered before the moment passed
        await asyncio.sleep(1.2)
        assert pool._all == set()
        received = await send_pings(server.url, pool, 1)
        assert [m.id for m in received if isinstance(m, jsonrpc.Response)] == [0]
        assert server.connections == 2
    finally:
        pool.close()


async def test_a_connection_flooded_after_its_sse_answer_is_closed_at_once(
    raw: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What comes after the answer is read only to find the stream's end: an upstream that
    sends more than a reader may leave unread (`HIGH_WATER`) loses the connection then."""
    monkeypatch.setattr(http1_response, "END_GRACE_SECONDS", 30.0)
    flood = b": " + b"x" * (http1_response.HIGH_WATER + 1024) + b"\n\n"
    server = await raw(sse_answers(end_after=None, then=flood))
    pool = Http1Pool(server.url, 5)
    try:
        received = await send_pings(server.url, pool, 1)
        assert [m.id for m in received if isinstance(m, jsonrpc.Response)] == [0]
        async with asyncio.timeout(5):  # not the 30 s of grace
            while pool._all:  # noqa: ASYNC110 - the pool has no event for a connection's end
                await asyncio.sleep(0.02)
    finally:
        pool.close()


@pytest.mark.parametrize("cancelled", ["after its head", "before its head"])
async def test_a_caller_cancelled_as_its_whole_answer_came_leaves_the_connection_kept(
    raw: Start, monkeypatch: pytest.MonkeyPatch, cancelled: str
) -> None:
    """The answer came whole and its connection went back to the pool before the caller, now
    cancelled (a time limit, a client gone), could resume: the connection is no longer the
    caller's to close, and the next request, maybe another's by then, goes on it. Closing it
    failed that other request ("the upstream closed the connection before its answer
    ended", a `work` task in the soak run under load), whether the caller was cancelled once
    its answer's head was read or before it (which cancels the future it waits on)."""
    answer = json_response(b'{"jsonrpc": "2.0", "id": 1, "result": {}}')
    server = await raw(keep_answering(answer, answer))
    pool = Http1Pool(server.url, 5)
    try:
        caller = asyncio.create_task(pool.post({}, b"{}"))  # noqa: TID251 - awaited below
        if cancelled == "after its head":
            release = pool.release

            def released(connection: http1.Connection) -> None:
                release(connection)
                caller.cancel()  # before the caller's turn comes: it resumes cancelled

            monkeypatch.setattr(pool, "release", released)
        else:
            received = http1.Connection.data_received

            def data_received(connection: http1.Connection, data: bytes) -> None:
                if not caller.done():
                    caller.cancel()  # its head's future is cancelled at once, before this read
                received(connection, data)

            monkeypatch.setattr(http1.Connection, "data_received", data_received)
        with pytest.raises(asyncio.CancelledError):
            await caller
        monkeypatch.undo()
        assert len(pool._idle) == 1 and pool._idle[0].open
        async with await pool.post({}, b"{}") as again:
            assert again.status == 200 and await again.read()
        assert server.connections == 1
    finally:
        pool.close()


async def test_a_sessions_delete_goes_on_its_kept_connection(raw: Start) -> None:
    """Transports (2025-11-25): "Clients that no longer need a particular session [...]
    SHOULD send an HTTP DELETE to the MCP endpoint with the Mcp-Session-Id header". It goes
    on the connection the session's calls kept, not on one opened for it."""
    initialized = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {}}).encode()
    ended = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    server = await raw(
        keep_answering(json_response(initialized, b"Mcp-Session-Id: s-1\r\n"), ended)
    )
    pool = Http1Pool(server.url, 5)
    try:
        received = await send_pings(server.url, pool, 1, close=True)
        assert [m.id for m in received if isinstance(m, jsonrpc.Response)] == [0]
        heads = [request.split(b"\r\n", 1)[0] for request in server.requests]
        assert heads == [b"POST /mcp?x=1 HTTP/1.1", b"DELETE /mcp?x=1 HTTP/1.1"]
        assert b"Mcp-Session-Id: s-1\r\n" in server.requests[1]
        assert server.connections == 1
        await asyncio.sleep(0.05)
        assert len(pool._idle) == 1  # the DELETE's answer ended: its connection was kept
    finally:
        pool.close()


@pytest.mark.parametrize("kind", ["streamable_http", "mcp2"])
async def test_calls_to_an_sdk_server_answering_on_sse_share_one_connection(
    kind: str,
    start_gateway: StartGateway,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mcp 1.30's FastMCP and mcp 2.3's MCPServer answer each POST on an SSE stream, which
    they end just after the answer: the next call goes out on the same connection."""
    made: list[http1.Connection] = []
    connection_init = http1.Connection.__init__

    def counted(self: http1.Connection, pool: http1.Owner) -> None:
        made.append(self)
        connection_init(self, pool)

    monkeypatch.setattr(http1.Connection, "__init__", counted)
    base = await start_gateway(route(upstream_of(kind, request)))
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        opened = len(made)
        for n in range(10):
            echo = {"name": "echo", "arguments": {"text": f"call {n}"}}
            answer = await rpc(http, url, session, "tools/call", echo, request_id=10 + n)
            assert answer["result"]["content"][0]["text"] == f"call {n}"
            await asyncio.sleep(0.01)  # a client's pause between calls: the stream's end lands
    assert len(made) - opened <= 1  # one for the calls, at most, beside the handshake's


async def test_https_upstreams_are_verified(tmp_path: Path) -> None:
    """TLS is verified as aiohttp verifies it: a certificate no trusted CA signed is refused."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    accepted: list[bool] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    pool = Http1Pool(f"https://127.0.0.1:{port}/mcp", 5)
    try:
        with pytest.raises(Http1Error, match="CERTIFICATE_VERIFY_FAILED"):
            await pool.post({}, b"{}")
        assert accepted == []  # no request reached a server whose certificate failed
    finally:
        pool.close()
        server.close()
