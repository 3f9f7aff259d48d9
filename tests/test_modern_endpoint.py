"""The 2026-07-28 path over raw HTTP: the per-request envelope, the headers, and what each
malformed, mismatched or hostile request is answered with."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gateway.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
)

from .conftest import DEMO, StartGateway
from .helpers import INIT, headers

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


def envelope(version: Any = MODERN, **extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        **extra,
    }


def request(method: str, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": method,
        "params": {**(params or {}), "_meta": envelope(**meta)},
    }


def modern_headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    out = headers(**{"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
    if name is not None:
        out["Mcp-Name"] = name
    out.update(extra)
    return out


async def post(url: str, body: Any, hdrs: dict[str, str]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers=hdrs) as resp:
            return resp.status, dict(await resp.json())


@pytest.fixture
async def gateway(start_gateway: StartGateway) -> str:
    route = {"name": "demo", "upstream": DEMO, "tasks": {"tools": {"slow": "required"}}}
    return f"{await start_gateway([route])}/demo/mcp"


async def test_discover_answers_from_the_upstreams_initialize_result(gateway: str) -> None:
    discover = request("server/discover")
    status, body = await post(gateway, discover, modern_headers("server/discover"))
    assert status == 200
    result = body["result"]
    assert result["supportedVersions"] == [MODERN]
    assert result["resultType"] == "complete"
    assert (result["ttlMs"], result["cacheScope"]) == (0, "private")
    assert "tools" in result["capabilities"]
    assert "tasks" not in result["capabilities"]  # 2025-11-25 tasks are not the extension
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]


async def test_tools_list_and_a_plain_call_carry_result_type(gateway: str) -> None:
    status, listed = await post(gateway, request("tools/list"), modern_headers("tools/list"))
    assert status == 200
    assert listed["result"]["resultType"] == "complete"
    assert listed["result"]["cacheScope"] == "private"
    assert "echo" in {tool["name"] for tool in listed["result"]["tools"]}
    call = request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    status, called = await post(gateway, call, modern_headers("tools/call", "echo"))
    assert status == 200
    assert called["id"] == 3
    assert called["result"]["resultType"] == "complete"
    assert called["result"]["content"][0]["text"] == "hi"


async def test_an_mcp_name_header_may_use_the_base64_sentinel(gateway: str) -> None:
    call = request("tools/call", {"name": "echo", "arguments": {"text": "b64"}})
    status, called = await post(gateway, call, modern_headers("tools/call", "=?base64?ZWNobw==?="))
    assert status == 200
    assert called["result"]["content"][0]["text"] == "b64"


async def test_an_unknown_method_is_404_method_not_found(gateway: str) -> None:
    status, body = await post(gateway, request("nope/never"), modern_headers("nope/never"))
    assert status == 404
    assert body["error"]["code"] == METHOD_NOT_FOUND


async def test_a_required_task_tool_names_the_tasks_extension(gateway: str) -> None:
    call = request("tools/call", {"name": "slow", "arguments": {}})
    status, body = await post(gateway, call, modern_headers("tools/call", "slow"))
    assert status == 400
    assert body["error"]["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert body["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


async def test_a_version_the_gateway_lacks_gets_the_supported_list(gateway: str) -> None:
    hdrs = modern_headers("tools/list", **{"MCP-Protocol-Version": "2099-01-01"})
    status, body = await post(gateway, request("tools/list", version="2099-01-01"), hdrs)
    assert status == 400
    assert body["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert body["error"]["data"] == {"supported": [MODERN], "requested": "2099-01-01"}


@pytest.mark.parametrize(
    ("body", "hdrs"),
    [
        # the header and _meta disagree on the version
        (request("tools/list", version="2025-11-25"), modern_headers("tools/list")),
        # _meta names the version, the header is absent
        (request("tools/list"), headers(**{"Mcp-Method": "tools/list"})),
        # Mcp-Method absent, or naming another method
        (request("tools/list"), headers(**{"MCP-Protocol-Version": MODERN})),
        (request("tools/list"), modern_headers("tools/call")),
        # Mcp-Name names another tool, or is a broken sentinel
        (request("tools/call", {"name": "echo"}), modern_headers("tools/call", "fail")),
        (request("tools/call", {"name": "echo"}), modern_headers("tools/call", "=?base64?!!?=")),
    ],
    ids=["version", "no-version-header", "no-method", "other-method", "other-name", "bad-b64"],
)
async def test_headers_that_disagree_with_the_body_are_a_header_mismatch(
    gateway: str, body: dict[str, Any], hdrs: dict[str, str]
) -> None:
    status, answer = await post(gateway, body, hdrs)
    assert status == 400
    assert answer["error"]["code"] == HEADER_MISMATCH


def _without_meta() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}


def _meta(meta: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta}}


@pytest.mark.parametrize(
    "body",
    [
        _without_meta(),
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        _meta("garbage"),
        _meta([1, 2]),
        _meta({"io.modelcontextprotocol/protocolVersion": MODERN}),
        _meta({**envelope(), "io.modelcontextprotocol/clientCapabilities": "all"}),
        _meta({**envelope(), "io.modelcontextprotocol/clientInfo": 7}),
        _meta({**envelope(), "io.modelcontextprotocol/logLevel": {"x": 1}}),
    ],
    ids=[
        "no-meta",
        "no-params",
        "meta-string",
        "meta-list",
        "no-capabilities",
        "capabilities-string",
        "client-info-number",
        "log-level-object",
    ],
)
async def test_a_missing_or_garbage_envelope_is_invalid_params(
    gateway: str, body: dict[str, Any]
) -> None:
    status, answer = await post(gateway, body, modern_headers(body["method"]))
    assert status == 400
    assert answer["id"] == 3
    assert answer["error"]["code"] == INVALID_PARAMS


async def test_a_non_string_version_in_meta_is_a_header_mismatch_with_the_header(
    gateway: str,
) -> None:
    status, answer = await post(
        gateway, request("tools/list", version=20260728), modern_headers("tools/list")
    )
    assert status == 400
    assert answer["error"]["code"] == HEADER_MISMATCH


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_without_a_session_are_405_on_the_modern_path(
    gateway: str, method: str
) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.request(method, gateway, headers=modern_headers("x")) as resp:
            assert resp.status == 405
            assert resp.headers["Allow"] == "POST"


async def test_initialize_and_sessions_keep_the_2025_11_25_path(gateway: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway, json=INIT, headers=headers()) as resp:
            assert resp.status == 200
            assert resp.headers["Mcp-Session-Id"]
            assert (await resp.json())["result"]["capabilities"]["tasks"]


async def test_a_route_without_2026_07_28_answers_discover_as_before(
    start_gateway: StartGateway,
) -> None:
    route = {"name": "demo", "upstream": DEMO, "generations": ["2025-11-25"]}
    url = f"{await start_gateway([route])}/demo/mcp"
    status, body = await post(url, request("server/discover"), modern_headers("server/discover"))
    assert status == 400
    assert body["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert MODERN not in body["error"]["data"]["supported"]


async def test_a_route_without_2025_11_25_refuses_initialize_and_serves_2026_07_28(
    start_gateway: StartGateway,
) -> None:
    route = {"name": "demo", "upstream": DEMO, "generations": ["2026-07-28"]}
    url = f"{await start_gateway([route])}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=INIT, headers=headers()) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["data"]["supported"] == [MODERN]
        async with http.get(url, headers=headers()) as resp:
            assert resp.status == 405
    status, _ = await post(url, request("tools/list"), modern_headers("tools/list"))
    assert status == 200
