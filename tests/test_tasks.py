"""Gateway-owned tasks through the real mcp 1.30 task client, against legacy upstreams.

Each test names the rule of the 2025-11-25 tasks spec it checks.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from mcp import types
from mcp.shared.exceptions import McpError

from gateway.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from gateway.protocol.outcome import Outcome
from gateway.session import task_api as api_2025
from gateway.tasks.models import Task
from gateway.tasks.notifier import Notifier
from gateway.tasks.store.sqlite import SqliteTaskStore

from .conftest import ROOT, StartGateway, mcp_client
from .fakes import FAULT_HOOKS
from .helpers import (
    RELATED,
    FakeClock,
    headers,
    raw_session,
    read_messages,
    result_request,
    route,
    rpc,
    start_task,
    text,
    upstream_of,
    wait_terminal,
)
from .test_observability import sample, scrape

# -- capabilities and tool policy


async def test_initialize_advertises_tasks_to_2025_11_25_clients_only(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route())}/t/mcp"
    async with aiohttp.ClientSession() as http:
        _, modern = await raw_session(http, url)
        _, older = await raw_session(http, url, "2025-06-18")
    # Servers that support task-augmented requests MUST declare a `tasks` capability.
    assert modern["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert "tasks" not in older["capabilities"]


async def test_tools_list_carries_task_support_from_the_route_policy(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(tools={"echo": "forbidden", "slow": "required"}))
    async with mcp_client(f"{base}/t/mcp") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert (
        tools["echo"].execution is not None and tools["echo"].execution.taskSupport == "forbidden"
    )
    assert tools["slow"].execution is not None and tools["slow"].execution.taskSupport == "required"
    assert tools["ask"].execution is not None and tools["ask"].execution.taskSupport == "optional"


async def test_forbidden_tool_as_task_and_required_tool_called_plainly_get_minus_32601(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(tools={"echo": "forbidden", "slow": "required"}))
    async with mcp_client(f"{base}/t/mcp") as client:
        # forbidden + task: "Servers SHOULD return a -32601 (Method not found) error".
        with pytest.raises(McpError) as forbidden:
            await client.experimental.call_tool_as_task("echo", {"text": "x"})
        # required without task: "Servers MUST return a -32601 (Method not found) error".
        with pytest.raises(McpError) as required:
            await client.call_tool("slow", {"seconds": 0.1})
    assert forbidden.value.error.code == METHOD_NOT_FOUND
    assert required.value.error.code == METHOD_NOT_FOUND


async def test_a_route_with_tasks_off_processes_task_calls_normally(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route(enabled=False))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, init = await raw_session(http, url)
        assert "tasks" not in init["capabilities"]
        answer = await rpc(
            http,
            url,
            session_id,
            "tools/call",
            {"name": "echo", "arguments": {"text": "plain"}, "task": {"ttl": 1000}},
        )
    # Receivers without the capability MUST process the request normally, ignoring `task`.
    assert answer["result"]["content"][0]["text"] == "plain"


# -- creating tasks and getting results


#: Per upstream kind (`helpers.upstream_of`): a `slow` call of about a second, and its answer.
SLOW_CALLS: dict[str, tuple[dict[str, Any], str]] = {
    "stdio": ({"seconds": 1, "steps": 2}, "slept 1 s"),
    "streamable_http": ({"steps": 10}, "10 steps done"),
    "mcp2": ({"text": "slept a second", "seconds": 1, "steps": 2}, "slept a second"),
}


@pytest.mark.parametrize("kind", list(SLOW_CALLS))
async def test_task_call_returns_a_working_task_at_once_and_the_result_later(
    kind: str, start_gateway: StartGateway, request: pytest.FixtureRequest
) -> None:
    args, expected = SLOW_CALLS[kind]
    base = await start_gateway(route(upstream_of(kind, request)))
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("slow", args, ttl=120_000)
        task = created.task
        # Tasks MUST begin in the `working` status (which also shows the answer came before
        # the upstream call ended); createdAt, lastUpdatedAt and the actual ttl are in every
        # task response.
        assert task.status == "working" and task.ttl == 120_000
        assert task.createdAt is not None and task.lastUpdatedAt is not None
        assert task.pollInterval == 1000 and len(task.taskId) >= 22
        final = await wait_terminal(client, task.taskId)
        result = await client.experimental.get_task_result(task.taskId, types.CallToolResult)
    assert final.status == "completed"
    assert text(result) == expected


async def test_upstream_receives_a_plain_tools_call_without_the_task_field(
    start_gateway: StartGateway, faulty_upstream: TestServer
) -> None:
    url = str(faulty_upstream.make_url("/mcp"))
    base = await start_gateway(route({"transport": "streamable_http", "url": url}))
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("echo", {"text": "hi"})
        await wait_terminal(client, created.task.taskId)
    calls = [
        m for m in faulty_upstream.app[FAULT_HOOKS].received if m.get("method") == "tools/call"
    ]
    assert len(calls) == 1 and "task" not in calls[0]["params"]
    assert calls[0]["params"]["arguments"] == {"text": "hi"}


async def test_tasks_result_returns_the_upstream_result_with_related_task_meta(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route())
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("echo", {"text": "exact ✓"})
        # tasks/result straight after CreateTaskResult blocks until the task is terminal.
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
    assert text(result) == "exact ✓" and result.structuredContent == {"text": "exact ✓"}
    # The tasks/result response MUST include the related-task metadata.
    assert result.meta is not None and result.meta[RELATED] == {"taskId": created.task.taskId}


async def test_blocking_tasks_result_streams_keep_alives_until_the_task_ends(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route(), http={'keepalive_seconds': 0.1})}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.8, "steps": 1})
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as resp:
            assert resp.content_type == "text/event-stream"
            body = (await resp.content.read()).decode()
    assert ": keep-alive" in body  # nothing between gateway and client sees an idle stream
    assert '"text":"slept 0.8 s"' in body and f'"taskId":"{task_id}"' in body


async def test_a_terminal_write_between_the_results_read_and_its_wait_answers_at_once(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking tasks/result watches the task before it reads it: a terminal write that
    lands after its read saw `working`, before its wait began, answers it at once (the
    contract: within milliseconds of the write), never at the backstop poll seconds later."""
    url = f"{await start_gateway(route())}/t/mcp"
    landed = asyncio.Event()
    finish, find = SqliteTaskStore.finish_task, SqliteTaskStore.find_task

    async def finishing(self: SqliteTaskStore, *args: Any, **kwargs: Any) -> Task | None:
        done = await finish(self, *args, **kwargs)
        landed.set()
        return done

    async def read_before_the_write(self: SqliteTaskStore, task_id: str, owner: str) -> Task | None:
        task = await find(self, task_id, owner)
        assert task is not None and not task.status.terminal
        await landed.wait()  # the write lands between the read and the wait
        return task

    monkeypatch.setattr(SqliteTaskStore, "finish_task", finishing)
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.3, "steps": 1})
        monkeypatch.setattr(SqliteTaskStore, "find_task", read_before_the_write)
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as resp:
            await landed.wait()
            async with asyncio.timeout(1):  # the backstop is 5 s
                body = (await resp.content.read()).decode()
    assert '"text":"slept 0.3 s"' in body


