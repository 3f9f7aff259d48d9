"""Metrics and the audit log, observed from outside: /metrics over HTTP, the audit file."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from mcp import types
from mcp.shared.exceptions import McpError

from gateway.config import AuditConfig
from gateway.observability import audit

from .conftest import DEMO, StartGateway, free_port, mcp_client
from .helpers import audit_events, open_session, start_process, start_task, write_config


async def scrape(url: str, **headers: str) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers=headers) as resp:
            assert resp.status == 200, resp.status
            return await resp.text()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one series in a Prometheus text exposition (0 if absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_metrics_count_requests_tasks_and_upstream_calls_with_bounded_labels(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway([{"name": "demo", "upstream": DEMO}])
    async with mcp_client(f"{base}/demo/mcp") as client:
        await client.list_tools()
        await client.call_tool("echo", {"text": "x"})
        await client.call_tool("fail", {})
        created = await client.experimental.call_tool_as_task("echo", {"text": "t"})
        await client.experimental.get_task_result(created.task.taskId, types.CallToolResult)
        # A tool the upstream never listed is counted as "other", never by its name.
        with pytest.raises(McpError):
            await client.call_tool("made_up_tool_name_x", {})
        text = await scrape(f"{base}/metrics")
    assert (
        sample(text, "mcp_gateway_requests_total", route="demo", method="tools/call", outcome="ok")
        >= 4
    )
    assert (
        sample(text, "mcp_gateway_upstream_requests_total", route="demo", tool="echo", outcome="ok")
        >= 2
    )
    assert (
        sample(
            text,
            "mcp_gateway_upstream_requests_total",
            route="demo",
            tool="fail",
            outcome="tool_error",
        )
        == 1
    )
    assert (
        sample(
            text,
            "mcp_gateway_upstream_requests_total",
            route="demo",
            tool="other",
            outcome="jsonrpc_error",
        )
        == 1
    )
    assert sample(text, "mcp_gateway_tasks_created_total", route="demo") == 1
    assert sample(text, "mcp_gateway_tasks_finished_total", route="demo", status="completed") == 1
    assert "made_up_tool_name_x" not in text
    # Never a task id as a label value.
    assert created.task.taskId not in text


async def test_metrics_never_carry_session_ids_or_principals(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K", "secret-key-1")
    auth = {"mode": "api_keys", "api_keys": [{"principal": "alice-person", "key_env": "K"}]}
    base = await start_gateway([{"name": "demo", "upstream": DEMO, "auth": auth}])
    url = f"{base}/demo/mcp"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": "Bearer secret-key-1",
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=init, headers=headers) as resp:
            session_id = resp.headers["Mcp-Session-Id"]
        async with http.post(url, json=init, headers={**headers, "Authorization": "Bearer no"}):
            pass
    text = await scrape(f"{base}/metrics")
    assert session_id not in text and "alice-person" not in text and "secret-key-1" not in text
    assert sample(text, "mcp_gateway_auth_failures_total", route="demo") == 1
    assert sample(text, "mcp_gateway_sessions_active", route="demo") == 1
    assert sample(text, "mcp_gateway_stdio_children", route="demo") == 1


async def test_metrics_can_require_a_bearer_token_and_listen_on_their_own_address(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("METRICS_TOKEN", "scrape-me")
    port = free_port()
    base = await start_gateway(
        metrics={"listen": {"host": "127.0.0.1", "port": port}, "bearer_token_env": "METRICS_TOKEN"}
    )
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/metrics") as on_gateway:
            assert on_gateway.status == 404  # moved to its own address
        async with http.get(f"http://127.0.0.1:{port}/metrics") as anonymous:
            assert anonymous.status == 401
    text = await scrape(f"http://127.0.0.1:{port}/metrics", Authorization="Bearer scrape-me")
    assert "mcp_gateway_requests_total" in text


def forget_audit_handlers() -> None:
    audit.stop()  # writes out what is queued
    log = logging.getLogger("gateway.audit")
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    log.propagate = True


class StuckDisk(logging.Handler):
    """A handler whose writes hang until `unstick` is set: a disk that stopped answering."""

    def __init__(self) -> None:
        super().__init__()
        self.unstick = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.unstick.wait(10)
        self.lines.append(record.getMessage())


def test_a_stuck_audit_disk_holds_up_no_caller_and_a_clean_stop_writes_every_line() -> None:
    disk = StuckDisk()
    audit.start(disk)
    try:
        started = time.perf_counter()
        for n in range(200):
            audit.audit("task_created", task_id=f"t{n}", route="demo")
        # 200 events while the disk hangs: each was only queued (a write would take 10 s).
        assert time.perf_counter() - started < 1
        assert disk.lines == []
        disk.unstick.set()
    finally:
        forget_audit_handlers()
    assert [json.loads(line)["task_id"] for line in disk.lines] == [f"t{n}" for n in range(200)]


def test_the_lines_queued_meanwhile_reach_a_configured_handler_joined_in_bounded_records() -> None:
    # One record a line cost creations a tenth of their rate (docs/performance.md): each
    # write gave the GIL to the event loop and took it back.
    disk = StuckDisk()
    audit.start(disk, 1000)
    try:
        for n in range(200):
            audit.audit("task_created", task_id=f"t{n}", route="demo")
        disk.unstick.set()
    finally:
        forget_audit_handlers()
    records = disk.lines
    lines = [line for record in records for line in record.split("\n")]
    assert [json.loads(line)["task_id"] for line in lines] == [f"t{n}" for n in range(200)]
    assert len(records) < 40 and all(len(record) <= 1000 for record in records)


def blocked_signals(thread: threading.Thread) -> set[signal.Signals]:
    """The signals `thread` blocks, as Linux reports them (SigBlk: a hex bit mask)."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    mask = int(next(ln for ln in status.splitlines() if ln.startswith("SigBlk:")).split()[1], 16)
    return {sig for sig in signal.Signals if mask >> (sig - 1) & 1}


