"""`upstream.modern: native`: 2026-07-28 callers relayed on the 2026-07-28 wire to an upstream
that speaks it (mcp 2.3's MCPServer, whose tools do their own MRTR), the gateway still making
the tasks."""

from __future__ import annotations

import json

import aiohttp
import pytest

from gateway.config import ConfigError, parse_settings

from .conftest import StartGateway, free_port
from .helpers import (
    TASKS_EXTENSION,
    WITH_ELICITATION,
    WITH_TASKS,
    headers,
    modern_rpc,
    modern_status,
    modern_terminal,
    needs_mcp2,
)

pytestmark = needs_mcp2
BOTH = {**WITH_TASKS, **WITH_ELICITATION}
ANN = {"action": "accept", "content": {"name": "Ann"}}


#: `native` said, and `auto` (the default, nothing said): its server/discover lists 2026-07-28.
@pytest.fixture(params=["native", "auto"])
async def native(
    request: pytest.FixtureRequest, start_gateway: StartGateway, native_upstream: str
) -> str:
    upstream = {"transport": "streamable_http", "url": native_upstream}
    if request.param == "native":
        upstream["modern"] = "native"
    tasks = {"tools": {"slow": "optional", "slow_greet": "optional"}}
    return f"{await start_gateway([{'name': 'n', 'upstream': upstream, 'tasks': tasks}])}/n/mcp"


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


async def test_discover_is_the_upstreams_own_with_the_gateways_tasks_extension(
    native: str,
) -> None:
    async with aiohttp.ClientSession() as http:
        _, found = await modern_rpc(http, native, "server/discover")
    result = found["result"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "native-upstream"
    assert result["capabilities"]["extensions"] == {TASKS_EXTENSION: {}}


async def test_the_upstreams_own_mrtr_rounds_pass_through(native: str) -> None:
    async with aiohttp.ClientSession() as http:
        _, first = await modern_rpc(http, native, "tools/call", call("greet"), WITH_ELICITATION)
        round_ = first["result"]
        assert round_["resultType"] == "input_required"
        assert round_["inputRequests"]["who"]["method"] == "elicitation/create"
        retry = {**call("greet"), "inputResponses": {"who": ANN}}
        if "requestState" in round_:
            retry["requestState"] = round_["requestState"]
        _, done = await modern_rpc(http, native, "tools/call", retry, WITH_ELICITATION)
    assert done["result"]["resultType"] == "complete"
    assert done["result"]["content"][0]["text"] == "Hello, Ann!"


async def test_a_round_during_a_task_becomes_its_input_requests(native: str) -> None:
    async with aiohttp.ClientSession() as http:
        _, created = await modern_rpc(
            http, native, "tools/call", call("slow_greet", seconds=0.6), BOTH
        )
        task_id = created["result"]["taskId"]
        waiting = await modern_status(http, native, task_id, "input_required")
        assert list(waiting["inputRequests"]) == ["who"]
        assert "tasks/update" in waiting["statusMessage"]
        update = {"taskId": task_id, "inputResponses": {"who": ANN}}
        await modern_rpc(http, native, "tasks/update", update, BOTH)
        done = await modern_terminal(http, native, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Hello at last, Ann!"


async def test_progress_streams_through_and_a_task_is_made_around_a_long_call(
    native: str,
) -> None:
    params = {
        **call("slow", seconds=0.6),
        "_meta": {
            "progressToken": 41,
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    hdrs = headers(
        **{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "slow"}
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(native, json=body, headers=hdrs) as resp:
            events = [
                json.loads(line[6:]) async for line in resp.content if line.startswith(b"data: ")
            ]
        _, created = await modern_rpc(
            http, native, "tools/call", call("slow", seconds=0.6), WITH_TASKS
        )
        done = await modern_terminal(http, native, created["result"]["taskId"])
    *notes, answer = events
    assert [note["params"]["progressToken"] for note in notes] == [41, 41, 41]
    assert answer["result"]["content"][0]["text"] == "slept 0.6 s"
    assert created["result"]["resultType"] == "task"
    assert done["result"]["content"][0]["text"] == "slept 0.6 s"


def test_native_needs_streamable_http() -> None:
    route = {
        "name": "x",
        "upstream": {"transport": "stdio", "command": ["python"], "modern": "native"},
    }
    with pytest.raises(ConfigError) as raised:
        parse_settings({"routes": [route]}, "gateway.yaml")
    assert "gateway.yaml: routes[0].upstream.modern" in str(raised.value)
    assert "streamable_http" in str(raised.value)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("sync_window_ms", -1, "greater than or equal to 0"),
        ("sync_window_ms", 600_000, "less than or equal to 60000"),
        ("sync_window_ms", "soon", "valid integer"),
    ],
)
def test_a_bad_sync_window_is_refused_naming_its_key(key: str, value: object, says: str) -> None:
    route = {"name": "x", "upstream": {"transport": "stdio", "command": ["python"]}}
    route["tasks"] = {key: value}
    with pytest.raises(ConfigError) as raised:
        parse_settings({"routes": [route]}, "gateway.yaml")
    assert f"gateway.yaml: routes[0].tasks.{key}" in str(raised.value)
    assert says in str(raised.value)


async def test_a_method_the_gateway_does_not_know_gets_the_upstreams_own_answer(
    native: str, native_upstream: str
) -> None:
    """Relayed as it came (subscriptions/listen is the reason): what the upstream says of a
    method, the client hears, status and body."""
    async with aiohttp.ClientSession() as http:
        direct = await modern_rpc(http, native_upstream, "nothing/here")
        relayed = await modern_rpc(http, native, "nothing/here")
    assert relayed[0] == direct[0]
    assert relayed[1]["error"]["code"] == direct[1]["error"]["code"]


async def test_an_upstream_gone_before_a_relayed_answer_is_a_json_rpc_error(
    start_gateway: StartGateway,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    upstream = {"transport": "streamable_http", "url": dead, "modern": "native"}
    url = f"{await start_gateway([{'name': 'n', 'upstream': upstream}])}/n/mcp"
    async with aiohttp.ClientSession() as http:
        status, body = await modern_rpc(http, url, "nothing/here")
    assert status == 200, status  # an internal error of the call, as every upstream failure
    assert body["error"]["code"] == -32603
    assert "cannot reach the upstream" in body["error"]["message"]
