"""A NUL ("\\u0000") where the gateway keeps or looks up text, on both stores: PostgreSQL's
text cannot hold one (SQLite can), and no client input may reach a store that would fail on
it. Each answer is the one the same input gets without a NUL: an unknown task, a task made."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import pytest

from gateway.protocol.errors import INVALID_PARAMS
from gateway.tasks.api_common import NOT_FOUND

from .conftest import DEMO, StartGateway
from .helpers import MODERN, WITH_TASKS, headers, open_session, rpc, start_task, task_terminal

NUL_ID = "abc\u0000def"


#: (Asked for before `start_gateway`, so that a test's database outlives its gateways.)
@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> dict[str, Any] | None:
    if request.param == "sqlite":
        return None
    return {"backend": "postgres", "url": request.getfixturevalue("pg_url")}


async def gateway(start_gateway: StartGateway, store: dict[str, Any] | None) -> str:
    routes = [{"name": "t", "upstream": DEMO}]
    base = await start_gateway(routes, **({"store": store} if store else {}))
    return f"{base}/t/mcp"


async def modern(
    http: aiohttp.ClientSession, url: str, method: str, params: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """A 2026-07-28 request; `Mcp-Name` carries the name or task id in the base64 sentinel,
    the header codec's form for what is not visible ASCII."""
    params = {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": WITH_TASKS,
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        },
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    named = str(params.get("taskId", params.get("name")))
    hdrs = headers(**{"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
    hdrs["Mcp-Name"] = f"=?base64?{base64.b64encode(named.encode()).decode()}?="
    async with http.post(url, json=body, headers=hdrs) as resp:
        return resp.status, dict(await resp.json())


async def test_a_task_id_with_a_nul_is_an_unknown_task_in_both_generations(
    store: dict[str, Any] | None, start_gateway: StartGateway
) -> None:
    url = await gateway(start_gateway, store)
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            answer = await rpc(http, url, session, method, {"taskId": NUL_ID}, request_id=3)
            assert answer["error"]["code"] == INVALID_PARAMS, (method, answer)
            assert answer["error"]["message"] == NOT_FOUND
        for method, params in (
            ("tasks/get", {}),
            ("tasks/update", {"inputResponses": {"k\u0000": {"action": "accept"}}}),
            ("tasks/cancel", {}),
        ):
            status, body = await modern(http, url, method, {"taskId": NUL_ID, **params})
            assert status == 400 and body["error"]["code"] == INVALID_PARAMS, (method, body)
            assert body["error"]["message"] == NOT_FOUND


async def test_a_tool_name_with_a_nul_makes_a_task_the_upstream_refuses_cleanly(
    store: dict[str, Any] | None, start_gateway: StartGateway
) -> None:
    url = await gateway(start_gateway, store)
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        task_id = await start_task(http, url, session, "ec\u0000ho", {"text": "x"})
        task = await task_terminal(http, url, session, task_id)
        modern_status, created = await modern(
            http, url, "tools/call", {"name": "ec\u0000ho", "arguments": {"text": "y"}}
        )
    # The upstream knows no such tool, and says so naming it: the message the task keeps
    # has the NUL replaced (its terminal write must land, or the task would stay working).
    assert task["status"] == "failed"
    assert "ec\ufffdho" in task["statusMessage"], task
    # Within the sync window, the upstream's own answer: the call is not a task.
    assert modern_status == 400 and created["error"]["code"] == INVALID_PARAMS, created


async def test_a_result_with_a_nul_is_kept_whole(
    store: dict[str, Any] | None, start_gateway: StartGateway
) -> None:
    url = await gateway(start_gateway, store)
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        task_id = await start_task(http, url, session, "echo", {"text": "a\u0000b"})
        done = await task_terminal(http, url, session, task_id)
        result = await rpc(http, url, session, "tasks/result", {"taskId": task_id}, request_id=9)
    assert done["status"] == "completed"
    assert result["result"]["content"][0]["text"] == "a\u0000b"
