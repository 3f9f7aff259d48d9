"""`routes[].tools`: which tools a client sees (allow, deny), under what name (rename) and
with what description (describe), in both generations, over real HTTP to real upstreams.

The 2025-11-25 tools page answers a call of an unknown tool with a JSON-RPC error: "Unknown
tools: -32602 (Invalid params)", its example `"message": "Unknown tool: invalid_tool_name"`;
a hidden tool gets exactly that, and never reaches the upstream.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from mcp import types
from mcp.shared.exceptions import McpError

from gateway.config import ConfigError, parse_settings
from gateway.config.tools import ToolsConfig
from gateway.protocol import jsonrpc
from gateway.protocol.curation import Curation
from gateway.protocol.decisions import Reject
from gateway.protocol.errors import INVALID_PARAMS

from .conftest import DEMO, StartGateway, mcp_client
from .fakes import RECEIVED
from .helpers import (
    WITH_TASKS,
    audit_events,
    modern_rpc,
    modern_terminal,
    needs_mcp2,
    open_session,
    rpc,
    text,
    wait_terminal,
)
from .test_modern_clients import modern_client

#: The SDK upstream's tools: echo, slow, slow_read, ask, ask_both, sample, fail, lookup.
CURATED = {
    "allow": ["say", "slow*", "fail"],  # names as clients see them
    "deny": ["slow_read"],
    "rename": {"echo": "say"},
    "describe": {"say": "Says it back"},
}


def curated_route(upstream: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    auth = {"list_tasks_without_auth": True}
    return [{"name": "t", "upstream": upstream, "tools": CURATED, "auth": auth, **extra}]


def sdk(url: str) -> dict[str, Any]:
    return {"transport": "streamable_http", "url": url}


# -- the rule, as a table


@pytest.mark.parametrize(
    ("config", "upstream", "client"),
    [
        ({}, "a", "a"),
        ({"allow": ["a*"]}, "b", None),
        ({"allow": ["a*"], "deny": ["ab"]}, "ab", None),  # deny wins over allow
        ({"rename": {"a": "b"}}, "a", "b"),
        ({"rename": {"a": "b"}}, "b", None),  # the renamed tool wins the name
        ({"rename": {"a": "b", "b": "a"}}, "b", "a"),  # a swap is two renames
        ({"rename": {"a": "b"}, "deny": ["b"]}, "a", None),  # globs see the client's name
        ({"rename": {"a": "b"}, "deny": ["a"]}, "a", "b"),
    ],
)
def test_a_tool_is_seen_under_its_client_name_or_not_at_all(
    config: dict[str, Any], upstream: str, client: str | None
) -> None:
    curation = Curation(ToolsConfig.model_validate(config))
    assert curation.client_name(upstream) == client
    if client is not None:
        assert curation.upstream_name(client) == upstream


def test_a_call_of_a_name_the_client_never_sees_is_unknown() -> None:
    curation = Curation(ToolsConfig.model_validate({"rename": {"a": "b"}}))
    call = jsonrpc.Request(id=1, method="tools/call", params={"name": "a"})
    assert curation.call(call) == Reject(INVALID_PARAMS, "Unknown tool: a")


def test_each_page_is_filtered_and_keeps_its_cursor() -> None:
    curation = Curation(ToolsConfig.model_validate({"deny": ["secret_*"]}))
    tools = [{"name": "secret_a", "inputSchema": {}}, {"name": "secret_b", "inputSchema": {}}]
    page = jsonrpc.Response(id=1, result={"tools": tools, "nextCursor": "page-2"})
    curated = curation.tools_list(page)
    # An empty page is still a page: the client follows nextCursor to the tools after it.
    assert curated.result == {"tools": [], "nextCursor": "page-2"}


# -- config errors name their key


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        ({"allow": ["a"], "bogus": 1}, "routes[0].tools.bogus: unknown key"),
        ({"allow": [""]}, "routes[0].tools.allow[0]: must not be empty"),
        ({"deny": ["a\x00b"]}, "routes[0].tools.deny[0]: must not contain NUL"),
        ({"rename": {"": "x"}}, "must not be empty"),
        ({"describe": {"a\x00": "d"}}, "must not contain NUL"),
        ({"rename": {"a": "x", "b": "x"}}, "routes[0].tools.rename: gives 'x' to both"),
        ({"rename": {"a": "bad name"}}, "routes[0].tools.rename.a: 'bad name' is not a tool"),
        ({"rename": {"a": "x" * 129}}, "is not a tool name the spec allows"),
        ({"allow": ["a"] * 1001}, "routes[0].tools.allow: Tuple should have at most 1000"),
        ({"rename": {f"t{i}": f"u{i}" for i in range(1001)}}, "routes[0].tools.rename:"),
    ],
)
def test_careless_tools_sections_are_refused_naming_the_key(
    tools: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings({"routes": [{"name": "r", "upstream": DEMO, "tools": tools}]}, "f.yaml")
    assert expected in str(raised.value)


async def test_globs_that_hide_every_tool_are_allowed_with_a_warning(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    await start_gateway([{"name": "r", "upstream": DEMO, "tools": {"deny": ["*"]}}])
    assert "route r: its tools.allow and tools.deny hide every tool" in caplog.text


# -- 2025-11-25 sessions


async def test_tools_list_is_curated_for_a_2025_client(
    start_gateway: StartGateway, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(curated_route(sdk(sdk_upstream)))}/t/mcp"
    async with mcp_client(url) as client:
        listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["fail", "say", "slow"]
    assert tools["say"].description == "Says it back"
    assert tools["say"].execution is not None and tools["say"].execution.taskSupport


async def test_a_renamed_tool_runs_as_a_task_under_its_upstream_name(
    start_gateway: StartGateway, sdk_upstream: str
) -> None:
    # `tasks.tools` names the tool as the client sees it.
    routes = curated_route(sdk(sdk_upstream), tasks={"tools": {"say": "required"}})
    url = f"{await start_gateway(routes)}/t/mcp"
    async with mcp_client(url) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        execution = listed["say"].execution
        assert execution is not None and execution.taskSupport == "required"
        with pytest.raises(McpError):  # required: a plain call is refused
            await client.call_tool("say", {"text": "x"})
        created = await client.experimental.call_tool_as_task("say", {"text": "renamed ✓"})
        task = await wait_terminal(client, created.task.taskId)
        assert task.status == "completed"
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
    assert text(result) == "renamed ✓"


async def test_a_rename_onto_a_listed_name_hides_that_tool_with_a_warning(
    start_gateway: StartGateway, sdk_upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The rule chosen: the renamed tool wins the name; the upstream's own is hidden.
    routes = [{"name": "t", "upstream": sdk(sdk_upstream), "tools": {"rename": {"fail": "echo"}}}]
    url = f"{await start_gateway(routes)}/t/mcp"
    async with mcp_client(url) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        await client.list_tools()
        result = await client.call_tool("echo", {})
    assert names.count("echo") == 1 and "fail" not in names
    assert result.isError  # it is `fail` upstream
    shadowed = "route t: the upstream's tool echo is hidden: tools.rename gives its name"
    assert [r.levelno for r in caplog.records if shadowed in r.getMessage()] == [logging.WARNING]


async def test_a_hidden_tool_is_unknown_audited_and_never_reaches_the_upstream(
    start_gateway: StartGateway, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    upstream = sdk(str(recorder.make_url("/mcp")))
    url = f"{await start_gateway(curated_route(upstream))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        secret = {"name": "slow_read", "arguments": {"steps": 1}}
        plain = await rpc(http, url, session_id, "tools/call", secret)
        as_task = await rpc(http, url, session_id, "tools/call", {**secret, "task": {}}, 2)
        renamed_away = await rpc(http, url, session_id, "tools/call", {"name": "echo"}, 3)
    for answer, name in ((plain, "slow_read"), (as_task, "slow_read"), (renamed_away, "echo")):
        assert answer["error"] == {"code": INVALID_PARAMS, "message": f"Unknown tool: {name}"}
    assert not [m for m in recorder.app[RECEIVED] if m.get("method") == "tools/call"]
    events = audit_events(caplog, "tool_hidden")
    assert [(e["route"], e["tool"], e["generation"]) for e in events] == [
        ("t", "slow_read", "2025-11-25"),
        ("t", "slow_read", "2025-11-25"),
        ("t", "echo", "2025-11-25"),
    ]
    assert all("arguments" not in e and "task_id" not in e for e in events)


async def test_a_renamed_tool_goes_upstream_under_its_own_name(
    start_gateway: StartGateway, recorder: TestServer
) -> None:
    upstream = sdk(str(recorder.make_url("/mcp")))
    url = f"{await start_gateway(curated_route(upstream))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        await rpc(http, url, session_id, "tools/call", {"name": "say", "arguments": {}})
        await modern_rpc(http, url, "tools/call", {"name": "say", "arguments": {}})
    calls = [m for m in recorder.app[RECEIVED] if m.get("method") == "tools/call"]
    assert [call["params"]["name"] for call in calls] == ["echo", "echo"]


# -- 2026-07-28, over sessions the gateway holds


async def test_tools_list_is_curated_for_a_2026_client(
    start_gateway: StartGateway, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(curated_route(sdk(sdk_upstream)))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        _, listed = await modern_rpc(http, url, "tools/list")
    tools = {tool["name"]: tool for tool in listed["result"]["tools"]}
    assert sorted(tools) == ["fail", "say", "slow"]
    assert tools["say"]["description"] == "Says it back"


async def test_a_2026_client_calls_a_renamed_tool_directly_and_as_a_task(
    start_gateway: StartGateway, sdk_upstream: str
) -> None:
    routes = curated_route(sdk(sdk_upstream), tasks={"tools": {"slow": "required"}})
    url = f"{await start_gateway(routes)}/t/mcp"
    async with aiohttp.ClientSession() as http:
        _, said = await modern_rpc(
            http, url, "tools/call", {"name": "say", "arguments": {"text": "hi"}}
        )
        _, hidden = await modern_rpc(
            http, url, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}
        )
        slow = {"name": "slow", "arguments": {"steps": 1}}
        _, created = await modern_rpc(http, url, "tools/call", slow, WITH_TASKS)
        task = await modern_terminal(http, url, created["result"]["taskId"])
    assert said["result"]["content"][0]["text"] == "hi"
    assert hidden["error"]["code"] == INVALID_PARAMS
    assert hidden["error"]["message"] == "Unknown tool: echo"
    assert created["result"]["resultType"] == "task"  # `required`, named as the client sees it
    assert task["status"] == "completed"


@needs_mcp2
@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_the_mcp_2_3_client_sees_and_calls_the_curated_tools(
    start_gateway: StartGateway, mode: str
) -> None:
    tools = {"deny": ["slow*"], "rename": {"echo": "say"}}
    url = f"{await start_gateway([{'name': 't', 'upstream': DEMO, 'tools': tools}])}/t/mcp"
    said = await asyncio.to_thread(modern_client, url, mode, "echo:say")
    unknown = await asyncio.to_thread(modern_client, url, mode, "echo:echo")
    assert "say" in said["tools"] and "echo" not in said["tools"]
    assert not [name for name in said["tools"] if name.startswith("slow")]
    assert said["echo"][0]["text"] == "modern"
    assert unknown["error"]["code"] == INVALID_PARAMS
    assert unknown["error"]["message"] == "Unknown tool: echo"


# -- 2026-07-28 on the native wire (mcp 2.3's MCPServer, which checks Mcp-Name against the body)


@needs_mcp2
async def test_a_native_upstream_is_curated_and_called_under_its_own_names(
    start_gateway: StartGateway, native_upstream: str
) -> None:
    upstream = {"transport": "streamable_http", "url": native_upstream, "modern": "native"}
    tools = {"deny": ["greet"], "rename": {"slow": "nap"}, "describe": {"nap": "Rests"}}
    routes = [
        {"name": "n", "upstream": upstream, "tools": tools, "tasks": {"tools": {"nap": "required"}}}
    ]
    url = f"{await start_gateway(routes)}/n/mcp"
    async with aiohttp.ClientSession() as http:
        _, listed = await modern_rpc(http, url, "tools/list")
        nap = {"name": "nap", "arguments": {"seconds": 0.3}}
        _, created = await modern_rpc(http, url, "tools/call", nap, WITH_TASKS)
        task = await modern_terminal(http, url, created["result"]["taskId"])
        _, hidden = await modern_rpc(http, url, "tools/call", {"name": "greet", "arguments": {}})
    tools_seen = {tool["name"]: tool for tool in listed["result"]["tools"]}
    assert sorted(tools_seen) == ["nap", "slow_greet"]
    assert tools_seen["nap"]["description"] == "Rests"
    assert task["status"] == "completed"
    assert task["result"]["content"][0]["text"] == "slept 0.3 s"
    assert hidden["error"] == {"code": INVALID_PARAMS, "message": "Unknown tool: greet"}