async def test_a_waiting_result_is_answered_from_the_terminal_write_without_reading_it_back(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run that ends a task here hands its waiting tasks/result the outcome it wrote: the
    answer needs no read of the store (a round trip to a shared PostgreSQL) and no turn of
    the loop of its own. Audited as read all the same."""
    url = f"{await start_gateway(route())}/t/mcp"
    read_back: list[str] = []
    get_task, get_outcome = SqliteTaskStore.get_task, SqliteTaskStore.get_outcome

    async def reading_task(self: SqliteTaskStore, task_id: str) -> Task | None:
        read_back.append("task")
        return await get_task(self, task_id)

    async def reading_outcome(self: SqliteTaskStore, task_id: str) -> Outcome | None:
        read_back.append("outcome")
        return await get_outcome(self, task_id)

    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.3, "steps": 1})
        monkeypatch.setattr(SqliteTaskStore, "get_task", reading_task)
        monkeypatch.setattr(SqliteTaskStore, "get_outcome", reading_outcome)
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as resp:
            if resp.content_type == "text/event-stream":  # (a slow machine: past the window)
                answer = (await read_messages(resp, 1))[0]
            else:
                answer = await resp.json()
    assert answer["result"]["content"][0]["text"] == "slept 0.3 s"
    assert answer["result"]["_meta"][RELATED] == {"taskId": task_id}
    # The tool's last progress comes with its answer: when the progress note commits in the
    # batch before the terminal write's, it wakes the wait, which reads the task's status (its
    # job); the answer itself reads nothing.
    assert "outcome" not in read_back and read_back in ([], ["task"])


async def test_a_lost_wake_up_still_ends_the_wait_at_the_backstop_and_is_counted(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Correctness never depends on a wake-up (a replica's NOTIFY may be lost): the wait
    re-reads the task at the backstop poll, and a metric counts each time that poll, not a
    wake-up, brought the news."""
    monkeypatch.setattr(api_2025, "_BACKSTOP_SECONDS", 0.3)
    monkeypatch.setattr(Notifier, "task_changed", lambda self, task_id: None)
    monkeypatch.setattr(Notifier, "task_ended", lambda self, task, outcome: None)
    base = await start_gateway(route())
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.1, "steps": 1})
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as resp:
            body = (await resp.content.read()).decode()
    assert '"text":"slept 0.1 s"' in body
    assert sample(await scrape(f"{base}/metrics"), "mcp_gateway_task_wakeups_lost_total") == 1


