"""What the test modules share: MCP over raw HTTP, the real client's task calls, a fake clock,
the gateway as a child process, and upstream children's pids.

Fixtures are in conftest.py and fake upstreams in fakes.py; no test module imports another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from gateway.http.keys import METRICS
from gateway.protocol import jsonrpc
from gateway.session.session import Session
from gateway.session.streams import EventStream
from gateway.tasks.models import SessionRecord, utcnow

from .conftest import DEMO, ROOT, free_port, wait_for_port

# -- MCP over raw HTTP

ACCEPT_BOTH = "application/json, text/event-stream"
#: The related-task `_meta` key (tasks spec, "Associating Task-Related Messages").
RELATED = "io.modelcontextprotocol/related-task"
#: What a raw test client declares it can answer: the upstream's questions of every kind (a
#: question of an undeclared kind is refused upstream, never relayed).
ANSWERS_ALL: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}

#: The same handshake as a typed message, for tests that drive a `Session` in-process.
INITIALIZE = jsonrpc.Request(
    jsonrpc="2.0",
    id=0,
    method="initialize",
    params={"protocolVersion": "2025-11-25", "capabilities": ANSWERS_ALL},
)


def opened_record(session: Session) -> SessionRecord:
    """What the registry records once the upstream took the handshake: the client's
    initialize, whose capabilities say which of the upstream's questions may reach it."""
    return SessionRecord(
        session_id=session.id,
        route=session.route.name,
        protocol_version="2025-11-25",
        initialize=INITIALIZE.model_dump(exclude_unset=True),
        created_at=datetime(2025, 11, 25, 12, 0, tzinfo=UTC),
    )


INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": ANSWERS_ALL,
        "clientInfo": {"name": "raw-test", "version": "1"},
    },
}


def store_commits(app: web.Application) -> float:
    """The commits of the app's task store so far, as its metrics count them."""
    name = "mcp_gateway_store_operation_duration_seconds_count"
    return app[METRICS].registry.get_sample_value(name, {"operation": "commit"}) or 0.0


def headers(session_id: str | None = None, **extra: str) -> dict[str, str]:
    out = {"Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
    if session_id:
        out["Mcp-Session-Id"] = session_id
    out.update(extra)
    return out


async def open_session(
    http: aiohttp.ClientSession, url: str, capabilities: dict[str, Any] | None = None
) -> str:
    """An initialized 2025-11-25 session, checked at every step; its id."""
    init = {**INIT, "params": {**INIT["params"], "capabilities": capabilities or {}}}
    async with http.post(url, json=init, headers=headers()) as resp:
        assert resp.status == 200
        body = await resp.json()
        assert body["result"]["protocolVersion"] == "2025-11-25"
        session_id = resp.headers["Mcp-Session-Id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, json=note, headers=headers(session_id)) as resp:
        assert resp.status == 202
    return session_id


async def raw_session(
    http: aiohttp.ClientSession, url: str, version: str = "2025-11-25"
) -> tuple[str, dict[str, Any]]:
    """An initialized session at `version`: its id and the initialize result."""
    init = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}
    async with http.post(url, json=init, headers=headers()) as resp:
        body = await resp.json()
        session_id = resp.headers.get("Mcp-Session-Id")
        # Said in full: a CI run once got an answer here without a session (which server
        # answered, and what, went unrecorded).
        server = resp.headers.get("Server")
        assert session_id is not None, f"no session: HTTP {resp.status} from {server}: {body}"
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, json=note, headers=headers(session_id)):
        pass
    return session_id, body["result"]


