"""Fixtures: the gateway on a real port, real upstreams, and the real mcp 1.30 client."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from gateway.app import create_app
from gateway.config import ListenConfig, Settings, parse_settings
from gateway.http import listen
from gateway.tasks.models import utcnow

from . import postgres
from .fakes import faulty_streamable_app, legacy_sse_app, recording_upstream

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `slow` (a quarter to three minutes each on 2 cores) go first, in the
    order found: on xdist's workers each then runs beside the rest of the suite, where one
    started last would run alone at the end and set the length of the whole run."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


DEMO = {"transport": "stdio", "command": ["python", "-m", "gateway.demo"]}

StartGateway = Callable[..., Awaitable[str]]


def _own_ports() -> Iterator[int]:
    """This test process's ports, in turn: its own 1,024 of the 8,192 below the kernel's
    ephemeral range (`ip_local_port_range`), by its xdist worker's number."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = max(1024, low - 8 * 1024) + (int(worker) % 8 if worker.isdigit() else 0) * 1024
    return itertools.cycle(range(start, start + 1024))


_PORTS = _own_ports()


def free_port() -> int:
    """A port for a server this test starts, which no other test process takes meanwhile.

    A port that `bind(0)` picked was free only at that moment: the server named it seconds
    later (a process imports that long on 2 cores), by when another worker's `bind(0)` could
    have picked it too, and the test whose server then failed to bind would talk to the other
    one's (the likely cause of an `initialize` answered without a session id, once in CI).
    Each worker takes its ports from a range of its own, below the ephemeral range, where
    neither `bind(0)` nor an outgoing connection takes one."""
    for _ in range(1024):
        port = next(_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # listened on, or a closed server's connections still linger
        return port
    raise RuntimeError("every port of this test process's range is taken")


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Returns once `proc` listens on `port`, and raises at once if it exits first. The bound
    is for a start that hangs: importing the gateway or an SDK server takes seconds of CPU,
    and on 2 cores shared by the test workers and the rest of CI a start took over 20 s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"upstream exited with code {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def start_upstream(*command: str) -> tuple[str, subprocess.Popen[bytes]]:
    """`command PORT` (a Streamable HTTP server at /mcp) as a child process, once it listens."""
    port = free_port()
    proc = subprocess.Popen(
        [*command, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, proc)
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    return f"http://127.0.0.1:{port}/mcp", proc


def start_sdk_upstream() -> tuple[str, subprocess.Popen[bytes]]:
    """The SDK's FastMCP server over Streamable HTTP as a child process, once it listens."""
    return start_upstream(sys.executable, str(ROOT / "tests" / "sdk_upstream.py"))


@pytest.fixture(scope="session")
def sdk_upstream() -> Iterator[str]:
    """The SDK's FastMCP server over Streamable HTTP, as a real child process."""
    url, proc = start_sdk_upstream()
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def native_upstream() -> Iterator[str]:
    """mcp 2.3's MCPServer on the 2026-07-28 wire (tests/modern/native_upstream.py), which
    checks Mcp-Name against the body, as a real child process."""
    from .helpers import MCP2_PYTHON  # here: helpers imports this module

    port = free_port()
    proc = subprocess.Popen(
        [str(MCP2_PYTHON), str(ROOT / "tests" / "modern" / "native_upstream.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def mcp2_upstream() -> Iterator[str]:
    """Python mcp 2.3's MCPServer (tests/mcp2_upstream.py) as a real child process, stateful
    with SSE answers as the SDK runs by default; skipped like `helpers.needs_mcp2` without it."""
    from .helpers import MCP2_PYTHON, needs_mcp2  # here: helpers imports this module

    if needs_mcp2.args[0]:
        pytest.skip(needs_mcp2.kwargs["reason"])
    url, proc = start_upstream(str(MCP2_PYTHON), str(ROOT / "tests" / "mcp2_upstream.py"))
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The tests' PostgreSQL server (started by .ci/postgres.sh if it is not running)."""
    return postgres.server_url()


@pytest.fixture
async def pg_url(postgres_server: str) -> AsyncIterator[str]:
    """A new, empty database of this test's own on the tests' PostgreSQL server."""
    url = await postgres.create_database(postgres_server)
    try:
        yield url
    finally:
        await postgres.drop_database(postgres_server, url)


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    def make(routes: list[dict[str, Any]] | None = None, **sections: Any) -> Settings:
        data: dict[str, Any] = {"store": {"path": str(tmp_path / "gateway.db")}, **sections}
        data["routes"] = routes or [{"name": "demo", "upstream": DEMO}]
        return parse_settings(data, "test settings")

    return make


@pytest.fixture
async def start_gateway(make_settings: Callable[..., Settings]) -> AsyncIterator[StartGateway]:
    """Starts the gateway on a real loopback port, on the server the command runs; returns
    its base URL. `clock=` replaces the wall clock (a `helpers.FakeClock`'s `now`)."""
    runners: list[web.AppRunner] = []

    async def start(
        routes: list[dict[str, Any]] | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        **sections: Any,
    ) -> str:
        settings = make_settings(routes, **sections)
        address = ListenConfig(host="127.0.0.1", port=0)
        runner = await listen.start(create_app(settings, clock), address, settings.http)
        runners.append(runner)
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def sse_upstream() -> AsyncIterator[str]:
    server = TestServer(legacy_sse_app(), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/sse"))
    await server.close()


@pytest.fixture
async def recorder() -> AsyncIterator[TestServer]:
    """An upstream that answers and records what it was sent (`fakes.recording_upstream`)."""
    server = TestServer(recording_upstream(), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
async def faulty_upstream() -> AsyncIterator[TestServer]:
    server = TestServer(faulty_streamable_app(), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


@asynccontextmanager
async def mcp_client(url: str, **callbacks: Any) -> AsyncIterator[ClientSession]:
    """The official Python SDK client, initialized, over Streamable HTTP."""
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write, **callbacks) as session:
            await session.initialize()
            yield session