async def test_requested_ttl_is_clamped_to_the_maximum_and_reported(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(max_ttl_ms=5000, default_ttl_ms=2000))
    async with mcp_client(f"{base}/t/mcp") as client:
        clamped = await client.experimental.call_tool_as_task("echo", {"text": "a"}, ttl=60_000)
        fetched = await client.experimental.get_task(clamped.task.taskId)
    assert clamped.task.ttl == 5000 and fetched.ttl == 5000


async def test_immediate_response_meta_is_sent_when_the_route_configures_it(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route(immediate_response='Working on it.'))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        created = await rpc(
            http,
            url,
            session_id,
            "tools/call",
            {"name": "echo", "arguments": {"text": "x"}, "task": {"ttl": 1000}},
        )
    meta = created["result"]["_meta"]
    assert meta["io.modelcontextprotocol/model-immediate-response"] == "Working on it."


# -- outcomes: the status rules


async def test_is_error_result_fails_the_task_and_tasks_result_still_returns_it(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route())
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("fail", {})
        final = await wait_terminal(client, created.task.taskId)
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
    # "For tool calls specifically, this includes cases where the tool call result has
    # isError set to true" -> failed; tasks/result returns exactly that result.
    assert final.status == "failed" and final.statusMessage == "the tool failed on purpose"
    assert result.isError and text(result) == "the tool failed on purpose"


async def test_json_rpc_error_fails_the_task_and_tasks_result_replays_it(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route())
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("error", {})
        final = await wait_terminal(client, created.task.taskId)
        # "If the underlying request resulted in a JSON-RPC error, tasks/result MUST return
        # that same JSON-RPC error."
        with pytest.raises(McpError) as raised:
            await client.experimental.get_task_result(created.task.taskId, types.CallToolResult)
    assert final.status == "failed" and final.statusMessage == "upstream error on purpose"
    assert raised.value.error.code == -32000
    assert raised.value.error.message == "upstream error on purpose"


