"""The gateway as the command runs it, against slow and greedy connections, a taken port, and
log forging: each test starts the real process (`python -m gateway`)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config import ListenConfig
from gateway.http import listen
from gateway.http.lingering import LingeringTransport

from .conftest import free_port, mcp_client
from .helpers import (
    answered_and_closed,
    expecting,
    gateway_process,
    headers,
    raw_session,
    rpc,
    write_config,
)

#: Another loopback address: the "attacker" in these tests, so caps on it leave 127.0.0.1 free.
OTHER = "127.0.0.2"


async def connect(port: int, source: str = OTHER) -> tuple[asyncio.StreamReader, Any]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def healthz(base: str) -> int:
    async with aiohttp.ClientSession() as http:
        async with asyncio.timeout(5), http.get(f"{base}/healthz") as resp:
            return resp.status


async def test_a_request_head_sent_a_byte_at_a_time_gets_408_and_a_silent_one_is_closed(
    tmp_path: Path,
) -> None:
    with gateway_process(tmp_path, "http: {header_timeout_seconds: 1}") as (_, port, _err):
        slow_reader, slow = await connect(port)
        silent_reader, silent = await connect(port)
        started = time.monotonic()
        async with asyncio.timeout(10):
            for byte in b"GET /hea":  # a head begun, a byte at a time, then a pause
                slow.write(bytes([byte]))
                await asyncio.sleep(0.1)
            answer = await slow_reader.read()
            quiet = await silent_reader.read()
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert quiet == b""  # nothing was asked, nothing is said: the connection just ends
        assert time.monotonic() - started < 5
        slow.close()
        silent.close()


async def test_one_address_holds_at_most_its_share_of_connections_and_others_get_in(
    tmp_path: Path,
) -> None:
    extra = "http: {max_connections_per_address: 20, header_timeout_seconds: 30}"
    with gateway_process(tmp_path, extra) as (base, port, _err):
        held = [await connect(port) for _ in range(20)]
        reader, writer = await connect(port)
        async with asyncio.timeout(5):
            refused = await reader.read()
        assert refused.startswith(b"HTTP/1.1 429 ")
        assert await healthz(base) == 200  # from 127.0.0.1: its own share
        async with mcp_client(f"{base}/demo/mcp") as client:
            assert (await client.call_tool("echo", {"text": "in"})).content[0].text == "in"  # type: ignore[union-attr]
        for _, held_writer in held:
            held_writer.close()
        writer.close()


async def test_when_descriptors_run_short_idle_connections_make_room_for_healthz_and_clients(
    tmp_path: Path,
) -> None:
    # 512 descriptors: max_connections defaults to half, 256 (leaving room for a burst of 128
    # accepts and the gateway's own files, children and sockets). A flood of 600 connections that
    # never finish a request head must not keep /healthz or a real client out.
    extra = "http: {max_connections_per_address: null, header_timeout_seconds: 60}"
    with gateway_process(tmp_path, extra, nofile=512) as (base, port, err):
        flood = []
        for _ in range(600):
            try:
                flood.append(await connect(port))
            except OSError:
                break
        for _, writer in flood:
            writer.write(b"GET /healthz HTTP/1.1\r\n")  # a head begun, never finished
        await asyncio.sleep(0.2)
        assert await healthz(base) == 200
        async with mcp_client(f"{base}/demo/mcp") as client:
            result = await client.call_tool("echo", {"text": "still served"})
            assert result.content[0].text == "still served"  # type: ignore[union-attr]
        for _, writer in flood:
            writer.close()
    log = err.read_text()
    assert "at the connection limit" in log
    assert "Traceback" not in log and "out of system resource" not in log


def test_a_port_in_use_by_another_program_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "--port", str(port)],
            cwd=tmp_path,
            capture_output=True,
            timeout=30,
        )
    assert done.returncode == 2
    lines = [line for line in done.stderr.decode().splitlines() if "mcp-task-gateway:" in line]
    assert lines == [
        f"mcp-task-gateway: cannot listen on 127.0.0.1:{port}: the port is in use (another "
        "gateway?); choose another with --port or listen.port"
    ]
    assert not (tmp_path / "data").exists()  # it stopped before opening the store


def test_port_0_gives_every_address_of_the_host_the_one_port_the_log_names() -> None:
    """An empty host binds 0.0.0.0 and ::, and with port 0 each got a port of its own: the
    one URL logged reached only one of them."""
    address = ListenConfig(host="", port=0)
    sockets = listen.bind(address)
    try:
        if len(sockets) < 2:
            pytest.skip("the host has one address family only")
        ports = {sock.getsockname()[1] for sock in sockets}
        assert ports == {listen.bound(address, sockets).port}
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("taken_by", ["another program", "the gateway's own port"])
def test_a_metrics_port_in_use_is_one_line_and_exit_2_before_the_store_opens(
    tmp_path: Path, taken_by: str
) -> None:
    """It was bound after the store had opened and the tasks were recovered: a traceback,
    then a process that no SIGTERM stopped."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        port = busy if taken_by == "the gateway's own port" else free_port()
        metrics = f"metrics: {{listen: {{host: 127.0.0.1, port: {busy}}}}}"
        if taken_by == "the gateway's own port":
            taken.close()  # the gateway binds it first, then the metrics listener meets it
        config = write_config(tmp_path, port, metrics)
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "--config", str(config)],
            cwd=tmp_path,
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr.decode()[-2000:]
    lines = [line for line in done.stderr.decode().splitlines() if "mcp-task-gateway:" in line]
    assert lines == [
        f"mcp-task-gateway: cannot listen on 127.0.0.1:{busy}: the port is in use (another "
        "gateway?); choose another with metrics.listen.port"
    ]
    assert "Traceback" not in done.stderr.decode()
    assert not (tmp_path / "gateway.db").exists()  # it stopped before opening the store