async def error_of(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The JSON-RPC error object of a JSON error response."""
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["jsonrpc"] == "2.0" and "id" in body
    return dict(body["error"])


def audit_events(
    caplog: pytest.LogCaptureFixture, event: str | None = None
) -> list[dict[str, Any]]:
    """The audit events caplog caught (only those named `event`, if given), in order."""
    events = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.audit"]
    return [e for e in events if event is None or e["event"] == event]


async def read_events(resp: aiohttp.ClientResponse, count: int) -> list[dict[str, str]]:
    """The next `count` SSE events (comments skipped), as dicts of their fields."""
    events: list[dict[str, str]] = []
    event: dict[str, str] = {}
    async with asyncio.timeout(10):
        while len(events) < count:
            line = (await resp.content.readline()).decode().rstrip("\r\n")
            if not line:
                if event:
                    events.append(event)
                event = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                event[name] = event.get(name, "") + value.removeprefix(" ")
    return events


async def read_messages(resp: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    """The next `count` JSON-RPC messages on an SSE response."""
    messages: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        while len(messages) < count:
            line = await resp.content.readline()
            if not line:
                raise AssertionError(f"stream ended after {messages}")
            if line.startswith(b"data: {"):
                messages.append(json.loads(line[6:]))
    return messages


async def rpc(
    http: aiohttp.ClientSession,
    url: str,
    session_id: str,
    method: str,
    params: dict[str, Any],
    request_id: int = 1,
) -> dict[str, Any]:
    """One request; the JSON or SSE answer, decoded."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    async with http.post(url, json=message, headers=headers(session_id)) as resp:
        if resp.content_type == "application/json":
            return dict(await resp.json())
        async for line in resp.content:
            if line.startswith(b"data: {"):
                data = json.loads(line[6:])
                if data.get("id") == request_id:
                    return dict(data)
    raise AssertionError("no answer")


async def start_task(
    http: aiohttp.ClientSession,
    url: str,
    session_id: str,
    tool: str,
    arguments: dict[str, Any] | None = None,
) -> str:
    """A task-augmented tools/call over raw HTTP; the new task's id."""
    params = {"name": tool, "arguments": arguments or {}, "task": {}}
    created = await rpc(http, url, session_id, "tools/call", params)
    return str(created["result"]["task"]["taskId"])


async def get_task(
    http: aiohttp.ClientSession, url: str, session_id: str, task_id: str
) -> dict[str, Any]:
    """The 2025-11-25 tasks/get answer's task."""
    answer = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, request_id=9)
    return dict(answer["result"])


async def task_terminal(
    http: aiohttp.ClientSession,
    url: str,
    session_id: str,
    task_id: str,
    seconds: float = 30,
    seen: list[str] | None = None,
) -> dict[str, Any]:
    """Polls tasks/get until the task is terminal; each statusMessage on the way goes to
    `seen`."""
    async with asyncio.timeout(seconds):
        while True:
            task = await get_task(http, url, session_id, task_id)
            if seen is not None and task.get("statusMessage"):
                seen.append(task["statusMessage"])
            if task["status"] in ("completed", "failed", "cancelled"):
                return task
            await asyncio.sleep(0.1)


def result_request(task_id: str, request_id: int = 2) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tasks/result",
        "params": {"taskId": task_id},
    }


#: The real HTTP servers a journey runs against, by the kind it is parametrized with (the
#: fixture that starts each): mcp 1.30's FastMCP and mcp 2.3's MCPServer, both stateful with
#: SSE answers, as the SDKs run by default.
SDK_SERVERS = {"streamable_http": "sdk_upstream", "mcp2": "mcp2_upstream"}