@pytest.mark.parametrize(
    ("tool", "says", "limit"),
    [
        ("hang", "did not finish the task within 0.5 s", 0.5),
        ("garbage", "invalid answer", None),
        ("drop", "cannot reach the upstream", None),
    ],
)
async def test_upstream_failure_fails_the_task_and_tasks_result_says_which(
    tool: str,
    says: str,
    limit: float | None,
    start_gateway: StartGateway,
    faulty_upstream: TestServer,
) -> None:
    url = str(faulty_upstream.make_url("/mcp"))
    tasks = {"time_limit_seconds": limit} if limit else {}
    base = await start_gateway(route({"transport": "streamable_http", "url": url}, **tasks))
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task(tool, {})
        final = await wait_terminal(client, created.task.taskId)
        with pytest.raises(McpError) as raised:
            await client.experimental.get_task_result(created.task.taskId, types.CallToolResult)
    assert (
        final.status == "failed" and final.statusMessage is not None and says in final.statusMessage
    )
    assert raised.value.error.code == INTERNAL_ERROR and says in raised.value.error.message


async def test_upstream_process_killed_mid_task_fails_the_task(
    start_gateway: StartGateway, tmp_path: Any
) -> None:
    command = ["python", str(ROOT / "tests" / "stdio_upstream.py")]
    base = await start_gateway(route({"transport": "stdio", "command": command}))
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("crash", {})
        final = await wait_terminal(client, created.task.taskId)
        with pytest.raises(McpError) as raised:
            await client.experimental.get_task_result(created.task.taskId, types.CallToolResult)
        # The session goes on with a fresh child.
        assert text(await client.call_tool("echo", {"text": "alive"})) == "alive"
    assert final.status == "failed"
    assert final.statusMessage == "the stdio upstream process exited with code 3"
    assert raised.value.error.code == INTERNAL_ERROR
    assert raised.value.error.message == final.statusMessage


# -- tasks/get, tasks/list, tasks/cancel


async def test_unknown_and_expired_task_ids_get_minus_32602(start_gateway: StartGateway) -> None:
    clock = FakeClock()
    base = await start_gateway(route(), clock=clock.now)
    async with mcp_client(f"{base}/t/mcp") as client:
        with pytest.raises(McpError) as unknown:
            await client.experimental.get_task("no-such-task")
        short = await client.experimental.call_tool_as_task("echo", {"text": "x"}, ttl=60_000)
        assert (await client.experimental.get_task(short.task.taskId)).taskId == short.task.taskId
        clock.advance(60)  # the ttl has passed
        with pytest.raises(McpError) as expired:
            await client.experimental.get_task(short.task.taskId)
        with pytest.raises(McpError) as expired_result:
            await client.experimental.get_task_result(short.task.taskId, types.CallToolResult)
    assert unknown.value.error.code == INVALID_PARAMS
    assert unknown.value.error.message == "Failed to retrieve task: Task not found"
    assert expired.value.error.code == INVALID_PARAMS
    assert expired.value.error.message == "Failed to retrieve task: Task has expired"
    assert expired_result.value.error.code == INVALID_PARAMS


async def test_stray_task_field_on_tasks_get_and_result_is_ignored(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route())}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "echo", {"text": "ts"})
        # The TS SDK client sends its request options as params.task on these requests.
        result = await rpc(
            http, url, session_id, "tasks/result", {"taskId": task_id, "task": {"ttl": 30000}}, 2
        )
        got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id, "task": {}}, 3)
    assert result["result"]["content"][0]["text"] == "ts"
    assert got["result"]["status"] == "completed"
    assert RELATED not in got["result"].get("_meta", {})  # SHOULD NOT on tasks/get


async def test_tasks_list_pages_with_opaque_cursors_and_rejects_forged_ones(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(list_page_size=2))
    async with mcp_client(f"{base}/t/mcp") as client, mcp_client(f"{base}/t/mcp") as other:
        ids = [
            (await client.experimental.call_tool_as_task("echo", {"text": str(i)})).task.taskId
            for i in range(5)
        ]
        await other.experimental.call_tool_as_task("echo", {"text": "not yours"})
        pages, cursor = [], None
        while True:
            page = await client.experimental.list_tasks(cursor)
            pages.append([t.taskId for t in page.tasks])
            cursor = page.nextCursor
            if cursor is None:
                break
            last_cursor = cursor
        # A cursor is bound to its session: another one gets -32602, and so does a forgery.
        with pytest.raises(McpError) as foreign:
            await other.experimental.list_tasks(last_cursor)
        with pytest.raises(McpError) as forged:
            await client.experimental.list_tasks(last_cursor[:-2] + "xx")
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [t for p in pages for t in p] == ids  # every task retrievable by get is listed
    assert foreign.value.error.code == INVALID_PARAMS and forged.value.error.code == INVALID_PARAMS


