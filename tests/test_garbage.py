"""What a request leaves for the cyclic garbage collector: nothing of the gateway's.

An object caught in a reference cycle outlives its request until a collection, with whatever
it refers to (a call's task, coroutine and context, its request and answer), and every
collection must walk it. Under load that was a cycle per relayed call (a call's time limit)
and one per 2026-07-28 task (the call, its host and the runner's hooks): `docs/performance.md`.
Each flow runs over real HTTP against a real upstream, then the collector says what it found.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import pytest
from mcp import types

from .conftest import DEMO, StartGateway, mcp_client
from .helpers import (
    WITH_TASKS,
    get_task,
    modern_rpc,
    open_session,
    result_request,
    route,
    rpc,
    start_task,
    task_terminal,
    text,
    upstream_of,
    wait_terminal,
)


@contextmanager
def cycles_of_the_gateway() -> Iterator[list[str]]:
    """Collects what became cyclic garbage inside the block; yields (filled at its end) the
    names of the gateway's types among it."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[str] = []
    try:
        yield found
        gc.collect()
        found += sorted(
            {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("gateway.")}
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("kind", ["stdio", "streamable_http", "mcp2"])
async def test_relayed_calls_and_tasks_of_a_session_leave_no_cycle(
    start_gateway: StartGateway, request: pytest.FixtureRequest, kind: str
) -> None:
    base = await start_gateway(route(upstream_of(kind, request)))
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        await rpc(http, url, session, "tools/call", {"name": "echo", "arguments": {"text": "-"}})
        with cycles_of_the_gateway() as found:
            for n in range(5):
                echo = {"name": "echo", "arguments": {"text": f"call {n}"}}
                answer = await rpc(http, url, session, "tools/call", echo, request_id=10 + n)
                assert answer["result"]["content"][0]["text"] == f"call {n}"
            polled = await start_task(http, url, session, "echo", {"text": "polled"})
            assert (await task_terminal(http, url, session, polled))["status"] == "completed"
            waited = await start_task(http, url, session, "echo", {"text": "waited"})
            async with http.post(url, json=result_request(waited), headers=_json(session)) as r:
                assert (await r.json())["result"]["content"][0]["text"] == "waited"
            assert (await get_task(http, url, session, waited))["status"] == "completed"
    assert found == [], found


async def test_questions_and_a_cancelled_task_leave_no_cycle(start_gateway: StartGateway) -> None:
    base = await start_gateway(route())

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with mcp_client(f"{base}/t/mcp", elicitation_callback=elicit) as client:
        await client.call_tool("echo", {"text": "-"})
        with cycles_of_the_gateway() as found:
            asked = await client.call_tool("ask", {})
            assert "Ada" in text(asked)
            created = await client.experimental.call_tool_as_task("ask", {})
            result = await client.experimental.get_task_result(
                created.task.taskId, types.CallToolResult
            )
            assert "Ada" in text(result)
            slow = await client.experimental.call_tool_as_task("slow", {"seconds": 30})
            await client.experimental.cancel_task(slow.task.taskId)
            assert (await wait_terminal(client, slow.task.taskId)).status == "cancelled"
    assert found == [], found


async def test_a_2026_07_28_task_leaves_no_cycle(start_gateway: StartGateway) -> None:
    # A caller with a name: its calls share one held upstream session, as in service.
    key = "garbage-key-0123456789"
    auth = {"mode": "api_keys", "api_keys": [{"principal": "ada", "sha256": sha256(key)}]}
    base = await start_gateway([{"name": "t", "upstream": DEMO, "auth": auth}])
    url, ada = f"{base}/t/mcp", {"Authorization": f"Bearer {key}"}
    slow = {"name": "slow", "arguments": {"seconds": 0.3, "steps": 1}}
    echo = {"name": "echo", "arguments": {"text": "-"}}
    async with aiohttp.ClientSession() as http:
        await modern_rpc(http, url, "tools/call", echo, extra=ada)
        with cycles_of_the_gateway() as found:
            for _ in range(3):
                _, created = await modern_rpc(http, url, "tools/call", slow, WITH_TASKS, extra=ada)
                task_id = created["result"]["taskId"]
                async with asyncio.timeout(20):
                    while True:
                        got = {"taskId": task_id}
                        _, body = await modern_rpc(
                            http, url, "tasks/get", got, WITH_TASKS, extra=ada
                        )
                        if body["result"]["status"] != "working":
                            break
                        await asyncio.sleep(0.05)
                assert body["result"]["status"] == "completed"
    assert found == [], found


@pytest.mark.parametrize("kind", ["stdio", "streamable_http", "members"])
async def test_ended_sessions_leave_no_cycle(
    start_gateway: StartGateway, request: pytest.FixtureRequest, kind: str
) -> None:
    # An anonymous 2026-07-28 caller's call has an upstream session of its own, closed with
    # the call; a 2025-11-25 session ends with DELETE. A session's parts refer to one another
    # while it lives (its upstream client tells it what the upstream sends); once it has
    # ended, none of them may be left to the collector: for an anonymous caller, that was a
    # cycle of some forty objects a call.
    if kind == "members":
        sdk = {"name": "sdk", **upstream_of("streamable_http", request)}
        members = [{"name": "demo", **DEMO}, sdk]
        base = await start_gateway([{"name": "t", "upstreams": members}])
        echo = {"name": "demo__echo", "arguments": {"text": "-"}}
    else:
        base = await start_gateway(route(upstream_of(kind, request)))
        echo = {"name": "echo", "arguments": {"text": "-"}}
    url = f"{base}/t/mcp"
    async with aiohttp.ClientSession() as http:
        await modern_rpc(http, url, "tools/call", echo)
        with cycles_of_the_gateway() as found:
            for _ in range(3):
                status, body = await modern_rpc(http, url, "tools/call", echo)
                assert status == 200 and _text(body) == "-", body
                session = await open_session(http, url)
                answer = await rpc(http, url, session, "tools/call", echo)
                assert _text(answer) == "-", answer
                async with http.delete(url, headers=_json(session)) as ended:
                    assert ended.status < 300, ended.status
    assert found == [], found


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _text(answer: dict[str, Any]) -> Any:
    return answer["result"]["content"][0]["text"]


def _json(session: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Session-Id": session,
    }