async def test_client_text_cannot_forge_log_lines_and_libraries_stay_at_info(
    tmp_path: Path,
) -> None:
    forged = "2026-01-01 00:00:00,000 ERROR gateway: FORGED"
    with gateway_process(tmp_path, args=("--log-level", "DEBUG")) as (base, _port, err):
        url = f"{base}/demo/mcp"
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            evil = {"jsonrpc": "2.0", "id": 9, "method": f"x\n{forged}\r\x1b[2J", "params": {}}
            async with http.post(url, json=evil, headers=headers(session_id)) as resp:
                assert resp.status == 200
            await rpc(
                http,
                url,
                session_id,
                "tools/call",
                {"name": "echo", "arguments": {"text": "stored"}},
            )
    log = err.read_text()
    assert "x\\n2026-01-01" in log and "\\x1b[2J" in log  # logged, escaped
    assert not any(line.startswith(forged) for line in log.splitlines())
    assert "\x1b" not in log
    assert " DEBUG gateway." in log  # the gateway's own debug lines are there...
    assert " DEBUG aiosqlite" not in log and " DEBUG asyncio" not in log  # ...not the libraries'


@pytest.mark.parametrize("level", ["loud", "5"])
def test_an_unknown_log_level_is_a_usage_error(tmp_path: Path, level: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--log-level", level],
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "unknown log level" in done.stderr.decode()


async def test_the_admin_port_is_guarded_as_the_gateways_port_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 256 descriptors, 300 connections to the admin port that never finish a request
    head, no token needed, once took the whole gateway down and flooded the log. Now its
    connections have the head deadline and caps of the gateway's port: the oldest idle one
    makes room, bad requests are answered without a traceback, and both ports serve."""
    monkeypatch.setenv("ADMIN_TOKEN", "admin-token-for-the-test")
    admin_port = free_port()
    extra = (
        "http: {max_connections_per_address: null, header_timeout_seconds: 2}\n"
        f"admin: {{listen: {{host: 127.0.0.1, port: {admin_port}}}, token_env: ADMIN_TOKEN}}"
    )
    with gateway_process(tmp_path, extra, nofile=256) as (base, _port, err):
        flood = []
        for _ in range(300):
            try:
                flood.append(await connect(admin_port))
            except OSError:
                break
        for _, writer in flood:
            writer.write(b"GET /admin/tasks HTTP/1.1\r\n")  # a head begun, never finished
        await asyncio.sleep(0.2)
        assert await healthz(base) == 200
        async with mcp_client(f"{base}/demo/mcp") as client:
            result = await client.call_tool("echo", {"text": "still served"})
            assert result.content[0].text == "still served"  # type: ignore[union-attr]
        token = {"Authorization": "Bearer admin-token-for-the-test"}
        async with aiohttp.ClientSession() as http:
            async with asyncio.timeout(5):
                async with http.get(
                    f"http://127.0.0.1:{admin_port}/admin/tasks", headers=token
                ) as resp:
                    assert resp.status == 200
        async with asyncio.timeout(10):  # the head deadline ends what is left of the flood
            for reader, _ in flood[-5:]:
                assert (await reader.read()).startswith(b"HTTP/1.1 408 ")
        for raw, status in (
            (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"431"),
            (
                b"GET /admin/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x00b\r\n\r\n",
                b"400",
            ),
        ):
            reader, writer = await connect(admin_port)
            writer.write(raw)
            async with asyncio.timeout(5):
                assert (await reader.read()).split(b" ")[1] == status
            writer.close()
        for _, writer in flood:
            writer.close()
    log = err.read_text()
    assert "at the connection limit" in log
    assert "Traceback" not in log and "out of system resource" not in log
    assert "Error handling request" not in log
    assert len(log) < 200_000


async def test_the_metrics_port_is_guarded_as_the_gateways_port_is(tmp_path: Path) -> None:
    """metrics.listen ran on aiohttp's plain server: a request head could take for ever, and
    a header over the limit or a malformed request was a 400 with a traceback in the log."""
    metrics_port = free_port()
    extra = (
        "http: {header_timeout_seconds: 1}\n"
        f"metrics: {{listen: {{host: 127.0.0.1, port: {metrics_port}}}}}"
    )
    with gateway_process(tmp_path, extra) as (_base, _port, err):
        for raw, status in (
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
            (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"431"),
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n\r\n", b"400"),
            (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", b"400"),  # TLS
        ):
            reader, writer = await connect(metrics_port)
            writer.write(raw)
            async with asyncio.timeout(5):
                assert (await reader.read()).split(b" ")[1] == status
            writer.close()
        slow_reader, slow = await connect(metrics_port)
        slow.write(b"GET /metr")  # a head begun, never finished
        async with asyncio.timeout(5):
            assert (await slow_reader.read()).startswith(b"HTTP/1.1 408 ")
        slow.close()
        async with aiohttp.ClientSession() as http:
            async with asyncio.timeout(5):
                metrics = f"http://127.0.0.1:{metrics_port}/metrics"
                async with http.get(metrics) as resp:
                    assert resp.status == 200
    log = err.read_text()
    assert "Traceback" not in log and "Error handling request" not in log
    assert "bad HTTP request from" in log


async def test_the_metrics_port_asks_for_no_body_before_its_token_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp said `100 Continue` before the bearer token check, and then left the
    connection waiting 10 s for the body the client held back."""
    monkeypatch.setenv("METRICS_TOKEN", "metrics-token-0123456789")
    metrics_port = free_port()
    extra = (
        f"metrics: {{listen: {{host: 127.0.0.1, port: {metrics_port}}}, "
        "bearer_token_env: METRICS_TOKEN}"
    )
    url = f"http://127.0.0.1:{metrics_port}"
    with gateway_process(tmp_path, extra) as (_base, _port, err):
        for path, lines, status in (
            ("/metrics", [], 401),
            ("/metrics", [b"Authorization: Bearer wrong"], 401),
            ("/nothing", [], 404),
        ):
            await answered_and_closed(url + path, lines, status, method="GET")
        token = b"Authorization: Bearer metrics-token-0123456789"
        go_ahead, _, writer = await expecting(url + "/metrics", [token], b"{}", method="GET")
        writer.close()
        assert go_ahead.startswith(b"HTTP/1.1 200 "), go_ahead  # it reads no body
    assert "Traceback" not in err.read_text()


def test_the_lingering_transport_hands_on_every_method_of_a_transport() -> None:
    # It has no __getattr__ (every attribute read would take CPython's slow path), so a method
    # of asyncio.Transport it did not spell out would be the base class's NotImplementedError
    # in the middle of a request.
    public = {name for name in dir(asyncio.Transport) if not name.startswith("_")}
    missing = {name for name in public if name not in vars(LingeringTransport)}
    assert not missing