async def test_cancel_marks_the_task_cancelled_before_answering_and_it_stays_cancelled(
    start_gateway: StartGateway, faulty_upstream: TestServer
) -> None:
    url = str(faulty_upstream.make_url("/mcp"))
    base = await start_gateway(route({"transport": "streamable_http", "url": url}))
    hooks = faulty_upstream.app[FAULT_HOOKS]
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("hang", {})
        async with asyncio.timeout(5):
            await hooks.arrived["hang"].wait()
        cancelled = await client.experimental.cancel_task(created.task.taskId)
        # MUST transition to cancelled before sending the response.
        assert cancelled.status == "cancelled"
        assert (await client.experimental.get_task(created.task.taskId)).status == "cancelled"
        # Cancelling a terminal task: -32602.
        with pytest.raises(McpError) as again:
            await client.experimental.cancel_task(created.task.taskId)
        with pytest.raises(McpError) as result:
            await client.experimental.get_task_result(created.task.taskId, types.CallToolResult)
    assert again.value.error.code == INVALID_PARAMS
    assert "already in terminal status 'cancelled'" in again.value.error.message
    assert result.value.error.code == INTERNAL_ERROR
    assert result.value.error.message == "The task was cancelled by request."
    # notifications/cancelled went upstream for the call the task was waiting on.
    upstream_call = next(m for m in hooks.received if m.get("method") == "tools/call")
    cancels = [m for m in hooks.received if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["requestId"] for c in cancels] == [upstream_call["id"]]


# -- progress and status notifications


#: Per upstream kind: a `slow` call reporting its progress three times.
THREE_STEPS: dict[str, dict[str, Any]] = {
    "stdio": {"seconds": 0.6, "steps": 3},
    "streamable_http": {"steps": 3},
    "mcp2": {"text": "done", "seconds": 0.6, "steps": 3},
}


@pytest.mark.parametrize("kind", list(THREE_STEPS))
async def test_progress_and_status_notifications_reach_the_client_after_create(
    kind: str, start_gateway: StartGateway, request: pytest.FixtureRequest
) -> None:
    base = await start_gateway(route(upstream_of(kind, request)))
    progress: list[types.ProgressNotificationParams] = []
    statuses: list[str] = []
    done = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            note = message.root
            if isinstance(note, types.ProgressNotification):
                assert not done.is_set(), "progress after the task was terminal"
                progress.append(note.params)
            elif isinstance(note, types.TaskStatusNotification):
                # SHOULD NOT carry related-task meta: the task id is in the params.
                assert note.params.meta is None or RELATED not in note.params.meta.model_dump()
                statuses.append(note.params.status)
                if note.params.status == "completed":
                    done.set()

    async with mcp_client(f"{base}/t/mcp", message_handler=on_message) as client:
        await client.experimental.call_tool_as_task(
            "slow", THREE_STEPS[kind], meta={"progressToken": "p-7"}
        )
        async with asyncio.timeout(5):
            await done.wait()
    # The token the client sent "remains valid throughout the task lifetime", and every
    # notification related to a task MUST carry the related-task meta.
    assert [p.progressToken for p in progress] == ["p-7"] * 3
    assert all(p.meta is not None and RELATED in p.meta.model_dump() for p in progress)
    assert [p.progress for p in progress] == [1, 2, 3]
    assert statuses[-1] == "completed"


