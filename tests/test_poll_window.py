"""`tasks.poll_window_ms`: a poll that comes while a young task's call runs waits for its end.

Clients poll once at once, then every `pollInterval` ("Requestors SHOULD respect the
pollInterval provided in responses when polling for task completion", tasks-2025-11-25): the
Python SDK's `poll_task` does. Without the window, a quick tool's task was `working` at that
first poll and its client slept a whole interval (1 s by default) before it saw the result.
The window changes no status the spec defines, only when the answer to an early poll leaves.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import types

from gateway.tasks.models import Task
from gateway.tasks.store.sqlite import SqliteTaskStore

from .conftest import StartGateway, mcp_client
from .helpers import (
    RELATED,
    WITH_TASKS,
    headers,
    modern_rpc,
    raw_session,
    route,
    rpc,
    start_task,
    text,
    upstream_of,
)
from .test_docs import TS_DIR, needs_ts_sdk, node

#: Far above any quick call's time on a loaded machine; the tests show what ends a wait.
WIDE_MS = 5000


@pytest.mark.parametrize("kind", ["stdio", "streamable_http", "mcp2"])
async def test_a_quick_tools_task_is_completed_at_the_python_sdks_first_poll(
    kind: str, start_gateway: StartGateway, request: pytest.FixtureRequest
) -> None:
    base = await start_gateway(route(upstream_of(kind, request), poll_window_ms=WIDE_MS))
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("echo", {"text": "quick"})
        # Tasks MUST begin in the `working` status: the creation answers before the call ends.
        assert created.task.status == "working"
        statuses = [s.status async for s in client.experimental.poll_task(created.task.taskId)]
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
    assert statuses == ["completed"]  # one poll, no pollInterval slept
    assert text(result) == "quick"


#: The TypeScript SDK 1.32.2's client: `callToolStream` polls tasks/get at once, then every
#: pollInterval, as the Python SDK's does; it prints each status it sees, then the result.
TS_POLLER = """
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
const client = new Client({ name: "poll-window", version: "1.0.0" });
await client.connect(transport);
const call = { name: "echo", arguments: { text: "quick" } };
const stream = client.experimental.tasks.callToolStream(call, CallToolResultSchema, { task: {} });
for await (const m of stream) {
  if (m.type === "taskStatus") console.log(m.task.status);
  if (m.type === "result") console.log(m.result.content[0].text);
  if (m.type === "error") console.log("failed:", m.error.message);
}
await transport.terminateSession();
await client.close();
"""


@needs_ts_sdk
async def test_a_quick_tools_task_is_completed_at_the_typescript_sdks_first_poll(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    base = await start_gateway(route(poll_window_ms=WIDE_MS))
    (tmp_path / "node_modules").symlink_to(TS_DIR / "node_modules", target_is_directory=True)
    script = tmp_path / "poll.mjs"
    script.write_text(TS_POLLER, encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        node(),
        str(script),
        f"{base}/t/mcp",
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert out.decode().split() == ["completed", "quick"]  # one poll, no pollInterval slept


async def test_a_poll_in_the_window_of_a_longer_call_says_working_when_the_window_closes(
    start_gateway: StartGateway, request: pytest.FixtureRequest
) -> None:
    # The demo's slow tool runs 3 s; the window is the default 100 ms.
    base = await start_gateway(route(upstream_of("stdio", request)))
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 3, "steps": 1})
        first = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id})
        again = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, request_id=3)
    assert first["result"]["status"] == again["result"]["status"] == "working"


async def test_a_question_in_the_window_answers_the_waiting_poll_at_once(
    start_gateway: StartGateway,
) -> None:
    # Over raw HTTP: a session with no GET stream keeps the question for tasks/result, so no
    # client answers it before the poll reads the status. (The SDK client, its GET stream
    # open, gets the question there, and its callback runs in the loop that would read the
    # poll's answer: it can neither answer at once nor wait.)
    base = await start_gateway(route(poll_window_ms=WIDE_MS))
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "ask")
        began = time.monotonic()
        polled = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id})
        waited = time.monotonic() - began
        await rpc(http, url, session_id, "tasks/cancel", {"taskId": task_id}, request_id=5)
    # "When a receiver needs input ... the receiver MUST move the task to input_required": a
    # poll waiting in the window hears of the move, not of the window's end.
    assert polled["result"]["status"] == "input_required"
    assert waited < WIDE_MS / 1000 / 2


async def test_a_cancel_answers_a_poll_waiting_in_the_window_at_once(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(poll_window_ms=WIDE_MS))
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 30, "steps": 1})
        began = time.monotonic()

        async def cancel_soon() -> None:
            await asyncio.sleep(0.2)
            await rpc(http, url, session_id, "tasks/cancel", {"taskId": task_id}, request_id=5)

        polled, _ = await asyncio.gather(
            rpc(http, url, session_id, "tasks/get", {"taskId": task_id}), cancel_soon()
        )
        waited = time.monotonic() - began
    assert polled["result"]["status"] == "cancelled"
    assert waited < WIDE_MS / 1000 / 2


async def test_a_strangers_poll_of_a_young_task_is_not_found_at_once(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(poll_window_ms=WIDE_MS))
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        owner, _ = await raw_session(http, url)
        task_id = await start_task(http, url, owner, "slow", {"seconds": 3, "steps": 1})
        # Without authentication every session is its own caller.
        stranger, _ = await raw_session(http, url)
        began = time.monotonic()
        answer = await rpc(http, url, stranger, "tasks/get", {"taskId": task_id})
        waited = time.monotonic() - began
    assert "error" in answer and waited < WIDE_MS / 1000 / 2


async def test_a_2026_clients_first_poll_of_a_quick_task_inlines_its_result(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(sync_window_ms=0, poll_window_ms=WIDE_MS))
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        params = {"name": "echo", "arguments": {"text": "quick"}}
        _, created = await modern_rpc(http, url, "tools/call", params, WITH_TASKS)
        assert created["result"]["status"] == "working"
        task_id = created["result"]["taskId"]
        _, polled = await modern_rpc(http, url, "tasks/get", {"taskId": task_id}, WITH_TASKS)
    assert polled["result"]["status"] == "completed"
    assert polled["result"]["result"]["content"][0]["text"] == "quick"


async def test_the_owners_first_poll_of_a_quick_task_reads_nothing_back(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll is answered with the task as the terminal write left it: on PostgreSQL a
    read would be a round trip per lifecycle."""
    base = await start_gateway(route(poll_window_ms=WIDE_MS))
    url = f"{base}/t/mcp"
    reads: list[str] = []
    find_task = SqliteTaskStore.find_task

    async def counted(self: SqliteTaskStore, task_id: str, owner: str) -> Task | None:
        reads.append(task_id)
        return await find_task(self, task_id, owner)

    monkeypatch.setattr(SqliteTaskStore, "find_task", counted)
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        # (A call still running when the poll comes: one already ended is read from memory
        # on either store, the outcome kept beside it.)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.3, "steps": 1})
        polled = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id})
    assert polled["result"]["status"] == "completed"
    assert reads == []


