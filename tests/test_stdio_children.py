"""stdio upstreams: one child per session, a cap, the child ended with its session, a child
that dies mid-call, and the environment a child gets."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from gateway.config import CHILD_ENV_ALLOWED, Limits, UpstreamConfig
from gateway.protocol.errors import INTERNAL_ERROR

from .conftest import ROOT, StartGateway, mcp_client
from .helpers import (
    INIT,
    alive,
    headers,
    open_session,
    pids,
    read_events,
    text,
    wait_until_dead,
)
from .test_observability import sample, scrape


def route(pid_dir: Path, **upstream: object) -> list[dict[str, object]]:
    command = ["python", str(ROOT / "tests" / "stdio_upstream.py"), "--pid-dir", str(pid_dir)]
    return [{"name": "kids", "upstream": {"transport": "stdio", "command": command, **upstream}}]


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    """Where the upstream children write their pids (the gateway's database is elsewhere)."""
    path = tmp_path / "pids"
    path.mkdir()
    return path


async def test_each_session_gets_its_own_child_ended_with_the_session(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    base = await start_gateway(route(pid_dir))
    async with mcp_client(f"{base}/kids/mcp") as one, mcp_client(f"{base}/kids/mcp") as two:
        await one.call_tool("echo", {"text": "1"})
        await two.call_tool("echo", {"text": "2"})
        children = pids(pid_dir)
        assert len(children) == 2 and all(alive(p) for p in children)
    # Leaving the client context sends DELETE; each child must be gone, not orphaned.
    for pid in children:
        await wait_until_dead(pid)


async def open_raw(http: aiohttp.ClientSession, url: str, pid_dir: Path) -> tuple[str, int]:
    """An initialized session over raw HTTP and the pid of the child it started."""
    before = set(pids(pid_dir))
    session_id = await open_session(http, url)
    (child,) = set(pids(pid_dir)) - before
    return session_id, child


async def echo(http: aiohttp.ClientSession, url: str, session_id: str, text: str) -> str:
    """An echo call over raw HTTP; the answer comes as JSON or, when slow, as SSE."""
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    call["params"] = {"name": "echo", "arguments": {"text": text}}
    async with http.post(url, json=call, headers=headers(session_id)) as resp:
        assert resp.status == 200
        if resp.content_type == "application/json":
            answer = await resp.json()
        else:
            (event,) = [e for e in await read_events(resp, 2) if e.get("data")]
            answer = json.loads(event["data"])
    return str(answer["result"]["content"][0]["text"])


async def test_at_the_cap_a_new_session_stops_the_least_recently_used_idle_child(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    url = f"{await start_gateway(route(pid_dir, max_children=2))}/kids/mcp"
    async with aiohttp.ClientSession() as http:
        one, one_child = await open_raw(http, url, pid_dir)
        two, two_child = await open_raw(http, url, pid_dir)
        assert await echo(http, url, one, "one was used last") == "one was used last"
        three, three_child = await open_raw(http, url, pid_dir)
        await wait_until_dead(two_child)
        assert alive(one_child) and alive(three_child)
        # The session whose child went keeps its id: its next call starts a new child (with
        # the handshake replayed), which takes the slot of the now least recently used one.
        assert await echo(http, url, two, "two is back") == "two is back"
        await wait_until_dead(one_child)
        assert alive(three_child) and len([p for p in pids(pid_dir) if alive(p)]) == 2


async def test_at_the_cap_a_child_whose_client_still_listens_goes_last(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    url = f"{await start_gateway(route(pid_dir, max_children=2))}/kids/mcp"
    async with mcp_client(url) as listening, aiohttp.ClientSession() as http:
        assert text(await listening.call_tool("echo", {"text": "oldest"})) == "oldest"
        (listening_child,) = pids(pid_dir)
        _, quiet_child = await open_raw(http, url, pid_dir)
        newest, _ = await open_raw(http, url, pid_dir)
        await wait_until_dead(quiet_child)
        assert alive(listening_child)
        assert await echo(http, url, newest, "served") == "served"


async def test_the_cap_refuses_a_new_session_only_while_every_child_is_busy(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    base = await start_gateway(route(pid_dir, max_children=1), sessions={"max_sessions": 2})
    url = f"{base}/kids/mcp"
    asked, answer = asyncio.Event(), asyncio.Event()

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        await answer.wait()
        return types.ElicitResult(action="accept", content={"name": "busy"})

    async with (
        mcp_client(url, elicitation_callback=elicit) as busy,
        aiohttp.ClientSession() as http,
        asyncio.TaskGroup() as group,
    ):
        call = group.create_task(busy.call_tool("ask", {}))
        async with asyncio.timeout(10):
            await asked.wait()  # a call in flight and a question open: the child is busy
        for _ in range(2):
            # Refused twice for the child cap: a refused initialize leaves no session behind
            # (else the second refusal would name sessions.max_sessions instead).
            async with http.post(url, json=INIT, headers=headers()) as refused:
                assert refused.status == 503
                assert "max_children" in (await refused.json())["error"]["message"]
        answer.set()
        assert text(await call) == "Hello, busy!"
        # Now idle, the busy session's child gives way to a new session.
        session_id = await open_session(http, url)
        assert await echo(http, url, session_id, "served") == "served"


async def test_child_that_dies_mid_call_fails_the_call_and_the_next_call_gets_a_fresh_child(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    base = await start_gateway(route(pid_dir))
    async with mcp_client(f"{base}/kids/mcp") as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("crash", {})
        assert raised.value.error.code == INTERNAL_ERROR
        assert "exited with code 3" in raised.value.error.message
        result = await client.call_tool("echo", {"text": "again"})
        block = result.content[0]
        assert isinstance(block, types.TextContent) and block.text == "again"
    first, second = pids(pid_dir)
    assert not alive(first)
    await wait_until_dead(second)
    # Counted for the alert on children that keep dying; a child the gateway stops is not.
    exposition = await scrape(f"{base}/metrics")
    assert sample(exposition, "mcp_gateway_stdio_child_exits_total", route="kids") == 1


async def test_replacing_a_dead_child_while_every_child_is_busy_is_a_clear_error_not_a_hang(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    url = f"{await start_gateway(route(pid_dir, max_children=1))}/kids/mcp"
    asked, answer = asyncio.Event(), asyncio.Event()

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        await answer.wait()
        return types.ElicitResult(action="accept", content={"name": "second"})

    async with mcp_client(url) as first:
        with pytest.raises(McpError):
            await first.call_tool("crash", {})
        # The dead child's slot goes to another session, busy when `first` calls again.
        async with (
            mcp_client(url, elicitation_callback=elicit) as second,
            asyncio.TaskGroup() as group,
        ):
            call = group.create_task(second.call_tool("ask", {}))
            async with asyncio.timeout(10):
                await asked.wait()
                with pytest.raises(McpError) as raised:
                    await first.call_tool("echo", {"text": "no room"})
            assert raised.value.error.code == INTERNAL_ERROR
            assert "max_children" in raised.value.error.message
            answer.set()
            assert text(await call) == "Hello, second!"
            # Once the second session's call is done, its idle child gives way.
            assert text(await first.call_tool("echo", {"text": "room"})) == "room"


async def test_a_replaced_child_that_dies_again_fails_its_call_at_once(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    # Every child, the first or a replacement, reports its death to the calls it leaves.
    url = f"{await start_gateway(route(pid_dir))}/kids/mcp"
    async with mcp_client(url) as client:
        for _ in range(2):
            async with asyncio.timeout(10):
                with pytest.raises(McpError) as raised:
                    await client.call_tool("crash", {})
            assert "exited with code 3" in raised.value.error.message
        assert text(await client.call_tool("echo", {"text": "third child"})) == "third child"


async def test_an_idle_child_is_stopped_after_child_idle_seconds_and_its_session_carries_on(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    url = f"{await start_gateway(route(pid_dir, child_idle_seconds=0.3))}/kids/mcp"
    # The SDK client keeps a GET stream open: it still hears what its child sends unasked,
    # so its child stays although it has been idle longer than the other.
    async with mcp_client(url) as listening, aiohttp.ClientSession() as http:
        assert text(await listening.call_tool("echo", {"text": "listening"})) == "listening"
        (listening_child,) = pids(pid_dir)
        gone, gone_child = await open_raw(http, url, pid_dir)
        assert await echo(http, url, gone, "before") == "before"
        await wait_until_dead(gone_child)
        assert alive(listening_child)
        # Same session id: the gateway starts a child and replays the handshake.
        assert await echo(http, url, gone, "after") == "after"
        (new_child,) = set(pids(pid_dir)) - {listening_child, gone_child}
        assert alive(new_child)


async def test_a_child_busy_for_longer_than_child_idle_seconds_keeps_running(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    url = f"{await start_gateway(route(pid_dir, child_idle_seconds=0.2))}/kids/mcp"
    quiet = {"seconds": 1, "steps": 1}  # no message to or from the child until it answers
    async with mcp_client(url) as client:
        created = await client.experimental.call_tool_as_task("slow", quiet)
        assert text(await client.call_tool("slow", quiet)) == "slept 1 s"
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
        assert text(result) == "slept 1 s"
    assert len(pids(pid_dir)) == 1  # never stopped, so never started again


@pytest.mark.slow
async def test_abandoned_sessions_never_lock_out_a_route_of_four_children(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    # Clients that go away without DELETE (the TS SDK's close(), the inspector CLI) leave
    # their sessions behind for sessions.idle_timeout_seconds; only busy children hold the cap.
    url = f"{await start_gateway(route(pid_dir, max_children=4))}/kids/mcp"
    asked, answer = asyncio.Event(), asyncio.Event()

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        await answer.wait()
        return types.ElicitResult(action="accept", content={"name": "patient"})

    async with (
        mcp_client(url, elicitation_callback=elicit) as early,
        aiohttp.ClientSession() as http,
        asyncio.TaskGroup() as group,
    ):
        created = await early.experimental.call_tool_as_task("ask", {})
        result = group.create_task(
            early.experimental.get_task_result(created.task.taskId, types.CallToolResult)
        )
        async with asyncio.timeout(10):
            await asked.wait()  # a task in flight with a question open
        (task_child,) = pids(pid_dir)
        abandoned: list[str] = []
        for n in range(8):
            async with (
                streamable_http_client(url, terminate_on_close=False) as (read, write, get_id),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                assert text(await client.call_tool("echo", {"text": f"{n}"})) == f"{n}"
                abandoned.append(str(get_id()))
        async with mcp_client(url) as newcomer:
            assert text(await newcomer.call_tool("echo", {"text": "new"})) == "new"
        for n, session_id in enumerate(abandoned):
            assert await echo(http, url, session_id, f"back {n}") == f"back {n}"
        assert alive(task_child)
        assert len([p for p in pids(pid_dir) if alive(p)]) <= 4
        answer.set()
        assert text(await result) == "Hello, patient!"


def test_by_default_one_caller_can_keep_at_most_half_of_a_stdio_routes_children_busy() -> None:
    # Idle children give way, so what one caller can hold of a route is one busy child per
    # session: its session cap must leave room for other callers.
    sessions = Limits().sessions_per_principal
    children = UpstreamConfig(transport="stdio", command=("server",)).max_children
    assert sessions is not None and 2 * sessions <= children


async def test_a_stdio_child_gets_only_the_allowed_environment_and_its_route_env(
    start_gateway: StartGateway, pid_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Secrets in the gateway's own environment (read by it or not) must stay in the gateway.
    secrets = {
        "TEST_JWT_SECRET": "j" * 40,
        "TEST_API_KEY": "k" * 40,
        "TEST_METRICS_TOKEN": "m" * 40,
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TEST_PROXY", "http://proxy.example:3128")
    env = {"CHILD_MODE": "strict", "CHILD_KEY": "${TEST_API_KEY}"}
    base = await start_gateway(
        route(pid_dir, env=env, inherit_env=["TEST_PROXY"]),
        metrics={"bearer_token_env": "TEST_METRICS_TOKEN"},
    )
    async with mcp_client(f"{base}/kids/mcp") as client:
        block = (await client.call_tool("environment", {})).content[0]
    assert isinstance(block, types.TextContent)
    seen: dict[str, str] = json.loads(block.text)
    assert not secrets.keys() & seen.keys()
    assert seen["PATH"] == os.environ["PATH"]
    assert seen["CHILD_MODE"] == "strict" and seen["CHILD_KEY"] == secrets["TEST_API_KEY"]
    assert seen["TEST_PROXY"] == "http://proxy.example:3128"
    assert seen.keys() <= {*CHILD_ENV_ALLOWED, *env, "TEST_PROXY"}