async def test_progress_shows_in_status_message_while_polling(start_gateway: StartGateway) -> None:
    base = await start_gateway(route())
    async with mcp_client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task(
            "slow", {"seconds": 3, "steps": 3}, meta={"progressToken": 1}
        )
        async with asyncio.timeout(10):
            while True:
                task = await client.experimental.get_task(created.task.taskId)
                if task.statusMessage:
                    break
                await asyncio.sleep(0.05)  # polling is what this client does
        await client.experimental.cancel_task(created.task.taskId)
    assert task.status == "working" and task.statusMessage == "1/3: step 1/3"


async def test_a_poller_without_a_progress_token_sees_progress_and_receives_none(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route())
    heard: list[Any] = []
    cancelled = asyncio.Event()

    async def note(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            heard.append(message.root)
            if isinstance(message.root, types.TaskStatusNotification):
                cancelled.set()

    async with mcp_client(f"{base}/t/mcp", message_handler=note) as client:
        created = await client.experimental.call_tool_as_task("slow", {"seconds": 3, "steps": 3})
        async with asyncio.timeout(10):
            while True:
                task = await client.experimental.get_task(created.task.taskId)
                if task.statusMessage:
                    break
                await asyncio.sleep(0.05)
        await client.experimental.cancel_task(created.task.taskId)
        async with asyncio.timeout(5):
            await cancelled.wait()  # the client's stream was open all along
    # The gateway asked the upstream for progress with a token of its own: the task's
    # statusMessage follows it, and no notifications/progress reached a client that asked
    # for none.
    assert task.status == "working" and task.statusMessage == "1/3: step 1/3"
    assert not [m for m in heard if isinstance(m, types.ProgressNotification)]


# -- durability, sessions, restarts, scale


async def test_restart_keeps_finished_tasks_fails_running_ones_and_the_session_carries_on(
    make_settings: Any, tmp_path: Any
) -> None:
    from gateway.app import create_app

    settings = make_settings(route())
    first = TestServer(create_app(settings), host="127.0.0.1")
    await first.start_server()
    url = str(first.make_url("/t/mcp"))
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        done = await rpc(
            http,
            url,
            session_id,
            "tools/call",
            {"name": "echo", "arguments": {"text": "kept"}, "task": {}},
        )
        running = await rpc(
            http,
            url,
            session_id,
            "tools/call",
            {"name": "slow", "arguments": {"seconds": 30, "steps": 1}, "task": {}},
            2,
        )
        done_id, running_id = done["result"]["task"]["taskId"], running["result"]["task"]["taskId"]
        listen = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        async with http.get(url, headers=listen) as stream:
            old_event_id = (await stream.content.readline()).decode().removeprefix("id: ").strip()
        assert (await rpc(http, url, session_id, "tasks/result", {"taskId": done_id}, 3))["result"]
    await first.close()  # a clean stop with a task running: it fails as interrupted

    second = TestServer(create_app(settings), host="127.0.0.1")  # same database file
    await second.start_server()
    url = str(second.make_url("/t/mcp"))
    try:
        async with aiohttp.ClientSession() as http:
            kept = await rpc(http, url, session_id, "tasks/result", {"taskId": done_id}, 4)
            interrupted = await rpc(http, url, session_id, "tasks/get", {"taskId": running_id}, 5)
            replay = await rpc(http, url, session_id, "tasks/result", {"taskId": running_id}, 6)
            # Event ids never repeat within a session, across restarts too (transports MUST).
            resume = {
                "Accept": "text/event-stream",
                "Mcp-Session-Id": session_id,
                "Last-Event-ID": old_event_id,
            }
            async with http.get(url, headers=resume) as resumed:
                assert resumed.status == 400
            fresh = await rpc(
                http,
                url,
                session_id,
                "tools/call",
                {"name": "echo", "arguments": {"text": "same session"}},
                7,
            )
    finally:
        await second.close()
    assert kept["result"]["content"][0]["text"] == "kept"
    assert interrupted["result"]["status"] == "failed"
    assert interrupted["result"]["statusMessage"] == "interrupted: gateway shut down"
    assert replay["error"] == {"code": INTERNAL_ERROR, "message": "interrupted: gateway shut down"}
    # The session id from before the restart still works; its upstream is re-established.
    assert fresh["result"]["content"][0]["text"] == "same session"


async def test_two_hundred_tasks_from_several_sessions_all_complete_with_their_results(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route())

    async def one_session(n: int) -> list[tuple[str, str]]:
        async with mcp_client(f"{base}/t/mcp") as client:
            texts = [f"session {n} task {i}" for i in range(25)]
            created = await asyncio.gather(
                *(client.experimental.call_tool_as_task("echo", {"text": t}) for t in texts)
            )
            results = await asyncio.gather(
                *(
                    client.experimental.get_task_result(c.task.taskId, types.CallToolResult)
                    for c in created
                )
            )
            return [(t, text(r)) for t, r in zip(texts, results, strict=True)]

    async with asyncio.timeout(60):
        pairs = [
            p
            for session in await asyncio.gather(*(one_session(n) for n in range(8)))
            for p in session
        ]
    assert len(pairs) == 200
    assert all(sent == got for sent, got in pairs)


async def test_sweeper_deletes_expired_tasks_and_their_results(start_gateway: StartGateway) -> None:
    clock = FakeClock()
    base = await start_gateway(route(), clock=clock.now, store={"sweep_interval_seconds": 0.05})
    async with mcp_client(f"{base}/t/mcp") as client:
        short = await client.experimental.call_tool_as_task("echo", {"text": "x"}, ttl=60_000)
        await client.experimental.get_task_result(short.task.taskId, types.CallToolResult)
        clock.advance(60)
        async with asyncio.timeout(10):
            while True:  # "expired" until the sweeper ran, then gone: "not found"
                with pytest.raises(McpError) as raised:
                    await client.experimental.get_task(short.task.taskId)
                if raised.value.error.message.endswith("Task not found"):
                    break
                await asyncio.sleep(0.05)  # the sweeper's timer sets no event to await
        listed = await client.experimental.list_tasks()
    assert short.task.taskId not in [t.taskId for t in listed.tasks]


async def test_cancellation_sends_a_status_notification(start_gateway: StartGateway) -> None:
    base = await start_gateway(route())
    cancelled = asyncio.Event()

    async def on_message(message: Any) -> None:
        if (
            isinstance(message, types.ServerNotification)
            and isinstance(message.root, types.TaskStatusNotification)
            and message.root.params.status == "cancelled"
        ):
            cancelled.set()

    async with mcp_client(f"{base}/t/mcp", message_handler=on_message) as client:
        created = await client.experimental.call_tool_as_task("slow", {"seconds": 30, "steps": 1})
        await client.experimental.cancel_task(created.task.taskId)
        async with asyncio.timeout(5):
            await cancelled.wait()


async def test_another_sessions_task_answers_exactly_like_an_unknown_one(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route())
    async with mcp_client(f"{base}/t/mcp") as owner, mcp_client(f"{base}/t/mcp") as stranger:
        created = await owner.experimental.call_tool_as_task("slow", {"seconds": 30, "steps": 1})
        task_id = created.task.taskId
        errors = []
        for probe in (
            stranger.experimental.get_task(task_id),
            stranger.experimental.get_task_result(task_id, types.CallToolResult),
            stranger.experimental.cancel_task(task_id),
        ):
            with pytest.raises(McpError) as raised:
                await probe
            errors.append((raised.value.error.code, raised.value.error.message))
        assert task_id not in [t.taskId for t in (await stranger.experimental.list_tasks()).tasks]
        assert (await owner.experimental.get_task(task_id)).status == "working"
        await owner.experimental.cancel_task(task_id)
    assert errors == [(INVALID_PARAMS, "Failed to retrieve task: Task not found")] * 3


async def test_default_ttl_applies_when_none_is_requested_and_fractional_ttls_are_accepted(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route(default_ttl_ms=12_345))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        plain = await rpc(
            http,
            url,
            session_id,
            "tools/call",
            {"name": "echo", "arguments": {"text": "a"}, "task": {}},
        )
        decimal = await rpc(
            http,
            url,
            session_id,
            "tools/call",
            {"name": "echo", "arguments": {"text": "b"}, "task": {"ttl": 5000.0}},
            2,
        )
        negative = await rpc(
            http,
            url,
            session_id,
            "tools/call",
            {"name": "echo", "arguments": {"text": "c"}, "task": {"ttl": -1}},
            3,
        )
    assert plain["result"]["task"]["ttl"] == 12_345
    assert decimal["result"]["task"]["ttl"] == 5000
    assert negative["error"]["code"] == INVALID_PARAMS


async def test_related_task_meta_on_task_requests_is_ignored_and_absent_from_answers(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route())}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 30, "steps": 1})
        decoy = {"_meta": {RELATED: {"taskId": "some-other-task"}}}
        # The taskId parameter MUST be the source of truth; the meta MUST be ignored.
        got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id, **decoy}, 2)
        listed = await rpc(http, url, session_id, "tasks/list", {}, 3)
        cancelled = await rpc(
            http, url, session_id, "tasks/cancel", {"taskId": task_id, **decoy}, 4
        )
    assert got["result"]["taskId"] == task_id and cancelled["result"]["status"] == "cancelled"
    for answer in (got, listed, cancelled):  # SHOULD NOT carry related-task meta
        assert RELATED not in answer["result"].get("_meta", {})