def upstream_of(kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The upstream of a route for `kind`: the stdio demo, or the server SDK_SERVERS names,
    started on first use (mcp2 skips the test where mcp 2.3 is not installed)."""
    if kind == "stdio":
        return DEMO
    return {"transport": "streamable_http", "url": request.getfixturevalue(SDK_SERVERS[kind])}


def route(upstream: dict[str, Any] | None = None, **tasks: Any) -> list[dict[str, Any]]:
    """Route `t` (the demo unless `upstream` is given) with the task policy `tasks`."""
    # These tests run without authentication, where tasks/list is offered only on opt-in.
    auth = {"list_tasks_without_auth": True}
    return [{"name": "t", "upstream": upstream or DEMO, "tasks": tasks, "auth": auth}]


# -- Expect: 100-continue, over a raw socket (aiohttp's client never waits for the go-ahead)


async def expecting(
    url: str, head_lines: list[bytes], body: bytes, method: str = "POST", host: str | None = None
) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """A request head (to `host`, else the URL's) that asks `Expect: 100-continue` and holds
    its body back; the first response head that comes, and the connection."""
    parsed = httpx.URL(url)
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
    head = [
        f"{method} {parsed.raw_path.decode()} HTTP/1.1".encode(),
        f"Host: {host or parsed.netloc.decode()}".encode(),
        *head_lines,
        b"Expect: 100-continue",
        f"Content-Length: {len(body)}".encode(),
    ]
    writer.write(b"\r\n".join(head) + b"\r\n\r\n")
    async with asyncio.timeout(5):
        return await reader.readuntil(b"\r\n\r\n"), reader, writer


async def answered_and_closed(
    url: str, head_lines: list[bytes], status: int, method: str = "POST", host: str | None = None
) -> None:
    """A request that holds its body back for a `100 Continue` (`expecting`) gets `status`
    at once (a refusal, or an answer that reads no body), said with `Connection: close`, and
    its connection closes, not after aiohttp's
    10 s wait for the body (RFC 9110 section 10.1.1: an answer before the content SHOULD say
    whether the server goes on reading it)."""
    answer, reader, writer = await expecting(url, head_lines, b"{}", method=method, host=host)
    try:
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer
        assert b"\r\nconnection: close\r\n" in answer.lower()
        async with asyncio.timeout(2):
            while await reader.read(65536):
                pass
    finally:
        writer.close()


async def answer_to(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next response's head on a connection, and its body (as long as it says)."""
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return head, await reader.readexactly(length)


# -- a session's event streams, read as a connection would

#: What `EventStream.follow` yields: (event number, data), or None for a quiet interval.
StreamItem = tuple[int, str] | None


async def take(stream: EventStream, after: int, count: int, idle: float = 60) -> list[StreamItem]:
    """The next `count` items a connection reading `stream` from event `after` on gets."""
    items: list[StreamItem] = []
    async with asyncio.timeout(5), contextlib.aclosing(stream.follow(after, idle)) as events:
        async for item in events:
            items.append(item)
            if len(items) == count:
                break
    return items


async def until_end(stream: EventStream, after: int = 0) -> list[StreamItem]:
    """Everything a connection reading `stream` from event `after` on gets until it ends."""
    async with asyncio.timeout(5):
        return [item async for item in stream.follow(after, 60)]


async def pushed(stream: EventStream, count: int) -> None:
    """Return once `count` events were pushed to `stream`, none of them read."""
    async with asyncio.timeout(5):
        while stream.pushed < count:
            await stream.wait_changed()


async def messages(stream: EventStream, count: int, after: int = 0) -> list[dict[str, Any]]:
    """The next `count` messages on `stream` after event `after`, decoded."""
    return [json.loads(item[1]) for item in await take(stream, after, count) if item]


async def last_messages(stream: EventStream, after: int = 0) -> list[dict[str, Any]]:
    """The messages on `stream` after event `after` until it ends, decoded."""
    return [json.loads(item[1]) for item in await until_end(stream, after) if item]


# -- the real mcp 1.30 client


@asynccontextmanager
async def client_as(url: str, credential: str) -> AsyncIterator[ClientSession]:
    """The real mcp 1.30 client, sending `Authorization: Bearer <credential>`."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {credential}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def wait_terminal(client: ClientSession, task_id: str) -> types.GetTaskResult:
    async with asyncio.timeout(20):
        async for status in client.experimental.poll_task(task_id):
            if status.status in ("completed", "failed", "cancelled"):
                return status
    raise AssertionError("poll_task ended without a terminal status")


def text(result: types.CallToolResult) -> str:
    """The text of a tool result's first content block."""
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


# -- time


class FakeClock:
    """The gateway's wall clock (`create_app(settings, clock=clock.now)`), moved by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or utcnow()

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


# -- processes

DEMO_ROUTE = (
    "routes: [{name: demo, upstream: {transport: stdio, command: [python, -m, gateway.demo]}}]"
)


def start_process(
    config: Path, port: int, log: Path | None = None, audit: Path | None = None
) -> subprocess.Popen[bytes]:
    """`python -m gateway --config <config>`, once it listens on `port`; its stderr (the log)
    goes to `log` and its stdout (the audit lines, without `audit.file`) to `audit` when given."""
    with open(log or os.devnull, "ab") as err, open(audit or os.devnull, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(config)],
            cwd=ROOT,
            stdout=out,
            stderr=err,
        )
    wait_for_port(port, proc)
    return proc


def write_config(
    tmp_path: Path,
    port: int,
    extra: str = "",
    routes: str = DEMO_ROUTE,
    drain_seconds: float = 0,
    store: str | None = None,
) -> Path:
    """A config file for the real command: listening on `port`, its store in `tmp_path`
    unless `store` (a YAML mapping) says otherwise. SIGTERM stops it without a drain unless
    `drain_seconds` asks for one."""
    config = tmp_path / "gateway.yaml"
    store = store or f"{{path: {json.dumps(str(tmp_path / 'gateway.db'))}}}"
    config.write_text(
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        f"store: {store}\n"
        f"shutdown: {{drain_seconds: {drain_seconds:g}}}\n"
        f"{extra}\n{routes}\n"
    )
    return config


@contextmanager
def gateway_process(
    tmp_path: Path, extra: str = "", args: tuple[str, ...] = (), nofile: int | None = None
) -> Iterator[tuple[str, int, Path]]:
    """The real command on a free port with the demo route; yields its base URL, port and
    stderr file."""
    port = free_port()
    config = write_config(tmp_path, port, extra)
    stderr = tmp_path / f"gateway-{port}.log"

    def limit_descriptors() -> None:
        assert nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(config), *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=limit_descriptors if nofile is not None else None,
        )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}", port, stderr
    finally:
        proc.terminate()
        proc.wait(15)


def pids(pid_dir: Path) -> list[int]:
    """The pids the upstream children (tests/stdio_upstream.py --pid-dir) wrote."""
    return sorted(int(p.name) for p in pid_dir.iterdir())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        # Gone between the two looks: as dead as not found at the first.
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except (ProcessLookupError, FileNotFoundError):
        return False


async def logged(log: Path, text: str, seconds: float = 20) -> None:
    """Return once a process's log file holds `text`. A file has no event to await, and a
    test's log of a few kilobytes reads at once."""
    async with asyncio.timeout(seconds):
        while text not in log.read_text():  # noqa: ASYNC110, ASYNC240 - see above
            await asyncio.sleep(0.05)


async def wait_until_dead(pid: int) -> None:
    async with asyncio.timeout(10):
        while alive(pid):  # noqa: ASYNC110 - another process's exit has no event to await
            await asyncio.sleep(0.05)


# -- the 2026-07-28 wire: every request carries its envelope and names itself in headers

MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: Client capabilities: the tasks extension, and elicitation for MRTR rounds.
WITH_TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
WITH_ELICITATION: dict[str, Any] = {"elicitation": {}}


async def modern_rpc(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any] | None = None,
    capabilities: dict[str, Any] | None = None,
    request_id: int = 7,
    extra: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """One 2026-07-28 request with a valid envelope and headers; returns (status, body)."""
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }
    hdrs = headers(**{"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
    named = params.get("taskId", params.get("name"))
    if isinstance(named, str):
        hdrs["Mcp-Name"] = named
    hdrs.update(extra or {})
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    async with http.post(url, json=body, headers=hdrs) as resp:
        return resp.status, dict(await resp.json())


async def modern_terminal(
    http: aiohttp.ClientSession, url: str, task_id: str, seconds: float = 20
) -> dict[str, Any]:
    """Polls tasks/get until the task is terminal; returns its DetailedTask."""
    async with asyncio.timeout(seconds):
        while True:
            _, body = await modern_rpc(http, url, "tasks/get", {"taskId": task_id}, WITH_TASKS)
            assert "result" in body, body
            task = dict(body["result"])
            if task["status"] in ("completed", "failed", "cancelled"):
                return task
            await asyncio.sleep(0.05)


async def modern_status(
    http: aiohttp.ClientSession, url: str, task_id: str, status: str, seconds: float = 20
) -> dict[str, Any]:
    """Polls tasks/get until the task has `status`; returns its DetailedTask."""
    async with asyncio.timeout(seconds):
        while True:
            _, body = await modern_rpc(http, url, "tasks/get", {"taskId": task_id}, WITH_TASKS)
            if body["result"]["status"] == status:
                return dict(body["result"])
            await asyncio.sleep(0.05)


async def modern_inputs(
    http: aiohttp.ClientSession, url: str, task_id: str, count: int, seconds: float = 20
) -> dict[str, Any]:
    """Polls tasks/get until the task waits on `count` input requests (each question is
    recorded on its own, so the status may show before the last of them)."""
    async with asyncio.timeout(seconds):
        while True:
            task = await modern_status(http, url, task_id, "input_required", seconds)
            if len(task["inputRequests"]) == count:
                return task
            await asyncio.sleep(0.05)


#: mcp 2.3 lives in a venv of its own (it conflicts with 1.30): `.ci/conformance.sh
#: --setup-only` makes it; `MCP2_PYTHON` may name another.
MCP2_PYTHON = Path(
    os.environ.get(
        "MCP2_PYTHON", ROOT / ".cache" / "conformance" / "everything-venv" / "bin" / "python"
    )
)
#: Tests that run mcp 2.3 skip without it, except under CI, which must have installed it.
needs_mcp2 = pytest.mark.skipif(
    not MCP2_PYTHON.exists() and not os.environ.get("CI"),
    reason=f"mcp 2.3 not installed at {MCP2_PYTHON} (bash .ci/conformance.sh --setup-only)",
)