async def test_the_owners_poll_during_the_terminal_write_waits_for_it_and_reads_nothing(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window here: a poll that comes once the call has ended, its terminal write still
    under way (milliseconds on a busy shared store, held here), is answered from that write
    when it lands, with no read of its own."""
    base = await start_gateway(route(poll_window_ms=0))
    url = f"{base}/t/mcp"
    reads: list[str] = []
    find_task, finish_task = SqliteTaskStore.find_task, SqliteTaskStore.finish_task
    writing, gate = asyncio.Event(), asyncio.Event()

    async def counted(self: SqliteTaskStore, task_id: str, owner: str) -> Task | None:
        reads.append(task_id)
        return await find_task(self, task_id, owner)

    async def held(self: SqliteTaskStore, *args: Any) -> Task | None:
        writing.set()
        await gate.wait()
        return await finish_task(self, *args)

    monkeypatch.setattr(SqliteTaskStore, "find_task", counted)
    monkeypatch.setattr(SqliteTaskStore, "finish_task", held)
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.1, "steps": 1})
        async with asyncio.timeout(10):
            await writing.wait()
        polling = asyncio.ensure_future(
            rpc(http, url, session_id, "tasks/get", {"taskId": task_id})
        )
        await asyncio.sleep(0.2)
        assert not polling.done()
        gate.set()
        polled = await polling
    assert polled["result"]["status"] == "completed"
    assert reads == []


async def test_the_owners_tasks_result_for_a_young_call_is_its_answer_as_json_with_no_read(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking tasks/result that comes in the window waits as a poll does: the answer is
    the run's own outcome, audited as read, with no stream opened and nothing read back."""
    base = await start_gateway(route(poll_window_ms=WIDE_MS))
    url = f"{base}/t/mcp"
    reads: list[str] = []
    for name in ("find_task", "get_task", "get_outcome"):
        read = getattr(SqliteTaskStore, name)

        async def counted(self: SqliteTaskStore, *args: Any, _read: Any = read) -> Any:
            reads.append(_read.__name__)
            return await _read(self, *args)

        monkeypatch.setattr(SqliteTaskStore, name, counted)
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.3, "steps": 1})
        message = {"jsonrpc": "2.0", "id": 2, "method": "tasks/result"}
        message["params"] = {"taskId": task_id}
        async with http.post(url, json=message, headers=headers(session_id)) as resp:
            assert resp.content_type == "application/json"
            answer = await resp.json()
    assert answer["result"]["content"][0]["text"] == "slept 0.3 s"
    assert answer["result"]["_meta"][RELATED] == {"taskId": task_id}
    assert reads == []