async def test_malformed_forged_and_stale_cursors_get_minus_32602(
    start_gateway: StartGateway,
) -> None:
    clock = FakeClock()
    base = await start_gateway(route(list_page_size=1, cursor_max_age_seconds=60), clock=clock.now)
    async with mcp_client(f"{base}/t/mcp") as client:
        for i in range(2):
            await client.experimental.call_tool_as_task("echo", {"text": str(i)})
        cursor = (await client.experimental.list_tasks()).nextCursor
        assert cursor is not None
        codes = []
        for bad in ("a.é", "no-dot", cursor + "x", "eyJ9." + cursor.split(".")[1]):
            with pytest.raises(McpError) as raised:
                await client.experimental.list_tasks(bad)
            codes.append(raised.value.error.code)
        assert (await client.experimental.list_tasks(cursor)).tasks  # still fresh
        clock.advance(61)  # older than cursor_max_age_seconds
        with pytest.raises(McpError) as stale:
            await client.experimental.list_tasks(cursor)
    assert codes == [INVALID_PARAMS] * 4
    assert stale.value.error.code == INVALID_PARAMS and "expired" in stale.value.error.message


async def test_tasks_get_on_a_running_task_is_plain_json(start_gateway: StartGateway) -> None:
    url = f"{await start_gateway(route())}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 30, "steps": 1})
        get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": task_id}}
        # "servers SHOULD NOT upgrade to an SSE stream in response to a tasks/get request"
        async with http.post(url, json=get, headers=headers(session_id)) as resp:
            assert resp.content_type == "application/json"
            assert (await resp.json())["result"]["status"] == "working"


async def test_a_task_left_working_by_a_crashed_process_fails_at_the_next_start(
    make_settings: Any, tmp_path: Any
) -> None:
    from datetime import UTC, datetime

    from gateway.app import create_app
    from gateway.tasks.models import Task, TaskStatus
    from gateway.tasks.store import open_store

    settings = make_settings(route())
    store = await open_store(settings.store.path)  # what a SIGKILLed process leaves behind
    now = datetime.now(UTC)
    left = Task(
        task_id="left-working",
        owner="session:gone",
        route="t",
        tool="slow",
        status=TaskStatus.WORKING,
        created_at=now,
        updated_at=now,
        ttl_ms=600_000,
        poll_interval_ms=1000,
    )
    await store.create_task(left)
    await store.close()
    server = TestServer(create_app(settings), host="127.0.0.1")
    await server.start_server()
    await server.close()
    store = await open_store(settings.store.path)
    try:
        task = await store.get_task("left-working")
        outcome = await store.get_outcome("left-working")
    finally:
        await store.close()
    assert task is not None and task.status == "failed"
    assert task.status_message == "interrupted: gateway restarted"
    assert outcome is not None and outcome.body["code"] == INTERNAL_ERROR