def test_the_audit_writer_takes_none_of_the_signals_the_event_loop_handles() -> None:
    """The kernel gives a process's signal to any thread not blocking it. One the writer took
    while the loop closed its self-pipe was written to a closed descriptor (CI printed
    "OSError: [Errno 9] Bad file descriptor" at the stop) or took its default action."""
    audit.start(logging.NullHandler())
    try:
        writer = next(t for t in threading.enumerate() if t.name == "audit-writer")
        audit.audit("task_created", task_id="t", route="demo")  # the writer has run
        deadline = time.monotonic() + 5
        while not {signal.SIGTERM, signal.SIGINT, signal.SIGHUP} <= blocked_signals(writer):
            assert time.monotonic() < deadline, blocked_signals(writer)
            time.sleep(0.01)
    finally:
        forget_audit_handlers()


async def test_a_stopped_gateway_has_written_every_audit_event_of_its_run(tmp_path: Path) -> None:
    port = free_port()
    trail = tmp_path / "audit.log"
    config = write_config(tmp_path, port, f"audit: {{file: {json.dumps(str(trail))}}}")
    proc = start_process(config, port)
    try:
        url = f"http://127.0.0.1:{port}/demo/mcp"
        async with aiohttp.ClientSession() as http:
            sessions = [await open_session(http, url) for _ in range(10)]
            for session in sessions:
                await start_task(http, url, session, "slow", {"seconds": 60, "steps": 1})
    finally:
        proc.terminate()  # SIGTERM, no drain: the tasks fail as the gateway stops
        assert proc.wait(15) == 0
    events = [json.loads(line) for line in trail.read_text().splitlines()]
    assert [e["event"] for e in events].count("session_created") == 10
    assert [e["event"] for e in events].count("task_created") == 10
    # Written on the way out, after the last request: the queue was emptied before the exit.
    failed = [e for e in events if e["event"] == "task_status_changed" and e["status"] == "failed"]
    assert len(failed) == 10


def test_audit_log_is_json_lines_in_a_rotating_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    audit.configure(AuditConfig(file=str(path), max_bytes=1024, backups=2))
    try:
        for n in range(40):
            audit.audit("auth_failed", route="demo", reason="token expired", n=n)
    finally:
        forget_audit_handlers()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all(f.stat().st_size < 1024 for f in files)  # rotated between records, as asked
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records and all(r["event"] == "auth_failed" and r["time"].endswith("Z") for r in records)


def test_an_audit_line_reads_as_the_standard_encoder_writes_it_whatever_its_fields_hold(
    tmp_path: Path,
) -> None:
    """The lines are made by orjson where it writes what json would, else by json: hostile
    values (a lone surrogate from a token's claims, NUL, non-ASCII, a huge integer) neither
    fail the event nor change how the line reads."""
    path = tmp_path / "audit.log"
    audit.configure(AuditConfig(file=str(path)))
    odd: list[object] = ["\udc80", "a\x00b", "ü ✓", 2**70, True, 1.877145, "x\n{", ["y"]]
    odd.append(datetime(2026, 7, 28, tzinfo=UTC))
    try:
        for value in odd:
            audit.audit("auth_failed", route="demo", principal=value)
    finally:
        forget_audit_handlers()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(odd) and all(line.isascii() for line in lines)
    made = [json.loads(line) for line in lines]
    standard = json.JSONEncoder(separators=(",", ":"), default=str)
    for line, record, value in zip(lines, made, odd, strict=True):
        assert line == standard.encode({**record, "principal": value})


def test_an_audit_lines_time_is_its_moment_in_utc_to_the_millisecond(tmp_path: Path) -> None:
    """Printed as task times are (`tasks.models.iso`), across a change of second too."""
    path = tmp_path / "audit.log"
    audit.configure(AuditConfig(file=str(path)))
    moments: list[tuple[datetime, datetime]] = []
    try:
        for _ in range(3):
            before = datetime.now(UTC)
            audit.audit("auth_failed", route="demo", reason="token expired")
            moments.append((before, datetime.now(UTC)))
            time.sleep(0.6)  # (each line in another second, or the next one's half)
    finally:
        forget_audit_handlers()
    stamps = [json.loads(line)["time"] for line in path.read_text().splitlines()]
    assert len(stamps) == 3
    for stamp, (before, after) in zip(stamps, moments, strict=True):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), stamp
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        # Milliseconds cut, not rounded, as isoformat(timespec="milliseconds") does.
        assert before - timedelta(milliseconds=1) < moment <= after


async def test_the_gauges_the_alerts_read_follow_the_tasks_and_the_store(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(
        [{"name": "demo", "upstream": DEMO, "tasks": {"time_limit_seconds": 120}}],
        sessions={"max_sessions": 50},
    )
    url = f"{base}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        await start_task(http, url, session, "slow", {"seconds": 30, "steps": 1})
        await asyncio.sleep(1.1)
    text = await scrape(f"{base}/metrics")
    assert sample(text, "mcp_gateway_task_oldest_running_seconds", route="demo") >= 1
    assert sample(text, "mcp_gateway_task_time_limit_seconds", route="demo") == 120
    assert sample(text, "mcp_gateway_sessions_max") == 50
    assert sample(text, "mcp_gateway_replicas_live") == 1  # one process on SQLite
    assert sample(text, "mcp_gateway_stdio_children_max", route="demo") == 32
    assert sample(text, "mcp_gateway_upstream_up", route="demo") == 1
    written = sample(text, "mcp_gateway_store_last_write_timestamp_seconds")
    assert abs(written - time.time()) < 30  # the task's creation, a moment ago


async def test_task_lifecycle_and_sessions_are_audited_without_arguments(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    base = await start_gateway([{"name": "demo", "upstream": DEMO}])
    async with mcp_client(f"{base}/demo/mcp") as client:
        created = await client.experimental.call_tool_as_task("echo", {"text": "private words"})
        await client.experimental.get_task_result(created.task.taskId, types.CallToolResult)
        slow = await client.experimental.call_tool_as_task("slow", {"seconds": 30, "steps": 1})
        await client.experimental.cancel_task(slow.task.taskId)
    events = audit_events(caplog)
    kinds = [e["event"] for e in events]
    for kind in (
        "session_created",
        "task_created",
        "task_status_changed",
        "task_result_retrieved",
        "task_cancelled",
        "session_ended",
    ):
        assert kind in kinds, kind
    ended = [
        e for e in events if e["event"] == "task_status_changed" and e["status"] == "completed"
    ]
    assert ended and ended[0]["duration_seconds"] >= 0
    first = next(e for e in events if e["event"] == "task_created")
    assert first["task_id"] == created.task.taskId and first["tool"] == "echo"
    assert first["generation"] == "2025-11-25"
    assert "private words" not in caplog.text  # arguments only when the operator opts in


async def test_requests_are_counted_and_audited_by_protocol_generation(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    monkeypatch.setenv("K", "key-1")
    auth = {"mode": "api_keys", "api_keys": [{"principal": "alice", "key_env": "K"}]}
    base = await start_gateway([{"name": "demo", "upstream": DEMO, "auth": auth}])
    url = f"{base}/demo/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    modern = {**accept, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with aiohttp.ClientSession() as http:
        for body, hdrs in ((listing, modern), (init, accept)):
            async with http.post(url, json=body, headers={**hdrs, "Authorization": "Bearer no"}):
                pass
            async with http.post(url, json=body, headers={**hdrs, "Authorization": "Bearer key-1"}):
                pass
    text = await scrape(f"{base}/metrics")

    def counted(generation: str, method: str, outcome: str) -> float:
        labels = {"generation": generation, "method": method, "outcome": outcome}
        return sample(text, "mcp_gateway_requests_total", route="demo", **labels)

    assert counted("2026-07-28", "tools/list", "ok") == 1
    assert counted("2025-11-25", "initialize", "ok") == 1
    # Refused before the body is read: the headers alone tell the generation.
    assert counted("2026-07-28", "other", "rejected") == 1
    assert counted("2025-11-25", "other", "rejected") == 1
    assert counted("2025-11-25", "tools/list", "ok") == 0
    seconds = "mcp_gateway_request_duration_seconds_count"
    assert sample(text, seconds, generation="2026-07-28", method="tools/list") == 1
    refused = audit_events(caplog, "auth_failed")
    assert sorted(e["generation"] for e in refused) == ["2025-11-25", "2026-07-28"]
